package dev.stoker.core.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.testkit.ModelFolders;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A model folder read as {@code AutoProcessor.from_pretrained} reads it: each family's published files give that
 * family's preset (its processor's bounds, mean, std, patch sizes); what Stoker cannot reproduce is refused naming the
 * file and the field.
 */
@Timeout(60)
class ModelFolderTest {
    @TempDir Path tmp;

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-vl", "qwen2.5-vl", "qwen3-vl"})
    void eachFamilysPublishedFolderIsItsPreset(String family) {
        Path dir = ModelFolders.write(tmp.resolve(family), family);
        var m = ModelFolder.read(dir);
        var preset = ProcessorPreset.fromName(family);
        assertEquals(preset, m.family());
        assertEquals(preset.vision(), m.vision(), "the published processor's settings are the preset's");
        assertEquals(dir.resolve("tokenizer.json"), m.tokenizer());
        assertEquals(64, m.tokenizerSha256().length());
        assertNull(m.chatTemplate(), "no template in the folder");
        assertTrue(m.transformersVersion() != null && m.describe().contains(family), m.describe());
    }

    @Test
    void minAndMaxPixelsWinOverSizeAsInTheProcessorsConstructor() {
        Path dir = ModelFolders.write(tmp.resolve("m"), "qwen3-vl");
        ModelFolders.edit(dir, "preprocessor_config.json", p -> p.put("max_pixels", 1003520));
        assertEquals(65536, ModelFolder.read(dir).vision().minPixels(), "size.shortest_edge");
        assertEquals(1003520, ModelFolder.read(dir).vision().maxPixels(), "max_pixels over size.longest_edge");
    }

    @Test
    void theTemplateIsFoundWhereTransformersLooksFirst() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("m"), "qwen2.5-vl");
        ModelFolders.edit(dir, "tokenizer_config.json", t -> t.put("chat_template", "from tokenizer_config"));
        assertEquals("from tokenizer_config", ModelFolder.read(dir).chatTemplate());
        assertEquals("tokenizer_config.json", ModelFolder.read(dir).chatTemplateSource());
        Files.writeString(dir.resolve("chat_template.json"), "{\"chat_template\": \"from chat_template.json\"}");
        assertEquals("from chat_template.json", ModelFolder.read(dir).chatTemplate());
        Files.writeString(dir.resolve("chat_template.jinja"), "from the jinja file");
        assertEquals("from the jinja file", ModelFolder.read(dir).chatTemplate());
        assertEquals("chat_template.jinja", ModelFolder.read(dir).chatTemplateSource());
        // a list of named templates: the default one
        Files.delete(dir.resolve("chat_template.jinja"));
        Files.delete(dir.resolve("chat_template.json"));
        ModelFolders.edit(dir, "tokenizer_config.json", t -> {
            var list = t.putArray("chat_template");
            list.addObject().put("name", "tool_use").put("template", "tools");
            list.addObject().put("name", "default").put("template", "the default");
        });
        assertEquals("the default", ModelFolder.read(dir).chatTemplate());
    }

    @Test
    void aMissingFileIsRefusedNamingIt() throws Exception {
        for (String file : new String[] {"config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"}) {
            Path dir = ModelFolders.write(tmp.resolve("m-" + file), "qwen2.5-vl");
            Files.delete(dir.resolve(file));
            var e = assertThrows(ModelFolder.ModelFolderException.class, () -> ModelFolder.read(dir));
            assertEquals(dir.resolve(file) + " is missing", e.getMessage());
        }
        var notADir = assertThrows(ModelFolder.ModelFolderException.class, () -> ModelFolder.read(tmp.resolve("none")));
        assertTrue(notADir.getMessage().endsWith("none: not a folder"), notADir.getMessage());
    }

    @Test
    void whatStokerCannotReproduceIsRefusedNamingTheFileAndField() {
        refused("config.json", c -> c.put("model_type", "llava"), "config.json: model_type is 'llava', not a Qwen-VL model");
        refused("config.json", c -> c.remove("model_type"), "config.json: model_type is missing");
        refused("config.json", c -> c.put("image_token_id", 248056), "config.json: image_token_id is 248056, but Stoker's Qwen-VL encoder writes 151655");
        refused("config.json", c -> ((ObjectNode) c.get("vision_config")).put("patch_size", 16),
                "config.json: vision_config.patch_size is 16, but preprocessor_config.json makes patches for 14");
        refused("preprocessor_config.json", p -> p.remove("patch_size"), "preprocessor_config.json: patch_size is missing");
        refused("preprocessor_config.json", p -> p.remove("image_std"), "preprocessor_config.json: image_std is missing");
        refused("preprocessor_config.json", p -> p.putArray("image_mean").add(0.5).add(0.5), "preprocessor_config.json: image_mean is [0.5,0.5], not three numbers");
        refused("preprocessor_config.json", p -> p.put("do_normalize", false), "preprocessor_config.json: do_normalize is false");
        refused("preprocessor_config.json", p -> p.put("resample", 2), "preprocessor_config.json: resample is 2; Stoker resizes with bicubic (3) only");
        refused("preprocessor_config.json", p -> p.put("rescale_factor", 0.5), "preprocessor_config.json: rescale_factor is 0.5");
        refused("preprocessor_config.json", p -> p.put("image_processor_type", "SiglipImageProcessor"),
                "preprocessor_config.json: image_processor_type is \"SiglipImageProcessor\", not the Qwen-VL image processor");
        refused("preprocessor_config.json", p -> p.remove("max_pixels"), "preprocessor_config.json: max_pixels is missing (and so is size.longest_edge)");
        refused("preprocessor_config.json", p -> p.put("min_pixels", 20_000_000), "preprocessor_config.json: min_pixels 20000000 is over max_pixels 12845056");
        refused("preprocessor_config.json", p -> p.putObject("size").put("height", 448).put("width", 448),
                "preprocessor_config.json: size.height: a Qwen-VL processor's size holds shortest_edge and longest_edge");
    }

    @Test
    void aTokenizerWhoseSpecialIdsDifferIsRefused() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("m"), "qwen2.5-vl");
        Path t = dir.resolve("tokenizer.json");
        Files.writeString(t, Files.readString(t).replace("\"id\":151655,", "\"id\":151999,").replace("\"id\": 151655,", "\"id\": 151999,"));
        var e = assertThrows(ModelFolder.ModelFolderException.class, () -> ModelFolder.read(dir));
        assertTrue(e.getMessage().startsWith(t + ": added_tokens: <|image_pad|> is id 151999, but Stoker's Qwen-VL encoder writes 151655"),
                e.getMessage());
        Files.writeString(t, "{\"added_tokens\": [");
        var broken = assertThrows(ModelFolder.ModelFolderException.class, () -> ModelFolder.read(dir));
        assertTrue(broken.getMessage().startsWith(t + " cannot be read as a tokenizer"), broken.getMessage());
    }

    private void refused(String file, Consumer<ObjectNode> edit, String expected) {
        Path dir = ModelFolders.write(tmp.resolve("r" + System.nanoTime()), "qwen2.5-vl");
        ModelFolders.edit(dir, file, edit);
        var e = assertThrows(ModelFolder.ModelFolderException.class, () -> ModelFolder.read(dir));
        assertTrue(e.getMessage().startsWith(dir.resolve(expected.substring(0, expected.indexOf(':'))) + expected.substring(expected.indexOf(':'))),
                "expected '" + expected + "', got: " + e.getMessage());
    }
}
