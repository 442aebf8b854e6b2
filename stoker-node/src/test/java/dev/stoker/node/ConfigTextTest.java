package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import dev.stoker.testkit.ModelFolders;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A configuration as text: JSON carries the settings given and nothing else; a YAML file's scalars, lists and source
 * lists read as each key's text, and what YAML would misread is refused; the printed YAML quotes what a plain scalar
 * would turn into another value, comments out what was not given, and reads back as the same configuration.
 */
@Timeout(30)
class ConfigTextTest {
    @TempDir Path tmp;

    @Test
    void jsonCarriesTheGivenSettingsOnlySoThatDerivedDefaultsAreTheReadersOwn() {
        var config = NodeConfig.builder().data("s3://b/ds/train.jsonl").ranks(4).set(NodeSettings.JOIN, List.of("a:1", "b:2")).build();
        String json = ConfigText.toJson(config);
        assertEquals("{\"data\":\"s3://b/ds/train.jsonl\",\"ranks\":\"4\",\"join\":\"a:1,b:2\"}", json,
                "in the table's order, each as text");
        var back = ConfigText.fromJson(json);
        assertEquals(config, back);
        assertFalse(back.isGiven(NodeSettings.THREADS), "the threads stay the reading node's cores");
        assertEquals(json, config.toJson());
        assertEquals("not a node configuration: expected a JSON object",
                assertThrows(ConfigException.class, () -> ConfigText.fromJson("[1]")).getMessage());
        assertTrue(assertThrows(ConfigException.class, () -> ConfigText.fromJson("{\"ranks\":")).getMessage()
                .startsWith("not a node configuration: "));
        assertTrue(assertThrows(ConfigException.class, () -> ConfigText.fromJson("{\"rank\":\"2\"}")).getMessage()
                .contains("unknown setting 'rank'"));
    }

    @Test
    void aYamlFilesValuesReadAsEachKeysText() throws Exception {
        Path file = Files.writeString(tmp.resolve("c.yaml"), """
                data: ds/train.jsonl
                join: [a:1, "b:2"]
                sources:
                  - {data: x.jsonl, weight: 2}
                metrics-port: ~
                batch: 16
                transformers: "5.10"
                """);
        var settings = ConfigText.readSettings(file);
        assertEquals(Map.of("data", "ds/train.jsonl", "join", "a:1,b:2", "sources", "[{\"data\":\"x.jsonl\",\"weight\":2}]", "batch", "16",
                "transformers", "5.10"), settings, "a null leaves the setting out; a list of sources stays a list, as JSON");
        assertEquals(List.copyOf(settings.keySet()), List.of("data", "join", "sources", "batch", "transformers"), "in the file's order");

        Path unquoted = Files.writeString(tmp.resolve("u.yaml"), "transformers: 5.10\n");
        assertTrue(assertThrows(ConfigException.class, () -> ConfigText.readSettings(unquoted)).getMessage()
                .contains("is a number to YAML (an unquoted 5.10 reads as 5.1): quote the version"));
        Path nested = Files.writeString(tmp.resolve("n.yaml"), "join: [[a:1]]\n");
        assertTrue(assertThrows(ConfigException.class, () -> ConfigText.readSettings(nested)).getMessage()
                .endsWith("join: a list of plain values expected"));
        Path list = Files.writeString(tmp.resolve("l.yaml"), "- data\n");
        assertTrue(assertThrows(ConfigException.class, () -> ConfigText.readSettings(list)).getMessage()
                .endsWith("expected a mapping of option names to values"));
        assertEquals(Map.of(), ConfigText.readSettings(Files.writeString(tmp.resolve("empty.yaml"), "")), "an empty file sets nothing");
        assertEquals("--config " + tmp.resolve("none.yaml") + ": no such file",
                assertThrows(ConfigException.class, () -> ConfigText.readSettings(tmp.resolve("none.yaml"))).getMessage());
    }

    /** Text YAML would read as another value (a boolean, null, a number, a flow item) is quoted; the file reads back the same. */
    @Test
    void thePrintedYamlQuotesWhatAPlainScalarWouldMisreadAndReadsBackTheSame() throws Exception {
        for (String s : List.of("yes", "No", "null", "~", ".inf", "1e3", "a b", "#x", "x: y", "[a]", "é", "C:\\data", "\"q\""))
            assertEquals(s, new ObjectMapper(new YAMLFactory()).readTree("k: " + ConfigText.scalar(s)).get("k").asText(), s);
        assertEquals("ds/train.jsonl", ConfigText.scalar("ds/train.jsonl"), "a plain path stays plain");
        assertEquals("\"yes\"", ConfigText.scalar("yes"));

        var config = NodeConfig.builder().data("my data/train.jsonl").set(NodeSettings.JOB, "yes").set(NodeSettings.JOIN, List.of("h:1"))
                .build();
        String yaml = ConfigText.toYaml(config, NodeSettings.keys());
        assertTrue(yaml.startsWith("# model: (default: none)\n"), "not given, no default: " + yaml);
        assertTrue(yaml.contains("\ndata: \"my data/train.jsonl\"\n"), yaml);
        assertTrue(yaml.contains("\njob: \"yes\"\n"), yaml);
        assertTrue(yaml.contains("\njoin: [\"h:1\"]\n"), "a colon is quoted in a flow list: " + yaml);
        assertTrue(yaml.contains("\n# seed: 1234  (default)\n"), yaml);
        assertTrue(yaml.contains("\n# threads: (default: the number of cores)\n"), yaml);
        assertEquals(NodeSettings.keys().size(), yaml.lines().count(), "one line per setting");
        assertEquals(config, ConfigText.fromYaml(Files.writeString(tmp.resolve("p.yaml"), yaml)));
        String some = ConfigText.toYaml(config, NodeSettings.keys(NodeSettings.groups(ConfigKey.Group.MEMBER)));
        assertTrue(some.startsWith("join: [\"h:1\"]\n"), some);
        assertEquals(NodeSettings.keys(NodeSettings.groups(ConfigKey.Group.MEMBER)).size(), some.lines().count(), "those keys only");
    }

    @Test
    void aModelsSettingsArePrintedAsComingFromIt() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("qwen2"), "qwen2-vl");
        var config = NodeConfig.builder().data("d.jsonl").set(NodeSettings.MODEL, dir).build();
        String yaml = ConfigText.toYaml(config, NodeSettings.keys());
        assertTrue(yaml.contains("\n# processor: qwen2-vl  (from --model)\n"), yaml);
        assertTrue(yaml.contains("\n# max-pixels: 12845056  (from --model)\n"), yaml);
        assertTrue(yaml.contains("\n# transformers: \"4.41.2\"  (from --model)\n"), yaml);
        var back = ConfigText.fromYaml(Files.writeString(tmp.resolve("m.yaml"), yaml));
        assertEquals(config.encodeOptions(), back.encodeOptions(), "commented out, they come from the model again");
    }
}
