package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A packed cluster job (issue 31 item 1): two members on loopback in this JVM ({@code serve --join --pack-tokens} and
 * {@code node --join} as the CLI assembles them), two ranks, a worker on each node, so that rank r's step s is made on
 * worker (r + s) mod 2 and every rank takes packs both by a lease on its own node's store and by a Flight pull from the
 * other's. Each rank's pack per step is the one {@code stoker plan --pack-tokens} prints for the same options
 * ({@link NodeFeeds#schedule}, what the plan command walks): the same samples in the same segment order, the dummy image's
 * segment (-1) where the plan gives it one; and over the first epoch every sample the plan feeds comes once.
 */
@Tag("slow")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PackedClusterTest {
    static final int RANKS = 2, SAMPLES = 20, PACK_TOKENS = 384;
    @TempDir Path tmp;

    /** The job's options as every node reads them: the data, the processor, the packing. */
    static NodeConfig.Builder packed(Path manifest) {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).packTokens(PACK_TOKENS).seed(5).pixels(3136, 50176)
                .threads(1).warmUpMillis(0).set(NodeConfig.MAX_IMAGES, 1);
    }

    /**
     * What {@code stoker plan} prints for {@code config} from step 0, {@code steps} steps: per "step/rank" the samples of the
     * rank's pack in segment order (-1: the dummy image), in step order; and the samples each step left out.
     */
    record Plan(Map<String, List<Long>> packs, List<Long> filtered, long stepsInFirstEpoch) {}

    static Plan plan(NodeConfig config, int steps) throws Exception {
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache())) {
            var source = sources.feedSource();
            var records = source.records();
            var schedule = NodeFeeds.schedule(config, source, records, null, line -> {}).labelled(ScheduleCursor.START, 0);
            var walks = new ArrayList<java.util.Iterator<dev.stoker.plan.schedule.ScheduledBatch>>();
            for (int r = 0; r < RANKS; r++) walks.add(schedule.iterator(ScheduleCursor.START, r));
            var packs = new LinkedHashMap<String, List<Long>>();
            var filtered = new ArrayList<Long>();
            long firstEpoch = 0;
            for (int g = 0; g < steps; g++) {
                dev.stoker.plan.schedule.ScheduledBatch last = null;
                for (var walk : walks) {
                    last = walk.next();
                    var samples = new ArrayList<Long>();
                    for (var segment : schedule.describe(last)) samples.add(((Number) segment.get("sample")).longValue());
                    packs.put(last.globalStep() + "/" + last.rank(), samples);
                }
                if (last.epoch() == 0) {
                    firstEpoch++;
                    for (var s : schedule.leftOut(last)) filtered.add((long) s.record());
                }
            }
            return new Plan(packs, filtered, firstEpoch);
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void aPackedClusterJobDeliversThePlannedPacksOverLeaseAndFlightEverySampleOnce() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 5);
        var reference = plan(packed(manifest).build(), 16);
        long steps = reference.stepsInFirstEpoch();
        assertTrue(steps >= 2 && steps < 16, "the first epoch takes a few steps of packs: " + steps);

        String member = "127.0.0.1:" + CoordinatorTimingsTest.freePort();
        var memberConfig = NodeConfig.builder().set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, member).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-member"))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve("member.sock")).build();
        var coordinatorConfig = packed(manifest).steps(steps).set(NodeConfig.JOB, "packed")
                .set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, "127.0.0.1:" + CoordinatorTimingsTest.freePort())
                .set(NodeConfig.SLOTS, 1).set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-coord"))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve("coord.sock")).build();
        var delivered = new LinkedHashMap<String, List<Long>>();
        try (var m = ClusteredNode.launchMember(memberConfig, line -> {});
             var c = ClusteredNode.launchCoordinator(coordinatorConfig, line -> {})) {
            for (int r = 0; r < RANKS; r++) // rank 0 on the coordinator's node, rank 1 on the member's
                try (var t = TrainerClient.connect((r == 0 ? c : m).socket(), r, RANKS, "packed", TrainerClient.Options.SHARED_MEMORY)) {
                    for (int s = 0; s < steps; s++)
                        try (var got = t.next()) {
                            var b = got.batch();
                            assertEquals(s, b.meta().globalStep(), "rank " + r + "'s packs in step order");
                            var samples = new ArrayList<Long>();
                            for (long i : b.tensor("sample_index").toLongs()) samples.add(i);
                            assertEquals(samples.size() + 1, b.tensor("cu_seqlens").toInts().length, "a segment per sample");
                            assertEquals(1, b.tensor("input_ids").shape()[0], "a pack is one row");
                            delivered.put(s + "/" + r, samples);
                        }
                }
            var stats = (List<NodeProtocol.NodeStats>) c.metrics().get("nodes");
            assertEquals(2, stats.size(), stats.toString());
            for (var n : stats) { // each node's rank took packs both ways: leased from its own store and pulled from the other's
                assertTrue(n.localHandOuts() > 0, "leased on the own node: " + n);
                assertTrue(n.pulledBatches() > 0 && n.flightBatchesSent() > 0, "pulled over Flight: " + n);
            }
        }
        for (var e : delivered.entrySet())
            assertEquals(reference.packs().get(e.getKey()), e.getValue(), "step/rank " + e.getKey() + ": the planned pack, segment by segment");
        assertEquals(steps * RANKS, delivered.size());

        // every sample once over the first epoch: those the plan feeds, none twice, none left out but what the plan left out
        var seen = new HashSet<Long>();
        for (var pack : delivered.values())
            for (long i : pack) if (i >= 0) assertTrue(seen.add(i), "sample " + i + " delivered twice: " + delivered);
        Set<Long> expected = new HashSet<>();
        for (long i = 0; i < SAMPLES; i++) expected.add(i);
        reference.filtered().forEach(expected::remove);
        assertEquals(expected, seen, "the first epoch's samples, each once (left out by the plan: " + reference.filtered() + ")");
    }
}
