package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.cluster.ClusterKey;
import dev.stoker.cluster.ClusterNode;
import dev.stoker.cluster.NodeProtocol;
import dev.stoker.cluster.Placement;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.testkit.netns.NetnsTestBed;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Packed cluster jobs ({@code serve --join --pack-tokens}) with real {@code stoker node} child JVMs, where PackedClusterTest's
 * members share this JVM: a node killed with SIGKILL mid-job and started again at its address, the cache of preprocessed
 * samples on every node (cold, then warm), and two members in network namespaces. Every (step, rank) pack a trainer takes
 * is held to what {@code stoker plan --pack-tokens} prints (the same samples in the same segment order) and, bit for bit
 * ({@link BatchDigest}: every tensor and the sample_index), to what a local {@code serve --pack-tokens} makes.
 *
 * <p>The first two cases share one cluster (two nodes of one slot each, a coordinator in this JVM with none), as
 * ClusterTest's cases do, since starting JVMs is what they cost: the cache's jobs run on it first, then a node is killed
 * and started again (the cluster is whole again after). Each node's JVM has a cache folder of its own
 * ({@code $STOKER_CACHE_DIR}, which a job's {@code --cache on} without {@code --cache-dir} uses on each node).
 */
@Tag("slow")
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class PackedClusterFaultsTest {
    static final int RANKS = 2, PACK_TOKENS = 384, SAMPLES = 40;
    @TempDir static Path tmp;
    static Path manifest;
    static ClusterTest.Cluster cluster;
    static ClusterNode coordinator;
    /** {@code stoker plan --pack-tokens}'s packs: per "step/rank" the samples in segment order (-1: the dummy image). */
    static Map<String, List<Long>> planned;
    /** The samples the planner leaves out of every pack of the first epoch (over a budget, or marked by the shape index). */
    static Set<Long> leftOut;
    /**
     * The first epoch's last step: it starts in the first epoch and ends in the second (a pack is filled on from the next
     * epoch's order), so the steps before it hold only first-epoch samples, and with it every one.
     */
    static int lastOfFirstEpoch;
    /** The most steps a case takes: the killed node's job's, past the first epoch so that steps are left after the admission. */
    static final int MOST_STEPS = 12;
    /** The digests of the packs a local {@code serve --pack-tokens} makes, by "step/rank", for {@link #MOST_STEPS} steps. */
    static Map<String, String> local;

    @BeforeAll
    static void start() throws Exception {
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 6);
        plan(MOST_STEPS);
        assertTrue(lastOfFirstEpoch < MOST_STEPS, "the first epoch within the steps a case takes: " + lastOfFirstEpoch);
        local = local(MOST_STEPS);
        // the coordinator joins while the second node boots; the nodes notice a lost member within 3 s, every member hears of it
        cluster = ClusterTest.Cluster.start(tmp, ClusterTest.freePort(), 2, 1, 3000,
                i -> Map.of("STOKER_CACHE_DIR", tmp.resolve("cache-node" + i).toString()), c -> c.coordinator(10_000));
        coordinator = cluster.coordinator();
    }

    @AfterAll
    static void stop() throws Exception {
        if (cluster != null) cluster.close();
    }

    /** The job's options as every node reads them (the data, the processor, the packing), PackedClusterTest's. */
    static NodeConfig.Builder packed() {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).packTokens(PACK_TOKENS).seed(5).pixels(3136, 50176)
                .threads(1).warmUpMillis(0).set(NodeConfig.MAX_IMAGES, 1);
    }

    /** The same options as {@code stoker plan} and {@code serve} arguments. */
    static List<String> packedArgs() {
        return List.of("--data", manifest.toString(), "--ranks", "" + RANKS, "--pack-tokens", "" + PACK_TOKENS, "--seed", "5",
                "--min-pixels", "3136", "--max-pixels", "50176", "--max-images", "1", "--threads", "1");
    }

    /**
     * Runs {@code stoker plan --pack-tokens} for {@code steps} steps: {@link #planned}; and walks the same planner's schedule
     * (what the plan command prints, NodeFeeds.schedule, as PackedClusterTest does) for the epochs and what it leaves out:
     * {@link #lastOfFirstEpoch}, {@link #leftOut}.
     */
    static void plan(int steps) throws Exception {
        var args = new ArrayList<>(List.of("plan"));
        args.addAll(packedArgs());
        args.addAll(List.of("--steps", "" + steps));
        var run = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, run.status(), run.err());
        var json = new ObjectMapper();
        planned = new LinkedHashMap<>();
        for (String line : run.out().lines().toList()) {
            JsonNode n = json.readTree(line);
            if (n.has("segment"))
                planned.computeIfAbsent(n.get("step").asLong() + "/" + n.get("rank").asInt(), k -> new ArrayList<>()).add(n.get("sample").asLong());
        }
        var config = packed().build();
        leftOut = new TreeSet<>();
        lastOfFirstEpoch = -1;
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache())) {
            var source = sources.feedSource();
            var schedule = NodeFeeds.schedule(config, source, source.records(), null, line -> {});
            var at = schedule.aligned(ScheduleCursor.START);
            var walk = schedule.labelled(at, 0).iterator(at, 0);
            for (int g = 0; g < steps && lastOfFirstEpoch < 0; g++) {
                var b = walk.next();
                for (var x : schedule.leftOut(b)) leftOut.add((long) x.record());
                if (b.lastOfEpoch()) lastOfFirstEpoch = g;
            }
        }
        assertTrue(lastOfFirstEpoch >= 0, "the plan's " + steps + " steps reach the second epoch");
        System.out.printf("PackedClusterFaultsTest: %d samples make %d steps of %d packs of at most %d tokens in the first epoch "
                + "(the planner leaves out %s)%n", SAMPLES, lastOfFirstEpoch + 1, RANKS, PACK_TOKENS, leftOut);
    }

    /** The digests of the packs a local zero-copy {@code serve --pack-tokens} (in this JVM, no cache) makes, {@code steps} per rank. */
    static Map<String, String> local(int steps) throws Exception {
        var config = packed().set(NodeConfig.CACHE, false).shmDir(Files.createDirectories(tmp.resolve("shm-local")))
                .shmBudgetBytes(256L << 20).build();
        var out = new TreeMap<String, String>();
        try (var factory = NodeFeeds.open(config); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve("local.sock"), service, false)) {
            for (int r = 0; r < RANKS; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, RANKS, "local", TrainerClient.Options.SHARED_MEMORY)) {
                    for (int i = 0; i < steps; i++)
                        try (var got = c.next()) {
                            out.put(got.batch().meta().globalStep() + "/" + r, BatchDigest.of(got.batch()));
                        }
                }
        }
        return out;
    }

    /** A pack as a trainer took it: its digest and its samples in segment order. */
    record Pack(String digest, List<Long> samples) {}

    /**
     * Rank {@code rank} on {@code socket} takes {@code steps} packs, each checked as a pack (one row, a segment per sample), on
     * a thread of its own; after {@code gateAt} packs it waits for {@code gate} (2 minutes at most). Its packs by "step/rank".
     */
    static CompletableFuture<Map<String, Pack>> trainer(Path socket, int rank, int steps, AtomicLong progress, int gateAt,
                                                        CompletableFuture<Void> gate) {
        return CompletableFuture.supplyAsync(() -> {
            try (var c = TrainerClient.connect(socket, rank, RANKS, "t", TrainerClient.Options.SHARED_MEMORY)) {
                var out = new TreeMap<String, Pack>();
                for (int s = 0; s < steps; s++) {
                    if (s == gateAt) gate.get(120, TimeUnit.SECONDS);
                    try (var got = c.next()) {
                        var b = got.batch();
                        var samples = new ArrayList<Long>();
                        for (long x : b.tensor("sample_index").toLongs()) samples.add(x);
                        if (b.tensor("cu_seqlens").toInts().length != samples.size() + 1 || b.tensor("input_ids").shape()[0] != 1)
                            throw new AssertionError("not a pack: " + b.meta());
                        var key = b.meta().globalStep() + "/" + b.meta().rank();
                        if (out.put(key, new Pack(BatchDigest.of(b), samples)) != null) throw new AssertionError(key + " handed out twice");
                    }
                    progress.incrementAndGet();
                }
                return out;
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        }, r -> Thread.ofPlatform().daemon(true).start(r));
    }

    /**
     * {@code packs} (every rank's, by "step/rank") are the plan's first {@code steps} steps, sample for sample, and the local
     * serve's, bit for bit; where they hold the whole first epoch, every sample comes once in it (but those the planner
     * leaves out): none twice before its last step, and every one by the end of it (which goes on into the second epoch).
     */
    static void arePlannedAndLocal(Map<String, Pack> packs, int steps, String what) {
        assertEquals(steps * RANKS, packs.size(), what + ": every rank's every step " + packs.keySet());
        var digests = new TreeMap<String, String>();
        packs.forEach((k, p) -> {
            digests.put(k, p.digest());
            assertEquals(planned.get(k), p.samples(), what + ": step/rank " + k + ", the pack stoker plan prints");
        });
        var expected = new TreeMap<String, String>();
        local.forEach((k, d) -> { if (Long.parseLong(k.substring(0, k.indexOf('/'))) < steps) expected.put(k, d); });
        assertEquals(expected, digests, what + ": the packs a local serve --pack-tokens makes, bit for bit");
        if (steps <= lastOfFirstEpoch) return;
        var seen = new HashSet<Long>();
        var through = new TreeSet<Long>();
        packs.forEach((k, p) -> {
            long step = Long.parseLong(k.substring(0, k.indexOf('/')));
            for (long x : p.samples()) {
                if (x < 0) continue;
                if (step < lastOfFirstEpoch) assertTrue(seen.add(x), what + ": sample " + x + " twice in the first epoch");
                if (step <= lastOfFirstEpoch) through.add(x);
            }
        });
        var all = new TreeSet<Long>();
        for (long i = 0; i < SAMPLES; i++) if (!leftOut.contains(i)) all.add(i);
        assertTrue(through.containsAll(all), what + ": every first-epoch sample by its last step (the planner leaves out " + leftOut
                + "); missing " + all.stream().filter(x -> !through.contains(x)).toList());
        assertTrue(java.util.Collections.disjoint(seen, leftOut), what + ": none the planner leaves out " + seen);
    }

    /** The cache lines node {@code i}'s log holds so far (one per job closed on it): hits, misses, written, corrupt. */
    static List<long[]> cacheLines(Path log) throws Exception {
        var m = Pattern.compile("the job's cache of preprocessed samples: (\\d+) hits, (\\d+) misses, (\\d+) written, (\\d+) corrupt \\(--cache-dir (\\S+)\\)")
                .matcher(Files.readString(log));
        var out = new ArrayList<long[]>();
        while (m.find())
            out.add(new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3)), Long.parseLong(m.group(4))});
        return out;
    }

    /** Runs packed job {@code name} of {@code config} over both nodes for {@code steps} steps, rank r on node r; closes it; its packs. */
    static Map<String, Pack> runJob(String name, NodeConfig config, int steps) throws Exception {
        var job = cluster.runJob(name, config, 2, Placement.SPREAD, 2, steps, false);
        try {
            assertEquals(2, job.workerNodes().stream().distinct().count(), "spread: a worker on each node " + job.workerNodes());
            var packs = new TreeMap<String, Pack>();
            var trainers = new ArrayList<CompletableFuture<Map<String, Pack>>>();
            for (int r = 0; r < RANKS; r++) trainers.add(trainer(cluster.sockets.get(r), r, steps, new AtomicLong(), -1, null));
            for (var t : trainers) packs.putAll(t.get(180, TimeUnit.SECONDS));
            assertEquals(0, job.redone(), "no node was given up on: " + job.summary());
            return packs;
        } finally {
            job.close();
        }
    }

    /**
     * The cache of preprocessed samples on the cluster (issue 31 item 7): a packed job with {@code --cache on
     * --cache-affinity off}, each node with its own cache folder, run cold and then as a new job on the same nodes (warm): the warm job's packs are the cold
     * one's and an uncached serve's bit for bit (and the plan's), and it decodes nothing — every node's cache answers every
     * lookup of the warm job (as many as the cold job made, all hits, no miss, nothing written), as each node logs when
     * the job closes on it. Spread placement gives each (step, rank) the same worker, on the same node, in both jobs.
     */
    @Test
    @Order(1)
    void aCachedPackedJobRunAgainOnTheSameNodesDecodesNothingAndMakesTheSamePacks() throws Exception {
        int steps = 3;
        // the cache's affinity off: each node keeps the entries it computed (with it on, entries move to their homes across the
        // nodes, which CacheAffinityTest shows), so that each node's own counters say what its packs found
        var cached = packed().set(NodeConfig.CACHE, true).set(NodeConfig.CACHE_BYTES, 1L << 30).set(NodeConfig.CACHE_AFFINITY, false).build();
        var cold = runJob("cold", cached, steps);
        arePlannedAndLocal(cold, steps, "cold");
        long[][] coldLines = new long[2][];
        for (int i = 0; i < 2; i++) {
            Path log = cluster.log(i, "");
            ClusterTest.awaitTrue(() -> lines(log) >= 1, Duration.ofSeconds(30), "node " + i + " closed the cold job");
            coldLines[i] = cacheLines(log).getFirst();
            assertTrue(coldLines[i][1] > 0 && coldLines[i][2] == coldLines[i][1], "cold on node " + i + ": every miss written "
                    + java.util.Arrays.toString(coldLines[i]));
            try (var files = Files.walk(tmp.resolve("cache-node" + i))) {
                assertTrue(files.anyMatch(p -> p.toString().endsWith(".stc")), "node " + i + "'s own folder holds its entries");
            }
        }
        var warm = runJob("warm", cached, steps);
        var coldDigests = new TreeMap<String, String>();
        cold.forEach((k, p) -> coldDigests.put(k, p.digest()));
        var warmDigests = new TreeMap<String, String>();
        warm.forEach((k, p) -> warmDigests.put(k, p.digest()));
        assertEquals(coldDigests, warmDigests, "the warm job's packs: the cold job's, bit for bit");
        arePlannedAndLocal(warm, steps, "warm");
        for (int i = 0; i < 2; i++) {
            Path log = cluster.log(i, "");
            ClusterTest.awaitTrue(() -> lines(log) >= 2, Duration.ofSeconds(30), "node " + i + " closed the warm job");
            long[] w = cacheLines(log).get(1), c = coldLines[i];
            assertEquals(0, w[1], "warm on node " + i + ": no miss, nothing decoded " + java.util.Arrays.toString(w));
            assertEquals(0, w[2], "warm on node " + i + ": nothing written");
            assertEquals(c[0] + c[1], w[0], "warm on node " + i + ": every lookup the cold job made, a hit");
            System.out.printf("PackedClusterFaultsTest: node %d's cache, cold %d hits %d misses, warm %d hits %d misses%n", i, c[0], c[1],
                    w[0], w[1]);
        }
    }

    static int lines(Path log) {
        try {
            return cacheLines(log).size();
        } catch (Exception e) {
            return 0;
        }
    }

    /**
     * A node killed with SIGKILL during a packed job, then started again at its address (issue 31: a node's death and a
     * re-admission, with packs). Both ranks' trainers are on the first node; the second, killed after the ranks' first
     * packs, made every other pack (spread, a worker on each). The packs it owed that no rank had pulled are made again on
     * the first node (redone, or refetched where a rank's pull failed); started again on its host and port (a new
     * incarnation, as a supervisor does) while the ranks wait at a gate, it is admitted and makes its share of the packs
     * issued after. Over the first epoch and into the second, each rank gets the plan's pack at every step, bit for bit the
     * local serve's, and every sample once in the first epoch.
     */
    @Test
    @Order(2)
    void aKilledNodesPacksAreMadeElsewhereAndItsNewIncarnationMakesLaterPacks() throws Exception {
        // each rank takes 4 packs, then waits for the killed node's new incarnation to be admitted: the coordinator has then
        // issued at most 4 + 2 pulled ahead + 2 made ahead of each rank's 12, and the rest goes to the workers placed anew
        int steps = MOST_STEPS, gateAt = 4;
        var job = cluster.runJob("kill", packed().build(), 2, Placement.SPREAD, 2, steps, false);
        String victim = cluster.addresses.get(1);
        assertTrue(job.workerNodes().contains(victim), "spread gives every node a worker " + job.workerNodes());
        var progress = new AtomicLong();
        var admittedGate = new CompletableFuture<Void>();
        var t0 = trainer(cluster.sockets.getFirst(), 0, steps, progress, gateAt, admittedGate);
        var t1 = trainer(cluster.sockets.getFirst(), 1, steps, progress, gateAt, admittedGate);
        ClusterTest.awaitTrue(() -> progress.get() >= 2, Duration.ofSeconds(120), "the ranks' first packs");
        long killed = System.nanoTime();
        cluster.nodes.get(1).destroyForcibly(); // SIGKILL: no goodbye to the cluster
        assertTrue(cluster.nodes.get(1).waitFor(10, TimeUnit.SECONDS));
        ClusterTest.awaitTrue(() -> job.deadNodes().contains(victim), Duration.ofSeconds(60), "the killed node given up on");
        double givenUp = (System.nanoTime() - killed) / 1e9;
        assertTrue(job.workerNodes().stream().noneMatch(victim::equals), "its worker moved: " + job.workerNodes());
        double removed = ClusterTest.awaitRemoved(coordinator, victim, killed); // before it comes back: a new incarnation

        assertEquals(victim, cluster.restart(1), "the same host and port");
        long restarted = System.nanoTime();
        ClusterTest.awaitTrue(() -> job.workerNodes().contains(victim), Duration.ofSeconds(60), "the node started again admitted");
        double admitted = (System.nanoTime() - restarted) / 1e9;
        admittedGate.complete(null);
        var packs = new TreeMap<String, Pack>(t0.get(240, TimeUnit.SECONDS));
        packs.putAll(t1.get(240, TimeUnit.SECONDS));
        arePlannedAndLocal(packs, steps, "through the kill and the re-admission");
        var summary = job.summary();
        assertTrue(job.redone() > 0, "its packs were made again elsewhere: " + summary);
        assertFalse(job.deadNodes().contains(victim), "no longer given up on: " + job.deadNodes());
        assertEquals(1L, summary.get("admitted"), summary.toString());
        long madeThere = job.nodeStats().stream().filter(n -> n.address().equals(victim)).mapToLong(NodeProtocol.NodeStats::produced).sum();
        assertTrue(madeThere > 0, "the node admitted made packs of the later steps: " + job.nodeStats());
        System.out.printf("PackedClusterFaultsTest: the killed node given up on %.1f s after, removed %.1f s after; started again, admitted "
                + "%.1f s after it listened, made %d packs; redone %s, refetched %s%n", givenUp, removed, admitted, madeThere,
                summary.get("redone"), summary.get("refetched"));
        job.close();
    }

    /**
     * A packed job on two members in network namespaces (the test bed of {@code bench cluster}: a namespace per node,
     * joined by a bridge, no NIC limit here): {@code serve --join --pack-tokens} in the first, {@code stoker node} in the
     * second, each with a worker, bound to their namespaces' addresses with a cluster key and token as on real hosts. The
     * trainers (in this JVM) reach each member's trainer socket by its path, as a trainer on that host would; rank 1's
     * node pulls the packs the first made over the namespaces' link (the first member's card sent, and the second's received,
     * at least the bytes its Flight endpoint lent). Each rank's packs are the plan's and the local serve's, bit for bit.
     * Skipped where namespaces are unavailable (not root, no ip or tc).
     */
    @Test
    @Order(3)
    void aPackedJobOnTwoMembersInNetworkNamespacesDeliversThePlannedPacks() throws Exception {
        var why = NetnsTestBed.unavailableReason();
        assumeTrue(why.isEmpty(), () -> "network namespaces unavailable: " + why.orElse(""));
        int steps = 4;
        Path dir = Files.createDirectories(tmp.resolve("netns"));
        Path token = dir.resolve("token");
        Files.writeString(token, "packed-netns-" + System.nanoTime());
        Files.setPosixFilePermissions(token, PosixFilePermissions.fromString("rw-------"));
        Path key = ClusterKey.create(dir.resolve("cluster.key")).file();
        var processes = new ArrayList<Process>();
        long t0 = System.nanoTime();
        try (var bed = NetnsTestBed.create(2, 0, NetnsTestBed.Options.defaults())) {
            String seed = bed.address(0) + ":2551";
            var sockets = List.of(dir.resolve("n0.sock"), dir.resolve("n1.sock"));
            for (int i = 0; i < 2; i++) {
                var args = new ArrayList<>(List.of(i == 0 ? "serve" : "node", "--join", seed, "--bind", bed.address(i) + ":2551",
                        "--cluster-key", key.toString(), "--cluster-token-file", token.toString(), "--slots", "1",
                        "--socket", sockets.get(i).toString(), "--node-shm-dir", Files.createDirectories(dir.resolve("shm" + i)).toString(),
                        "--node-shm-budget", "256M", "--heartbeat-pause-ms", "10000"));
                if (i == 0) {
                    args.addAll(packedArgs());
                    args.addAll(List.of("--nodes", "2", "--workers", "2", "--placement", "spread", "--job", "t", "--steps", "" + steps,
                            "--warm-up-ms", "0", "--cache", "off", "--metrics-file", dir.resolve("metrics.json").toString()));
                }
                var argv = dev.stoker.bench.ChildJvm.stoker(ServeProcess.jvmFlags(dir.resolve("member" + i + ".log"), "512m"), args);
                processes.add(bed.command(i, argv).redirectErrorStream(true).redirectOutput(dir.resolve("member" + i + ".log").toFile()).start());
                // the seed's member up before the node asks it to join (else the node's first attempt fails and it tries again later)
                if (i == 0) ServeProcess.awaitLine(processes.getFirst(), dir.resolve("member0.log"), "cluster member ");
            }
            ServeProcess.awaitLine(processes.get(1), dir.resolve("member1.log"), "stoker node: listening on ");
            ServeProcess.awaitListening(processes.getFirst(), dir.resolve("member0.log"));
            double up = (System.nanoTime() - t0) / 1e9;
            var packs = new TreeMap<String, Pack>();
            var trainers = new ArrayList<CompletableFuture<Map<String, Pack>>>();
            for (int r = 0; r < RANKS; r++) trainers.add(trainer(sockets.get(r), r, steps, new AtomicLong(), -1, null));
            for (var t : trainers) packs.putAll(t.get(180, TimeUnit.SECONDS));
            arePlannedAndLocal(packs, steps, "in network namespaces");
            double took = (System.nanoTime() - t0) / 1e9 - up;
            long tx0 = bed.counters(0).txBytes(), rx1 = bed.counters(1).rxBytes();
            // serve first: it asks every node for its counters as it stops and writes them to its metrics file
            for (var p : processes) {
                p.destroy();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS), "a member stops on SIGTERM");
            }
            JsonNode first = null, second = null;
            for (JsonNode n : new ObjectMapper().readTree(dir.resolve("metrics.json").toFile()).path("nodes")) {
                if (n.path("address").asText().contains("@" + bed.address(0) + ":")) first = n;
                if (n.path("address").asText().contains("@" + bed.address(1) + ":")) second = n;
            }
            assertTrue(first != null && second != null, "both members' counters in serve's metrics file: " + Files.readString(dir.resolve("metrics.json")));
            long lent = first.path("flightBytesSent").asLong();
            // rank 1's packs made by the first member's worker went to the second member's store over Flight, through the link
            assertTrue(lent > 0 && second.path("pulledBatches").asLong() > 0, "the second member pulled packs the first made: " + first + second);
            assertTrue(tx0 >= lent && rx1 >= lent, "the packs the first member lent crossed the namespaces' link: sent " + tx0 + ", received "
                    + rx1 + ", lent " + lent);
            System.out.printf("PackedClusterFaultsTest: two members in network namespaces up %.1f s after the bed was made, %d steps "
                    + "taken %.1f s after; the first lent %d bytes over Flight, its link sent %d%n", up, steps, took, lent, tx0);
        } finally {
            for (var p : processes) p.destroy();
            for (var p : processes) if (!p.waitFor(20, TimeUnit.SECONDS)) p.destroyForcibly();
        }
        String mine = NetnsTestBed.DEFAULT_PREFIX + ProcessHandle.current().pid() + "x";
        assertTrue(NetnsTestBed.listNamespaces().stream().noneMatch(n -> n.startsWith(mine)), "no namespace left");
    }
}
