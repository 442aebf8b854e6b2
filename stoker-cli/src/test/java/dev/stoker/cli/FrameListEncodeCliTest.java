package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code stoker encode} on a sample whose video is a list of frame images (issue 29, Build item 2), against the fixtures
 * stoker-encode's FrameListVideoTest reads (tools/video-framelist-fixtures: qwen-vl-utils' list branch, ported, then
 * the real transformers 5.18.0 processor): exit 0 and pixel_values_videos.npy, video_grid_thw.npy, frame_indices.npy
 * and (Qwen2.5) second_per_grid_ts.npy equal to the fixture's arrays, the frames read from the sample's folder; under
 * {@code --video-sampler hf} the same sample is refused: exit 2, one line naming the sample and the cause. Needs
 * neither FFmpeg nor Python.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class FrameListEncodeCliTest {
    static final ObjectMapper JSON = new ObjectMapper();
    @TempDir Path tmp;

    /** The fixtures, in stoker-encode's test resources (the tests run in their module's folder). */
    static Path fixtures() {
        Path p = Path.of("..", "stoker-encode", "src", "test", "resources", "dev", "stoker", "encode", "video", "framelist");
        assertTrue(Files.isDirectory(p), "no frame-list fixtures at " + p.toAbsolutePath());
        return p;
    }

    /** Copies a case's frames into {@code work} and writes its HF messages sample there; returns the sample. */
    static Path sample(String name, Path work) throws Exception {
        Path dir = fixtures().resolve(name);
        JsonNode expected = JSON.readTree(dir.resolve("expected.json").toFile());
        var video = JSON.createObjectNode().put("type", "video");
        var list = video.putArray("video");
        for (JsonNode f : expected.get("frames")) {
            Files.copy(dir.resolve(f.asText()), work.resolve(f.asText()));
            list.add(f.asText());
        }
        expected.get("item").properties().forEach(e -> video.set(e.getKey(), e.getValue()));
        var root = JSON.createObjectNode();
        var messages = root.putArray("messages");
        var content = messages.addObject().put("role", "user").putArray("content");
        content.add(video);
        content.addObject().put("type", "text").put("text", "What happens?");
        messages.addObject().put("role", "assistant").put("content", "Colours move.");
        return Files.writeString(work.resolve("sample.json"), root.toString());
    }

    @ParameterizedTest
    @ValueSource(strings = {"f1_qwen25_png_odd", "f2_qwen3_jpeg_resized"})
    void encodeWritesTheFixturesArrays(String name) throws Exception {
        Path work = Files.createDirectories(tmp.resolve("work")), out = tmp.resolve("out");
        Path s = sample(name, work);
        String family = JSON.readTree(fixtures().resolve(name).resolve("expected.json").toFile()).get("family").asText();
        var r = CliRunner.run("encode", "--processor", family, "--video-sampler", "qwen-vl-utils", "--transformers", "5.18",
                "--sample", s.toString(), "--out", out.toString());
        assertEquals(0, r.status(), r.out() + r.err());
        var names = new ArrayList<>(List.of("pixel_values_videos", "video_grid_thw"));
        if (family.equals("qwen2.5-vl")) names.add("second_per_grid_ts");
        for (String n : names) {
            var want = Npy.read(fixtures().resolve(name).resolve(n + ".npy"));
            var got = Npy.read(out.resolve(n + ".npy"));
            assertEquals(want.dtype(), got.dtype(), n);
            assertArrayEquals(want.shape(), got.shape(), n);
            assertArrayEquals(want.data(), got.data(), n + " differs from the fixture");
        }
        JsonNode idx = JSON.readTree(fixtures().resolve(name).resolve("expected.json").toFile()).get("frame_indices");
        long[] want = new long[idx.size()];
        for (int i = 0; i < want.length; i++) want[i] = idx.get(i).asLong();
        assertArrayEquals(want, Npy.read(out.resolve("frame_indices.npy")).asLongs());
    }

    /**
     * {@code validate} over a JSONL of frame-list records: the frames fetched as images, the good record kept with the
     * length {@code encode} gives it, a record with a missing frame an error.
     */
    @Test
    void validateFetchesTheFramesAndKeepsTheLengthEncodeGives() throws Exception {
        Path work = Files.createDirectories(tmp.resolve("work"));
        String good = Files.readString(sample("f1_qwen25_png_odd", work)).strip();
        String bad = good.replace("frame1.png", "missing.png");
        Path manifest = Files.writeString(work.resolve("train.jsonl"), good + "\n" + bad + "\n");
        Path lengths = tmp.resolve("lengths");
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen2.5-vl", "--video-sampler",
                "qwen-vl-utils", "--video", "on", "--threads", "1", "--lengths-dir", lengths.toString());
        var json = JSON.readTree(r.lastStdoutLine());
        assertEquals(2, json.get("samples").asInt(), r.out() + r.err());
        assertEquals(1, json.get("errors").asInt(), r.out() + r.err());
        assertTrue(r.out().contains("missing.png"), r.out());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(json.get("length_index").asText()));
        Path out = tmp.resolve("out");
        var e = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--video-sampler", "qwen-vl-utils", "--sample",
                work.resolve("sample.json").toString(), "--out", out.toString());
        assertEquals(0, e.status(), e.err());
        assertEquals(Npy.read(out.resolve("input_ids.npy")).asLongs().length, index.lengths()[0]);
        assertTrue(index.videos(0) > 0, "the record's video in the length index");
        long[] grid = Npy.read(fixtures().resolve("f1_qwen25_png_odd").resolve("video_grid_thw.npy")).asLongs();
        assertEquals(grid[0] * grid[1] * grid[2], Npy.read(out.resolve("pixel_values_videos.npy")).shape()[0]);
    }

    @Test
    void theHfSamplerRefusesAFrameListWithExit2AndOneLine() throws Exception {
        Path work = Files.createDirectories(tmp.resolve("work"));
        Path s = sample("f3_qwen2_png_one", work);
        var r = CliRunner.run("encode", "--processor", "qwen2-vl", "--sample", s.toString(), "--out", tmp.resolve("out").toString());
        assertEquals(2, r.status(), r.out() + r.err());
        assertEquals(1, r.err().strip().split("\n").length, r.err());
        assertTrue(r.err().contains("list of frame images") && r.err().contains("qwen-vl-utils"), r.err());
    }
}
