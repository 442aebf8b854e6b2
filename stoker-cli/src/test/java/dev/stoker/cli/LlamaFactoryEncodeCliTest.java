package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.testkit.FfmpegClips;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code stoker encode --video-sampler llamafactory} (issue 29, Build item 5) on a record in LLaMA-Factory's layout: exit
 * 0 and pixel_values_videos.npy bit for bit the fixture's (stoker-encode's tests resources, made by
 * tools/video-llamafactory-fixtures/make_fixtures.py: a port of LLaMA-Factory@ff6d4d12's {@code _regularize_videos} with
 * Pillow 12.3 and the real transformers 5.18.0 video processor), video_grid_thw, and Qwen2.5's second_per_grid_ts; and a
 * clip made here by {@link FfmpegClips} encodes with the grid the pre-resize gives.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaFactoryEncodeCliTest {
    static final ObjectMapper JSON = new ObjectMapper();
    @TempDir Path tmp;

    /** The fixtures, in stoker-encode's test resources (the tests run in their module's folder). */
    static Path fixtures() {
        Path p = Path.of("..", "stoker-encode", "src", "test", "resources", "dev", "stoker", "encode", "video", "llamafactory");
        assertTrue(Files.isDirectory(p), "no llamafactory fixtures at " + p.toAbsolutePath());
        return p;
    }

    static Path record(Path work, String clip) throws Exception {
        var root = JSON.createObjectNode();
        var messages = root.putArray("messages");
        messages.addObject().put("role", "user").put("content", "<video>What moves?");
        messages.addObject().put("role", "assistant").put("content", "Colours.");
        root.putArray("videos").add(clip);
        return Files.writeString(work.resolve("sample.json"), root.toString());
    }

    @ParameterizedTest
    @ValueSource(strings = {"l1_qwen25_320x240", "l2_qwen3_4000x20"})
    void encodeWritesTheFixturesPixels(String name) throws Exception {
        Path work = Files.createDirectories(tmp.resolve("work")), out = tmp.resolve("out");
        Files.copy(fixtures().resolve(name).resolve("clip.mp4"), work.resolve("clip.mp4"));
        JsonNode expected = JSON.readTree(fixtures().resolve(name).resolve("expected.json").toFile());
        String family = expected.get("family").asText();
        var r = CliRunner.run("encode", "--processor", family, "--video-sampler", "llamafactory", "--transformers", "5.18",
                "--sample", record(work, "clip.mp4").toString(), "--out", out.toString());
        assertEquals(0, r.status(), r.out() + r.err());
        var pv = Npy.read(out.resolve("pixel_values_videos.npy"));
        assertEquals("<f4", pv.dtype());
        assertArrayEquals(JSON.convertValue(expected.get("pixel_values_videos_shape"), long[].class), pv.shape());
        assertEquals(expected.get("pixel_values_videos_sha256").asText(),
                HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(pv.data())), "pixel_values_videos");
        assertArrayEquals(Npy.read(fixtures().resolve(name).resolve("video_grid_thw.npy")).asLongs(),
                Npy.read(out.resolve("video_grid_thw.npy")).asLongs());
        if (family.equals("qwen2.5-vl"))
            assertArrayEquals(new float[] {(float) expected.get("second_per_grid_ts").asDouble()},
                    Npy.read(out.resolve("second_per_grid_ts.npy")).asFloats());
    }

    /** 640x360 at 5 fps for 2 s: frames 0, 3, 6, 9 (4 of 10); Pillow 341x192; Qwen2-VL's smart_resize 196x336. */
    @Test
    void aClipMadeHereEncodesWithThePreResizedGrid() throws Exception {
        FfmpegClips.require();
        Path work = Files.createDirectories(tmp.resolve("work")), out = tmp.resolve("out");
        FfmpegClips.h264(work.resolve("c.mp4"), "640x360", "5", 2.0);
        var r = CliRunner.run("encode", "--processor", "qwen2-vl", "--video-sampler", "llamafactory", "--sample",
                record(work, "c.mp4").toString(), "--out", out.toString());
        assertEquals(0, r.status(), r.out() + r.err());
        assertArrayEquals(new long[] {0, 3, 6, 9}, Npy.read(out.resolve("frame_indices.npy")).asLongs());
        assertArrayEquals(new long[] {2, 14, 24}, Npy.read(out.resolve("video_grid_thw.npy")).asLongs());
    }
}
