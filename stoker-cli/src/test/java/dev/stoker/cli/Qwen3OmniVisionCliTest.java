package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.ModelFolders;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Qwen3-Omni samples with an image, a video, and a video with its own audio track ({@code use_audio_in_video}), through
 * {@code stoker encode --processor qwen3-omni} (issue 32), held to what transformers 5.18.0's {@code Qwen3OmniMoeProcessor}
 * (the published image and video processor settings) and its thinker's {@code get_rope_index} gave on the same media:
 * {@code omni3-vision-fixture.json}, made by {@code tools/hf-check/omni3_vision_check.py}, which also compared the
 * tensors themselves (tools/hf-check/RESULTS.md). The media are made here with the {@code ffmpeg} command and the
 * fixture's own arguments (a PNG; a lossless H.264 + 16 kHz PCM Matroska file). Compared: {@code input_ids},
 * {@code image_grid_thw}, {@code video_grid_thw}, {@code second_per_grid_ts} (the processor's
 * {@code video_second_per_grid}), the float32 {@code position_ids} bit for bit, and the SHA-256 of
 * {@code pixel_values} / {@code pixel_values_videos} (float32 little-endian). And the same image sample through
 * {@code --model DIR} of a Qwen3-Omni folder (its image processor read from {@code preprocessor_config.json}).
 */
