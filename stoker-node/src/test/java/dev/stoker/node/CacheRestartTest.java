package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;

/**
 * The cache of preprocessed samples as a user meets it, in process: a node with {@code --cache-dir D} serves two
 * epochs to a trainer, then a second node (a restart: a new cache instance over the same folder) serves them again,
 * on each path a batch takes (shared memory in float32 and in the compact format, the heap of the prefetch mode, packs).
 * Every batch of every run is byte-identical to the same step's batch without the cache (BatchDigest: every tensor's
 * name, shape and bytes), the first epoch fills the cache (misses), the second epoch and the restart read it (hits
 * only), and the run's metrics and report carry the cache's counters.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class CacheRestartTest {
    static final int SAMPLES = 12, BATCH = 3, STEPS = 2 * SAMPLES / BATCH; // two epochs
    @TempDir Path tmp;

    /** The paths a batch takes: shared memory (float32 or compact), the heap (prefetch mode), packs. */
    enum Path_ { SHM, COMPACT, HEAP, PACKED }

    private NodeConfig config(Path manifest, String run, boolean cache, Path_ path) throws Exception {
        boolean compact = path == Path_.COMPACT;
        var b = NodeConfig.builder().data(manifest.toString()).ranks(1).steps(STEPS)
                .processor(ProcessorPreset.QWEN2_5_VL).pixels(3136, 50176).socket(tmp.resolve(run + ".sock"))
                .shmDir(Files.createDirectories(tmp.resolve("shm-" + run))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1)
                .threads(2).warmUpMillis(0).set(NodeConfig.CACHE, cache).set(NodeConfig.CACHE_DIR, tmp.resolve("cache"))
                .set(NodeConfig.METRICS_FILE, tmp.resolve(run + ".json")).set(NodeConfig.REPORT_DIR, tmp.resolve(run + "-report"));
        if (compact) b.set(NodeConfig.PIXEL_FORMAT, dev.stoker.encode.EncodeOptions.PixelFormat.UINT8);
        if (path == Path_.HEAP) b.set(NodeConfig.MODE, dev.stoker.pipeline.feed.FeedMode.PREFETCH);
        if (path == Path_.PACKED) b.set(NodeConfig.PACK_TOKENS, 1024); // about as many samples a step as a batch of 3
        else b.batch(BATCH);
        return b.build();
    }

    /** Every step's batch digest, the trainer reading to the end. */
    private static List<String> take(NodeConfig config, Path_ path) throws Exception {
        var digests = new ArrayList<String>();
        try (var node = StokerNode.launch(config, line -> {});
             var client = TrainerClient.connect(node.socket(), 0, 1, "default",
                     path == Path_.HEAP ? TrainerClient.Options.COPY : TrainerClient.Options.SHARED_MEMORY)) {
            for (int s = 0; s < STEPS; s++) {
                try (var got = client.next()) {
                    digests.add(BatchDigest.of(got.batch()));
                }
            }
        }
        return digests;
    }

    @ParameterizedTest
    @org.junit.jupiter.params.provider.EnumSource(Path_.class)
    void cachedRunsAreByteIdenticalAndTheSecondEpochAndARestartReadTheCache(Path_ path) throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 5);
        var plain = take(config(manifest, "plain", false, path), path);
        assertEquals(STEPS, plain.size());

        var cold = take(config(manifest, "cold", true, path), path);
        assertEquals(plain, cold, "a cold cache changes no byte of any batch");
        var coldCache = new ObjectMapper().readTree(tmp.resolve("cold.json").toFile()).get("cache");
        long entries = coldCache.get("entries").asLong();
        assertTrue(entries > 0 && coldCache.get("misses").asLong() >= entries, "epoch 1 decodes each image (two threads may race on one): "
                + coldCache);
        assertTrue(coldCache.get("hits").asLong() >= entries, "epoch 2 reads them from the cache: " + coldCache);

        var warm = take(config(manifest, "warm", true, path), path);
        assertEquals(plain, warm, "a restarted service's batches are byte-identical");
        var warmCache = new ObjectMapper().readTree(tmp.resolve("warm.json").toFile()).get("cache");
        assertEquals(0, warmCache.get("misses").asInt(), "a restart over a warm cache decodes nothing: " + warmCache);
        assertTrue(warmCache.get("hits").asLong() >= 2 * entries, warmCache.toString());
        assertEquals(entries, warmCache.get("entries").asLong(), warmCache.toString());
        assertEquals(0, warmCache.get("written").asLong(), warmCache.toString());
        String report = dev.stoker.report.RunReport.render(dev.stoker.report.RunData.load(tmp.resolve("warm-report")));
        assertTrue(report.contains("Cache of preprocessed samples") && report.contains("100.0%"), "the report shows the cache's hit rate");
    }
}
