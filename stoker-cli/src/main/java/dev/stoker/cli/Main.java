package dev.stoker.cli;

import dev.stoker.core.SampleException;
import dev.stoker.node.ConfigException;
import dev.stoker.pipeline.feed.BadInputException;
import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * The {@code stoker} command line. Exit status: 0 success, 1 failure of the run itself,
 * 2 invalid input (one line on stderr naming the file or sample and the cause).
 */
@Command(name = "stoker", mixinStandardHelpOptions = true, versionProvider = VersionProvider.class,
        description = "Keeps GPU trainers fed with multimodal (image + text) training data.",
        subcommands = {PreprocessCommand.class, EncodeCommand.class, BenchCommand.class, DemoCommand.class, ServeCommand.class,
                NodeCommand.class, ClusterKeyCommand.class, LaunchCommand.class, TrainerCommand.class, ReportCommand.class, PlanCommand.class, ValidateCommand.class,
                CommandLine.HelpCommand.class})
public final class Main {
    public static final int EXIT_INVALID_INPUT = 2;

    /**
     * Netty's wire dump (its LoggingHandler, which the S3 client installs) logs every request's
     * headers at DEBUG, the S3 key id among them; raising the log level to debug something else
     * should not turn it on. Set this property explicitly to see the dump.
     */
    static final String WIRE_DUMP_LEVEL = "org.slf4j.simpleLogger.log.io.netty.handler.logging.LoggingHandler";

    public static void main(String[] args) {
        if (System.getProperty(WIRE_DUMP_LEVEL) == null) System.setProperty(WIRE_DUMP_LEVEL, "info");
        System.exit(run(args, new PrintWriter(System.out, true), new PrintWriter(System.err, true)));
    }

    /** Runs a command line in-process (tests use this) and returns its exit status. */
    public static int run(String[] args, PrintWriter out, PrintWriter err) {
        var cli = new CommandLine(new Main());
        cli.setOut(out);
        cli.setErr(err);
        cli.setCaseInsensitiveEnumValuesAllowed(true);
        cli.setUsageHelpAutoWidth(true);
        NodeOptions.register(cli);
        VersionProvider.install(cli);
        // launch's COMMAND is everything from its first word on, options of its own included (`--` is optional)
        cli.getSubcommands().get("launch").setStopAtPositional(true);
        cli.setExecutionExceptionHandler((ex, commandLine, parseResult) -> {
            String message = switch (ex) {
                case SampleException se -> se.describe();
                case BadInputException be -> be.getMessage(); // the feed stopped on bad data (--on-error, --max-error-rate)
                case ConfigException ce -> ce.getMessage();
                case InvalidInputException ie -> ie.getMessage();
                default -> null;
            };
            if (message != null) {
                err.println("stoker: " + message);
                return EXIT_INVALID_INPUT;
            }
            err.println("stoker: " + ex);
            if (Boolean.getBoolean("stoker.debug")) ex.printStackTrace(err);
            return 1;
        });
        cli.setParameterExceptionHandler((ex, a) -> {
            err.println("stoker: " + ex.getMessage().replace('\n', ' ').trim());
            return EXIT_INVALID_INPUT;
        });
        if (args.length == 0) {
            cli.usage(out);
            return 0;
        }
        try {
            NodeOptions.ConfigFile.install(cli, args);
        } catch (ConfigException e) {
            err.println("stoker: " + e.getMessage());
            return EXIT_INVALID_INPUT;
        }
        cli.setExecutionStrategy(parsed -> {
            var last = parsed;
            while (last.hasSubcommand()) last = last.subcommand();
            try {
                if (last.commandSpec().userObject() instanceof NodeOptions.Configured) NodeOptions.ConfigFile.current().check(last.commandSpec());
            } catch (ConfigException e) {
                err.println("stoker: " + e.getMessage());
                return EXIT_INVALID_INPUT;
            }
            return new CommandLine.RunLast().execute(parsed);
        });
        int status = cli.execute(args);
        out.flush();
        err.flush();
        return status;
    }

    /** A problem with what the user gave (a missing file, a bad value): exit status 2. */
    static final class InvalidInputException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        InvalidInputException(String message) { super(message); }
    }
}
