package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.cluster.ClusterJob;
import dev.stoker.cluster.ClusterNode;
import dev.stoker.cluster.NodeProtocol;
import dev.stoker.cluster.Placement;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Cluster mode with real JVMs on 127.0.0.1: {@code stoker node} child processes and a coordinator (a
 * cluster member with no worker slots, so that it makes nothing and serves no trainer), in this JVM or
 * as a {@code serve --join} child process where a case kills it. Trainer ranks connect to their node's
 * socket. Every rank's batches are compared, digest by digest, with what the embedded zero-copy service
 * yields for the same options; the nodes' counters show where the bytes went; a node killed with SIGKILL
 * mid-epoch has its work redone elsewhere with nothing lost or repeated, and started again at its address it is admitted
 * into the running job; a member frozen with SIGSTOP past the down time is removed, and a removed node or coordinator
 * exits rather than linger, while a node frozen for 7 s on the default detector settings stays in a two-member cluster.
 *
 * <p>What these cases cost is starting JVMs and waiting out the failure detector, not checking, so they
 * share both where one run can carry the assertions: the cases that kill none of its members run on one
 * cluster ({@link OnOneCluster}), each with a job of its own, and the whole cluster killed resumes its
 * job there with more ranks; a killed node and a stopped one are two failures of one cluster; the
 * killed coordinator's cluster is the one then killed whole.
 */
@Timeout(value = 420, unit = TimeUnit.SECONDS)
@Tag("slow")
class ClusterTest {
    static final int SAMPLES = 40, BATCH = 2;
    /** Steps of each rank the embedded service is asked for once (every case takes a prefix of them). */
    static final int REFERENCE_STEPS = 12;
    @TempDir static Path tmp;
    static Path manifest;
    private static final Map<Integer, List<List<String>>> references = new ConcurrentHashMap<>();

