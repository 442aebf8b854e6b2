package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The node as a library: a Java program embeds a node with {@code StokerNode.launch(config)} — no
 * command line — and a real trainer process (the Python client on Debian's Python, both ranks, its
 * numpy Loader over shared memory) takes every batch of the job until END. Each batch holds the
 * samples the global schedule gives its rank and step; closing the node removes its socket and its
 * shared memory.
 */
@Tag("slow")
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class EmbeddedNodeTest {
    static final String PYTHON = "/usr/bin/python3";
    static final int SAMPLES = 20, RANKS = 2, BATCH = 2, STEPS = 3;
    @TempDir Path tmp;

    @Test
    void aNodeLaunchedInProcessFeedsARealTrainerProcess() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "no " + PYTHON);
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        Path shm = Files.createDirectories(tmp.resolve("shm")), socket = tmp.resolve("node.sock"), out = tmp.resolve("out");
        var config = NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(BATCH).steps(STEPS)
                .processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176).socket(socket).shmDir(shm).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1)
                .threads(2).warmUpMillis(0).set(NodeConfig.METRICS_FILE, tmp.resolve("metrics.json")).build();
        var lines = new ArrayList<String>();
        try (var node = StokerNode.launch(config, lines::add)) {
            assertEquals(socket, node.socket());
            assertTrue(lines.getLast().equals("listening on " + socket), String.valueOf(lines));
            assertTrue(lines.getFirst().startsWith("job default, 2 ranks × batch 2, mode zero-copy, shared memory "), lines.getFirst());
            var p = new ProcessBuilder(PYTHON, Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py").toString(),
                    "fetch", "--socket", socket.toString(), "--world", "" + RANKS, "--out", out.toString(), "--job", "embedded")
                    .redirectErrorStream(true).start();
            String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(120, TimeUnit.SECONDS), text);
            assertEquals(0, p.exitValue(), text);
            var report = new ObjectMapper().readTree(text.strip().lines().reduce((a, b) -> b).orElseThrow());
            assertTrue(report.get("ok").asBoolean(), text);
            var schedule = new SampleSchedule(config.seed(), SAMPLES, RANKS, BATCH);
            for (int r = 0; r < RANKS; r++) {
                var steps = new ArrayList<Integer>();
                report.get("ranks").get("" + r).get("numpy_steps").forEach(s -> steps.add(s.asInt()));
                assertEquals(List.of(0, 1, 2), steps, "rank " + r + " took each step once, then END");
                assertTrue(report.get("ranks").get("" + r).get("refs").asInt() >= STEPS, "by reference to shared memory");
                int[] perm = schedule.permutationCopy(0);
                for (int s = 0; s < STEPS; s++) {
                    long[] got = npyLongs(out.resolve("rank" + r + "/step" + s + "/sample_index.npy"));
                    int from = s * RANKS * BATCH + r * BATCH;
                    long[] expected = Arrays.stream(perm, from, from + BATCH).asLongStream().toArray();
                    assertEquals(Arrays.toString(expected), Arrays.toString(got), "rank " + r + " step " + s);
                }
            }
            assertEquals(RANKS * STEPS, node.ledger().feeder().metrics().deliveredBatches());
        }
        assertFalse(Files.exists(socket), "the socket is removed with the node");
        try (var left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "and its shared memory");
        }
        var metrics = new ObjectMapper().readTree(tmp.resolve("metrics.json").toFile());
        assertEquals(RANKS * STEPS, metrics.get("server").get("refs_sent").asInt(), metrics.toString());
    }

    /** The values of a 1-D little-endian int64 .npy file. */
    static long[] npyLongs(Path file) throws Exception {
        byte[] b = Files.readAllBytes(file);
        int headerLen = (b[8] & 0xff) | (b[9] & 0xff) << 8;
        int start = 10 + headerLen;
        var buf = java.nio.ByteBuffer.wrap(b, start, b.length - start).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        long[] out = new long[(b.length - start) / 8];
        for (int i = 0; i < out.length; i++) out[i] = buf.getLong();
        return out;
    }
}
