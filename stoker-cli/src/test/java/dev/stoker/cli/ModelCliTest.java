package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.ModelFolders;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code --model DIR} through the commands: a folder built for each family from the bundled tokenizer and the
 * published processor settings encodes, bit for bit, as the same command with the equivalent options; an option that
 * disagrees with the folder is refused with one line naming both values; {@code --print-config} shows what came from
 * the model.
 */
@Timeout(120)
class ModelCliTest {
    static final List<String> FILES = List.of("input_ids", "labels", "attention_mask", "position_ids", "pixel_values", "image_grid_thw");
    @TempDir Path tmp;

    /** A sample with two images, one of them the 1600 × 1082 photo that the published bounds keep at full size. */
    private Path sample() throws Exception {
        Files.copy(Vectors.projectDir().resolve("assets/photos/lomiri16__Picture_0B_by_freespace.jpg"), tmp.resolve("a.jpg"));
        Files.copy(Vectors.get().inputImage("p07_halfround_400x294"), tmp.resolve("b.png"));
        return Files.writeString(tmp.resolve("sample.json"), """
                {"id": "m1", "image": ["a.jpg", "b.png"], "conversations": [
                  {"from": "human", "value": "<image>\\nWhat is here? <image> And here?"},
                  {"from": "gpt", "value": "A portrait, then a test card."}]}""");
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-vl", "qwen2.5-vl", "qwen3-vl"})
    void encodeWithAModelFolderEqualsTheEquivalentOptionsBitForBit(String family) throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("model"), family);
        Path sample = sample();
        var byModel = CliRunner.run("encode", "--model", dir.toString(), "--sample", sample.toString(), "--out", tmp.resolve("m").toString());
        assertEquals(0, byModel.status(), byModel.err());
        var args = new ArrayList<>(List.of("encode", "--sample", sample.toString(), "--out", tmp.resolve("o").toString(), "--tokenizer",
                dir.resolve("tokenizer.json").toString()));
        ModelFolders.equivalentOptions(family).forEach((k, v) -> args.addAll(List.of(k, v)));
        var byOptions = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, byOptions.status(), byOptions.err());
        for (String f : FILES)
            assertArrayEquals(Files.readAllBytes(tmp.resolve("o").resolve(f + ".npy")), Files.readAllBytes(tmp.resolve("m").resolve(f + ".npy")), f);
        // and the preprocess command reads the folder too
        var image = CliRunner.run("preprocess", "--model", dir.toString(), "--image", tmp.resolve("a.jpg").toString(), "--out",
                tmp.resolve("p").toString());
        assertEquals(0, image.status(), image.err());
        long rows = dev.stoker.core.Npy.read(tmp.resolve("p/pixel_values.npy")).shape()[0];
        long[] grid = dev.stoker.core.Npy.read(tmp.resolve("p/image_grid_thw.npy")).asLongs();
        assertEquals(grid[0] * grid[1] * grid[2], rows);
        assertTrue(rows * (family.equals("qwen3-vl") ? 256 : 196) > 1_003_520, "the photo keeps more than the old 1,003,520-pixel cap: " + rows);
    }

    /**
     * A folder with its family's published chat template: checked at start and encoded with the built-in template, or
     * rendered with the template itself ({@code --chat-template model}): the same bits either way. The same template
     * altered (another default system prompt) is refused naming the case and character, and with
     * {@code --chat-template model} encodes the model's way.
     */
    @ParameterizedTest
    @ValueSource(strings = {"qwen2.5-vl", "qwen3-vl"})
    void aModelsOwnTemplateIsCheckedOrRendered(String family) throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("model"), family, ModelFolders.publishedTemplate(family));
        Path sample = sample();
        var builtIn = CliRunner.run("encode", "--model", dir.toString(), "--sample", sample.toString(), "--out", tmp.resolve("b").toString());
        assertEquals(0, builtIn.status(), builtIn.err());
        var own = CliRunner.run("encode", "--model", dir.toString(), "--chat-template", "model", "--sample", sample.toString(), "--out",
                tmp.resolve("t").toString());
        assertEquals(0, own.status(), own.err());
        for (String f : FILES)
            assertArrayEquals(Files.readAllBytes(tmp.resolve("b").resolve(f + ".npy")), Files.readAllBytes(tmp.resolve("t").resolve(f + ".npy")), f);

        Path altered = ModelFolders.write(tmp.resolve("altered"), family, ModelFolders.publishedTemplate(family)
                .replace("<|im_start|>", "<|im_start|> "));
        var refused = CliRunner.run("encode", "--model", altered.toString(), "--sample", sample.toString(), "--out", tmp.resolve("x").toString());
        assertEquals(2, refused.status(), refused.err());
        assertEquals(1, refused.err().strip().lines().count(), refused.err());
        assertTrue(refused.err().startsWith("stoker: --model: the chat template of " + altered.resolve("chat_template.json") + " renders "
                + "differently from Stoker's built-in"), refused.err());
        assertTrue(refused.err().contains("differs at character"), refused.err());
        var rendered = CliRunner.run("encode", "--model", altered.toString(), "--chat-template", "model", "--sample", sample.toString(), "--out",
                tmp.resolve("y").toString());
        assertEquals(0, rendered.status(), rendered.err());
        long[] ids = dev.stoker.core.Npy.read(tmp.resolve("y/input_ids.npy")).asLongs();
        assertTrue(!java.util.Arrays.equals(ids, dev.stoker.core.Npy.read(tmp.resolve("b/input_ids.npy")).asLongs()),
                "the altered template's spaces are encoded");
        assertEquals(151644, ids[0]);
    }

    @Test
    void anOptionThatDisagreesWithTheModelIsOneLineNamingBoth() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("model"), "qwen2.5-vl");
        Path sample = sample();
        var r = CliRunner.run("encode", "--model", dir.toString(), "--max-pixels", "1003520", "--sample", sample.toString(), "--out",
                tmp.resolve("x").toString());
        assertEquals(2, r.status(), r.err());
        assertEquals("stoker: --max-pixels 1003520 disagrees with the model's 12845056 (" + dir.resolve("preprocessor_config.json")
                + " max_pixels (or size.longest_edge)); leave --max-pixels out, or add --override-model", r.err().strip());
        var overridden = CliRunner.run("encode", "--model", dir.toString(), "--max-pixels", "1003520", "--override-model", "--sample",
                sample.toString(), "--out", tmp.resolve("y").toString());
        assertEquals(0, overridden.status(), overridden.err());
        assertEquals("stoker: warning: --max-pixels 1003520 disagrees with the model's 12845056 (" + dir.resolve("preprocessor_config.json")
                + " max_pixels (or size.longest_edge)): using 1003520 (--override-model)", overridden.err().strip());
        ModelFolders.edit(dir, "config.json", c -> c.put("model_type", "llava"));
        var notQwen = CliRunner.run("encode", "--model", dir.toString(), "--sample", sample.toString(), "--out", tmp.resolve("z").toString());
        assertEquals(2, notQwen.status(), notQwen.err());
        assertTrue(notQwen.err().strip().startsWith("stoker: --model: " + dir.resolve("config.json") + ": model_type is 'llava', not a Qwen-VL model"),
                notQwen.err());
    }

    /** A sample without images: pixel_values has no rows but the model's row width, as in a batch. */
    @Test
    void aTextOnlySampleHasNoPixelRowsOfTheModelsWidth() throws Exception {
        Path sample = Files.writeString(tmp.resolve("text.json"), """
                {"id": "t1", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]}""");
        for (String family : List.of("qwen2.5-vl", "qwen3-vl")) {
            var r = CliRunner.run("encode", "--processor", family, "--sample", sample.toString(), "--out", tmp.resolve(family).toString());
            assertEquals(0, r.status(), r.err());
            assertArrayEquals(new long[] {0, family.equals("qwen3-vl") ? 1536 : 1176},
                    dev.stoker.core.Npy.read(tmp.resolve(family).resolve("pixel_values.npy")).shape());
            assertArrayEquals(new long[] {0, 3}, dev.stoker.core.Npy.read(tmp.resolve(family).resolve("image_grid_thw.npy")).shape());
        }
    }

    @Test
    void printConfigShowsWhatCameFromTheModel() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("model"), "qwen3-vl");
        var r = CliRunner.run("serve", "--data", tmp.resolve("train.jsonl").toString(), "--model", dir.toString(), "--print-config");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("model: " + dir + "\n"), r.out());
        assertTrue(r.out().contains("# processor: qwen3-vl  (from --model)\n"), r.out());
        assertTrue(r.out().contains("# min-pixels: 65536  (from --model)\n"), r.out());
        assertTrue(r.out().contains("# tokenizer: " + dir.resolve("tokenizer.json") + "  (from --model)\n"), r.out());
        assertTrue(r.out().contains("# transformers: \"4.57.0.dev0\"  (from --model)\n"), r.out());
    }

    /** --transformers on the command line: printed as given (beside --model too, where it wins), a bad value one line naming it. */
    @Test
    void theTransformersReleaseIsPrintedAndABadOneRefused() throws Exception {
        Path dir = ModelFolders.write(tmp.resolve("model"), "qwen2.5-vl");
        String data = tmp.resolve("train.jsonl").toString();
        var given = CliRunner.run("serve", "--data", data, "--model", dir.toString(), "--transformers", "5.18", "--print-config");
        assertEquals(0, given.status(), given.err());
        assertTrue(given.out().contains("\ntransformers: \"5.18\"\n"), given.out());
        assertEquals("", given.err().strip(), "no warning: the model's field is the release that saved it");
        var bad = CliRunner.run("serve", "--data", data, "--transformers", "5.x", "--print-config");
        assertEquals(2, bad.status(), bad.err());
        assertTrue(bad.err().strip().startsWith("stoker: --transformers: '5.x' is not a transformers version"), bad.err());
    }
}
