package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.BatchDigest;
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
 * A packed cluster job (issue 31 item 1): members on loopback in this JVM ({@code serve --join --pack-tokens} and
 * {@code node --join} as the CLI assembles them), a worker on each node, so that rank r's step s is made on worker
 * (r + s) mod W and every rank takes packs both by a lease on its own node's store and by a Flight pull from another's.
 * Each rank's pack per step is the one {@code stoker plan --pack-tokens} prints for the same options
 * ({@link NodeFeeds#schedule}, what the plan command walks): the same samples in the same segment order, the dummy image's
 * segment (-1) where the plan gives it one; and over the first epoch every sample the plan feeds comes once. One cluster
 * start carries a node's death and a resize too (a start costs seconds; the checks cost nothing).
 */
@Tag("slow")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PackedClusterTest {
    static final int RANKS = 2, PACK_TOKENS = 384;
    @TempDir Path tmp;

    /** The job's options as every node reads them: the data, the processor, the packing. */
    static NodeConfig.Builder packed(Path manifest) {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).packTokens(PACK_TOKENS).seed(5).pixels(3136, 50176)
                .threads(1).warmUpMillis(0).set(NodeConfig.MAX_IMAGES, 1);
    }

    /**
     * What {@code stoker plan} prints for {@code config}, {@code steps} steps of its {@code --ranks} from {@code at} labelled
     * {@code label} (the origin and 0: from the start): per "step/rank" the samples of the rank's pack in segment order (-1:
     * the dummy image); the samples the steps of epoch 0 left out; how many of the steps are in epoch 0; per step its
     * predicted cost of each rank's pack (the balance the plan prints).
     */
    record Plan(Map<String, List<Long>> packs, List<Long> filtered, long stepsInFirstEpoch, Map<Long, double[]> costs) {}

    static Plan plan(NodeConfig config, int steps) throws Exception { return plan(config, steps, ScheduleCursor.START, 0); }

    static Plan plan(NodeConfig config, int steps, ScheduleCursor from, long label) throws Exception {
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache())) {
            var source = sources.feedSource();
            var records = source.records();
            var planned = NodeFeeds.schedule(config, source, records, null, line -> {});
            var at = planned.aligned(from);
            var schedule = planned.labelled(at, label);
            var walks = new ArrayList<java.util.Iterator<dev.stoker.plan.schedule.ScheduledBatch>>();
            for (int r = 0; r < config.ranks(); r++) walks.add(schedule.iterator(at, r));
            var packs = new LinkedHashMap<String, List<Long>>();
            var filtered = new ArrayList<Long>();
            var costs = new LinkedHashMap<Long, double[]>();
            long firstEpoch = 0;
            for (int g = 0; g < steps; g++) {
                dev.stoker.plan.schedule.ScheduledBatch last = null;
                for (var walk : walks) {
                    last = walk.next();
                    var samples = new ArrayList<Long>();
                    for (var segment : schedule.describe(last)) samples.add(((Number) segment.get("sample")).longValue());
                    packs.put(last.globalStep() + "/" + last.rank(), samples);
                }
                for (var line : schedule.describeStep(last)) costs.put(last.globalStep(), (double[]) line.get("costs"));
                if (last.epoch() == 0) {
                    firstEpoch++;
                    for (var s : schedule.leftOut(last)) filtered.add((long) s.record());
                }
            }
            return new Plan(packs, filtered, firstEpoch, costs);
        }
    }

    /** {@code base} as a member of the cluster whose seed is {@code seed}, listening on {@code self}, taking {@code slots} workers. */
    NodeConfig.Builder member(NodeConfig.Builder base, String seed, String self, int slots, String name) throws Exception {
        return base.set(NodeConfig.JOIN, List.of(seed)).set(NodeConfig.BIND, self).set(NodeConfig.SLOTS, slots)
                .set(NodeConfig.HEARTBEAT_PAUSE_MS, 3000L).set(NodeConfig.DOWN_AFTER_MS, 2000L)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-" + name))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve(name + ".sock"));
    }

    static String loopback() throws Exception { return "127.0.0.1:" + CoordinatorTimingsTest.freePort(); }

    /** Every pack taken: its {@link BatchDigest} (every tensor, bit for bit, and the sample_index), by "step/rank". */
    final Map<String, String> digests = new LinkedHashMap<>();

    /**
     * The next {@code n} packs of {@code t}'s rank, each checked as a pack (a row, a segment per sample), by "step/rank"; their
     * digests into {@link #digests} under {@code prefix} + "step/rank".
     */
    void take(TrainerClient t, int n, Map<String, List<Long>> into, String prefix) throws Exception {
        for (int i = 0; i < n; i++)
            try (var got = t.next()) {
                var b = got.batch();
                var samples = new ArrayList<Long>();
                for (long x : b.tensor("sample_index").toLongs()) samples.add(x);
                assertEquals(samples.size() + 1, b.tensor("cu_seqlens").toInts().length, "a segment per sample");
                assertEquals(1, b.tensor("input_ids").shape()[0], "a pack is one row");
                var previous = into.put(b.meta().globalStep() + "/" + b.meta().rank(), samples);
                digests.put(prefix + b.meta().globalStep() + "/" + b.meta().rank(), BatchDigest.of(b));
                assertEquals(null, previous, "step " + b.meta().globalStep() + " of rank " + b.meta().rank() + " handed out twice");
            }
    }

    /**
     * The packs a local zero-copy service ({@code stoker serve --pack-tokens}, the single-node path) gives {@code config}'s
     * ranks, {@code steps} each, every rank resumed from {@code state} (null: from the start): their digests by
     * {@code prefix} + "step/rank", to hold the cluster's packs to bit for bit.
     */
    Map<String, String> local(NodeConfig.Builder config, int steps, TrainerClient.State state, String prefix) throws Exception {
        var built = config.shmDir(Files.createDirectories(tmp.resolve("shm-local"))).shmBudgetBytes(256L << 20).build();
        var out = new LinkedHashMap<String, String>();
        try (var factory = NodeFeeds.open(built); var service = factory.start(dev.stoker.pipeline.feed.FeedMode.ZERO_COPY, null);
             var server = new dev.stoker.transport.FeedServer(tmp.resolve("local-" + prefix.length() + ".sock"), service, false)) {
            for (int r = 0; r < built.ranks(); r++) {
                var options = state == null ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.SHARED_MEMORY.resumingFrom(state);
                try (var c = TrainerClient.connect(server.socketPath(), r, built.ranks(), "packed", options)) {
                    for (int i = 0; i < steps; i++)
                        try (var got = c.next()) {
                            out.put(prefix + got.batch().meta().globalStep() + "/" + r, BatchDigest.of(got.batch()));
                        }
                }
            }
        }
        return out;
    }

    /** Debian's Python, with numpy: the Python client's tests run on it (PythonClientTest); without it rank 0 is a Java trainer. */
    static final String PYTHON = "/usr/bin/python3";

    /**
     * The Python client ({@code clients/python}, its integration script's {@code take}) as rank {@code rank} of {@code world}
     * on {@code socket}, resumed from {@code state} (a Java trainer's, written as the Loader's {@code state_dict()}): its
     * {@code steps} packs' samples in segment order ({@code last_meta.sample_index}), in step order.
     */
    List<List<Long>> pythonTake(Path socket, int rank, int world, int steps, TrainerClient.State state) throws Exception {
        Path stateFile = tmp.resolve("py-state-" + rank + ".json");
        Files.writeString(stateFile, String.format(java.util.Locale.ROOT,
                "{\"job\": \"packed\", \"rank\": %d, \"world_size\": %d, \"fingerprint\": %s, \"epoch\": %d, \"position\": %d, "
                        + "\"next_step\": %d}", state.rank(), state.world(), Long.toUnsignedString(state.fingerprint()), state.epoch(),
                state.position(), state.nextStep()));
        Path script = Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py");
        var p = new ProcessBuilder(PYTHON, script.toString(), "take", "--socket", socket.toString(), "--world", "" + world, "--rank",
                "" + rank, "--steps", "" + steps, "--state-in", stateFile.toString(), "--job", "packed").redirectErrorStream(true).start();
        p.getOutputStream().close();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), out);
        assertEquals(0, p.exitValue(), out);
        var lines = out.strip().split("\n");
        var report = new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
        var packs = new ArrayList<List<Long>>();
        int i = 0;
        for (var d : report.get("digests")) { // "<digest> [i, j, …]": BatchDigest's, the pack's sample_index last
            String text = d.asText(), list = text.substring(text.indexOf('[') + 1, text.lastIndexOf(']')).strip();
            var samples = new ArrayList<Long>();
            if (!list.isEmpty()) for (var x : list.split(",")) samples.add(Long.parseLong(x.strip()));
            packs.add(samples);
            digests.put("3:" + (state.nextStep() + i++) + "/" + rank, text);
        }
        assertEquals(steps, packs.size(), out);
        return packs;
    }

    /** Waits until {@code condition} holds, checking every 20 ms; fails with {@code what} after 60 s. */
    static void awaitTrue(java.util.function.BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within 60 s: " + what);
            Thread.sleep(20);
        }
    }

    /** {@code metrics}' number {@code key} (a node's counters as JSON). */
    static long number(Map<String, Object> metrics, String key) { return ((Number) metrics.get(key)).longValue(); }

    /** Over epoch 0: every sample the plans feed once, none left out but what they left out. */
    static void everySampleOnce(int samples, Map<String, List<Long>> delivered, List<Long> filtered) {
        var seen = new HashSet<Long>();
        for (var pack : delivered.values())
            for (long i : pack) if (i >= 0) assertTrue(seen.add(i), "sample " + i + " delivered twice: " + delivered);
        Set<Long> expected = new HashSet<>();
        for (long i = 0; i < samples; i++) expected.add(i);
        filtered.forEach(expected::remove);
        assertEquals(expected, seen, "the first epoch's samples, each once (left out by the plan: " + filtered + ")");
    }

    /**
     * The planned packs over lease and Flight, through a node's death and a resize. Three members (the coordinator's, A and
     * B, a worker each; rank 0's trainer on the coordinator's node, rank 1's on A), each live node's rank taking packs by
     * lease and by Flight; after {@code after} steps B stops (its process closes: it leaves the cluster
     * and its Flight endpoint goes), and the packs it had made that no rank had pulled are made again on the live nodes
     * (redone, or refetched by a rank whose pull from B failed): each rank still gets the planned packs in order. Then the
     * job's trainers save their state after step {@code mid} and the coordinator stops; a new coordinator starts the job
     * with three ranks on A and itself, every rank resuming from that state: each gets what the planner cuts for three ranks
     * from the saved cursor, its labels going on from the saved step (rank 0 is the Python client, resumed from that state,
     * where Debian's python3 is), and over the first epoch, both jobs together, every sample comes once.
     */
    @Test
    @SuppressWarnings("unchecked")
    void aPackedJobDeliversThePlannedPacksByLeaseAndFlightThroughANodesDeathAndAResize() throws Exception {
        final int samples = 40, after = 2, mid = 4, resized = 3;
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), samples, 6);
        var reference = plan(packed(manifest).build(), mid);
        assertEquals(mid, reference.stepsInFirstEpoch(), "the death and the resize both fall in the first epoch");

        String seed = loopback();
        var delivered = new LinkedHashMap<String, List<Long>>();
        TrainerClient.State saved;
        try (var a = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, seed, 1, "a").build(), line -> {})) {
            try (var b = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, loopback(), 1, "b").build(), line -> {});
                 var c = ClusteredNode.launchCoordinator(member(packed(manifest).set(NodeConfig.JOB, "packed").set(NodeConfig.NODES, 3)
                         .set(NodeConfig.WORKERS, 3).set(NodeConfig.PREFETCH_BATCHES, 6), seed, loopback(), 1, "coord").build(), line -> {});
                 var t0 = TrainerClient.connect(c.socket(), 0, RANKS, "packed", TrainerClient.Options.SHARED_MEMORY);
                 var t1 = TrainerClient.connect(a.socket(), 1, RANKS, "packed", TrainerClient.Options.SHARED_MEMORY)) {
                take(t0, after, delivered, "");
                take(t1, after, delivered, "");
                // B has made packs of the windows ahead that no rank has pulled (the trainers are idle, their nodes' pulls
                // ahead done): its death leaves packs to make again
                awaitTrue(() -> {
                    var m = b.metrics();
                    return number(m, "produced") > number(m, "flightBatchesSent");
                }, "B holds packs it made that no rank pulled: " + b.metrics());
                b.close();
                take(t0, mid - after, delivered, "");
                take(t1, mid - after, delivered, "");
                var summary = c.metrics();
                var stats = (List<NodeProtocol.NodeStats>) summary.get("nodes");
                assertEquals(2, stats.size(), "the live nodes, A and the coordinator's: " + stats);
                for (var n : stats) { // each node's rank took packs both ways: leased from its own store and pulled from another's
                    assertTrue(n.localHandOuts() > 0, "leased on the own node: " + n);
                    assertTrue(n.pulledBatches() > 0 && n.flightBatchesSent() > 0, "pulled over Flight: " + n);
                }
                assertEquals(1, ((List<String>) summary.get("dead_nodes")).size(), summary.toString());
                // the balance of the steps handed out (the nodes pull up to 2 ahead of their trainers), each step's costs the plan's
                var packing = (dev.stoker.observe.PackStats.Summary) summary.get("packing");
                assertTrue(packing != null && packing.steps() >= mid && packing.steps() <= mid + ClusterRankFeed.PULL_AHEAD_DEFAULT,
                        "the coordinator's packing figures: " + summary);
                assertEquals(RANKS, packing.ranks());
                assertEquals(PACK_TOKENS, packing.packTokens());
                assertTrue(packing.meanImbalance() >= 1, "max / mean of the ranks' costs: " + packing.meanImbalance());
                for (int i = 0; i < packing.series().step().length; i++) {
                    long step = packing.series().step()[i];
                    if (step < mid)
                        assertArrayEquals(reference.costs().get(step), packing.series().costs()[i],
                                "step " + step + "'s predicted cost per rank");
                }
                assertTrue((Long) summary.get("redone") + (Long) summary.get("refetched") > 0, "B's packs made again: " + summary);
                saved = t1.state(); // every rank's state after the same step is the same global cursor
                assertEquals(mid, saved.nextStep());
            }
            assertEquals(mid * RANKS, delivered.size());
            var job1 = new LinkedHashMap<String, String>();
            digests.forEach((k, v) -> { if (!k.startsWith("3:")) job1.put(k, v); });
            assertEquals(local(packed(manifest), mid, null, ""), job1, "the packs a local serve --pack-tokens makes, bit for bit");
            for (var e : delivered.entrySet())
                assertEquals(reference.packs().get(e.getKey()), e.getValue(), "step/rank " + e.getKey() + " through B's death");

            // the resize: three ranks from the state two saved, on A and a new coordinator
            var three = packed(manifest).ranks(resized).build();
            var after3 = plan(three, 8, saved.cursor(), saved.nextStep());
            long left = after3.stepsInFirstEpoch();
            assertTrue(left >= 1 && left < 8, "the first epoch goes on for a few steps of three packs: " + left);
            var resumed = new LinkedHashMap<String, List<Long>>();
            boolean python = Files.isExecutable(Path.of(PYTHON));
            try (var c = ClusteredNode.launchCoordinator(member(packed(manifest).ranks(resized).set(NodeConfig.JOB, "resized")
                    .set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2), seed, loopback(), 1, "coord2").build(),
                    line -> {})) {
                var trainers = new ArrayList<TrainerClient>();
                try {
                    for (int r = python ? 1 : 0; r < resized; r++)
                        trainers.add(TrainerClient.connect((r == 0 ? c : a).socket(), r, resized, "packed",
                                TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved)));
                    for (var t : trainers) {
                        assertEquals(saved.nextStep(), t.state().nextStep(), "the labels go on from the saved step");
                        take(t, (int) left, resumed, "3:");
                    }
                } finally {
                    for (var t : trainers) t.close();
                }
                if (python) { // rank 0 is the Python client, on the coordinator's node, from the Java trainers' state
                    var packs = pythonTake(c.socket(), 0, resized, (int) left, saved);
                    for (int i = 0; i < packs.size(); i++) resumed.put((saved.nextStep() + i) + "/0", packs.get(i));
                }
            }
            assertEquals(left * resized, resumed.size());
            var job3 = new LinkedHashMap<String, String>();
            digests.forEach((k, v) -> { if (k.startsWith("3:")) job3.put(k, v); });
            assertEquals(new java.util.TreeMap<>(local(packed(manifest).ranks(resized), (int) left, saved, "3:")), new java.util.TreeMap<>(job3),
                    "three ranks resumed: the packs a local serve resumed from the same state makes, bit for bit");
            for (var e : resumed.entrySet())
                assertEquals(after3.packs().get(e.getKey()), e.getValue(), "step/rank " + e.getKey() + " of three, resumed");
            var all = new LinkedHashMap<String, List<Long>>(delivered);
            resumed.forEach((k, v) -> all.put("3:" + k, v));
            var filtered = new ArrayList<>(reference.filtered());
            filtered.addAll(after3.filtered());
            everySampleOnce(samples, all, filtered);
        }
    }

    /**
     * A member stopped while it makes the pack a rank waits for (its process closes, as {@code stoker node} on SIGTERM):
     * the rank gets that pack, made on the other node, not an error. Rank 0's step 0 is made on the seed's worker (the
     * oldest member takes worker 0), every image's fetch takes 3 s, and the seed stops as soon as it has taken the job's
     * first Produce (it answered an ask sent after it), while the trainer waits. Before,
     * closing its job failed the pack in the making and the node told the coordinator so, which failed the step (a step
     * handed out is not made again): "task producer closed".
     */
    @Test
    void aMemberStoppedWhileItMakesAWaitedPackHasItMadeElsewhere() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds-stop"), 8, 3);
        var reference = plan(packed(manifest).ranks(1).build(), 1);
        String seed = loopback();
        try (var b = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, seed, 1, "stop-b").build(), line -> {});
             var c = ClusteredNode.launchCoordinator(member(packed(manifest).ranks(1).set(NodeConfig.JOB, "stop").set(NodeConfig.NODES, 2)
                     .set(NodeConfig.WORKERS, 2).set(NodeConfig.PREFETCH_BATCHES, 1).set(NodeConfig.FETCH_LATENCY_MS, 3000L), seed,
                     loopback(), 1, "stop-c").build(), line -> {});
             var t = TrainerClient.connect(c.socket(), 0, 1, "packed", TrainerClient.Options.SHARED_MEMORY)) {
            var first = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                try (var got = t.next()) {
                    var samples = new ArrayList<Long>();
                    for (long x : got.batch().tensor("sample_index").toLongs()) samples.add(x);
                    return got.batch().meta().globalStep() + "/" + got.batch().meta().rank() + " " + samples;
                } catch (Exception e) {
                    throw new java.util.concurrent.CompletionException(e);
                }
            }, r -> Thread.ofPlatform().daemon(true).start(r));
            // the seed makes step 0 (its images' fetches wait 3 s): the coordinator sent it the Produce when the job opened,
            // and its agent answers the coordinator's stats ask (sent after, over the same association) only once it took that
            awaitTrue(() -> c.metrics().get("nodes") instanceof List<?> nodes && nodes.size() == 2, "both nodes answered the coordinator");
            var warnings = new java.util.concurrent.CopyOnWriteArrayList<String>();
            var log = java.util.logging.Logger.getLogger(NodeRuntime.class.getName());
            var handler = new java.util.logging.Handler() {
                @Override public void publish(java.util.logging.LogRecord r) { warnings.add(r.getLevel() + " " + r.getMessage()); }
                @Override public void flush() { }
                @Override public void close() { }
            };
            log.addHandler(handler);
            try {
                b.close();
            } finally {
                log.removeHandler(handler);
            }
            // its job closed whole: a fetch stuck past the close's grace had its stream aborted, not the close thrown out of
            // ("The queue has already been completed", which left the job's CPU pool and writer open)
            assertTrue(warnings.stream().noneMatch(w -> w.contains("closing job")), warnings.toString());
            assertEquals("0/0 " + reference.packs().get("0/0"), first.get(60, TimeUnit.SECONDS), "step 0, made on the other node");
        }
    }
}
