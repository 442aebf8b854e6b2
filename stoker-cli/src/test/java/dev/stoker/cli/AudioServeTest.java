package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.Npy;
import dev.stoker.core.batch.Tensor;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --processor qwen2.5-omni} (issue 32, build item 4, first step) over LLaMA-Factory's audio and video+audio
 * layouts ({@link AudioCliTest#RECORDS}: WAV, MP3 48 kHz stereo, two clips, H.264 video + MP3, an HF typed FLAC item), read by
 * the Java trainer client through shared memory (zero-copy) and through the socket (prefetch): every sample delivered once,
 * and each sample's rows of {@code input_ids}, {@code labels}, {@code attention_mask}, {@code position_ids},
 * {@code input_features}, {@code feature_attention_mask} and, for the video record, {@code pixel_values_videos} and
 * {@code video_grid_thw}, equal to what {@code stoker encode} writes for that sample, bit for bit (the batch's frames past
 * a sample's own zeros, its tokens past its own the padding); and the Python client reads the same batch from shared memory
 * (the same digest). The start-time refusals are in {@link AudioCliTest}.
 */
@Tag("slow")
@Timeout(300)
class AudioServeTest {
    static final int RECORDS = 5;
    @TempDir static Path tmp;
    private static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        manifest = writeData(tmp);
    }

    /** The clips of {@link AudioCliTest#RECORDS} made by FFmpeg into {@code dir}: 1.wav, 2.mp3 (48 kHz stereo), 3.flac, 4.mp4 (H.264 + AAC). */
    static void makeClips(Path dir) throws Exception {
        FfmpegClips.require();
        FfmpegClips.make(dir.resolve("1.wav"), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=2.5", "-ac", "1", "-c:a", "pcm_s16le");
        FfmpegClips.make(dir.resolve("2.mp3"), "-f", "lavfi", "-i", "sine=frequency=660:sample_rate=48000:duration=3", "-ac", "2",
                "-c:a", "libmp3lame", "-b:a", "128k");
        FfmpegClips.make(dir.resolve("3.flac"), "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=22050:duration=1.5", "-ac", "1", "-c:a", "flac");
        FfmpegClips.make(dir.resolve("4.mp4"), "-f", "lavfi", "-i", "testsrc2=size=128x96:rate=8:duration=2", "-f", "lavfi", "-i",
                "sine=frequency=500:sample_rate=44100:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-c:a", "aac", "-shortest");
    }

    /** {@link AudioCliTest#RECORDS} with its clips made by FFmpeg under {@code tmp}/data: the manifest. */
    static Path writeData(Path tmp) throws Exception {
        makeClips(Files.createDirectories(tmp.resolve("data/clips")));
        return Files.writeString(tmp.resolve("data/mllm_audio_demo.json"), AudioCliTest.RECORDS);
    }

    private static NodeConfig config(String name, FeedMode mode) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").ranks(1).batch(RECORDS).steps(1)
                .pixels(3136, 50176).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2).warmUpMillis(0).mode(mode).set(NodeConfig.JOB, name).build();
    }

    /** What {@code stoker encode --processor qwen2.5-omni} writes for record {@code i}, by file name. */
    private static java.util.Map<String, Npy.Array> encode(int i) throws IOException { return encode(tmp, i); }

    /** What {@code stoker encode --processor qwen2.5-omni} writes for record {@code i} of the data {@link #writeData} put under {@code tmp}. */
    static java.util.Map<String, Npy.Array> encode(Path tmp, int i) throws IOException {
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(AudioCliTest.RECORDS).get(i);
        Path sample = Files.writeString(tmp.resolve("data/record" + i + ".json"), json.toString());
        Path out = tmp.resolve("encoded-" + i);
        var r = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", out.toString());
        assertEquals(0, r.status(), "record " + i + ": " + r.err());
        var files = new java.util.TreeMap<String, Npy.Array>();
        try (var list = Files.list(out)) {
            for (Path f : list.toList()) files.put(f.getFileName().toString().replace(".npy", ""), Npy.read(f));
        }
        return files;
    }

    static long[] longs(Npy.Array a) {
        assertEquals("<i8", a.dtype());
        long[] v = new long[a.data().length / 8];
        java.nio.ByteBuffer.wrap(a.data()).order(java.nio.ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(v);
        return v;
    }

    static byte[] bytes(Tensor t) { return t.data().toArray(ValueLayout.JAVA_BYTE); }

    @Test
    void everySampleOnceAndEachSamplesRowsAreEncodesBitForBit() throws Exception {
        String javaDigest = null;
        var encoded = new java.util.ArrayList<java.util.Map<String, Npy.Array>>();
        for (int i = 0; i < RECORDS; i++) encoded.add(encode(i));
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String name = "omni-" + mode.name().toLowerCase(java.util.Locale.ROOT);
            var config = config(name, mode);
            assertNull(config.audioFeedRefusal());
            var options = mode == FeedMode.ZERO_COPY ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.COPY;
            try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, name, options);
                 var got = c.next()) {
                assertEquals(mode == FeedMode.ZERO_COPY, c.sharedMemory(), mode.toString());
                var b = got.batch();
                if (mode == FeedMode.ZERO_COPY) javaDigest = digest(b);
                long[] index = b.sampleIndex();
                assertEquals(List.of(0L, 1L, 2L, 3L, 4L), Arrays.stream(index).sorted().boxed().toList(), mode + ": every sample once");
                var names = b.tensors().stream().map(Tensor::name).toList();
                assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "pixel_values", "image_grid_thw",
                        "pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "input_features", "feature_attention_mask",
                        "sample_index"), names, mode.toString());
                int len = (int) b.tensor("input_ids").shape()[1];
                var features = b.tensor("input_features");
                var mask = b.tensor("feature_attention_mask");
                assertEquals(Tensor.DType.FLOAT32, features.dtype());
                assertEquals(Tensor.DType.INT32, mask.dtype());
                assertEquals(6, features.shape()[0], "six clips in the batch");
                int t = (int) features.shape()[2];
                byte[] f = bytes(features), m = bytes(mask);
                long[] ids = b.tensor("input_ids").toLongs(), labels = b.tensor("labels").toLongs(),
                        attention = b.tensor("attention_mask").toLongs(), positions = b.tensor("position_ids").toLongs();
                int clip = 0, longest = 0;
                for (int row = 0; row < RECORDS; row++) {
                    var e = encoded.get((int) index[row]);
                    String what = mode + " record " + index[row];
                    long[] eIds = longs(e.get("input_ids"));
                    int n = eIds.length;
                    assertArrayEquals(eIds, Arrays.copyOfRange(ids, row * len, row * len + n), what + " input_ids");
                    assertTrue(Arrays.stream(ids, row * len + n, row * len + len).allMatch(x -> x == 151643), what + ": padded");
                    assertArrayEquals(longs(e.get("labels")), Arrays.copyOfRange(labels, row * len, row * len + n), what + " labels");
                    assertArrayEquals(longs(e.get("attention_mask")), Arrays.copyOfRange(attention, row * len, row * len + n), what);
                    long[] p = longs(e.get("position_ids"));
                    for (int c3 = 0; c3 < 3; c3++)
                        assertArrayEquals(Arrays.copyOfRange(p, c3 * n, c3 * n + n),
                                Arrays.copyOfRange(positions, (c3 * RECORDS + row) * len, (c3 * RECORDS + row) * len + n), what + " position_ids");
                    longest = Math.max(longest, AudioRows.assertClips(what, e, f, m, t, clip));
                    clip += (int) e.get("input_features").shape()[0];
                    if (e.containsKey("pixel_values_videos")) {
                        assertArrayEquals(e.get("pixel_values_videos").data(), bytes(b.tensor("pixel_values_videos")), what + " pixel_values_videos");
                        assertArrayEquals(longs(e.get("video_grid_thw")), b.tensor("video_grid_thw").toLongs(), what + " video_grid_thw");
                        assertArrayEquals(e.get("second_per_grid_ts").data(), bytes(b.tensor("second_per_grid_ts")), what + " second_per_grid_ts");
                    }
                }
                assertEquals(6, clip);
                assertEquals(longest, t, "the batch's frames: its longest sample's");
            }
        }
        // the Python client reads the same batch from shared memory: the same tensors, shapes and bytes (its digest, as
        // BatchDigest computes it in Java)
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "no " + PYTHON);
        var config = config("omni-py", FeedMode.ZERO_COPY);
        try (var node = StokerNode.launch(config)) {
            var p = new ProcessBuilder(PYTHON, dev.stoker.testkit.Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py")
                    .toString(), "take", "--socket", node.socket().toString(), "--world", "1", "--rank", "0", "--job", "omni-py", "--steps", "1")
                    .redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS), out);
            assertEquals(0, p.exitValue(), out);
            var lines = out.strip().split("\n");
            var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
            assertEquals(javaDigest, json.get("digests").get(0).asText(), "the Python client's batch is the Java client's");
        }
    }

    static final String PYTHON = "/usr/bin/python3";

    /**
     * A clip that does not decode is its sample's error (the sample skipped, named with the clip and the cause in the
     * errors file), not the feed's: the batch holds the other sample, with its audio.
     */
    @Test
    void aClipThatDoesNotDecodeSkipsItsSampleNamingTheClip() throws Exception {
        Files.write(tmp.resolve("data/clips/broken.wav"), "RIFF not really a wave file".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        Path m = Files.writeString(tmp.resolve("data/broken.json"), """
            [{"id": "good", "messages": [{"role": "user", "content": "<audio>Say?"}, {"role": "assistant", "content": "A tone."}],
              "audios": ["clips/1.wav"]},
             {"id": "bad", "messages": [{"role": "user", "content": "<audio>Say?"}, {"role": "assistant", "content": "A tone."}],
              "audios": ["clips/broken.wav"]}]
            """);
        Path errors = tmp.resolve("broken-errors.jsonl");
        var config = NodeConfig.builder().data(m.toString()).set("processor", "qwen2.5-omni").ranks(1).batch(2).steps(1)
                .pixels(3136, 50176).socket(tmp.resolve("broken.sock")).shmDir(Files.createDirectories(tmp.resolve("shm-broken")))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2)
                .warmUpMillis(0).set(NodeConfig.ERRORS_FILE, errors).set(NodeConfig.JOB, "broken").build();
        try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, "broken", TrainerClient.Options.SHARED_MEMORY);
             var got = c.next()) {
            var b = got.batch();
            assertEquals(1, b.meta().batchSize());
            assertEquals(2, b.meta().scheduled());
            assertArrayEquals(new long[] {0}, b.sampleIndex(), "the good record");
            assertEquals(1, b.tensor("input_features").shape()[0], "its one clip");
        }
        String text = Files.readString(errors);
        assertTrue(text.contains("\"bad\"") && text.contains("broken.wav"), text);
    }

    /**
     * {@link dev.stoker.testkit.BatchDigest#of} in the Python client's order: the model inputs, then the metadata (this
     * batch has no image, so its empty image tensors are metadata and come after the audio tensors there).
     */
    static String digest(dev.stoker.core.batch.BatchLayout.Batch b) throws Exception {
        var md = java.security.MessageDigest.getInstance("SHA-256");
        for (var list : List.of(b.inputs(), b.metadata()))
            for (var t : list) {
                md.update(t.name().getBytes(java.nio.charset.StandardCharsets.UTF_8));
                md.update(Arrays.toString(t.shape()).getBytes(java.nio.charset.StandardCharsets.UTF_8));
                md.update(t.data().asByteBuffer());
            }
        return java.util.HexFormat.of().formatHex(md.digest(), 0, 12) + " " + Arrays.toString(b.sampleIndex());
    }
}
