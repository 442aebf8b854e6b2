package dev.stoker.cli;

import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import picocli.CommandLine;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;

/**
 * The command line's side of {@link NodeConfig}: every setting a command takes becomes an option of
 * the same name, with the setting's help and default (so the two cannot disagree), and a command
 * that runs a feed also takes {@code --config FILE} (YAML, keys the long option names; options given
 * on the command line win) and {@code --print-config}. The options carry text; {@link NodeConfig}
 * reads it, so a value means the same on the command line, in a file and in a cluster job.
 */
final class NodeOptions {
    static final String CONFIG = "--config";
    static final String PRINT_CONFIG = "--print-config";
    /** What ends the options: {@code stoker launch [options] -- COMMAND…}. */
    static final String END_OF_OPTIONS = "--";

    /** A command whose options include NodeConfig settings: the ones it takes, and whether it reads config files. */
    interface Configured {
        List<ConfigKey<?>> settings();

        default boolean configFile() { return true; }

        /**
         * Whether the command takes an audio family's {@code --processor} (issue 32): {@code encode} and {@code validate}
         * do; {@code serve} and {@code plan} within limits ({@link #feedsAudio}); {@code bench} refuses it at start. ({@code
         * node} takes no job settings: it makes what a {@code serve --join} job asks; {@code launch} starts {@code serve},
         * which judges the job.)
         */
        default boolean servesAudio() { return false; }

        /**
         * Whether the command feeds batches of an audio family's samples ({@code serve}: padded batches and packs,
         * {@link NodeConfig#audioFeedRefusal}), or prints them ({@code plan}); it then takes the audio families too,
         * within those limits.
         */
        default boolean feedsAudio() { return false; }
    }

    private NodeOptions() {}

    /** Adds the options of every {@link Configured} command under {@code cli}. */
    static void register(CommandLine cli) {
        if (cli.getCommand() instanceof Configured c) {
            var spec = cli.getCommandSpec();
            for (var k : c.settings()) spec.addOption(option(k));
            if (c.configFile()) {
                spec.addOption(OptionSpec.builder(CONFIG).paramLabel("FILE").type(Path.class)
                        .description("Read options from this YAML file (keys: the long option names; a repeatable option takes a list); "
                                + "options on the command line override it.").build());
                spec.addOption(OptionSpec.builder(PRINT_CONFIG).arity("0").type(boolean.class)
                        .description("Print the effective configuration as YAML (defaults commented out) and exit.").build());
            }
        }
        for (var sub : cli.getSubcommands().values()) register(sub);
    }

    private static OptionSpec option(ConfigKey<?> k) {
        // picocli formats descriptions: a '%' of the text (qwen-vl-finetune's name%50) is written as '%%'
        var b = OptionSpec.builder(k.option()).description((k.doc() + " (default: " + k.describeDefault() + ")").replace("%", "%%"));
        if (k == NodeConfig.DATA_KEY || k == NodeConfig.WEIGHT) // repeatable as a group: --data URI [--weight W] per source
            return b.type(List.class).auxiliaryTypes(String.class).paramLabel(k.label()).build();
        switch (k.kind()) {
            case FLAG -> b.type(Boolean.class).arity("0..1");
            case LIST -> b.type(List.class).auxiliaryTypes(String.class).splitRegex(",").paramLabel(k.label());
            default -> b.type(String.class).arity("1").paramLabel(k.label());
        }
        return b.build();
    }

    /** The settings of {@code spec}'s command as given (command line or config file) in a builder. */
    static NodeConfig.Builder builder(CommandSpec spec, Collection<ConfigKey<?>> keys) {
        var b = NodeConfig.builder();
        // a command that encodes but takes no video settings (preprocess, bench preprocess) encodes no video, and so
        // reads no model folder's video processor config
        if (keys.contains(NodeConfig.PROCESSOR_KEY) && !keys.contains(NodeConfig.VIDEO)) b.set(NodeConfig.VIDEO, NodeConfig.VideoMode.OFF);
        if (keys.contains(NodeConfig.DATA_KEY)) sources(spec, b);
        for (var k : keys) {
            if (k == NodeConfig.DATA_KEY || k == NodeConfig.WEIGHT) continue;
            Object v = spec.findOption(k.option()).getValue();
            if (v == null || v instanceof List<?> l && l.isEmpty()) continue;
            b.set(k.name(), v instanceof List<?> l ? String.join(",", l.stream().map(String::valueOf).toList()) : String.valueOf(v));
        }
        return b;
    }

