package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.transport.TrainerClient;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --processor qwen3-omni} over samples with an image, a video, a video with its own audio track
 * ({@code use_audio_in_video} on the item) and a text-only one (issue 32), in one batch: through shared memory every
 * sample once, each sample's rows and the batch's {@code pixel_values}, {@code image_grid_thw},
 * {@code pixel_values_videos}, {@code video_grid_thw}, {@code second_per_grid_ts}, float32 {@code position_ids} and audio
 * tensors equal to what {@code stoker encode} writes (held to the processor by {@link Qwen3OmniVisionCliTest}) bit for
 * bit; the compact format ({@code --pixel-format uint8}) over the socket converts back to the same pixels; the Python
 * client reads the shared-memory batch with the same digest. (A Qwen3-Omni batch without image or video gets the dummy
 * image: AudioBatchTest.)
 */
@Tag("slow")
@Timeout(300)
class Qwen3OmniVisionServeTest {
    static final String RECORDS = """
        [
          {"id": "image", "messages": [{"role": "user", "content": "<image>What is shown?"}, {"role": "assistant", "content": "Bars."}],
           "images": ["media/img.png"]},
          {"id": "video", "messages": [{"role": "user", "content": "<video>What moves?"}, {"role": "assistant", "content": "A pattern."}],
           "videos": ["media/vid.mkv"]},
          {"id": "video-audio", "messages": [{"role": "user", "content": [{"type": "video", "video": "media/vid.mkv", "use_audio_in_video": true},
                                                                         {"type": "text", "text": "What is heard?"}]},
                                             {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]}]},
          {"id": "text-only", "messages": [{"role": "user", "content": "Say something."}, {"role": "assistant", "content": "Something."}]}
        ]
        """;
    static final int N = 4;
    @TempDir static Path tmp;
    private static Path manifest;
    private static final List<Map<String, Npy.Array>> encoded = new ArrayList<>();

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path media = Files.createDirectories(tmp.resolve("data/media"));
        FfmpegClips.make(media.resolve("img.png"), "-f", "lavfi", "-i", "testsrc2=size=200x150:rate=1:duration=1", "-frames:v", "1");
        FfmpegClips.make(media.resolve("vid.mkv"), "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10:duration=2", "-f", "lavfi", "-i",
                "sine=frequency=440:sample_rate=16000:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-c:a", "pcm_s16le", "-ac", "1", "-shortest");
        manifest = Files.writeString(tmp.resolve("data/omni3.json"), RECORDS);
        var records = new ObjectMapper().readTree(RECORDS);
        for (int i = 0; i < N; i++) {
            Path sample = Files.writeString(tmp.resolve("data/record" + i + ".json"), records.get(i).toString());
            Path out = tmp.resolve("encoded-" + i);
            var r = CliRunner.run("encode", "--processor", "qwen3-omni", "--sample", sample.toString(), "--out", out.toString());
            assertEquals(0, r.status(), "record " + i + ": " + r.err());
            var files = new TreeMap<String, Npy.Array>();
            try (var list = Files.list(out)) {
                for (Path f : list.toList()) files.put(f.getFileName().toString().replace(".npy", ""), Npy.read(f));
            }
            encoded.add(files);
        }
    }

    private static NodeConfig config(Path data, String name, int batch, FeedMode mode, EncodeOptions.PixelFormat format) throws IOException {
        return NodeConfig.builder().data(data.toString()).set("processor", "qwen3-omni").ranks(1).batch(batch).steps(1)
                .socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 2048).set(NodeConfig.PREFETCH_BATCHES, 1).threads(2).warmUpMillis(0).mode(mode)
                .set(NodeConfig.PIXEL_FORMAT, format).set(NodeConfig.JOB, name)
                // videos decoded in process: the worker processes' start-up (~17 s here) is AudioServeTest's to pay
                .set(dev.stoker.node.NodeSettings.VIDEO_DECODE, dev.stoker.encode.video.VideoEncoding.Decode.IN_PROCESS).build();
    }

    private static byte[] bytes(Tensor t) { return t.data().toArray(ValueLayout.JAVA_BYTE); }

    /** The samples' {@code file} arrays, concatenated in batch order (those that have one). */
    private static byte[] concat(long[] index, String file) {
        var out = new ByteArrayOutputStream();
        for (long i : index) {
            var a = encoded.get((int) i).get(file);
            if (a != null) out.writeBytes(a.data());
        }
        return out.toByteArray();
    }

    @Test
    void oneBatchOfImageVideoAndVideoWithAudioIsWhatEncodeWrites() throws Exception {
        String javaDigest;
        byte[] pixels, videos;
        try (var node = StokerNode.launch(config(manifest, "shm", N, FeedMode.ZERO_COPY, EncodeOptions.PixelFormat.FLOAT32));
             var c = TrainerClient.connect(node.socket(), 0, 1, "shm", TrainerClient.Options.SHARED_MEMORY); var got = c.next()) {
            assertTrue(c.sharedMemory());
            var b = got.batch();
            javaDigest = AudioServeTest.digest(b);
            long[] index = b.sampleIndex();
            assertEquals(List.of(0L, 1L, 2L, 3L), Arrays.stream(index).sorted().boxed().toList(), "every sample once");
            assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "pixel_values", "image_grid_thw",
                    "pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "input_features", "feature_attention_mask"),
                    b.inputs().stream().map(Tensor::name).toList(), "the one schema: images, videos and audio of one batch");
            int len = (int) b.tensor("input_ids").shape()[1];
            long[] ids = b.tensor("input_ids").toLongs();
            var pos = b.tensor("position_ids");
            assertEquals(Tensor.DType.FLOAT32, pos.dtype());
            assertArrayEquals(new long[] {3, N, len}, pos.shape());
            byte[] positions = bytes(pos);
            for (int row = 0; row < N; row++) {
                var e = encoded.get((int) index[row]);
                String what = "record " + index[row];
                var eIds = e.get("input_ids");
                int n = (int) eIds.shape()[0];
                long[] want = new long[n];
                ByteBuffer.wrap(eIds.data()).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(want);
                assertArrayEquals(want, Arrays.copyOfRange(ids, row * len, row * len + n), what + " input_ids");
                assertTrue(Arrays.stream(ids, row * len + n, row * len + len).allMatch(x -> x == 151643), what + ": padded");
                var ep = e.get("position_ids");
                for (int r = 0; r < 3; r++) {
                    int at = ((r * N + row) * len) * 4;
                    assertArrayEquals(Arrays.copyOfRange(ep.data(), r * n * 4, (r + 1) * n * 4), Arrays.copyOfRange(positions, at, at + n * 4),
                            what + " position_ids row " + r + " (float32)");
                }
            }
            assertEquals(1, b.tensor("image_grid_thw").shape()[0], "the image record's image, no dummy");
            pixels = concat(index, "pixel_values");
            videos = concat(index, "pixel_values_videos");
            assertArrayEquals(pixels, bytes(b.tensor("pixel_values")), "pixel_values: the image sample's");
            assertArrayEquals(concat(index, "image_grid_thw"), bytes(b.tensor("image_grid_thw")));
            assertArrayEquals(videos, bytes(b.tensor("pixel_values_videos")), "pixel_values_videos: the two video samples', in batch order");
            assertArrayEquals(concat(index, "video_grid_thw"), bytes(b.tensor("video_grid_thw")));
            assertArrayEquals(concat(index, "second_per_grid_ts"), bytes(b.tensor("second_per_grid_ts")));
            assertEquals(1, b.tensor("input_features").shape()[0], "one clip: the video's own track");
            assertArrayEquals(concat(index, "feature_attention_mask"), bytes(b.tensor("feature_attention_mask")));
            assertArrayEquals(concat(index, "input_features"), bytes(b.tensor("input_features")));
        }
        // the compact format over the socket: the resized u8 pixels, converted as the trainer converts them, are the same floats
        try (var node = StokerNode.launch(config(manifest, "u8", N, FeedMode.PREFETCH, EncodeOptions.PixelFormat.UINT8));
             var c = TrainerClient.connect(node.socket(), 0, 1, "u8", TrainerClient.Options.COPY); var got = c.next()) {
            var b = got.batch();
            long[] index = b.sampleIndex();
            var cfg = CompactPixels.config(b.tensor("pixel_norm").toFloats(), b.tensor("pixel_patch").toLongs());
            assertArrayEquals(concat(index, "pixel_values"), floatBytes(CompactPixels.toPixelValues(b.tensor("pixel_values_u8").data(),
                    b.tensor("image_grid_thw").toLongs(), cfg)), "u8 → pixel_values (patch 16, mean/std 0.5)");
            assertArrayEquals(concat(index, "pixel_values_videos"), floatBytes(CompactPixels.toPixelValuesVideos(
                    b.tensor("pixel_values_videos_u8").data(), b.tensor("video_grid_thw").toLongs(), b.tensor("video_frame_counts").toLongs(),
                    cfg)), "u8 → pixel_values_videos");
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(AudioServeTest.PYTHON)), "no " + AudioServeTest.PYTHON);
        try (var node = StokerNode.launch(config(manifest, "py", N, FeedMode.ZERO_COPY, EncodeOptions.PixelFormat.FLOAT32))) {
            var p = new ProcessBuilder(AudioServeTest.PYTHON, dev.stoker.testkit.Vectors.projectDir()
                    .resolve("clients/python/tests/integration/fetch_batches.py").toString(), "take", "--socket", node.socket().toString(),
                    "--world", "1", "--rank", "0", "--job", "py", "--steps", "1").redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS), out);
            assertEquals(0, p.exitValue(), out);
            var lines = out.strip().split("\n");
            var json = new ObjectMapper().readTree(lines[lines.length - 1]);
            assertEquals(javaDigest, json.get("digests").get(0).asText(), "the Python client's batch is the Java client's");
        }
    }

    private static byte[] floatBytes(float[] v) {
        var b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(v);
        return b.array();
    }
}
