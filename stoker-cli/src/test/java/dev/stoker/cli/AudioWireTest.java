package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cluster.ClusteredNode;
import dev.stoker.core.AudioPreset;
import dev.stoker.core.Npy;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Qwen2.5-Omni's audio batches on the wires beyond shared memory and the socket (issue 32, build item 4): the compact format
 * ({@code --pixel-format uint8}), Arrow Flight ({@code --flight}) and the cluster ({@code serve --join} with a member), over
 * one made data set: {@link AudioCliTest#RECORDS} (WAV, MP3 48 kHz stereo, two clips, H.264 video + MP3, an HF typed FLAC
 * item) and an image + audio record, its clips and image made with the ffmpeg CLI. In every batch each sample's rows of the
 * text tensors, {@code input_features} and {@code feature_attention_mask} equal what {@code stoker encode} writes for it,
 * bit for bit; the compact batches' pixels convert ({@link CompactPixels}) to the float32 service's {@code pixel_values} and
 * {@code pixel_values_videos}; the Flight batches are the shared-memory ones, byte for byte.
 */
@Tag("slow")
@Timeout(300)
class AudioWireTest {
    static final int RECORDS = 6;
    @TempDir static Path tmp;
    private static Path manifest;
    /** What {@code stoker encode} writes for each record, by file name. */
    private static final List<Map<String, Npy.Array>> encoded = new ArrayList<>();
    /** The shared-memory batch of a service, by format, made once for the tests that compare with it. */
    private static final Map<EncodeOptions.PixelFormat, BatchDigestAndNames> shm = new HashMap<>();

    record BatchDigestAndNames(String digest, List<String> names) {}

    static final String IMAGE_RECORD = """
        {"id": "image-audio", "messages": [{"content": "<image><audio>What is shown and heard?", "role": "user"},
                                          {"content": "A pattern and a tone.", "role": "assistant"}],
         "images": ["clips/5.png"], "audios": ["clips/1.wav"]}""";