@Timeout(300)
class Qwen3OmniVisionCliTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    @TempDir static Path data;
    private static JsonNode fixture;

    @BeforeAll
    static void makeMedia() throws Exception {
        FfmpegClips.require();
        try (InputStream in = Qwen3OmniVisionCliTest.class.getResourceAsStream("/dev/stoker/cli/omni3-vision-fixture.json")) {
            fixture = JSON.readTree(in);
        }
        for (var m : fixture.get("media").properties()) {
            var args = new ArrayList<String>();
            m.getValue().forEach(a -> args.add(a.asText()));
            FfmpegClips.make(data.resolve(m.getKey()), args.toArray(String[]::new));
        }
    }

    @Test
    void imageVideoAndVideoWithItsAudioEncodeAsTheProcessorAndTheThinkerGiveThem() throws Exception {
        assertEquals(3, fixture.get("cases").size());
        for (JsonNode c : fixture.get("cases")) {
            String name = c.get("name").asText();
            Path sample = Files.writeString(data.resolve(name + ".json"), JSON.writeValueAsString(c.get("record")));
            var args = new ArrayList<>(List.of("encode", "--processor", "qwen3-omni", "--sample", sample.toString(), "--out",
                    data.resolve("out-" + name).toString()));
            if (c.get("use_audio_in_video").asBoolean()) args.add("--use-audio-in-video");
            var r = CliRunner.run(args.toArray(String[]::new));
            assertEquals(0, r.status(), name + ": " + r.err());
            check(name, c, data.resolve("out-" + name));
            if (c.get("use_audio_in_video").asBoolean()) {
                var mask = Npy.read(data.resolve("out-" + name).resolve("feature_attention_mask.npy"));
                assertArrayEquals(new long[] {1, 200}, mask.shape(), name + ": the video's 2 s track, 100 frames a second");
            } else {
                Path features = data.resolve("out-" + name).resolve("input_features.npy");
                assertTrue(Files.notExists(features) || Npy.read(features).shape()[0] == 0, name + ": no clip");
            }
        }
    }

    @Test
    void validateKeepsEveryRecordAtTheLengthEncodeGives() throws Exception {
        var records = JSON.createArrayNode();
        for (JsonNode c : fixture.get("cases")) {
            var r = c.get("record").deepCopy();
            if (c.get("use_audio_in_video").asBoolean()) { // the flag as an item key: one manifest, both kinds of video
                var m = (com.fasterxml.jackson.databind.node.ObjectNode) r;
                var user = JSON.createObjectNode().put("role", "user");
                user.putArray("content").add(JSON.createObjectNode().put("type", "video").put("video", r.get("videos").get(0).asText())
                        .put("use_audio_in_video", true)).add(JSON.createObjectNode().put("type", "text").put("text", "What is heard?"));
                var assistant = JSON.createObjectNode().put("role", "assistant");
                assistant.putArray("content").add(JSON.createObjectNode().put("type", "text").put("text", "A tone."));
                m.remove("videos");
                m.putArray("messages").add(user).add(assistant);
            }
            records.add(r);
        }
        Path manifest = Files.writeString(data.resolve("omni3.json"), JSON.writeValueAsString(records));
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen3-omni", "--threads", "1",
                "--lengths-dir", data.resolve("lengths").toString());
        assertEquals(0, r.status(), r.err() + r.out());
        var json = JSON.readTree(r.lastStdoutLine());
        assertEquals(3, json.get("samples").asInt(), r.out());
        assertEquals(0, json.get("errors").asInt(), "every record kept: " + r.out());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(json.get("length_index").asText()));
        for (int i = 0; i < 3; i++)
            assertEquals(fixture.get("cases").get(i).get("input_ids").size(), index.lengths()[i], "record " + i + ": the processor's length");
    }

    @Test
    void aQwen3OmniFolderReadsItsImageProcessorAndEncodesTheSame() throws Exception {
        Path model = ModelFolders.writeAudio(data.resolve("model"), "qwen3-omni", null);
        JsonNode c = fixture.get("cases").get(0);
        assertEquals("image", c.get("name").asText());
        Path sample = Files.writeString(data.resolve("model-image.json"), JSON.writeValueAsString(c.get("record")));
        var r = CliRunner.run("encode", "--model", model.toString(), "--sample", sample.toString(), "--out", data.resolve("out-model").toString());
        assertEquals(0, r.status(), r.err());
        check("--model image", c, data.resolve("out-model"));
        // a folder whose image processor Stoker does not reproduce is refused, naming the file and field
        Path bad = ModelFolders.writeAudio(data.resolve("model-bad"), "qwen3-omni", null);
        ModelFolders.edit(bad, "preprocessor_config.json", t -> t.put("patch_size", 14));
        var refused = CliRunner.run("encode", "--model", bad.toString(), "--sample", sample.toString(), "--out", data.resolve("out-bad").toString());
        assertEquals(2, refused.status(), refused.out());
        assertTrue(refused.err().contains("patch_size"), refused.err());
    }

    private static void check(String name, JsonNode c, Path out) throws Exception {
        assertArrayEquals(longs(c.get("input_ids")), int64(out.resolve("input_ids.npy")), name + ": input_ids");
        var pos = Npy.read(out.resolve("position_ids.npy"));
        assertEquals("<f4", pos.dtype(), name);
        int len = longs(c.get("input_ids")).length;
        assertArrayEquals(new long[] {3, len}, pos.shape(), name);
        var bits = ByteBuffer.wrap(pos.data()).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer();
        for (int row = 0; row < 3; row++)
            for (int k = 0; k < len; k++)
                assertEquals(c.get("position_f32_bits").get(row).get(k).asInt(), bits.get(row * len + k),
                        name + ": position_ids[" + row + "][" + k + "] bit for bit");
        if (c.has("image_grid_thw")) {
            assertArrayEquals(flat(c.get("image_grid_thw")), int64(out.resolve("image_grid_thw.npy")), name + ": image_grid_thw");
            digest(name, c.get("pixel_values"), out.resolve("pixel_values.npy"));
        }
        if (c.has("video_grid_thw")) {
            assertArrayEquals(flat(c.get("video_grid_thw")), int64(out.resolve("video_grid_thw.npy")), name + ": video_grid_thw");
            var spg = Npy.read(out.resolve("second_per_grid_ts.npy"));
            var f = ByteBuffer.wrap(spg.data()).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
            assertEquals(c.get("video_second_per_grid").size(), f.remaining(), name);
            for (int k = 0; k < f.remaining(); k++)
                assertEquals((float) c.get("video_second_per_grid").get(k).asDouble(), f.get(k), name + ": video_second_per_grid (2 / fps 2.0)");
            digest(name, c.get("pixel_values_videos"), out.resolve("pixel_values_videos.npy"));
        }
    }

    private static void digest(String name, JsonNode want, Path npy) throws Exception {
        var a = Npy.read(npy);
        assertEquals("<f4", a.dtype(), name);
        assertArrayEquals(longs(want.get("shape")), a.shape(), name + ": " + npy.getFileName() + " shape");
        String sha = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(a.data()));
        assertEquals(want.get("sha256").asText(), sha, name + ": " + npy.getFileName() + " bit for bit (sum there "
                + want.get("sum").asDouble() + ")");
    }

    private static long[] longs(JsonNode a) {
        long[] v = new long[a.size()];
        for (int i = 0; i < v.length; i++) v[i] = a.get(i).asLong();
        return v;
    }

    private static long[] flat(JsonNode rows) {
        var out = new ArrayList<Long>();
        rows.forEach(r -> r.forEach(x -> out.add(x.asLong())));
        return out.stream().mapToLong(Long::longValue).toArray();
    }

    private static long[] int64(Path npy) throws IOException {
        var a = Npy.read(npy);
        assertEquals("<i8", a.dtype(), npy.toString());
        long[] v = new long[(int) a.elementCount()];
        ByteBuffer.wrap(a.data()).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(v);
        return v;
    }
}