    /**
     * {@code --data URI [--weight W]}, repeated: one source is set as {@code data} (and {@code weight}), several as
     * {@code sources}, each {@code --weight} the weight of the {@code --data} before it.
     */
    @SuppressWarnings("unchecked")
    private static void sources(CommandSpec spec, NodeConfig.Builder b) {
        var data = (List<String>) spec.findOption(NodeConfig.DATA_KEY.option()).getValue();
        var weights = spec.findOption(NodeConfig.WEIGHT.option()) == null ? List.<String>of()
                : (List<String>) spec.findOption(NodeConfig.WEIGHT.option()).getValue();
        if (data == null) data = List.of();
        if (weights == null) weights = List.of();
        if (data.size() <= 1) {
            if (weights.size() > 1) throw new ConfigException("--weight given " + weights.size() + " times for one --data");
            if (!data.isEmpty()) b.set(NodeConfig.DATA_KEY.name(), data.get(0));
            if (!weights.isEmpty()) b.set(NodeConfig.WEIGHT.name(), weights.get(0));
            return;
        }
        // pair each --weight with the --data before it, in the order the command line gave them
        var pairs = new ArrayList<String[]>();
        var args = spec.commandLine().getParseResult().originalArgs();
        for (int i = 0; i < args.size() && !args.get(i).equals(END_OF_OPTIONS); i++) { // launch's COMMAND follows --
            String a = args.get(i);
            String value = null, name = null;
            for (var opt : List.of(NodeConfig.DATA_KEY.option(), NodeConfig.WEIGHT.option())) {
                if (a.equals(opt) && i + 1 < args.size()) { name = opt; value = args.get(++i); }
                else if (a.startsWith(opt + "=")) { name = opt; value = a.substring(opt.length() + 1); }
            }
            if (name == null) continue;
            if (name.equals(NodeConfig.DATA_KEY.option())) {
                pairs.add(new String[] {value, null});
            } else {
                if (pairs.isEmpty()) throw new ConfigException("--weight " + value + " comes before any --data: give --data URI [--weight W] per source");
                var last = pairs.get(pairs.size() - 1);
                if (last[1] != null) throw new ConfigException("--data " + last[0] + " has two weights (" + last[1] + ", " + value + ")");
                last[1] = value;
            }
        }
        var json = new com.fasterxml.jackson.databind.ObjectMapper().createArrayNode();
        for (var p : pairs) {
            var o = json.addObject().put("data", p[0]);
            if (p[1] != null) o.put("weight", p[1]);
        }
        b.set(NodeConfig.SOURCES.name(), json.toString());
    }

    /** The configuration {@code spec}'s command was given, built (validated). */
    static NodeConfig config(CommandSpec spec, Collection<ConfigKey<?>> keys) {
        var config = builder(spec, keys).build();
        String command = spec.qualifiedName(" ").replaceFirst("^stoker ", "");
        if (config.audioPreset() != null && spec.userObject() instanceof Configured c && c.feedsAudio()) {
            String refusal = config.audioFeedRefusal();
            if (refusal != null) throw new ConfigException("--processor " + config.processor() + ": stoker " + command + " " + refusal);
        } else if (config.audioPreset() != null && !(spec.userObject() instanceof Configured c && c.servesAudio()))
            throw new ConfigException("--processor " + config.processor() + ": stoker " + command
                    + " does not serve audio yet (issue 32); stoker serve serves the audio families' padded batches (shared memory, "
                    + "the socket, the compact format, --flight, a cluster with --join), their packs and the cache, stoker "
                    + "plan plans them, stoker encode and stoker validate take them");
        for (String w : config.warnings()) spec.commandLine().getErr().println("stoker: warning: " + w);
        spec.commandLine().getErr().flush();
        return config;
    }

    /**
     * The configuration {@code spec}'s command was given; or, with {@code --print-config}, null once it is printed
     * ({@link #print}): the command then exits 0.
     */
    static NodeConfig configOrPrint(CommandSpec spec, Collection<ConfigKey<?>> keys) {
        var config = config(spec, keys);
        if (!printConfig(spec)) return config;
        print(spec, config, keys, spec.commandLine().getOut());
        return null;
    }

