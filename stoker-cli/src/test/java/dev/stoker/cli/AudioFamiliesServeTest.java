package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --processor qwen2-audio} and {@code serve --processor qwen3-omni} (issue 32): the two families whose
 * {@code position_ids} are not the Qwen-VL int64 (3, B, L) — Qwen2-Audio's int64 (B, L), Qwen3-Omni's float32 (3, B, L)
 * ({@code BatchSchema}, docs/audio.md "Serving"). Over audio-only records (WAV, MP3 48 kHz stereo, two clips, an HF typed FLAC
 * item, a text-only record), read by the Java trainer client through shared memory and through the socket: every sample
 * once, each sample's rows equal to what {@code stoker encode} writes for it bit for bit, the padding where the model's own
 * code puts it (token 151643, label −100, attention 0, position 1), no dummy image ({@code --text-only allow}: Qwen2-Audio
 * takes none; Qwen3-Omni's is held by Qwen3OmniVisionServeTest);
 * and the Python client reads the same batch from shared memory (the same digest).
 */
@Tag("slow")
@Timeout(300)
class AudioFamiliesServeTest {
    static final String RECORDS = """
        [
          {"messages": [{"content": "<audio>What is said?", "role": "user"}, {"content": "A tone.", "role": "assistant"}],
           "audios": ["clips/1.wav"]},
          {"id": "sharegpt", "conversations": [{"from": "human", "value": "<audio>What can you hear?"}, {"from": "gpt", "value": "A beep."}],
           "audios": ["clips/2.mp3"]},
          {"id": "two-clips", "messages": [{"content": "<audio><audio>Which is longer?", "role": "user"},
                                           {"content": "The first.", "role": "assistant"}],
           "audios": ["clips/1.wav", "clips/3.flac"]},
          {"id": "typed", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "clips/3.flac"}, {"type": "text", "text": "And this?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "A shorter tone."}]}]},
          {"id": "text-only", "messages": [{"content": "Say something long enough to be the longest sample of this batch, please.", "role": "user"},
                                           {"content": "Something long enough, and then some more words.", "role": "assistant"}]}
        ]
        """;
    static final int RECORDS_N = 5, CLIPS = 5;
    @TempDir static Path tmp;
    private static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("data/clips"));
        AudioServeTest.makeClips(dir); // the clips of AudioCliTest.RECORDS
        manifest = Files.writeString(tmp.resolve("data/audio.json"), RECORDS);
    }

    private static NodeConfig config(String family, String name, FeedMode mode) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).set("processor", family).ranks(1).batch(RECORDS_N).steps(1)
                .socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).threads(2).warmUpMillis(0).mode(mode)
                .set(NodeConfig.JOB, name)
                // Qwen3-Omni's text-only batches get the dummy image (its thinker has a vision tower; Qwen3OmniVisionServeTest):
                // off here, where the rows and padding of audio samples are what is checked
                .textOnly(dev.stoker.encode.EncodeOptions.TextOnlyPolicy.ALLOW).build();
    }

    /** What {@code stoker encode --processor FAMILY} writes for record {@code i}, by file name. */
    private static Map<String, Npy.Array> encode(String family, int i) throws IOException {
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(RECORDS).get(i);
        Path sample = Files.writeString(tmp.resolve("data/record" + i + ".json"), json.toString());
        Path out = tmp.resolve("encoded-" + family + "-" + i);
        var r = CliRunner.run("encode", "--processor", family, "--sample", sample.toString(), "--out", out.toString());
        assertEquals(0, r.status(), family + " record " + i + ": " + r.err());
        var files = new java.util.TreeMap<String, Npy.Array>();
        try (var list = Files.list(out)) {
            for (Path f : list.toList()) files.put(f.getFileName().toString().replace(".npy", ""), Npy.read(f));
        }
        return files;
    }

    private static long[] longs(Npy.Array a) {
        assertEquals("<i8", a.dtype());
        long[] v = new long[a.data().length / 8];
        ByteBuffer.wrap(a.data()).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(v);
        return v;
    }

    private static byte[] bytes(Tensor t) { return t.data().toArray(ValueLayout.JAVA_BYTE); }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-audio", "qwen3-omni"})
    void everySampleOnceAndEachSamplesRowsAreEncodesBitForBit(String family) throws Exception {
        boolean qwen3 = family.equals("qwen3-omni");
        var encoded = new java.util.ArrayList<Map<String, Npy.Array>>();
        for (int i = 0; i < RECORDS_N; i++) encoded.add(encode(family, i));
        String javaDigest = null;
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String name = family.replace(".", "") + "-" + mode.name().toLowerCase(java.util.Locale.ROOT);
            var config = config(family, name, mode);
            assertNull(config.audioFeedRefusal(), family);
            var options = mode == FeedMode.ZERO_COPY ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.COPY;
            try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, name, options);
                 var got = c.next()) {
                String what0 = family + " " + mode;
                assertEquals(mode == FeedMode.ZERO_COPY, c.sharedMemory(), what0);
                var b = got.batch();
                if (mode == FeedMode.ZERO_COPY) javaDigest = AudioServeTest.digest(b);
                long[] index = b.sampleIndex();
                assertEquals(List.of(0L, 1L, 2L, 3L, 4L), Arrays.stream(index).sorted().boxed().toList(), what0 + ": every sample once");
                assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "input_features", "feature_attention_mask"),
                        b.inputs().stream().map(Tensor::name).toList(), what0 + ": no image, so no dummy image among the inputs");
                assertEquals(0, b.tensor("image_grid_thw").shape()[0], what0 + ": no dummy image");
                int len = (int) b.tensor("input_ids").shape()[1];
                var pos = b.tensor("position_ids");
                assertEquals(qwen3 ? Tensor.DType.FLOAT32 : Tensor.DType.INT64, pos.dtype(), what0);
                assertArrayEquals(qwen3 ? new long[] {3, RECORDS_N, len} : new long[] {RECORDS_N, len}, pos.shape(), what0 + " position_ids shape");
                byte[] positions = bytes(pos);
                var features = b.tensor("input_features");
                var mask = b.tensor("feature_attention_mask");
                assertEquals(Tensor.DType.FLOAT32, features.dtype());
                assertEquals(Tensor.DType.INT32, mask.dtype());
                assertEquals(CLIPS, features.shape()[0], what0 + ": every clip of the batch");
                int t = (int) features.shape()[2];
                byte[] f = bytes(features), m = bytes(mask);
                long[] ids = b.tensor("input_ids").toLongs(), labels = b.tensor("labels").toLongs(),
                        attention = b.tensor("attention_mask").toLongs();
                int clip = 0, longest = 0, paddedRows = 0;
                for (int row = 0; row < RECORDS_N; row++) {
                    var e = encoded.get((int) index[row]);
                    String what = what0 + " record " + index[row];
                    long[] eIds = longs(e.get("input_ids"));
                    int n = eIds.length;
                    if (n < len) paddedRows++;
                    assertArrayEquals(eIds, Arrays.copyOfRange(ids, row * len, row * len + n), what + " input_ids");
                    assertTrue(Arrays.stream(ids, row * len + n, row * len + len).allMatch(x -> x == 151643), what + ": padded");
                    assertArrayEquals(longs(e.get("labels")), Arrays.copyOfRange(labels, row * len, row * len + n), what + " labels");
                    assertTrue(Arrays.stream(labels, row * len + n, row * len + len).allMatch(x -> x == -100), what + ": labels padded");
                    assertArrayEquals(longs(e.get("attention_mask")), Arrays.copyOfRange(attention, row * len, row * len + n), what);
                    assertTrue(Arrays.stream(attention, row * len + n, row * len + len).allMatch(x -> x == 0), what + ": attention padded");
                    // position_ids: the sample's rows of encode's file, bit for bit, then the padding (1 in the family's dtype)
                    var ep = e.get("position_ids");
                    int rows = qwen3 ? 3 : 1, width = qwen3 ? 4 : 8;
                    assertEquals(qwen3 ? "<f4" : "<i8", ep.dtype(), what);
                    assertArrayEquals(new long[] {rows, n}, ep.shape(), what + " position_ids.npy");
                    byte[] pad = new byte[width];
                    if (qwen3) ByteBuffer.wrap(pad).order(ByteOrder.LITTLE_ENDIAN).putFloat(1f);
                    else ByteBuffer.wrap(pad).order(ByteOrder.LITTLE_ENDIAN).putLong(1L);
                    for (int r = 0; r < rows; r++) {
                        int at = ((r * RECORDS_N + row) * len) * width;
                        assertArrayEquals(Arrays.copyOfRange(ep.data(), r * n * width, (r + 1) * n * width),
                                Arrays.copyOfRange(positions, at, at + n * width), what + " position_ids row " + r);
                        for (int k = n; k < len; k++)
                            assertArrayEquals(pad, Arrays.copyOfRange(positions, at + k * width, at + (k + 1) * width), what + " position pad at " + k);
                    }
                    if (!e.containsKey("input_features")) {
                        assertEquals("text-only", new com.fasterxml.jackson.databind.ObjectMapper().readTree(RECORDS).get((int) index[row]).get("id").asText());
                        continue;
                    }
                    longest = Math.max(longest, AudioRows.assertClips(what, e, f, m, t, clip));
                    clip += (int) e.get("input_features").shape()[0];
                }
                assertEquals(CLIPS, clip);
                assertEquals(longest, t, what0 + ": the batch's frames, its longest sample's");
                assertTrue(paddedRows >= RECORDS_N - 1, what0 + ": the padding was checked on " + paddedRows + " rows");
            }
        }
        // the Python client reads the same batch from shared memory: the same tensors, shapes and bytes
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(AudioServeTest.PYTHON)), "no " + AudioServeTest.PYTHON);
        String name = family.replace(".", "") + "-py";
        try (var node = StokerNode.launch(config(family, name, FeedMode.ZERO_COPY))) {
            var p = new ProcessBuilder(AudioServeTest.PYTHON, dev.stoker.testkit.Vectors.projectDir()
                    .resolve("clients/python/tests/integration/fetch_batches.py").toString(), "take", "--socket", node.socket().toString(),
                    "--world", "1", "--rank", "0", "--job", name, "--steps", "1").redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS), out);
            assertEquals(0, p.exitValue(), out);
            var lines = out.strip().split("\n");
            var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
            assertEquals(javaDigest, json.get("digests").get(0).asText(), family + ": the Python client's batch is the Java client's");
        }
    }

    /**
     * Shared memory sized from the data's clips (issue 32): {@code --audio-pad hf} under Qwen2.5-Omni (every clip 30,000
     * frames, 15.4 MB) with no {@code --shm-budget}: the start-up scan reads each clip's duration from its header, the store's
     * largest batch is the data's (its start line says so) — at least the batch served, within 10 % of it — and the batch
     * is served through shared memory. Before, the store was sized from a worst case that counted no audio feature and set
     * no object limit.
     */
    @org.junit.jupiter.api.Test
    void anHfPaddedJobsSharedMemoryIsSizedFromItsClips() throws Exception {
        String name = "hf-sized";
        var config = NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").set("audio-pad", "hf").ranks(1)
                .batch(RECORDS_N).steps(1).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).threads(2).warmUpMillis(0).mode(FeedMode.ZERO_COPY)
                .set(NodeConfig.JOB, name).set(NodeConfig.REPORT_DIR, tmp.resolve("report-" + name)).build();
        assertTrue(!config.isGiven(NodeConfig.SHM_BUDGET), "no --shm-budget");
        var lines = new java.util.concurrent.CopyOnWriteArrayList<String>();
        try (var node = StokerNode.launch(config, lines::add);
             var c = TrainerClient.connect(node.socket(), 0, 1, name, TrainerClient.Options.SHARED_MEMORY); var got = c.next()) {
            assertTrue(c.sharedMemory());
            var b = got.batch();
            assertEquals(CLIPS, b.tensor("input_features").shape()[0]);
            assertEquals(30_000, b.tensor("input_features").shape()[2], "hf: every clip 300 s");
            long served = 0;
            for (var t : b.tensors()) served += t.data().byteSize();
            String start = lines.stream().filter(l -> l.contains("shared memory")).findFirst().orElseThrow(() -> new AssertionError(lines));
            var m = java.util.regex.Pattern.compile("sized from the data's largest batch, (\\d+) bytes \\(a header scan of 5 records").matcher(start);
            assertTrue(m.find(), start);
            long bound = Long.parseLong(m.group(1));
            assertTrue(served > 5L * 30_000 * 128 * 4, "the batch holds five padded clips: " + served);
            assertTrue(bound >= served && bound < served * 1.1, "the data's bound " + bound + " for a batch of " + served + " bytes");
        }
        // the audio metrics, in the run data and in stoker report. The feed encodes ahead of the trainer (12 samples for the
        // one step taken, here), so the figures are checked against each other, not against the one batch: every clip is
        // 30,000 frames of 128 float32 and one int32 of mask; the clips are 1.5 to 3 s long; one decode and one log-mel
        // observation per sample with clips, at least the batch's 4
        Path dir = tmp.resolve("report-" + name);
        var run = new com.fasterxml.jackson.databind.ObjectMapper().readTree(dir.resolve("job-pipeline.json").toFile());
        var audio = run.path("pipeline").path("audio");
        long clips = audio.path("clips").asLong();
        double seconds = audio.path("seconds").asDouble();
        assertTrue(clips >= CLIPS, run.toString());
        assertEquals(clips * 30_000 * (128 * 4 + 4), audio.path("featureBytes").asLong(), audio.toString());
        assertTrue(seconds >= 1.5 * clips - 0.05 && seconds <= 3.0 * clips + 0.05, audio.toString());
        long decodes = run.path("stages").path("audio_decode").path("count").asLong();
        assertTrue(decodes >= 4 && decodes <= clips, run.path("stages").toString());
        assertEquals(decodes, run.path("stages").path("audio_features").path("count").asLong(), run.path("stages").toString());
        var r = CliRunner.run("report", dir.toString());
        assertEquals(0, r.status(), r.err());
        String html = Files.readString(dir.resolve("report.html"));
        int table = html.indexOf("id=\"audio-table\"");
        assertTrue(table > 0, "the report's audio table");
        String row = html.substring(html.indexOf("<tr><td>job</td>", table));
        row = row.substring(0, row.indexOf("</tr>"));
        String want = String.format(java.util.Locale.ROOT, "<tr><td>job</td><td>%d</td><td>%,.1f</td><td>%,.2f</td><td>", clips, seconds,
                audio.path("featureBytes").asLong() / 1e6);
        assertTrue(row.startsWith(want) && row.contains(" ms</td><td>") && row.endsWith(" ms</td>"), want + " in " + row);
        assertTrue(html.contains("audio_decode") && html.contains("audio_features"), "the stage plot's audio stages");
    }
}
