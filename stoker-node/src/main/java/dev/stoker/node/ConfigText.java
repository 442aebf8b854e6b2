package dev.stoker.node;

import static dev.stoker.node.ConfigKey.Kind.LIST;
import static dev.stoker.node.ConfigKey.Kind.TEXT;
import static dev.stoker.node.NodeSettings.SOURCES;
import static dev.stoker.node.NodeSettings.TRANSFORMERS;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A {@link NodeConfig} as text, in and out: JSON for a cluster job's configuration (the settings given, by name, each
 * value as its key writes it) and YAML for config files ({@code --config FILE}) and {@code --print-config}. Both go
 * through each key's own reader and writer ({@link ConfigKey#parse}, {@link ConfigKey#format}), so that a value means
 * the same on the command line, in a file and on another node.
 *
 * <p>JSON carries only the settings that were given: the others stay defaults where it is read, so that a derived
 * default such as the CPU threads is the reading node's. YAML prints every setting, those not given commented out
 * (with their default, or the value the model folder gave), so that the printed file read back means the same.
 */
public final class ConfigText {
    private static final ObjectMapper JSON = new ObjectMapper();

    private ConfigText() {}

    /** The given settings of {@code config} as JSON {name: text}: what a cluster job carries to its nodes. */
    public static String toJson(NodeConfig config) {
        var m = new LinkedHashMap<String, String>();
        for (var k : NodeSettings.keys()) if (config.isGiven(k)) m.put(k.name(), k.format(config.get(k)));
        try {
            return JSON.writeValueAsString(m);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The configuration {@link #toJson} wrote. */
    public static NodeConfig fromJson(String json) {
        JsonNode tree;
        try {
            tree = JSON.readTree(json);
        } catch (JsonProcessingException e) {
            throw new ConfigException("not a node configuration: " + e.getOriginalMessage());
        }
        if (tree == null || !tree.isObject()) throw new ConfigException("not a node configuration: expected a JSON object");
        var b = NodeConfig.builder();
        tree.properties().forEach(e -> b.set(e.getKey(), e.getValue().asText()));
        return b.build();
    }

    /**
     * The settings a YAML config file holds, as text by name: a flat mapping whose keys are the long option names,
     * each value a scalar or, for a repeatable option, a list (read as comma-separated text); a null value leaves
     * the setting out. Names are not checked here (a command also takes options of its own).
     */
    public static Map<String, String> readSettings(Path file) {
        JsonNode tree;
        try {
            tree = new ObjectMapper(new YAMLFactory()).readTree(file.toFile());
        } catch (FileNotFoundException | NoSuchFileException e) {
            throw new ConfigException("--config " + file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException("--config " + file + ": not YAML: " + e.getMessage().lines().findFirst().orElse(""));
        }
        var out = new LinkedHashMap<String, String>();
        if (tree == null || tree.isMissingNode() || tree.isNull()) return out;
        if (!tree.isObject()) throw new ConfigException("--config " + file + ": expected a mapping of option names to values");
        for (var e : tree.properties()) {
            JsonNode v = e.getValue();
            if (v.isNull()) continue;
            if (v.isFloatingPointNumber() && e.getKey().equals(TRANSFORMERS.name())) // YAML reads 5.10 as the number 5.1
                throw new ConfigException("--config " + file + ": " + e.getKey() + ": " + v.asText() + " is a number to YAML (an unquoted "
                        + "5.10 reads as 5.1): quote the version, e.g. " + e.getKey() + ": \"5.10\"");
            if (v.isArray() && e.getKey().equals(SOURCES.name())) { // a list of mappings, kept as JSON text
                out.put(e.getKey(), v.toString());
            } else if (v.isArray()) {
                var items = new ArrayList<String>();
                for (JsonNode item : v) {
                    if (!item.isValueNode())
                        throw new ConfigException("--config " + file + ": " + e.getKey() + ": a list of plain values expected");
                    items.add(item.asText());
                }
                out.put(e.getKey(), String.join(",", items));
            } else if (v.isValueNode()) {
                out.put(e.getKey(), v.asText());
            } else {
                throw new ConfigException("--config " + file + ": " + e.getKey() + ": a value or a list expected, got a mapping");
            }
        }
        return out;
    }

    /** The configuration a YAML config file ({@link #readSettings}) holds; every key must be a setting. */
    public static NodeConfig fromYaml(Path file) {
        var b = NodeConfig.builder();
        readSettings(file).forEach((name, text) -> {
            if (NodeSettings.key(name) == null) throw new ConfigException("--config " + file + ": unknown setting '" + name + "'");
            b.set(name, text);
        });
        return b.build();
    }

    /**
     * The settings {@code keys} of {@code config} as YAML, one per line in the table's order: those given as
     * {@code name: value}, the others commented out ({@code # name: value  (default)}, or {@code (from --model)}),
     * so that the text read back as a config file means the same.
     */
    public static String toYaml(NodeConfig config, Collection<? extends ConfigKey<?>> keys) {
        var out = new StringBuilder();
        for (var k : NodeSettings.keys()) {
            if (!keys.contains(k)) continue;
            Object v = config.get(k);
            if (config.isGiven(k)) {
                out.append(k.name()).append(": ").append(yaml(k, v)).append('\n');
            } else if (config.isFromModel(k)) {
                out.append("# ").append(k.name()).append(": ").append(yaml(k, v)).append("  (from --model)\n");
            } else {
                out.append("# ").append(k.name()).append(": ");
                out.append(v != null ? yaml(k, v) + "  (default)" : "(default: " + k.describeDefault() + ")").append('\n');
            }
        }
        return out.toString();
    }

    private static String yaml(ConfigKey<?> k, Object v) {
        if (k.kind() == LIST) {
            var items = new ArrayList<String>();
            for (Object o : (List<?>) v) items.add(scalar(String.valueOf(o)));
            return "[" + String.join(", ", items) + "]";
        }
        String text = k.format(v);
        if (k == SOURCES) return text; // a JSON list of mappings is YAML as it is
        return k.kind() == TEXT ? scalar(text) : text;
    }

    /** A YAML scalar: plain where that reads back as the same string, else double-quoted (JSON's escapes are YAML's). */
    static String scalar(String s) {
        if (s.matches("[A-Za-z/._~][A-Za-z0-9/._~@+-]*") && !s.matches("(?i)true|false|yes|no|on|off|null|y|n|~|\\.nan|\\.inf"))
            return s;
        try {
            return JSON.writeValueAsString(s);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }
}
