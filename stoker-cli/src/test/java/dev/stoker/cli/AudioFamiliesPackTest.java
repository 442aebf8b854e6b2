package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Packs of Qwen2-Audio and Qwen3-Omni (issue 32, docs/packing.md §1a; Qwen2.5-Omni's: AudioPackTest, on a cluster:
 * AudioPackClusterTest).
 *
 * <p>{@code serve --processor qwen2-audio | qwen3-omni --pack-tokens N} over {@link AudioFamiliesServeTest#RECORDS} (WAV, MP3
 * 48 kHz stereo, two clips, an HF typed FLAC item, a text-only record; clips made by FFmpeg at test time), two ranks, read
 * through shared memory: the packs are {@code plan --pack-tokens N}'s per (step, rank), segment for segment; step 0 holds
 * every sample once (and the node's delivery audit checks every pack against its share); each segment's {@code input_ids},
 * {@code labels}, {@code position_ids} (Qwen2-Audio's int64 (1, T), each segment its own (1, L) row; Qwen3-Omni's float32
 * (4, 1, T), row 0 the segment's 0..L−1 and rows 1–3 its float (3, L) positions), clips' {@code input_features} and
 * {@code feature_attention_mask} rows equal what {@code stoker encode} writes for it alone, bit for bit; no dummy image
 * ({@code --text-only allow}: by default Qwen3-Omni's text-only packs get it, as its padded batches do).
 * The Python client reads Qwen2-Audio's first pack with the same digest as the Java client.
 */
@Tag("slow")
@Timeout(180)
class AudioFamiliesPackTest {
    static final int RECORDS = 5, RANKS = 2, STEPS = 3, PACK_TOKENS = 300, SEED = 3;
    @TempDir static Path tmp;
    private static Path manifest;
    private static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll
    static void data() throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("data/clips"));
        AudioServeTest.makeClips(dir);
        manifest = Files.writeString(tmp.resolve("data/audio.json"), AudioFamiliesServeTest.RECORDS);
    }

    /** What {@code stoker encode --processor FAMILY} writes for record {@code i} of {@code records}, by file name. */
    private static Map<String, Npy.Array> encode(String family, String records, int i) throws IOException {
        var json = JSON.readTree(records).get(i);
        Path sample = Files.writeString(tmp.resolve("data/" + family + "-record" + i + ".json"), json.toString());
        Path out = tmp.resolve("encoded-" + family + "-" + i);
        var r = CliRunner.run("encode", "--processor", family, "--sample", sample.toString(), "--out", out.toString());
        assertEquals(0, r.status(), family + " record " + i + ": " + r.err());
        var files = new TreeMap<String, Npy.Array>();
        try (var list = Files.list(out)) {
            for (Path f : list.toList()) files.put(f.getFileName().toString().replace(".npy", ""), Npy.read(f));
        }
        return files;
    }

    /** {@code plan --pack-tokens}'s packs of {@code family} over {@code data}: each (step, rank)'s samples in segment order (−1: the dummy image). */
    static Map<String, List<Long>> plan(String family, Path data, String... more) throws Exception {
        return plan(family, data, PACK_TOKENS, more);
    }

    /** {@link #plan(String, Path, String...)} with packs of {@code packTokens}. */
    static Map<String, List<Long>> plan(String family, Path data, int packTokens, String... more) throws Exception {
        var args = new ArrayList<>(List.of("plan", "--data", data.toString(), "--processor", family, "--ranks", String.valueOf(RANKS),
                "--pack-tokens", String.valueOf(packTokens), "--steps", String.valueOf(STEPS), "--seed", String.valueOf(SEED),
                "--max-seq-len", "512", "--threads", "1"));
        args.addAll(List.of(more));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        var out = new LinkedHashMap<String, List<Long>>();
        for (String line : r.out().lines().toList()) {
            var n = JSON.readTree(line);
            if (!n.has("segment")) continue;
            out.computeIfAbsent(n.get("step").asLong() + "/" + n.get("rank").asInt(), k -> new ArrayList<>()).add(n.get("sample").asLong());
        }
        assertEquals(STEPS * RANKS, out.size(), r.out());
        return out;
    }

    private static NodeConfig.Builder config(String family, String name) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).set("processor", family).ranks(RANKS).packTokens(PACK_TOKENS).steps(STEPS)
                .seed(SEED).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2)
                .warmUpMillis(0).mode(FeedMode.ZERO_COPY).set(NodeConfig.JOB, name).set("text-only", "allow");
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-audio", "qwen3-omni"})
    void thePacksArePlansAndEachSegmentIsEncodesBitForBit(String family) throws Exception {
        var encoded = new ArrayList<Map<String, Npy.Array>>();
        for (int i = 0; i < RECORDS; i++) encoded.add(encode(family, AudioFamiliesServeTest.RECORDS, i));
        var planned = plan(family, manifest, "--text-only", "allow"); // Qwen3-Omni's packs get the dummy image by default
        String name = family.replace(".", "") + "-pack";
        var config = config(family, name).build();
        assertNull(config.audioFeedRefusal(), family);
        var served = new LinkedHashMap<String, List<Long>>();
        String firstDigest = null;
        try (var node = StokerNode.launch(config)) {
            for (int rank = 0; rank < RANKS; rank++)
                try (var c = TrainerClient.connect(node.socket(), rank, RANKS, name, TrainerClient.Options.SHARED_MEMORY)) {
                    assertTrue(c.sharedMemory(), family);
                    for (int s = 0; s < STEPS; s++)
                        try (var got = c.next()) {
                            var b = got.batch();
                            String key = b.meta().globalStep() + "/" + b.meta().rank();
                            if (key.equals("0/0")) firstDigest = AudioServeTest.digest(b);
                            assertNull(served.put(key, Arrays.stream(b.sampleIndex()).boxed().toList()), family + ": pack " + key + " twice");
                            check(family + " pack " + key, family, b, encoded);
                        }
                }
        }
        assertEquals(planned, served, family + ": the packs are plan's, per (step, rank)");
        var first = new ArrayList<Long>();
        for (int rank = 0; rank < RANKS; rank++) first.addAll(served.get("0/" + rank));
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L), first.stream().sorted().toList(), family + ": every sample once in step 0, no dummy " + first);
        if (!family.equals("qwen2-audio")) return;
        // the Python client takes rank 0's first pack from shared memory: the Java client's digest
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(AudioServeTest.PYTHON)), "no " + AudioServeTest.PYTHON);
        String py = name + "-py";
        try (var node = StokerNode.launch(config(family, py).build())) {
            var p = new ProcessBuilder(AudioServeTest.PYTHON, dev.stoker.testkit.Vectors.projectDir()
                    .resolve("clients/python/tests/integration/fetch_batches.py").toString(), "take", "--socket", node.socket().toString(),
                    "--world", String.valueOf(RANKS), "--rank", "0", "--job", py, "--steps", "1").redirectErrorStream(true).start();
            p.getOutputStream().close();
            String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS), out);
            assertEquals(0, p.exitValue(), out);
            var lines = out.strip().split("\n");
            assertEquals(firstDigest, JSON.readTree(lines[lines.length - 1]).get("digests").get(0).asText(),
                    family + ": the Python client's pack is the Java client's");
        }
    }

    /** One pack of {@code family}'s samples, segment by segment, against each sample's encode files. */
    private static void check(String what, String family, BatchLayout.Batch b, List<Map<String, Npy.Array>> encoded) throws IOException {
        boolean qwen3 = family.equals("qwen3-omni");
        long[] index = b.sampleIndex();
        int[] cu = b.tensor("cu_seqlens").toInts();
        assertEquals(index.length + 1, cu.length, what + ": a segment per sample");
        assertTrue(Arrays.stream(index).allMatch(i -> i >= 0), what + ": no dummy image " + Arrays.toString(index));
        var ids = b.tensor("input_ids");
        assertArrayEquals(new long[] {1, cu[index.length]}, ids.shape(), what + ": one row, no tail pad");
        int t = (int) ids.shape()[1];
        var pos = b.tensor("position_ids");
        assertEquals(qwen3 ? Tensor.DType.FLOAT32 : Tensor.DType.INT64, pos.dtype(), what);
        assertArrayEquals(qwen3 ? new long[] {4, 1, t} : new long[] {1, t}, pos.shape(), what + " position_ids");
        assertEquals(List.of("input_ids", "labels", "position_ids", "input_features", "feature_attention_mask"),
                b.inputs().stream().map(Tensor::name).toList(), what + ": no image, so no dummy image among the inputs");
        assertEquals(0, b.tensor("image_grid_thw").shape()[0], what + ": no dummy image");
        long[] inputIds = ids.toLongs(), labels = b.tensor("labels").toLongs();
        byte[] positions = AudioServeTest.bytes(pos);
        int width = qwen3 ? 4 : 8;
        var features = b.tensor("input_features");
        int frames = (int) features.shape()[2];
        byte[] f = AudioServeTest.bytes(features), m = AudioServeTest.bytes(b.tensor("feature_attention_mask"));
        int clip = 0, longest = 0;
        for (int k = 0; k < index.length; k++) {
            int at = cu[k], len = cu[k + 1] - cu[k];
            var e = encoded.get((int) index[k]);
            String seg = what + " segment " + k + " (record " + index[k] + ")";
            long[] eIds = AudioServeTest.longs(e.get("input_ids"));
            assertEquals(eIds.length, len, seg + ": its length");
            assertArrayEquals(eIds, Arrays.copyOfRange(inputIds, at, at + len), seg + " input_ids");
            assertArrayEquals(AudioServeTest.longs(e.get("labels")), Arrays.copyOfRange(labels, at, at + len), seg + " labels");
            var ep = e.get("position_ids");
            assertEquals(qwen3 ? "<f4" : "<i8", ep.dtype(), seg);
            int rows = qwen3 ? 3 : 1, first = qwen3 ? 1 : 0; // Qwen3-Omni's rows 1–3 are the sample's; Qwen2-Audio's one row is
            assertArrayEquals(new long[] {rows, len}, ep.shape(), seg + " position_ids.npy");
            for (int r = 0; r < rows; r++) {
                int from = ((first + r) * t + at) * width;
                assertArrayEquals(Arrays.copyOfRange(ep.data(), r * len * width, (r + 1) * len * width),
                        Arrays.copyOfRange(positions, from, from + len * width), seg + " position_ids row " + (first + r));
            }
            if (qwen3) { // row 0: the segment's text positions 0..L−1, as floats
                var row0 = ByteBuffer.wrap(positions).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
                for (int x = 0; x < len; x++) assertEquals(x, row0.get(at + x), seg + ": row 0 its own 0..L-1");
            }
            if (!e.containsKey("input_features")) {
                assertEquals("text-only", JSON.readTree(AudioFamiliesServeTest.RECORDS).get((int) index[k]).path("id").asText(), seg);
                continue;
            }
            longest = Math.max(longest, AudioRows.assertClips(seg, e, f, m, frames, clip));
            clip += (int) e.get("input_features").shape()[0];
        }
        assertEquals(clip, (int) features.shape()[0], what + ": every clip of the pack's segments, none else");
        assertEquals(longest, frames, what + ": the pack's frames, its longest clip's");
    }
}