    @BeforeAll
    static void data() throws Exception {
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 7);
    }

    static NodeConfig.Builder job(int ranks) {
        return NodeConfig.builder().data(manifest.toString()).ranks(ranks).batch(BATCH).seed(99).threads(1)
                .set(NodeConfig.FETCH_CONCURRENCY, 4).warmUpMillis(0).pixels(3136, 50176).set(NodeConfig.MAX_IMAGES, 1);
    }

    /**
     * The embedded zero-copy service's digests of each rank's first {@link #REFERENCE_STEPS} batches, for the same options:
     * asked once per rank count, since a batch does not depend on how many steps are asked for (a case takes a prefix).
     */
    static List<List<String>> reference(int ranks) throws Exception {
        var known = references.get(ranks);
        if (known != null) return known;
        var config = job(ranks).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).steps(REFERENCE_STEPS)
                .build();
        var out = new ArrayList<List<String>>();
        try (var factory = NodeFeeds.open(config); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve("ref" + ranks + ".sock"), service, false)) {
            for (int r = 0; r < ranks; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, ranks, "ref", TrainerClient.Options.SHARED_MEMORY)) {
                    out.add(take(c, REFERENCE_STEPS));
                }
        }
        references.put(ranks, out);
        return out;
    }

    /** Rank r's reference batches from step {@code from} (inclusive) to {@code to} (exclusive). */
    static List<String> reference(int ranks, int rank, int from, int to) throws Exception {
        return reference(ranks).get(rank).subList(from, to);
    }

    /** The embedded service's digests of {@code steps} batches per rank, every rank resumed from {@code state}. */
    static List<List<String>> embeddedFrom(int ranks, int steps, TrainerClient.State state, String name) throws Exception {
        var config = job(ranks).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).build();
        var out = new ArrayList<List<String>>();
        try (var factory = NodeFeeds.open(config); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve(name + ".sock"), service, false)) {
            for (int r = 0; r < ranks; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, ranks, "ref",
                        TrainerClient.Options.SHARED_MEMORY.resumingFrom(state))) {
                    out.add(take(c, steps));
                }
        }
        return out;
    }

    /** A port for a child's member to bind later: below the ephemeral range, where no outgoing connection takes it meanwhile. */
    static int freePort() throws Exception {
        return dev.stoker.testkit.Ports.free();
    }

    /**
     * One cluster's processes and members: {@code stoker node} child JVMs (the first is the seed every member joins
     * through), a coordinator in this JVM or as a child process, and the jobs run on it. Closing stops every child JVM
     * (SIGTERM) first, so that they shut down while the members in this JVM close, then waits for them.
     */
    static final class Cluster implements AutoCloseable {
        final int seed;
        final long pauseMillis;
        final int slots;
        /** Where its sockets, logs and the coordinator's store go. */
        final Path dir;
        /** What each node's JVM adds to the environment, by node index. */
        private final java.util.function.IntFunction<Map<String, String>> env;
        final List<Path> sockets = new ArrayList<>();
        final List<String> addresses = new ArrayList<>(); // each node's cluster address
        final List<Process> nodes = new ArrayList<>(); // by node index; a node started again takes its place
        private final List<Process> started = new ArrayList<>(); // every child JVM, to stop at the end
        private final List<AutoCloseable> closing = new ArrayList<>();
        private ClusterNode coordinator;
        private int restarts;

        private Cluster(Path dir, int seed, int slots, long pauseMillis, java.util.function.IntFunction<Map<String, String>> env) {
            this.dir = dir;
            this.seed = seed;
            this.slots = slots;
            this.pauseMillis = pauseMillis;
            this.env = env;
        }

        /**
         * {@code n} nodes of {@code slots} slots, each marked unreachable after {@code pauseMillis} without a heartbeat (and
         * downed 2 s later): short only where a case kills a member (four JVMs share two cores here, and a busy one may miss
         * beats); 0: the CLI's defaults for both ({@code --heartbeat-pause-ms}, {@code --down-after-ms} not given).
         */
        static Cluster start(int n, int slots, long pauseMillis) throws Exception { return start(freePort(), n, slots, pauseMillis); }

        /**
         * {@link #start(int, int, long)} that, once the seed listens and the other nodes' JVMs are started, runs
         * {@code whileTheyStart} (starts the coordinator, which then joins while they boot, rather than after them).
         */
        static Cluster start(int n, int slots, long pauseMillis, SeedUp whileTheyStart) throws Exception {
            return start(tmp, freePort(), n, slots, pauseMillis, i -> Map.of(), whileTheyStart);
        }

        /** {@link #start(int, int, long)} with the seed bound to {@code seedPort}. */
        static Cluster start(int seedPort, int n, int slots, long pauseMillis) throws Exception {
            return start(tmp, seedPort, n, slots, pauseMillis, i -> Map.of(), c -> {});
        }

        /**
         * {@link #start(int, int, long, SeedUp)} in {@code dir}, the seed bound to {@code seedPort}, node i's JVM with
         * {@code env.apply(i)} in its environment.
         */
        static Cluster start(Path dir, int seedPort, int n, int slots, long pauseMillis, java.util.function.IntFunction<Map<String, String>> env,
                             SeedUp whileTheyStart) throws Exception {
            var c = new Cluster(dir, seedPort, slots, pauseMillis, env);
            try {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    c.sockets.add(dir.resolve("n" + i + "-" + seedPort + ".sock"));
                    c.nodes.add(c.startNode(i, i == 0 ? seedPort : 0, ""));
                    if (i == 0) ServeProcess.awaitLine(c.nodes.getFirst(), c.log(0, ""), "stoker node: listening on ");
                }
                whileTheyStart.run(c);
                for (int i = 0; i < n; i++) c.addresses.add(awaitNode(c.nodes.get(i), c.log(i, "")));
                System.out.printf("ClusterTest: %d nodes up %.1f s after the first was started%n", n, (System.nanoTime() - t0) / 1e9);
                return c;
            } catch (Exception | Error e) {
                c.close();
                throw e;
            }
        }

        /** What a case starts once the seed listens, while the other nodes boot. */
        interface SeedUp {
            void run(Cluster c) throws Exception;
        }

        Path log(int i, String run) { return dir.resolve("node" + i + "-" + seed + run + ".log"); }

        private Process startNode(int i, int bindPort, String run) throws IOException {
            var args = new ArrayList<>(List.of("--join", "127.0.0.1:" + seed, "--bind", "127.0.0.1:" + bindPort, "--slots", "" + slots,
                    "--socket", sockets.get(i).toString(), "--node-shm-budget", "512M"));
            if (pauseMillis > 0) args.addAll(List.of("--heartbeat-pause-ms", "" + pauseMillis, "--down-after-ms", "2000"));
            var p = ServeProcess.start(log(i, run), "512m", "node", args, env.apply(i));
            started.add(p);
            return p;
        }

        /** Starts node {@code i} again on its own host, port and socket, as a supervisor does; its cluster address once up. */
        String restart(int i) throws Exception {
            var m = Pattern.compile(":(\\d+)$").matcher(addresses.get(i));
            assertTrue(m.find(), addresses.get(i));
            String run = "-again" + ++restarts;
            nodes.set(i, startNode(i, Integer.parseInt(m.group(1)), run));
            return awaitNode(nodes.get(i), log(i, run));
        }

        /**
         * A member in this JVM with no slots, for coordinating jobs; it sees a node unreachable after {@code pauseMillis} (and
         * downs it 2 s later); 0: the defaults ({@link ClusterNode.Options#of}, the CLI's).
         */
        ClusterNode coordinator(long pauseMillis) throws Exception {
            var store = ShmObjectStore.open(new StoreConfig(Files.createDirectories(dir.resolve("shm")), 64L << 20, "coord"));
            closing.add(store);
            var options = ClusterNode.Options.of("127.0.0.1", 0, List.of("127.0.0.1:" + seed), 0);
            if (pauseMillis > 0) options = options.withTimings(Duration.ofSeconds(2), Duration.ofMillis(pauseMillis));
            var node = ClusterNode.start(options, store);
            closing.add(node);
            assertTrue(node.awaitUp(Duration.ofSeconds(60)), "the coordinator joined the cluster");
            coordinator = node;
            return node;
        }

        ClusterNode coordinator() { return coordinator; }

        /** Job {@code name} over {@code nodes} worker nodes, coordinated by the member in this JVM; closed with the cluster. */
        ClusterJob runJob(String name, int ranks, int nodes, Placement placement, int workers, int steps) throws Exception {
            return runJob(name, ranks, nodes, placement, workers, steps, false);
        }

        /** {@link #runJob(String, int, int, Placement, int, int)}, its remote batches relayed by the coordinator's node when {@code relay}. */
        ClusterJob runJob(String name, int ranks, int nodes, Placement placement, int workers, int steps, boolean relay) throws Exception {
            return runJob(name, job(ranks).build(), nodes, placement, workers, steps, relay);
        }

        /** A job of {@code config} (its data, processor, ranks, packing, cache …), coordinated by the member in this JVM. */
        ClusterJob runJob(String name, NodeConfig config, int nodes, Placement placement, int workers, int steps, boolean relay)
                throws Exception {
            var job = coordinator.runJob(new ClusterJob.Spec(name, config.toJson(), nodes, placement, workers, steps, 2, relay),
                    Duration.ofMinutes(3));
            closing.add(job);
            return job;
        }

        /** A coordinator as a child process ({@code serve --join}, no worker slots, bound to any port), for a case that kills it. */
        Process coordinatorProcess(int nodes, int ranks, int steps, Path socket, String run) throws Exception {
            return coordinatorProcess(0, nodes, ranks, steps, socket, run);
        }

        /** {@link #coordinatorProcess(int, int, int, Path, String)} bound to {@code bindPort}. */
        Process coordinatorProcess(int bindPort, int nodes, int ranks, int steps, Path socket, String run) throws Exception {
            var p = launchCoordinatorProcess(bindPort, nodes, ranks, steps, socket, run);
            ServeProcess.awaitLine(p, coordinatorLog(run), "listening on ");
            return p;
        }

        /** {@link #coordinatorProcess(int, int, int, int, Path, String)} started, not yet waited for. */
        Process launchCoordinatorProcess(int bindPort, int nodes, int ranks, int steps, Path socket, String run) throws Exception {
            Path log = coordinatorLog(run);
            var p = ServeProcess.start(log, "512m", "serve", List.of("--join", "127.0.0.1:" + seed, "--bind", "127.0.0.1:" + bindPort,
                    "--slots", "0", "--nodes", "" + nodes, "--job", "t" + seed, "--data", manifest.toString(),
                    "--ranks", "" + ranks, "--batch", "" + BATCH, "--seed", "99", "--threads", "1", "--fetch-concurrency", "4",
                    "--workers", "" + nodes,
                    "--warm-up-ms", "0", "--min-pixels", "3136", "--max-pixels", "50176", "--max-images", "1", "--steps", "" + steps,
                    "--socket", socket.toString(),
                    "--heartbeat-pause-ms", "4000", "--down-after-ms", "2000"));
            started.add(p);
            return p;
        }

        Path coordinatorLog(String run) { return dir.resolve("coord-" + seed + "-" + run + ".log"); }

        /** SIGKILL to every child JVM of the cluster (nodes and coordinator processes): no goodbye to anyone. */
        void kill() throws Exception {
            for (var p : started) p.destroyForcibly();
            for (var p : started) assertTrue(p.waitFor(20, TimeUnit.SECONDS), "killed");
        }

        @Override
        public void close() throws Exception {
            long t0 = System.nanoTime();
            for (var p : started) p.destroy();
            Exception failed = null;
            for (var c : closing.reversed()) {
                try {
                    c.close();
                } catch (Exception e) {
                    if (failed == null) failed = e;
                }
            }
            for (var p : started) if (!p.waitFor(20, TimeUnit.SECONDS)) p.destroyForcibly();
            System.out.printf("ClusterTest: the cluster of seed %d stopped in %.1f s%n", seed, (System.nanoTime() - t0) / 1e9);
            if (failed != null) throw failed;
        }
    }

    /** Waits until the node listens; its cluster address. */
    static String awaitNode(Process p, Path log) throws Exception {
        String text = ServeProcess.awaitLine(p, log, "stoker node: listening on ");
        var m = Pattern.compile("up as (pekko://\\S+),").matcher(text);
        assertTrue(m.find(), text);
        return m.group(1);
    }

    /** Rank r reads {@code steps} batches from its node's socket, waiting {@code pause} between them; digests in order. */
    static CompletableFuture<List<String>> trainer(Path socket, int rank, int world, int steps, long pauseMillis, AtomicLong progress,
                                                   long[] maxWaitNanos) {
        return trainer(socket, rank, world, steps, pauseMillis, progress, maxWaitNanos, -1, null);
    }

    /**
     * {@link #trainer(Path, int, int, int, long, AtomicLong, long[])} that, after {@code gateAt} batches, waits for {@code gate}
     * (2 minutes at most) before it asks for the next: a case opens it once what it waits for has happened.
     */
    static CompletableFuture<List<String>> trainer(Path socket, int rank, int world, int steps, long pauseMillis, AtomicLong progress,
                                                   long[] maxWaitNanos, int gateAt, CompletableFuture<Void> gate) {
        return CompletableFuture.supplyAsync(() -> {
            try (var c = TrainerClient.connect(socket, rank, world, "t", TrainerClient.Options.SHARED_MEMORY)) {
                var out = new ArrayList<String>();
                for (int s = 0; s < steps; s++) {
                    if (s == gateAt) gate.get(120, TimeUnit.SECONDS);
                    long t0 = System.nanoTime();
                    try (var got = c.next()) {
                        maxWaitNanos[0] = Math.max(maxWaitNanos[0], System.nanoTime() - t0);
                        out.add(BatchDigest.of(got.batch()));
                    }
                    progress.incrementAndGet();
                    Thread.sleep(pauseMillis);
                }
                return out;
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        }, r -> Thread.ofPlatform().daemon(true).start(r));
    }

    static CompletableFuture<List<String>> trainer(Path socket, int rank, int world, int steps) {
        return trainer(socket, rank, world, steps, 0, new AtomicLong(), new long[1]);
    }

    /** Rank r resumed from {@code state} on its node's socket, reading {@code steps} batches (digests in order), on a thread of its own. */
    static CompletableFuture<List<String>> resumedTrainer(Path socket, int rank, int world, TrainerClient.State state, int steps) {
        return CompletableFuture.supplyAsync(() -> {
            try (var c = TrainerClient.connect(socket, rank, world, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(state))) {
                // the saved step label goes on, also over another rank count (audit #32)
                if (c.state().nextStep() != state.nextStep())
                    throw new AssertionError("rank " + rank + " welcomed at step " + c.state().nextStep() + ", saved " + state.nextStep());
                return take(c, steps); // each batch's label is checked by the node's ledger against its schedule's
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        }, x -> Thread.ofPlatform().daemon(true).start(x));
    }

    /** The digests of the next {@code n} batches. */
    static List<String> take(TrainerClient c, int n) throws Exception {
        var out = new ArrayList<String>();
        for (int i = 0; i < n; i++)
            try (var got = c.next()) {
                out.add(BatchDigest.of(got.batch()));
            }
        return out;
    }

    static List<String> strings(JsonNode array) {
        var out = new ArrayList<String>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    static boolean havePython() { return Files.isExecutable(Path.of(PythonClientTest.PYTHON)); }

    /** fetch_batches.py take of rank 0 on {@code socket}; its last line's JSON. */
    static JsonNode python(Path socket, int world, int steps, List<String> extra) throws Exception {
        var args = new ArrayList<>(List.of("take", "--socket", socket.toString(), "--world", "" + world, "--rank", "0",
                "--steps", "" + steps));
        args.addAll(extra);
        return python(args, extra.contains("--then-die") ? 128 + 9 : 0);
    }

    /** fetch_batches.py with {@code args} (job "t"), expected to exit with {@code status}; its last line's JSON. */
    static JsonNode python(List<String> args, int status) throws Exception {
        Path script = Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py");
        var cmd = new ArrayList<>(List.of(PythonClientTest.PYTHON, script.toString()));
        cmd.addAll(args);
        cmd.addAll(List.of("--job", "t"));
        var p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(status, p.exitValue(), out);
        var lines = out.strip().split("\n");
        return new ObjectMapper().readTree(lines[lines.length - 1]);
    }

    /** Sends {@code SIG<name>} to the child's JVM. */
    static void signal(String name, Process p) throws Exception {
        var kill = new ProcessBuilder("kill", "-" + name, "" + p.pid()).inheritIO().start();
        assertTrue(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0, "kill -" + name + " " + p.pid());
    }

    /** Waits until {@code condition} holds, checking every 50 ms; fails naming {@code what} after {@code timeout}. */
    static void awaitTrue(java.util.function.BooleanSupplier condition, Duration timeout, String what) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within " + timeout.toSeconds() + " s: " + what);
            Thread.sleep(50);
        }
    }

    /** Waits until {@code observer} no longer lists {@code member} (downed by the majority's leader and removed); seconds it took. */
    static double awaitRemoved(ClusterNode observer, String member, long since) throws InterruptedException {
        while (observer.members().containsKey(member)) {
            assertTrue(System.nanoTime() - since < TimeUnit.SECONDS.toNanos(60), "still a member 60 s on: " + observer.members());
            Thread.sleep(100);
        }
        return (System.nanoTime() - since) / 1e9;
    }

    /**
     * The cases that kill none of its members, on one cluster started for them all: three nodes of two slots each and a
     * coordinator in this JVM. Each case runs a job of its own, closed after it, as a cluster serving one job after
     * another does. The nodes' counters are the cluster's since it started, so a case that counts takes their change
     * over its job.
     */
    @Nested
    @TestInstance(TestInstance.Lifecycle.PER_CLASS)
    class OnOneCluster {
        Cluster cluster;
        ClusterNode coordinator;
        /** The job of the case before (closed after it), through which the nodes' counters are asked before the next job. */
        ClusterJob last;

        @BeforeAll
        void start() throws Exception {
            cluster = Cluster.start(3, 2, 10_000, c -> c.coordinator(10_000)); // it joins while the other nodes boot
            coordinator = cluster.coordinator();
        }

        @AfterAll
        void stop() throws Exception {
            if (cluster != null) cluster.close();
        }

        @AfterEach
        void closeJob() {
            if (last != null) last.close();
        }

        ClusterJob runJob(String name, int ranks, Placement placement, int workers, int steps) throws Exception {
            last = cluster.runJob(name, ranks, 3, placement, workers, steps);
            return last;
        }

        Path socket(int node) { return cluster.sockets.get(node); }

        /**
         * Each node's counters once the jobs before have let go of everything (no object held, two readings alike): where a
         * case's counting starts. None before the first job: the nodes count from zero.
         */
        Map<String, NodeProtocol.NodeStats> settledCounters() throws Exception {
            if (last == null) return Map.of();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            var before = byAddress(last.nodeStats());
            while (true) {
                Thread.sleep(100);
                var now = byAddress(last.nodeStats());
                if (now.equals(before) && now.values().stream().allMatch(s -> s.heldObjects() == 0)) return now;
                assertTrue(System.nanoTime() < deadline, "the nodes still hold objects or count 30 s after the last job: " + now);
                before = now;
            }
        }

        /** Each node's counters now, less {@code since}. */
        Map<String, NodeProtocol.NodeStats> countedSince(ClusterJob job, Map<String, NodeProtocol.NodeStats> since) throws Exception {
            var out = new HashMap<String, NodeProtocol.NodeStats>();
            for (var s : job.nodeStats()) {
                var b = since.get(s.address());
                out.put(s.address(), b == null ? s : new NodeProtocol.NodeStats(s.address(), s.produced() - b.produced(),
                        s.flightBatchesSent() - b.flightBatchesSent(), s.flightBytesSent() - b.flightBytesSent(),
                        s.pulledBatches() - b.pulledBatches(), s.pulledBytes() - b.pulledBytes(), s.localHandOuts() - b.localHandOuts(),
                        s.heldObjects(), s.relayedBatches() - b.relayedBatches(), s.relayedBytes() - b.relayedBytes()));
            }
            return out;
        }

        static Map<String, NodeProtocol.NodeStats> byAddress(List<NodeProtocol.NodeStats> stats) {
            var out = new HashMap<String, NodeProtocol.NodeStats>();
            for (var s : stats) out.put(s.address(), s);
            return out;
        }

        @Test
        void threeNodesYieldTheEmbeddedBatchesAndRanksPullFromTheOwner() throws Exception {
            int ranks = 3, steps = 6;
            var before = settledCounters();
            var job = runJob("three", ranks, Placement.SPREAD, 3, steps);
            assertEquals(3, job.workerNodes().stream().distinct().count(), "spread: one worker per node " + job.workerNodes());

            var trainers = new ArrayList<CompletableFuture<List<String>>>();
            for (int r = 0; r < ranks; r++) trainers.add(trainer(socket(r), r, ranks, steps));
            for (int r = 0; r < ranks; r++)
                assertEquals(reference(ranks, r, 0, steps), trainers.get(r).get(180, TimeUnit.SECONDS), "rank " + r + "'s batches");

            // where the bytes went: each batch either leased on its owner (the rank's node made it) or pulled once from the owner
            var stats = countedSince(job, before);
            var coordinatorStats = coordinator.stats(); // over every job the cluster has run
            assertEquals(0, coordinatorStats.flightBytesSent(), "nothing is sent by the coordinator");
            assertEquals(0, coordinatorStats.pulledBytes(), "nothing passes through the coordinator");
            assertEquals(0, coordinatorStats.produced());
            long produced = 0, sent = 0, pulled = 0, local = 0, sentBatches = 0, pulledBatches = 0;
            for (var s : stats.values()) {
                produced += s.produced();
                sent += s.flightBytesSent();
                sentBatches += s.flightBatchesSent();
                pulled += s.pulledBytes();
                pulledBatches += s.pulledBatches();
                local += s.localHandOuts();
            }
            assertEquals((long) ranks * steps, local + pulledBatches,
                    "every batch reached its rank once: leased locally or pulled " + stats);
            assertEquals(sentBatches, pulledBatches, "each pull is one DoGet served by the owner " + stats);
            assertTrue(pulledBatches > 0 && local > 0, "spread over 3 nodes gives both local and remote batches " + stats);
            assertTrue(produced >= (long) ranks * steps, "the nodes made every batch " + stats);
            assertTrue(pulled >= sent && pulled - sent <= pulledBatches * 4096L, "pulled = sent payload + layout headers " + stats);
            assertEquals(0, job.redone());

            // every rank's trainer is on a node other than the coordinator's, and still its timings reach the coordinator
            var timings = job.refreshTimings(Duration.ofSeconds(10));
            assertEquals(0, timings.refused(), "no honest node's report refused " + timings.toJson());
            var perRank = timings.ranks();
            var perNode = new HashMap<String, dev.stoker.cluster.ClusterTimings.Figures>(); // by address: one incarnation each here
            timings.nodes().forEach((incarnation, f) -> assertNull(perNode.put(dev.stoker.cluster.ClusterTimings.addressOf(incarnation), f),
                    "one incarnation per address " + timings.toJson()));
            for (int r = 0; r < ranks; r++) {
                var f = perRank.get(r);
                assertNotNull(f, "rank " + r + "'s timings at the coordinator " + timings.toJson());
                assertTrue(f.steps() > 0 && f.steps() <= steps, "rank " + r + " measured steps " + f);
                double w = f.waitRatio().orElse(-1);
                assertTrue(w >= 0 && w <= 1, "rank " + r + "'s wait ratio " + w);
                var node = perNode.get(cluster.addresses.get(r));
                assertNotNull(node, "node " + r + " (" + cluster.addresses.get(r) + ") reported its rank " + timings.toJson());
                assertEquals(f, node, "one rank per node: the node's figures are its rank's");
            }
            assertFalse(perNode.containsKey(coordinator.address()), "the coordinator serves no trainer " + timings.toJson());
            @SuppressWarnings("unchecked") var measured = (Map<String, Object>) job.summary().get("trainers");
            double all = (Double) measured.get("wait_ratio");
            assertTrue(all >= 0 && all <= 1, "the job's wait ratio over every rank " + measured);
            assertEquals(timings.all().steps(), measured.get("steps_reported"));
        }

        @Test
        void relayedRetrievalPassesEveryRemoteBatchThroughTheCoordinatorsNode() throws Exception {
            int ranks = 3, steps = 4;
            var before = settledCounters();
            last = cluster.runJob("relay", ranks, 3, Placement.SPREAD, 3, steps, true);
            var trainers = new ArrayList<CompletableFuture<List<String>>>();
            for (int r = 0; r < ranks; r++) trainers.add(trainer(socket(r), r, ranks, steps));
            for (int r = 0; r < ranks; r++)
                assertEquals(reference(ranks, r, 0, steps), trainers.get(r).get(180, TimeUnit.SECONDS), "rank " + r + "'s batches, relayed");

            // --retrieval relay (the ablation's "retrieval off"): a batch made on another node than its rank's comes through the
            // coordinator's node (it makes none here), which fetched it from the owner and sent it on; a rank's own batches stay local
            var stats = countedSince(last, before);
            var c = stats.get(coordinator.address()); // the coordinator's node, a member too: this job's counts
            long pulled = 0, local = 0, ownersSent = 0;
            for (var st : stats.values()) {
                if (st == c) continue;
                pulled += st.pulledBatches();
                local += st.localHandOuts();
                ownersSent += st.flightBatchesSent();
            }
            assertEquals((long) ranks * steps, local + pulled, "every batch reached its rank once " + stats);
            assertTrue(pulled > 0 && local > 0, "spread over 3 nodes gives both local and remote batches " + stats);
            assertEquals(pulled, c.relayedBatches(), "every pulled batch was relayed by the coordinator's node " + stats);
            assertEquals(pulled, c.flightBatchesSent(), "and sent on by it " + stats);
            assertEquals(pulled, ownersSent, "each fetched once from its owner " + stats);
            assertTrue(c.relayedBytes() > 0 && c.produced() == 0 && c.pulledBatches() == 0, c.toString());
            assertEquals(0, last.redone());
        }

        @Test
        void packPutsEveryWorkerOnTheFirstNode() throws Exception {
            int ranks = 2, steps = 3;
            var before = settledCounters();
            var job = runJob("pack", ranks, Placement.PACK, 2, steps);
            assertEquals(1, job.workerNodes().stream().distinct().count(), "pack: both workers on one node " + job.workerNodes());
            assertEquals(job.nodes().getFirst().address(), job.workerNodes().getFirst());
            var t0 = trainer(socket(0), 0, ranks, steps);
            var t1 = trainer(socket(1), 1, ranks, steps);
            assertEquals(reference(ranks, 0, 0, steps), t0.get(180, TimeUnit.SECONDS));
            assertEquals(reference(ranks, 1, 0, steps), t1.get(180, TimeUnit.SECONDS));
            var stats = countedSince(job, before);
            var owner = stats.get(job.workerNodes().getFirst());
            assertEquals((long) ranks * steps, owner.produced(), "the packed node made every batch " + stats);
            assertEquals(steps, owner.flightBatchesSent(), "it sent every batch of the other node's rank " + stats);
        }

        /**
         * The Python client (Debian's python3) on one node's socket reads its rank's batches bit for bit,
         * like the Java one; killed with SIGKILL a batch after its checkpoint, a second Python process
         * resumes from the checkpoint exactly. A Python client claiming rank 1, which a Java trainer
         * holds, is refused with the rank named, and the Java trainer goes on with every batch of it.
         */
        @Test
        void thePythonClientReadsItsRankFromItsNodeAndResumesFromItsState() throws Exception {
            assumeTrue(havePython(), "no /usr/bin/python3");
            int ranks = 2, steps = 4;
            runJob("py", ranks, Placement.SPREAD, 2, steps);
            try (var live = TrainerClient.connect(socket(1), 1, ranks, "t", TrainerClient.Options.SHARED_MEMORY)) {
                assertEquals(reference(ranks, 1, 0, 1), take(live, 1));
                var twice = python(List.of("expect-error", "--socket", socket(1).toString(), "--world", "" + ranks, "--rank", "1"), 0);
                assertEquals("StokerError", twice.get("error_type").asText(), twice.toString());
                assertTrue(twice.get("message").asText().startsWith("rank 1 is already being fed to a trainer on another, open connection"),
                        twice.toString());

                Path state = tmp.resolve("py-cluster-" + cluster.seed + ".json");
                var first = python(socket(0), ranks, 2, List.of("--state-out", state.toString(), "--then-die", "1")); // SIGKILLed
                assertEquals(reference(ranks, 0, 0, 3), strings(first.get("digests")));
                var second = python(socket(0), ranks, steps - 2, List.of("--state-in", state.toString()));
                assertEquals(reference(ranks, 0, 2, steps), strings(second.get("digests")), "rank 0 resumed from its checkpoint, exactly");
                assertEquals(reference(ranks, 1, 1, steps), take(live, steps - 1), "rank 1's live Java trainer: nothing taken from it");
            }
        }

        /**
         * A cluster trainer behind the same ledger as a local one: a reconnect from a saved state gets
         * the rest of its batches exactly (the one that arrived after the state again), and a second
         * claim of a live rank is refused with the rank's name while the live trainer goes on.
         */
        @Test
        void aClusterTrainerResumesFromItsStateAndASecondClaimOfItsRankIsRefused() throws Exception {
            int ranks = 2, steps = 8;
            runJob("resume", ranks, Placement.SPREAD, 2, steps);
            var other = trainer(socket(1), 1, ranks, steps);
            TrainerClient.State saved;
            try (var c = TrainerClient.connect(socket(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY)) {
                assertEquals(reference(ranks, 0, 0, 3), take(c, 3));
                saved = c.state();
                var e = assertThrows(IOException.class,
                        () -> TrainerClient.connect(socket(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY));
                assertTrue(e.getMessage().contains("rank 0 is already being fed"), e.getMessage());
                assertEquals(reference(ranks, 0, 3, 4), take(c, 1)); // arrived; the trainer dies before its next checkpoint
            }
            try (var c = TrainerClient.connect(socket(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved))) {
                assertEquals(reference(ranks, 0, 3, steps), take(c, steps - 3), "resumed: every batch after the state, none twice");
            }
            assertEquals(reference(ranks, 1, 0, steps), other.get(180, TimeUnit.SECONDS));
        }

        /**
         * Every trainer restarted from an older checkpoint (an elastic restart: all ranks stopped, each
         * resumes from the same saved state, batches after it already confirmed): the job moves back
         * once no node has a trainer connected, and every rank gets exactly what followed the checkpoint.
         */
        @Test
        void clusterTrainersRestartedFromAnOlderCheckpointMoveTheJobBack() throws Exception {
            int ranks = 2, steps = 8;
            runJob("back", ranks, Placement.SPREAD, 2, steps);
            var saved = new TrainerClient.State[ranks];
            var clients = new ArrayList<TrainerClient>();
            for (int r = 0; r < ranks; r++) {
                var c = TrainerClient.connect(socket(r), r, ranks, "t", TrainerClient.Options.SHARED_MEMORY);
                clients.add(c);
                assertEquals(reference(ranks, r, 0, 2), take(c, 2));
                saved[r] = c.state(); // the checkpoint
            }
            for (int r = 0; r < ranks; r++) assertEquals(reference(ranks, r, 2, 4), take(clients.get(r), 2)); // trained on, then all crash
            for (var c : clients) c.close();
            var resumed = new ArrayList<CompletableFuture<List<String>>>();
            for (int r = 0; r < ranks; r++) resumed.add(resumedTrainer(socket(r), r, ranks, saved[r], steps - 2));
            for (int r = 0; r < ranks; r++)
                assertEquals(reference(ranks, r, 2, steps), resumed.get(r).get(180, TimeUnit.SECONDS),
                        "rank " + r + " from the checkpoint");
        }

        /**
         * The coordinator killed with SIGKILL, then the whole cluster, on a cluster of two nodes started for this case.
         * <ol>
         * <li>The coordinator killed: every trainer gets an error within 12 s (its nodes see the coordinator unreachable for
         *     the down time, or removed, and end the job); a coordinator started again opens the job afresh on every
         *     node, and the trainers resume into it from their saved states, exactly.
         * <li>Then coordinator and nodes killed, and the job started on another cluster, of three nodes, with three ranks
         *     (this class's: a cluster that never saw the job, which is all a cluster started afresh is to it): every rank
         *     resumes from the checkpoint taken after step 3 with two ranks, and gets exactly what the embedded service gives
         *     three ranks resumed there (the epoch's order goes on over the new world, nothing lost or repeated). Rank 0 is
         *     the Python client both times, resumed from its own state_dict(); the other ranks are Java trainers.
         * </ol>
         * With Python, it takes rank 0's first three batches before the Java trainers start; the Java trainer of rank 0 then
         * resumes from rank 1's state (a state from any rank resumes any rank), so that both ranks have a trainer connected
         * when the coordinator is killed.
         */
        @Test
        void aKilledCoordinatorFailsItsTrainersQuicklyAndAWholeClusterKilledResumesOnMoreRanksExactly() throws Exception {
            boolean python = havePython();
            int ranks = 2, after = 3, steps = 6;
            var saved = new TrainerClient.State[ranks];
            Path pyState = tmp.resolve("py-whole.json");
            var coordSocket = new Path[1];
            var launched = new Process[1];
            try (var cluster = Cluster.start(2, 1, 4000, c -> { // the coordinator, in a JVM of its own, boots beside the second node
                coordSocket[0] = tmp.resolve("coord-" + c.seed + ".sock");
                launched[0] = c.launchCoordinatorProcess(0, 2, ranks, 0, coordSocket[0], "1");
            })) {
                var serve = launched[0];
                ServeProcess.awaitLine(serve, cluster.coordinatorLog("1"), "listening on ");
                if (python) {
                    var first = python(cluster.sockets.get(0), ranks, after, List.of("--state-out", pyState.toString()));
                    assertEquals(reference(ranks, 0, 0, after), strings(first.get("digests")), "rank 0 of 2, Python");
                }
                var clients = new TrainerClient[ranks];
                clients[1] = TrainerClient.connect(cluster.sockets.get(1), 1, ranks, "t", TrainerClient.Options.SHARED_MEMORY);
                assertEquals(reference(ranks, 1, 0, after), take(clients[1], after));
                saved[1] = clients[1].state(); // every rank's state after the same step is the same global cursor
                if (python) {
                    clients[0] = TrainerClient.connect(cluster.sockets.get(0), 0, ranks, "t",
                            TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved[1]));
                    assertEquals(saved[1].nextStep(), clients[0].state().nextStep(), "rank 0 goes on after Python's batches");
                } else {
                    clients[0] = TrainerClient.connect(cluster.sockets.get(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY);
                    assertEquals(reference(ranks, 0, 0, after), take(clients[0], after));
                }
                saved[0] = clients[0].state();

                var failedAfter = new ArrayList<CompletableFuture<Long>>();
                long killed = System.nanoTime();
                serve.destroyForcibly();
                for (var c : clients)
                    failedAfter.add(CompletableFuture.supplyAsync(() -> {
                        try (c) {
                            while (true) c.next().close(); // what was pulled ahead still comes; then the error
                        } catch (IOException e) {
                            return System.nanoTime() - killed;
                        }
                    }, r -> Thread.ofPlatform().daemon(true).start(r)));
                for (int r = 0; r < ranks; r++) {
                    long nanos = failedAfter.get(r).get(60, TimeUnit.SECONDS);
                    System.out.printf("ClusterTest: rank %d got its error %.2f s after the coordinator's SIGKILL%n", r, nanos / 1e9);
                    // a node ends the job once its coordinator is unreachable for the down time (or removed): the pause (4 s)
                    // and a heartbeat, then 2 s, measured 7-8 s; 12 s leaves room for a loaded machine
                    assertTrue(nanos < TimeUnit.SECONDS.toNanos(12), "rank " + r + " failed after " + nanos / 1e9 + " s");
                }
                cluster.coordinatorProcess(2, ranks, 0, coordSocket[0], "2"); // its stale socket is replaced
                var resumed = new ArrayList<CompletableFuture<List<String>>>();
                for (int r = 0; r < ranks; r++) resumed.add(resumedTrainer(cluster.sockets.get(r), r, ranks, saved[r], steps - after));
                for (int r = 0; r < ranks; r++)
                    assertEquals(reference(ranks, r, after, steps), resumed.get(r).get(180, TimeUnit.SECONDS),
                            "rank " + r + " resumed exactly");
                cluster.kill(); // the whole cluster: coordinator and nodes
            }

            var reference3 = embeddedFrom(3, steps, saved[1], "refwhole3");
            runJob("resized", 3, Placement.SPREAD, 3, 0);
            var resumed = new ArrayList<CompletableFuture<List<String>>>();
            for (int r = python ? 1 : 0; r < 3; r++) resumed.add(resumedTrainer(socket(r), r, 3, saved[1], steps));
            if (python) {
                var again = python(socket(0), 3, steps, List.of("--state-in", pyState.toString()));
                assertEquals(reference3.get(0), strings(again.get("digests")), "rank 0 of 3, Python, from its state saved with 2 ranks");
            }
            for (int r = python ? 1 : 0; r < 3; r++)
                assertEquals(reference3.get(r), resumed.get(r - (python ? 1 : 0)).get(180, TimeUnit.SECONDS), "rank " + r + " of 3");
        }
    }

    /**
     * Two failures of one cluster of three nodes (one slot each) and a coordinator in this JVM, every member marking
     * another unreachable after 3 s without a heartbeat and the unreachable downed 2 s later.
     * <ol>
     * <li>A node killed with SIGKILL mid-epoch: its work is made again elsewhere, and the cluster downs and removes the
     *     node. Started again at the same address (a new incarnation) while the job runs, it is admitted into the job and
     *     makes its share of the batches issued after (the ranks wait at a gate until it is admitted, so that steps are left
     *     to issue). Each rank gets every batch in order, none twice.
     * <li>Audit #16: a node that cannot be heard for longer than {@code --heartbeat-pause-ms} + {@code --down-after-ms}
     *     (its JVM stopped with SIGSTOP) is downed and removed, and the job it served gives up on it; resumed (SIGCONT)
     *     it exits with an error saying so rather than linger as a member nobody hears. Started again on the same host
     *     and port it joins anew: the next job places a worker on it and feeds its trainer exactly the embedded service's
     *     batches.
     * </ol>
     */
    @Test
    void aKilledNodesWorkIsRedoneAndAStoppedNodeIsDownedThenServesTheNextJobStartedAgain() throws Exception {
        int ranks = 2, steps = 12;
        // the coordinator joins while the other nodes boot; the nodes notice a lost member within 3 s, and every member hears of it
        try (var cluster = Cluster.start(3, 1, 3000, c -> c.coordinator(10_000))) {
            var coordinator = cluster.coordinator();
            var job = cluster.runJob("kill", ranks, 3, Placement.SPREAD, 3, steps);
            String victim = cluster.addresses.get(1); // the second node: the ranks sit on the first and the third
            assertTrue(job.workerNodes().contains(victim), "spread gives every node a worker " + job.workerNodes());

            var progress = new AtomicLong();
            long[] wait0 = new long[1], wait1 = new long[1];
            // each rank takes 4 batches, then waits for the killed node's new incarnation to be admitted: the coordinator has then
            // issued at most 4 + 2 pulled ahead + 2 made ahead of each rank's 12, and the rest goes to the workers placed anew
            int gateAt = 4;
            var admittedGate = new CompletableFuture<Void>();
            var t0 = trainer(cluster.sockets.get(0), 0, ranks, steps, 150, progress, wait0, gateAt, admittedGate);
            var t1 = trainer(cluster.sockets.get(2), 1, ranks, steps, 150, progress, wait1, gateAt, admittedGate);
            awaitTrue(() -> progress.get() >= 4, Duration.ofSeconds(120), "the ranks' first batches");
            long killed = System.nanoTime();
            cluster.nodes.get(1).destroyForcibly(); // SIGKILL: no goodbye to the cluster
            assertTrue(cluster.nodes.get(1).waitFor(10, TimeUnit.SECONDS));
            awaitTrue(() -> job.deadNodes().contains(victim), Duration.ofSeconds(60), "the killed node given up on");
            assertTrue(job.workerNodes().stream().noneMatch(victim::equals), "its worker moved: " + job.workerNodes());
            // removed before it comes back (and before the next failure, so that the majority below is counted over three members)
            double removed = awaitRemoved(coordinator, victim, killed);

            assertEquals(victim, cluster.restart(1), "the same host and port"); // as a supervisor starts it again
            long restarted = System.nanoTime();
            awaitTrue(() -> job.workerNodes().contains(victim), Duration.ofSeconds(60), "the node started again admitted into the job");
            double admitted = (System.nanoTime() - restarted) / 1e9;
            admittedGate.complete(null);
            assertEquals(reference(ranks, 0, 0, steps), t0.get(240, TimeUnit.SECONDS), "rank 0: every batch, in order, none twice");
            assertEquals(reference(ranks, 1, 0, steps), t1.get(240, TimeUnit.SECONDS), "rank 1: every batch, in order, none twice");
            assertTrue(job.redone() > 0, "its batches were made again elsewhere: " + job.summary());
            assertFalse(job.deadNodes().contains(victim), "no longer given up on: " + job.deadNodes());
            assertEquals(1L, job.summary().get("admitted"), job.summary().toString());
            long madeThere = job.nodeStats().stream().filter(n -> n.address().equals(victim)).mapToLong(NodeProtocol.NodeStats::produced)
                    .sum(); // the new incarnation counts from zero: what it made, it made for this job after its admission
            assertTrue(madeThere > 0, "the node admitted made its share of the later steps: " + job.nodeStats());
            @SuppressWarnings("unchecked")
            var perRank = (List<Map<String, Object>>) job.summary().get("ranks");
            for (var r : perRank) assertEquals((long) steps, r.get("batches"), "batches handed out " + r);
            System.out.printf("ClusterTest: longest wait after the kill: rank 0 %.2f s, rank 1 %.2f s; the node removed %.1f s after; "
                    + "started again, admitted %.1f s after it listened, made %d batches%n", wait0[0] / 1e9, wait1[0] / 1e9, removed, admitted,
                    madeThere);

            // the third node (its trainer done, the job still open) stopped: the coordinator and the first node are the majority
            String stoppedAt = cluster.addresses.get(2);
            var stopped = cluster.nodes.get(2);
            long t = System.nanoTime();
            signal("STOP", stopped);
            double removedAfter = awaitRemoved(coordinator, stoppedAt, t);
            assertTrue(job.deadNodes().contains(stoppedAt), "the running job gave up on it: " + job.deadNodes());
            t = System.nanoTime();
            signal("CONT", stopped);
            assertTrue(stopped.waitFor(60, TimeUnit.SECONDS), "the resumed node exits: " + Files.readString(cluster.log(2, "")));
            double exitedAfter = (System.nanoTime() - t) / 1e9;
            String log = Files.readString(cluster.log(2, ""));
            assertEquals(1, stopped.exitValue(), log);
            assertTrue(log.contains("this node was removed from the cluster (downed after it was unreachable)"), log);
            System.out.printf("ClusterTest: a stopped node was removed %.1f s after SIGSTOP and exited %.1f s after SIGCONT%n",
                    removedAfter, exitedAfter);

            assertEquals(stoppedAt, cluster.restart(2), "the same host and port");
            job.close();
            int nextSteps = 3;
            // over all three nodes (the one killed before is back too): spread gives each a worker
            var next = cluster.runJob("next", ranks, 3, Placement.SPREAD, 3, nextSteps);
            assertTrue(next.workerNodes().contains(stoppedAt),
                    "the next job places a worker on the node started again: " + next.workerNodes());
            var n0 = trainer(cluster.sockets.get(0), 0, ranks, nextSteps);
            var n1 = trainer(cluster.sockets.get(2), 1, ranks, nextSteps);
            assertEquals(reference(ranks, 0, 0, nextSteps), n0.get(180, TimeUnit.SECONDS));
            assertEquals(reference(ranks, 1, 0, nextSteps), n1.get(180, TimeUnit.SECONDS), "the node started again feeds its rank exactly");
        }
    }

    /**
     * A node told to stop (SIGTERM) while it still joins, its seed gone, stops at once, exits 0 and leaves no store behind,
     * rather than wait out the join timeout (a minute) as a supervisor or {@code bench cluster} waits for it.
     */
    @Test
    void aNodeStoppedWhileItJoinsAGoneSeedExitsAtOnce() throws Exception {
        int gone = freePort(), port = freePort();
        Path log = tmp.resolve("joining-" + port + ".log"), store = Files.createDirectories(tmp.resolve("joining-shm"));
        var p = ServeProcess.start(log, "256m", "node", List.of("--join", "127.0.0.1:" + gone, "--bind", "127.0.0.1:" + port,
                "--slots", "1", "--socket", tmp.resolve("joining-" + port + ".sock").toString(), "--node-shm-budget", "64M",
                "--node-shm-dir", store.toString()));
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(ServeProcess.LISTEN_TIMEOUT_SECONDS);
            while (!listens(port)) { // its member is bound (it asks the seed to let it join): the stop handler is in place
                assertTrue(p.isAlive() && System.nanoTime() < deadline, "the node's member never bound: " + Files.readString(log));
                Thread.sleep(50);
            }
            long t = System.nanoTime();
            p.destroy();
            assertTrue(p.waitFor(10, TimeUnit.SECONDS), "the node stops while it joins: " + Files.readString(log));
            assertEquals(0, p.exitValue(), Files.readString(log));
            assertTrue(Files.readString(log).contains("stopped before it had joined the cluster"), Files.readString(log));
            try (var left = Files.list(store)) {
                assertEquals(List.of(), left.toList(), "its store is removed");
            }
            System.out.printf("ClusterTest: a joining node stopped %.2f s after SIGTERM%n", (System.nanoTime() - t) / 1e9);
        } finally {
            p.destroyForcibly();
        }
    }

    static boolean listens(int port) {
        try (var s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /**
     * Issue 31: a two-member cluster (a coordinator in this JVM and one node, both on the default detector settings: a
     * heartbeat pause of 4 s, downing after 7 s of stable unreachability) rides out its node's JVM frozen for 7 s (SIGSTOP,
     * as a long GC pause or a starved host would): both stay members, the node is not downed and does not exit, and the
     * rank's trainer, which asked the frozen node for its next batch, gets every batch in order, none twice. Before
     * (4 s + 3 s), this pause downed one of the two. The coordinator may give the node up for the pause's end (it is
     * unreachable from about 5 s on): its batches then wait, and the node is admitted again when it is heard again.
     */
    @Test
    void aTwoMemberClusterRidesOutItsNodeFrozenForSevenSeconds() throws Exception {
        int steps = 6, gateAt = 2;
        try (var cluster = Cluster.start(1, 1, 0)) { // the CLI's detector defaults
            var coordinator = cluster.coordinator(0);
            var job = cluster.runJob("pause", 1, 1, Placement.SPREAD, 1, steps);
            String node = cluster.addresses.getFirst();
            var progress = new AtomicLong();
            long[] longestWait = new long[1];
            var frozen = new CompletableFuture<Void>();
            var rank = trainer(cluster.sockets.getFirst(), 0, 1, steps, 0, progress, longestWait, gateAt, frozen);
            awaitTrue(() -> progress.get() >= gateAt, Duration.ofSeconds(120), "the rank's first batches");
            var p = cluster.nodes.getFirst();
            signal("STOP", p);
            frozen.complete(null); // the trainer asks the frozen node for its next batch
            Thread.sleep(7000); // the scenario: the node's JVM frozen for 7 s
            signal("CONT", p);
            assertEquals(reference(1, 0, 0, steps), rank.get(120, TimeUnit.SECONDS), "every batch, in order, none twice");
            assertTrue(longestWait[0] > TimeUnit.SECONDS.toNanos(5), "the trainer waited through the pause: " + longestWait[0] / 1e9 + " s");
            awaitTrue(() -> "up".equals(coordinator.members().get(node)), Duration.ofSeconds(30), "the node up and reachable: "
                    + coordinator.members());
            assertEquals(2, coordinator.members().size(), "both members: " + coordinator.members());
            assertTrue(p.isAlive(), "the node was not downed: " + Files.readString(cluster.log(0, "")));
            assertEquals(Set.of(), job.deadNodes(), "the job has the node: " + job.summary());
            System.out.printf("ClusterTest: two members, the node frozen 7 s: both stay; the trainer waited %.1f s; job %s%n",
                    longestWait[0] / 1e9, job.summary());
        }
    }

    /**
     * Two members (a coordinator and one node) have no majority, and keep-majority keeps the side with the lower address.
     * The node, of lower address, stopped (SIGSTOP) past the down time: the healthy coordinator downs itself, and exits
     * with an error saying so rather than linger with a job no node serves any more (docs/cluster.md, "Split brain").
     */
    @Test
    void withTwoMembersACoordinatorDownedByItsStoppedNodeExitsWithAClearError() throws Exception {
        int a = freePort(), b = freePort();
        try (var cluster = Cluster.start(Math.min(a, b), 1, 1, 3000)) {
            var coordinator = cluster.coordinatorProcess(Math.max(a, b), 1, 1, 2, tmp.resolve("two-coord-" + cluster.seed + ".sock"), "1");
            var node = cluster.nodes.getFirst();
            long t = System.nanoTime();
            signal("STOP", node);
            try {
                assertTrue(coordinator.waitFor(60, TimeUnit.SECONDS), "the downed coordinator exits");
                String log = Files.readString(cluster.coordinatorLog("1"));
                assertEquals(1, coordinator.exitValue(), log);
                assertTrue(log.contains("this node, the job's coordinator, was removed from the cluster"), log);
                System.out.printf("ClusterTest: two members, the node stopped: the coordinator downed itself and exited %.1f s after%n",
                        (System.nanoTime() - t) / 1e9);
            } finally {
                signal("CONT", node);
            }
        }
    }

}