    @BeforeAll
    static void data() throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("data/clips"));
        AudioServeTest.makeClips(dir); // the clips of AudioCliTest.RECORDS
        FfmpegClips.make(dir.resolve("5.png"), "-f", "lavfi", "-i", "testsrc2=size=150x110", "-frames:v", "1");
        String records = AudioCliTest.RECORDS.strip();
        records = records.substring(0, records.lastIndexOf(']')) + ",\n" + IMAGE_RECORD + "\n]";
        manifest = Files.writeString(tmp.resolve("data/mllm_audio_demo.json"), records);
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(records);
        assertEquals(RECORDS, json.size());
        for (int i = 0; i < RECORDS; i++) {
            Path sample = Files.writeString(tmp.resolve("data/record" + i + ".json"), json.get(i).toString());
            Path out = tmp.resolve("encoded-" + i);
            var r = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", out.toString(),
                    "--min-pixels", "3136", "--max-pixels", "50176");
            assertEquals(0, r.status(), "record " + i + ": " + r.err());
            var files = new TreeMap<String, Npy.Array>();
            try (var list = Files.list(out)) {
                for (Path f : list.toList()) files.put(f.getFileName().toString().replace(".npy", ""), Npy.read(f));
            }
            encoded.add(files);
        }
    }

    /** One rank, one step of every record: {@code name}'s job in {@code format}. */
    private static NodeConfig.Builder config(String name, FeedMode mode, EncodeOptions.PixelFormat format) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").ranks(1).batch(RECORDS).steps(1)
                .pixels(3136, 50176).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2)
                .warmUpMillis(0).mode(mode).set(NodeConfig.PIXEL_FORMAT, format).set(NodeConfig.JOB, name);
    }

    /** A test's checks of a batch taken from a service. */
    private interface BatchCheck {
        void check(BatchLayout.Batch b) throws Exception;
    }

    /** Takes the one batch of a {@code format} service through shared memory ({@code mode} zero-copy) or the socket, and checks it. */
    private static BatchDigestAndNames take(String name, FeedMode mode, EncodeOptions.PixelFormat format, BatchCheck check) throws Exception {
        var config = config(name, mode, format).build();
        assertNull(config.audioFeedRefusal());
        var options = mode == FeedMode.ZERO_COPY ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.COPY;
        try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, name, options); var got = c.next()) {
            assertEquals(mode == FeedMode.ZERO_COPY, c.sharedMemory(), name);
            check.check(got.batch());
            return new BatchDigestAndNames(BatchDigest.of(got.batch()), names(got.batch()));
        }
    }

    /** The shared-memory batch of the {@code format} service (made once per class). */
    private static synchronized BatchDigestAndNames shm(EncodeOptions.PixelFormat format) throws Exception {
        var known = shm.get(format);
        if (known != null) return known;
        var made = take("shm-" + format.name().toLowerCase(java.util.Locale.ROOT), FeedMode.ZERO_COPY, format, b -> checkRows(b, format + " shm"));
        shm.put(format, made);
        return made;
    }

    static List<String> names(BatchLayout.Batch b) { return b.tensors().stream().map(Tensor::name).toList(); }

    private static long[] longs(Npy.Array a) {
        assertEquals("<i8", a.dtype());
        long[] v = new long[a.data().length / 8];
        java.nio.ByteBuffer.wrap(a.data()).order(java.nio.ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(v);
        return v;
    }

    private static byte[] bytes(Tensor t) { return t.data().toArray(ValueLayout.JAVA_BYTE); }

    /**
     * Each sample's rows of {@code b} — input_ids, labels, attention_mask, position_ids, input_features,
     * feature_attention_mask — against what {@code stoker encode} wrote for it, bit for bit: its tokens then the padding,
     * its clips' frames then zeros. {@code b} may hold any of the records, in any order.
     */
    static void checkRows(BatchLayout.Batch b, String where) {
        long[] index = b.sampleIndex();
        int rows = index.length, len = (int) b.tensor("input_ids").shape()[1];
        var features = b.tensor("input_features");
        var mask = b.tensor("feature_attention_mask");
        assertEquals(Tensor.DType.FLOAT32, features.dtype(), where);
        assertEquals(Tensor.DType.INT32, mask.dtype(), where);
        assertEquals(AudioPreset.MEL_BINS, features.shape()[1], where);
        int t = (int) features.shape()[2];
        byte[] f = bytes(features), m = bytes(mask);
        long[] ids = b.tensor("input_ids").toLongs(), labels = b.tensor("labels").toLongs(),
                attention = b.tensor("attention_mask").toLongs(), positions = b.tensor("position_ids").toLongs();
        int clip = 0, longest = 0;
        long images = 0; // the samples' own images: a batch with more holds the dummy image
        for (long i : index) images += encoded.get((int) i).containsKey("image_grid_thw") ? encoded.get((int) i).get("image_grid_thw").shape()[0] : 0;
        boolean dummy = b.tensor("image_grid_thw").shape()[0] > images;
        for (int row = 0; row < rows; row++) {
            var e = encoded.get((int) index[row]);
            String what = where + " record " + index[row];
            long[] eIds = longs(e.get("input_ids"));
            int n = eIds.length;
            assertArrayEquals(eIds, Arrays.copyOfRange(ids, row * len, row * len + n), what + " input_ids");
            int tail = row * len + n;
            if (row == 0 && dummy) { // --text-only dummy-image: the dummy image's tokens after the first sample's
                assertEquals(VISION_START, ids[tail], what + ": the dummy image after its tokens");
                while (ids[tail] != VISION_END) tail++;
                tail++;
            }
            assertTrue(Arrays.stream(ids, tail, row * len + len).allMatch(x -> x == 151643), what + ": padded");
            assertArrayEquals(longs(e.get("labels")), Arrays.copyOfRange(labels, row * len, row * len + n), what + " labels");
            assertArrayEquals(longs(e.get("attention_mask")), Arrays.copyOfRange(attention, row * len, row * len + n), what);
            long[] p = longs(e.get("position_ids"));
            for (int c3 = 0; c3 < 3; c3++)
                assertArrayEquals(Arrays.copyOfRange(p, c3 * n, c3 * n + n),
                        Arrays.copyOfRange(positions, (c3 * rows + row) * len, (c3 * rows + row) * len + n), what + " position_ids");
            longest = Math.max(longest, AudioRows.assertClips(what, e, f, m, t, clip));
            clip += (int) e.get("input_features").shape()[0];
        }
        assertEquals(clip, features.shape()[0], where + ": every clip of the batch's samples");
        assertEquals(longest, t, where + ": the batch's frames, its longest sample's");
    }

    /** Qwen2-VL's {@code <|vision_start|>} and {@code <|vision_end|>}, around the dummy image's pads. */
    static final long VISION_START = 151652, VISION_END = 151653;

    /** Whether every bit of {@code a} is {@code b}'s. */
    private static void assertSameBits(float[] a, float[] b, String what) {
        assertEquals(a.length, b.length, what);
        for (int k = 0; k < a.length; k++)
            if (Float.floatToRawIntBits(a[k]) != Float.floatToRawIntBits(b[k])) throw new AssertionError(what + " differs at " + k);
    }

    /**
     * {@code --pixel-format uint8}: the compact batch carries the images' and the video's resized u8 pixels, and the audio
     * tensors as the float32 batch does (float32 and int32, the same bytes); the pixels convert to the float32 service's
     * {@code pixel_values} and {@code pixel_values_videos} bit for bit; through shared memory and through the socket.
     */
    @Test
    void compactBatchesCarryTheAudioTensorsUnchangedAndTheirPixelsConvertToTheFloat32Ones() throws Exception {
        var expected = new HashMap<String, byte[]>();
        var f32 = take("f32", FeedMode.ZERO_COPY, EncodeOptions.PixelFormat.FLOAT32, b -> {
            checkRows(b, "float32");
            assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L), Arrays.stream(b.sampleIndex()).sorted().boxed().toList(), "every sample once");
            for (var t : b.tensors()) expected.put(t.name(), bytes(t));
            assertEquals(1, b.tensor("image_grid_thw").shape()[0], "the image record's image, no dummy");
        });
        shm.putIfAbsent(EncodeOptions.PixelFormat.FLOAT32, f32);
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String where = "uint8 " + mode;
            var u8 = take("u8-" + mode.name().toLowerCase(java.util.Locale.ROOT), mode, EncodeOptions.PixelFormat.UINT8, b -> {
                checkRows(b, where);
                assertArrayEquals(expected.get("sample_index"), bytes(b.tensor("sample_index")), where + ": the same samples in the same order");
                for (String name : List.of("input_ids", "labels", "attention_mask", "position_ids", "image_grid_thw", "video_grid_thw",
                        "second_per_grid_ts", "input_features", "feature_attention_mask"))
                    assertArrayEquals(expected.get(name), bytes(b.tensor(name)), where + ": " + name + " as in the float32 batch");
                assertFalse(names(b).contains("pixel_values") || names(b).contains("pixel_values_videos"), where + ": " + names(b));
                var cfg = CompactPixels.config(b.tensor("pixel_norm").toFloats(), b.tensor("pixel_patch").toLongs());
                var u8Images = b.tensor("pixel_values_u8");
                assertEquals(Tensor.DType.UINT8, u8Images.dtype());
                assertSameBits(floats(expected.get("pixel_values")),
                        CompactPixels.toPixelValues(u8Images.data(), b.tensor("image_grid_thw").toLongs(), cfg), where + " pixel_values");
                assertSameBits(floats(expected.get("pixel_values_videos")),
                        CompactPixels.toPixelValuesVideos(b.tensor("pixel_values_videos_u8").data(), b.tensor("video_grid_thw").toLongs(),
                                b.tensor("video_frame_counts").toLongs(), cfg), where + " pixel_values_videos");
                assertEquals(expected.get("pixel_values").length, 8 * u8Images.data().byteSize(), where + ": an image's pixels, 8 times fewer bytes");
                assertTrue(b.tensor("pixel_values_videos_u8").data().byteSize() * 4 <= expected.get("pixel_values_videos").length, where + ": video");
            });
            assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "pixel_values_u8", "image_grid_thw",
                    "pixel_values_videos_u8", "video_grid_thw", "second_per_grid_ts", "input_features", "feature_attention_mask",
                    "sample_index", "pixel_norm", "pixel_patch", "video_frame_counts"), u8.names(), where);
            if (mode == FeedMode.ZERO_COPY) shm.putIfAbsent(EncodeOptions.PixelFormat.UINT8, u8);
        }
    }

    private static float[] floats(byte[] b) {
        float[] v = new float[b.length / 4];
        java.nio.ByteBuffer.wrap(b).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(v);
        return v;
    }

    /**
     * {@code serve --flight}: the Java Flight client gets the batch a trainer gets from shared memory, every tensor byte
     * for byte (its digest) — the audio tensors with their dtypes and shapes — in float32 and in the compact format; then the
     * end of the feed.
     */
    @Test
    void flightBatchesAreTheSharedMemoryOnesBitForBit() throws Exception {
        for (var format : List.of(EncodeOptions.PixelFormat.FLOAT32, EncodeOptions.PixelFormat.UINT8)) {
            var reference = shm(format);
            String name = "flight-" + format.name().toLowerCase(java.util.Locale.ROOT);
            var config = config(name, FeedMode.ZERO_COPY, format).flight("127.0.0.1:0").build();
            assertNull(config.audioFeedRefusal());
            try (var node = StokerNode.launch(config)) {
                String url = node.flightUrl();
                int port = Integer.parseInt(url.substring(url.lastIndexOf(':') + 1));
                try (var client = FlightBatchClient.connect("127.0.0.1", port, dev.stoker.node.FlightTokenFile.clientOptions(System.getenv()), null)) {
                    BatchLayout.Batch b = client.next(0, 1, name);
                    assertNotNull(b, name);
                    checkRows(b, name);
                    assertEquals(reference.names(), names(b), name);
                    assertEquals(reference.digest(), BatchDigest.of(b), name + ": the shared-memory batch, byte for byte");
                    assertFalse(b.tensor("input_features").metadata(), name + ": a model input");
                    assertTrue(b.tensor("sample_index").metadata(), name);
                    assertNull(client.next(0, 1, name), name + ": the end of the feed after --steps 1");
                }
            }
        }
    }

    /**
     * The Python with pyarrow that reads Flight as docs/protocol.md shows ({@code $STOKER_PYARROW_PYTHON}, else Debian's
     * python3), or null where none imports {@code pyarrow.flight} (Debian 12 packages no pyarrow: the test is then skipped).
     */
    static String pyarrowPython() throws Exception {
        String python = System.getenv().getOrDefault("STOKER_PYARROW_PYTHON", AudioServeTest.PYTHON);
        if (!Files.isExecutable(Path.of(python))) return null;
        var p = new ProcessBuilder(python, "-c", "import pyarrow.flight, numpy").redirectErrorStream(true).start();
        p.getInputStream().readAllBytes();
        return p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS) && p.exitValue() == 0 ? python : null;
    }

    /**
     * A Python trainer reading {@code serve --flight} with pyarrow, as docs/protocol.md shows
     * ({@code clients/python/tests/integration/flight_take.py}), gets the shared-memory batch byte for byte (the same digest
     * over every row), the audio tensors among its rows with their dtypes (float32, int32) as model inputs; float32 and
     * compact.
     */
    @Test
    void pyarrowReadsTheAudioTensorsOverFlight() throws Exception {
        String python = pyarrowPython();
        org.junit.jupiter.api.Assumptions.assumeTrue(python != null, "no python3 with pyarrow.flight (set STOKER_PYARROW_PYTHON)");
        for (var format : List.of(EncodeOptions.PixelFormat.FLOAT32, EncodeOptions.PixelFormat.UINT8)) {
            var reference = shm(format);
            String name = "pyflight-" + format.name().toLowerCase(java.util.Locale.ROOT);
            try (var node = StokerNode.launch(config(name, FeedMode.ZERO_COPY, format).flight("127.0.0.1:0").build())) {
                String url = node.flightUrl();
                var p = new ProcessBuilder(python, dev.stoker.testkit.Vectors.projectDir().resolve("clients/python/tests/integration/flight_take.py")
                        .toString(), "--port", url.substring(url.lastIndexOf(':') + 1), "--world", "1", "--rank", "0", "--job", name,
                        "--steps", "1", "--expect-end").redirectErrorStream(true).start();
                p.getOutputStream().close();
                String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
                assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS), out);
                assertEquals(0, p.exitValue(), out);
                var lines = out.strip().split("\n");
                var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
                assertEquals(reference.digest(), json.get("digests").get(0).asText(), name + ": pyarrow's batch is the shared-memory one");
                var rows = new HashMap<String, String>();
                for (var t : json.get("tensors")) rows.put(t.get(0).asText(), t.get(1).asText() + (t.get(3).asBoolean() ? " metadata" : ""));
                assertEquals("float32", rows.get("input_features"), name + ": " + rows);
                assertEquals("int32", rows.get("feature_attention_mask"), name + ": " + rows);
            }
        }
    }

    static int freePort() throws IOException {
        try (var s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /**
     * {@code base} as a member of the cluster whose seed is {@code seed}, listening on {@code self}, with one worker, its
     * shared memory and socket under {@code dir} (AudioPackClusterTest's members too).
     */
    static NodeConfig.Builder member(Path dir, NodeConfig.Builder base, String seed, String self, String name) throws IOException {
        return base.set(NodeConfig.JOIN, List.of(seed)).set(NodeConfig.BIND, self).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.HEARTBEAT_PAUSE_MS, 3000L).set(NodeConfig.DOWN_AFTER_MS, 2000L)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(dir.resolve("node-shm-" + name))).set(NodeConfig.NODE_SHM_BUDGET, 512L << 20)
                .socket(dir.resolve(name + ".sock"));
    }

    /**
     * {@code serve --join --processor qwen2.5-omni} with a member ({@code stoker node}): a worker on each node makes audio
     * batches into its store, and the two ranks' trainers on the coordinator's node take them by lease and, the other node's,
     * pulled over Flight; every sample once, each sample's rows {@code encode}'s.
     */
    @Test
    @SuppressWarnings("unchecked")
    void aClusterMakesAudioBatchesOnEveryNodeAndPullsThemOverFlight() throws Exception {
        final int ranks = 2;
        String seed = "127.0.0.1:" + freePort();
        var job = config("cluster", FeedMode.ZERO_COPY, EncodeOptions.PixelFormat.FLOAT32).ranks(ranks).batch(RECORDS / ranks)
                .set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2);
        var coordinatorConfig = member(tmp, job, seed, "127.0.0.1:" + freePort(), "coord").build();
        assertNull(coordinatorConfig.audioFeedRefusal());
        var delivered = new ArrayList<Long>();
        try (var a = ClusteredNode.launchMember(member(tmp, NodeConfig.builder(), seed, seed, "a").build(), line -> {});
             var c = ClusteredNode.launchCoordinator(coordinatorConfig, line -> {})) {
            try (var t0 = TrainerClient.connect(c.socket(), 0, ranks, "cluster", TrainerClient.Options.SHARED_MEMORY);
                 var t1 = TrainerClient.connect(c.socket(), 1, ranks, "cluster", TrainerClient.Options.SHARED_MEMORY)) {
                for (var t : List.of(t0, t1))
                    try (var got = t.next()) {
                        var b = got.batch();
                        String where = "cluster rank " + b.meta().rank();
                        checkRows(b, where);
                        assertEquals(RECORDS / ranks, b.sampleIndex().length, where);
                        for (long i : b.sampleIndex()) delivered.add(i);
                    }
            }
            var stats = (List<dev.stoker.cluster.NodeProtocol.NodeStats>) c.metrics().get("nodes");
            assertEquals(2, stats.size(), stats.toString());
            assertTrue(stats.stream().allMatch(n -> n.produced() > 0), "each node made a batch: " + stats);
            assertTrue(stats.stream().anyMatch(n -> n.flightBatchesSent() > 0) && stats.stream().anyMatch(n -> n.pulledBatches() > 0),
                    "a batch pulled over Flight: " + stats);
        }
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L), delivered.stream().sorted().toList(), "every sample once: " + delivered);
    }
}
