package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.testkit.ModelFolders;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A model folder's settings, adopted or refused, on the values a configuration is being built from: what was not given
 * is taken from the folder (and marked so), what was given and agrees is kept, what disagrees is refused or, with
 * --override-model, kept and warned about once; the job's identity is the tokenizer it encodes with.
 */
@Timeout(30)
class ModelDefaultsTest {
    @TempDir Path tmp;

    /** The values of every setting at its default, then {@code given} set: what {@code build()} hands to {@link ModelDefaults}. */
    private static Map<ConfigKey<?>, Object> values(Map<ConfigKey<?>, Object> given) {
        var all = new LinkedHashMap<ConfigKey<?>, Object>();
        for (var k : NodeSettings.keys()) all.put(k, k.defaultValue());
        all.putAll(given);
        return all;
    }

    @Test
    void withoutAModelNothingIsAdoptedAndItsCompanionsAreRefused() {
        var all = values(Map.of());
        var before = new LinkedHashMap<>(all);
        assertSame(ModelDefaults.Adopted.NONE, ModelDefaults.apply(all, Set.of()));
        assertEquals(before, all, "no value touched");
        var override = Map.<ConfigKey<?>, Object>of(NodeSettings.OVERRIDE_MODEL, true);
        assertEquals("--override-model goes with --model",
                assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(override), override.keySet())).getMessage());
        assertEquals("--chat-template model needs --model DIR", assertThrows(ConfigException.class,
                () -> ModelDefaults.apply(values(Map.of(NodeSettings.CHAT_TEMPLATE, NodeSettings.ChatTemplateChoice.MODEL)),
                        Set.of(NodeSettings.CHAT_TEMPLATE))).getMessage());
    }

    @Test
    void whatWasNotGivenIsTakenFromTheFolderAndMarked() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl");
        var all = values(Map.of(NodeSettings.MODEL, dir));
        var adopted = ModelDefaults.apply(all, Set.of(NodeSettings.MODEL));
        assertEquals(ProcessorPreset.QWEN3_VL, all.get(NodeSettings.PROCESSOR_KEY));
        assertEquals(adopted.model().vision().minPixels(), all.get(NodeSettings.MIN_PIXELS));
        assertEquals(adopted.model().vision().maxPixels(), all.get(NodeSettings.MAX_PIXELS));
        assertEquals(dir.resolve("tokenizer.json"), all.get(NodeSettings.TOKENIZER));
        assertEquals(TransformersVersion.parse("4.57.0.dev0"), all.get(NodeSettings.TRANSFORMERS), "config.json's transformers_version");
        assertEquals(Set.of(NodeSettings.PROCESSOR_KEY, NodeSettings.MIN_PIXELS, NodeSettings.MAX_PIXELS, NodeSettings.TOKENIZER,
                NodeSettings.TRANSFORMERS), adopted.fromModel());
        assertEquals(List.of(), adopted.warnings());
        assertEquals("tokenizer:" + ModelDefaults.sha256(dir.resolve("tokenizer.json")), adopted.identity());
        assertEquals(adopted.model().tokenizerSha256(), ModelDefaults.sha256(dir.resolve("tokenizer.json")));
    }

    @Test
    void whatWasGivenAndAgreesIsKeptAndTheReleaseGivenWinsSilently() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("qwen25"), "qwen2.5-vl");
        Path copy = Files.copy(dir.resolve("tokenizer.json"), tmp.resolve("same-bytes.json"));
        var given = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, dir, NodeSettings.PROCESSOR_KEY, ProcessorPreset.QWEN2_5_VL,
                NodeSettings.TOKENIZER, copy, NodeSettings.TRANSFORMERS, TransformersVersion.parse("5.18"));
        var all = values(given);
        var adopted = ModelDefaults.apply(all, given.keySet());
        assertEquals(copy, all.get(NodeSettings.TOKENIZER), "a tokenizer of the same bytes is the model's, wherever it lies");
        assertEquals(TransformersVersion.parse("5.18"), all.get(NodeSettings.TRANSFORMERS), "the release the trainer runs");
        assertEquals(Set.of(NodeSettings.MIN_PIXELS, NodeSettings.MAX_PIXELS), adopted.fromModel());
        assertEquals(List.of(), adopted.warnings());
        assertEquals("tokenizer:" + adopted.model().tokenizerSha256(), adopted.identity());
    }

    @Test
    void whatDisagreesIsRefusedOrOverriddenAndWarnedAboutOnce() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("qwen25"), "qwen2.5-vl");
        Path other = Files.writeString(tmp.resolve("other.json"), Files.readString(dir.resolve("tokenizer.json")) + " ");
        var given = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, dir, NodeSettings.MIN_PIXELS, 3136L, NodeSettings.TOKENIZER, other);
        var refused = assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(given), given.keySet()));
        assertTrue(refused.getMessage().startsWith("--tokenizer " + other + " is not the model's " + dir.resolve("tokenizer.json")
                + " (their bytes differ); leave --tokenizer out, or add --override-model"), refused.getMessage());

        var max = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, dir, NodeSettings.MAX_PIXELS, 1003520L);
        assertEquals("--max-pixels 1003520 disagrees with the model's 12845056 (" + dir.resolve("preprocessor_config.json")
                + " max_pixels (or size.longest_edge)); leave --max-pixels out, or add --override-model",
                assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(max), max.keySet())).getMessage());

        var overriding = new LinkedHashMap<>(given);
        overriding.put(NodeSettings.MAX_PIXELS, 1003520L);
        overriding.put(NodeSettings.OVERRIDE_MODEL, true);
        var all = values(overriding);
        var adopted = ModelDefaults.apply(all, overriding.keySet());
        assertEquals(1003520L, all.get(NodeSettings.MAX_PIXELS), "the given value is kept");
        assertEquals(other, all.get(NodeSettings.TOKENIZER));
        assertEquals(2, adopted.warnings().size(), adopted.warnings().toString());
        assertTrue(adopted.warnings().get(0).endsWith("max_pixels (or size.longest_edge)): using 1003520 (--override-model)"));
        assertTrue(adopted.warnings().get(1).endsWith(": encoding with " + other + " (--override-model)"));
        assertEquals("tokenizer:" + ModelDefaults.sha256(other), adopted.identity(), "the job is known by the tokenizer it encodes with");
        assertNotEquals("tokenizer:" + adopted.model().tokenizerSha256(), adopted.identity());
    }

    @Test
    void aTemplateThatRendersOtherwiseIsRefusedUnlessTheModelsOwnIsChosen() throws Exception {
        String altered = ModelFolders.publishedTemplate("qwen2.5-vl").replace("You are a helpful assistant.", "You are helpful.");
        Path dir = ModelFolders.write(tmp.resolve("altered"), "qwen2.5-vl", altered);
        var builtIn = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, dir);
        var e = assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(builtIn), builtIn.keySet()));
        assertTrue(e.getMessage().startsWith("--model: the chat template of " + dir.resolve("chat_template.json")
                + " renders differently from Stoker's built-in qwen2-vl template"), e.getMessage());
        Path twin = ModelFolders.write(tmp.resolve("twin"), "qwen2.5-vl", altered); // the same template: its check is remembered
        var again = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, twin);
        assertTrue(assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(again), again.keySet())).getMessage()
                .startsWith("--model: the chat template of " + twin.resolve("chat_template.json") + " renders"), "each names its own file");
        var own = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, dir, NodeSettings.CHAT_TEMPLATE, NodeSettings.ChatTemplateChoice.MODEL);
        assertEquals(altered, ModelDefaults.apply(values(own), own.keySet()).model().chatTemplate());
        Path none = ModelFolders.write(tmp.resolve("none"), "qwen2.5-vl");
        var noTemplate = Map.<ConfigKey<?>, Object>of(NodeSettings.MODEL, none,
                NodeSettings.CHAT_TEMPLATE, NodeSettings.ChatTemplateChoice.MODEL);
        assertTrue(assertThrows(ConfigException.class, () -> ModelDefaults.apply(values(noTemplate), noTemplate.keySet())).getMessage()
                .startsWith("--chat-template model: " + none + " has no chat template"));
        assertNull(ModelDefaults.apply(values(Map.of(NodeSettings.MODEL, none)), Set.of(NodeSettings.MODEL)).model().chatTemplate(),
                "a model without a template encodes with the built-in one");
    }
}