    /** Whether {@code --print-config} was given. */
    static boolean printConfig(CommandSpec spec) {
        var o = spec.findOption(PRINT_CONFIG);
        return o != null && Boolean.TRUE.equals(o.getValue());
    }

    /**
     * Prints the effective configuration of {@code spec}'s command: {@code config}'s settings, then the
     * command's own options (a benchmark's), each given one as {@code name: value}, each default
     * commented out, so that the output read back as a {@code --config} file means the same.
     */
    static void print(CommandSpec spec, NodeConfig config, Collection<ConfigKey<?>> keys, PrintWriter out) {
        out.print(config.toYaml(keys));
        var parsed = spec.commandLine().getParseResult();
        for (OptionSpec o : spec.options()) {
            String name = o.longestName().replaceFirst("^--", "");
            if (keys.stream().anyMatch(k -> k.name().equals(name)) || o.usageHelp() || o.versionHelp() || o.longestName().equals(CONFIG)
                    || o.longestName().equals(PRINT_CONFIG) || o.hidden())
                continue;
            Object v = o.getValue();
            boolean given = parsed.hasMatchedOption(o) || ConfigFile.current().has(name);
            String text = v == null ? null : v instanceof List<?> l ? "[" + String.join(", ", l.stream().map(x -> yaml(String.valueOf(x))).toList()) + "]"
                    : yaml(String.valueOf(v));
            if (given && text != null) out.println(name + ": " + text);
            else out.println("# " + name + ": " + (text != null ? text + "  (default)" : "(default: none)"));
        }
        out.flush();
    }

    private static String yaml(String s) {
        return s.matches("[A-Za-z0-9/._~@+-]+") && !s.matches("(?i)true|false|yes|no|on|off|null|y|n") || s.matches("-?[0-9.]+") ? s
                : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /**
     * The {@code --config} file of this invocation, read before parsing (picocli asks it for the value of every option
     * the command line leaves out). Its keys must all be options of the command that runs ({@link #check}).
     */
    static final class ConfigFile implements CommandLine.IDefaultValueProvider {
        private static volatile ConfigFile current = new ConfigFile(null, Map.of());
        private final Path file;
        private final Map<String, String> settings;

        private ConfigFile(Path file, Map<String, String> settings) {
            this.file = file;
            this.settings = settings;
        }

        /** Reads the {@code --config FILE} that {@code args} name, if any, and answers picocli's default lookups from it. */
        static void install(CommandLine cli, String[] args) {
            Path file = null;
            for (int i = 0; i < args.length && !args[i].equals(END_OF_OPTIONS); i++) { // launch's COMMAND after -- is not ours
                if (args[i].equals(CONFIG) && i + 1 < args.length) file = Path.of(args[i + 1]);
                else if (args[i].startsWith(CONFIG + "=")) file = Path.of(args[i].substring(CONFIG.length() + 1));
            }
            current = file == null ? new ConfigFile(null, Map.of()) : new ConfigFile(file, NodeConfig.readSettings(file));
            if (file != null) cli.setDefaultValueProvider(current);
        }

        static ConfigFile current() { return current; }

        boolean has(String name) { return settings.containsKey(name); }

        @Override
        public String defaultValue(CommandLine.Model.ArgSpec arg) {
            if (!(arg instanceof OptionSpec o)) return null;
            return settings.get(o.longestName().replaceFirst("^--", ""));
        }

        /** Refuses keys of the file that are no option of {@code spec}'s command (a typo would otherwise be ignored). */
        void check(CommandSpec spec) {
            if (file == null) return;
            var unknown = new ArrayList<String>();
            for (String name : settings.keySet()) {
                var o = spec.findOption("--" + name);
                if (o == null || Set.of(CONFIG, PRINT_CONFIG).contains(o.longestName())) unknown.add(name);
            }
            if (!unknown.isEmpty())
                throw new ConfigException(CONFIG + " " + file + ": " + String.join(", ", unknown) + (unknown.size() == 1 ? " is" : " are")
                        + " not an option of stoker " + spec.qualifiedName(" ").replaceFirst("^stoker ", ""));
        }
    }
}
