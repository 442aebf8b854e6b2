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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code --shm-resident} as a trainer meets it: a zero-copy service whose store gives back the pages of every released
 * batch (a 1 MiB limit, far under one batch) serves the same batches, byte for byte, as one without the limit, while its
 * segments are reused with their pages filled again; its metrics say how many pages went back.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ShmResidentServeTest {
    static final int SAMPLES = 12, BATCH = 3, STEPS = 2 * SAMPLES / BATCH; // two epochs: every segment reused
    @TempDir Path tmp;

    private NodeConfig config(Path manifest, String run, String resident) throws Exception {
        var b = NodeConfig.builder().data(manifest.toString()).ranks(1).steps(STEPS).batch(BATCH)
                .processor(ProcessorPreset.QWEN2_5_VL).pixels(3136, 50176).socket(tmp.resolve(run + ".sock"))
                .shmDir(Files.createDirectories(tmp.resolve("shm-" + run))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1)
                .threads(2).warmUpMillis(0).set(NodeConfig.CACHE, false).set(NodeConfig.METRICS_FILE, tmp.resolve(run + ".json"));
        if (resident != null) b.set("shm-resident", resident);
        return b.build();
    }

    private static List<String> take(NodeConfig config) throws Exception {
        var digests = new ArrayList<String>();
        try (var node = StokerNode.launch(config, line -> {});
             var client = TrainerClient.connect(node.socket(), 0, 1, "default", TrainerClient.Options.SHARED_MEMORY)) {
            for (int s = 0; s < STEPS; s++) {
                try (var got = client.next()) {
                    digests.add(BatchDigest.of(got.batch()));
                }
            }
        }
        return digests;
    }

    @Test
    void aStoreThatGivesBackEveryReleasedBatchsPagesServesTheSameBytes() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 5);
        var plain = take(config(manifest, "plain", null));
        var lean = take(config(manifest, "lean", "1M"));
        assertEquals(STEPS, plain.size());
        assertEquals(plain, lean, "every batch byte for byte");
        var json = new ObjectMapper();
        var store = json.readTree(tmp.resolve("lean.json").toFile()).get("store");
        assertEquals(1L << 20, store.get("residentLimitBytes").asLong(), store.toString());
        assertTrue(store.get("returnedBytes").asLong() > 0, "released batches gave pages back: " + store);
        assertTrue(store.get("segmentsReused").asLong() > 0, "and their segments served later batches: " + store);
        var plainStore = json.readTree(tmp.resolve("plain.json").toFile()).get("store");
        assertEquals(0, plainStore.get("returnedBytes").asLong(), "no limit, nothing given back: " + plainStore);
        assertEquals(0, plainStore.get("residentLimitBytes").asLong());
    }
}
