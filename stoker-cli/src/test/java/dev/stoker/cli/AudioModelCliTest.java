package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.ModelFolders;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code --model DIR} of an audio family (issue 32): a folder written for each family (the published config fields, the
 * Whisper settings, the family's tokenizer: the bundled one with the family's added tokens; the published template where
 * one is kept) encodes a two-clip sample bit for bit as {@code --processor FAMILY} does; with the template,
 * {@code --chat-template model} renders the same bits; an altered template is refused naming the audio case; a Qwen-VL
 * processor given beside the folder is refused, naming both; {@code validate} keeps the record at the encoded length.
 */
@Timeout(240)
class AudioModelCliTest {
    static final List<String> FILES = List.of("input_ids", "labels", "attention_mask", "position_ids", "input_features", "feature_attention_mask");
    /** The published templates, kept with stoker-text's tests (OmniTemplateTest). */
    static final Path TEMPLATES = Path.of("..", "stoker-text", "src", "test", "resources", "dev", "stoker", "text", "omni");

    @TempDir static Path shared;
    @TempDir Path tmp;
    private static Path sample;

    @BeforeAll
    static void sample() throws Exception {
        FfmpegClips.require();
        FfmpegClips.make(shared.resolve("a.wav"), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=1.5", "-ac", "1",
                "-c:a", "pcm_s16le");
        FfmpegClips.make(shared.resolve("b.flac"), "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=22050:duration=1", "-ac", "1",
                "-c:a", "flac");
        sample = Files.writeString(shared.resolve("sample.json"), """
                {"id": "s1", "messages": [{"role": "user", "content": "<audio>Two clips: <audio> Same tone?"},
                                          {"role": "assistant", "content": "No, the second is lower."}],
                 "audios": ["a.wav", "b.flac"]}""");
    }

    private static String template(String family) throws Exception {
        Path p = TEMPLATES.resolve(family + ".jinja");
        return Files.isRegularFile(p) ? Files.readString(p) : null;
    }

    private CliRunner encode(Path out, String... args) {
        var all = new java.util.ArrayList<>(List.of("encode", "--sample", sample.toString(), "--out", out.toString()));
        all.addAll(List.of(args));
        return CliRunner.run(all.toArray(String[]::new));
    }

    private static void assertSameFiles(Path expected, Path actual) throws Exception {
        for (String f : FILES)
            assertArrayEquals(Files.readAllBytes(expected.resolve(f + ".npy")), Files.readAllBytes(actual.resolve(f + ".npy")), f);
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-audio", "qwen2.5-omni", "qwen3-omni"})
    void aFolderEncodesAsItsFamily(String family) throws Exception {
        String published = template(family); // Qwen3-Omni's is not kept here: its folder has none and encodes with the built-in one
        Path dir = ModelFolders.writeAudio(tmp.resolve("model"), family, published);
        var byModel = encode(tmp.resolve("m"), "--model", dir.toString());
        assertEquals(0, byModel.status(), byModel.err());
        var byName = encode(tmp.resolve("p"), "--processor", family);
        assertEquals(0, byName.status(), byName.err());
        assertSameFiles(tmp.resolve("p"), tmp.resolve("m"));
        if (published != null) { // the model's own template renders the same chat, so the same bits
            var own = encode(tmp.resolve("t"), "--model", dir.toString(), "--chat-template", "model");
            assertEquals(0, own.status(), own.err());
            assertSameFiles(tmp.resolve("p"), tmp.resolve("t"));
        } else {
            var none = encode(tmp.resolve("t"), "--model", dir.toString(), "--chat-template", "model");
            assertEquals(2, none.status(), none.err());
            assertTrue(none.err().contains("--chat-template model: " + dir + " has no chat template"), none.err());
        }
        // validate reads the folder too: the record kept, its length the encoded one
        Path manifest = Files.writeString(shared.resolve("m-" + family + ".jsonl"), Files.readString(sample).replace("\n", " ") + "\n");
        var v = CliRunner.run("validate", "--data", manifest.toString(), "--model", dir.toString(), "--threads", "1", "--lengths-dir",
                tmp.resolve("lengths").toString());
        assertEquals(0, v.status(), v.err() + v.out());
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(v.lastStdoutLine());
        assertEquals(1, json.get("samples").asInt(), v.out());
        assertEquals(0, json.get("errors").asInt(), v.out());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(json.get("length_index").asText()));
        assertEquals(dev.stoker.core.Npy.read(tmp.resolve("m/input_ids.npy")).asLongs().length, index.lengths()[0]);
    }

    @Test
    void anAlteredTemplateOrAQwenVlProcessorIsRefusedNamingWhy() throws Exception {
        Path dir = ModelFolders.writeAudio(tmp.resolve("model"), "qwen2.5-omni",
                template("qwen2.5-omni").replace("You are a helpful assistant.", "You are Qwen."));
        var r = encode(tmp.resolve("a"), "--model", dir.toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("--model: the chat template of " + dir.resolve("chat_template.jinja")
                + " renders differently from Stoker's built-in qwen2.5-omni template: template case 'audio_then_text' differs"), r.err());
        assertTrue(r.err().contains("add --chat-template model"), r.err());
        // the model's own template is what a trainer with this folder renders: encoded with it
        var own = encode(tmp.resolve("o"), "--model", dir.toString(), "--chat-template", "model");
        assertEquals(0, own.status(), own.err());
        long[] ids = dev.stoker.core.Npy.read(tmp.resolve("o/input_ids.npy")).asLongs();
        var reference = encode(tmp.resolve("p"), "--processor", "qwen2.5-omni");
        assertEquals(0, reference.status(), reference.err());
        long[] builtIn = dev.stoker.core.Npy.read(tmp.resolve("p/input_ids.npy")).asLongs();
        assertTrue(ids.length < builtIn.length, "the shorter system prompt: " + ids.length + " against " + builtIn.length);

        Path plain = ModelFolders.writeAudio(tmp.resolve("plain"), "qwen2.5-omni", null);
        var vl = encode(tmp.resolve("v"), "--model", plain.toString(), "--processor", "qwen2.5-vl");
        assertEquals(2, vl.status(), vl.err());
        assertTrue(vl.err().contains("--processor qwen2.5-vl disagrees with the model's qwen2.5-omni"), vl.err());
        var overridden = encode(tmp.resolve("w"), "--model", plain.toString(), "--processor", "qwen2.5-vl", "--override-model");
        assertEquals(2, overridden.status(), overridden.err());
        assertTrue(overridden.err().contains("is a qwen2.5-omni folder; --processor qwen2.5-vl takes no audio"), overridden.err());
    }
}
