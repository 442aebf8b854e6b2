package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.encode.validate.LengthIndex;
import dev.stoker.testkit.SmallJpegDataset;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code stoker validate}: the report, the length index it names and, last, the summary JSON; exit 0 with bad records
 * in the data, 2 with a clear message when the source cannot be read.
 */
@Timeout(120)
class ValidateCliTest {
    @TempDir Path tmp;

    @Test
    void validatePrintsTheSummaryLastAndWritesTheLengthIndex() throws Exception {
        Path manifest = SmallJpegDataset.write(tmp.resolve("ds"), 60, 7);
        var lines = Files.readAllLines(manifest);
        lines.set(10, "{\"id\": \"broken\", ");                                       // malformed
        lines.set(20, lines.get(20).replaceAll("images/[0-9_]+\\.jpg", "images/gone.jpg")); // a missing image (if it has one)
        Files.write(manifest, lines);
        Path lengths = tmp.resolve("lengths");
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--threads", "2", "--max-pixels", "50176", "--lengths-dir", lengths.toString());
        assertEquals(0, r.status(), r.err());
        var json = new ObjectMapper().readTree(r.lastStdoutLine());
        assertEquals(60, json.get("samples").asInt());
        int errors = lines.get(20).contains("gone.jpg") ? 2 : 1;
        assertEquals(errors, json.get("errors").asInt(), r.out());
        assertEquals(0, json.get("filtered").asInt());
        assertTrue(json.get("images").asInt() > 40, r.out());
        var tokens = json.get("tokens");
        assertTrue(tokens.get("p50").asInt() > 0 && tokens.get("p50").asInt() <= tokens.get("p99").asInt()
                && tokens.get("p99").asInt() <= tokens.get("max").asInt(), tokens.toString());
        assertTrue(json.get("samples_per_s").asDouble() > 0);
        assertTrue(r.out().contains("malformed JSON") && r.out().contains("train.jsonl:11"), r.out());

        Path file = Path.of(json.get("length_index").asText());
        assertTrue(file.startsWith(lengths) && file.getFileName().toString().matches("lengths-[0-9a-f]{32}\\.bin"), file.toString());
        assertTrue(r.out().contains("length index: " + file), r.out());
        var index = LengthIndex.read(file);
        assertEquals(60, index.lengths().length);
        assertEquals(LengthIndex.ERROR, index.lengths()[10]);
        assertEquals(50176L, ((Number) index.settings().get("max_pixels")).longValue());
        assertEquals(tokens.get("max").asInt(), Arrays.stream(index.lengths()).max().orElseThrow());

        var other = CliRunner.run("validate", "--data", manifest.toString(), "--threads", "1", "--lengths-dir", lengths.toString());
        assertEquals(0, other.status(), other.err());
        var otherJson = new ObjectMapper().readTree(other.lastStdoutLine());
        assertTrue(!otherJson.get("length_index").asText().equals(file.toString()), "other --max-pixels, another index file");
        assertTrue(otherJson.get("tokens").get("max").asInt() >= tokens.get("max").asInt(), "a larger pixel cap, no shorter samples");
    }

    /**
     * {@code validate --model DIR} measures as the equivalent options do (the same token lengths), keyed by the model's
     * tokenizer; with {@code --chat-template model} the model's own template renders, under another index key.
     */
    @Test
    void validateReadsAModelFolder() throws Exception {
        Path manifest = SmallJpegDataset.write(tmp.resolve("ds"), 30, 3);
        Path model = dev.stoker.testkit.ModelFolders.write(tmp.resolve("model"), "qwen3-vl",
                dev.stoker.testkit.ModelFolders.publishedTemplate("qwen3-vl"));
        Path lengths = tmp.resolve("lengths");
        var byModel = CliRunner.run("validate", "--data", manifest.toString(), "--model", model.toString(), "--threads", "1",
                "--lengths-dir", lengths.toString());
        assertEquals(0, byModel.status(), byModel.err());
        var byOptions = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen3-vl", "--tokenizer",
                model.resolve("tokenizer.json").toString(), "--threads", "1", "--lengths-dir", lengths.toString());
        assertEquals(0, byOptions.status(), byOptions.err());
        var a = LengthIndex.read(Path.of(new ObjectMapper().readTree(byModel.lastStdoutLine()).get("length_index").asText()));
        var b = LengthIndex.read(Path.of(new ObjectMapper().readTree(byOptions.lastStdoutLine()).get("length_index").asText()));
        assertTrue(Arrays.equals(a.lengths(), b.lengths()), "the same lengths");
        assertEquals(65536L, ((Number) a.settings().get("min_pixels")).longValue(), "Qwen3-VL's published bounds");
        var own = CliRunner.run("validate", "--data", manifest.toString(), "--model", model.toString(), "--chat-template", "model",
                "--threads", "1", "--lengths-dir", lengths.toString());
        assertEquals(0, own.status(), own.err());
        var c = LengthIndex.read(Path.of(new ObjectMapper().readTree(own.lastStdoutLine()).get("length_index").asText()));
        assertTrue(Arrays.equals(a.lengths(), c.lengths()), "the published template renders as the built-in one");
        assertTrue(c.settings().containsKey("chat_template") && !a.settings().containsKey("chat_template"), c.settings().toString());
    }

    @Test
    void anUnreadableSourceExitsTwoWithAClearMessage() {
        var r = CliRunner.run("validate", "--data", tmp.resolve("nothing/train.jsonl").toString(), "--lengths-dir", tmp.toString());
        assertEquals(Main.EXIT_INVALID_INPUT, r.status(), r.out() + r.err());
        assertTrue(r.err().contains("cannot read --data") && r.err().contains("train.jsonl"), r.err());
    }
}
