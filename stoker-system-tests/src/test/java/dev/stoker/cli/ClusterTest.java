package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Cluster mode with real JVMs on 127.0.0.1: three {@code stoker node} child processes and a
 * coordinator in this JVM (a cluster member with no worker slots, so that it makes nothing and
 * serves no trainer). Trainer ranks connect to their node's socket. Every rank's batches are
 * compared, digest by digest, with what the embedded zero-copy service yields for the same
 * options; the nodes' counters show where the bytes went; a node killed with SIGKILL mid-epoch has
 * its work redone elsewhere with nothing lost or repeated; a member frozen with SIGSTOP past the
 * down time is removed, and a removed node or coordinator exits rather than linger.
 */
@Timeout(value = 420, unit = TimeUnit.SECONDS)
@Tag("slow")
class ClusterTest {
    static final int SAMPLES = 40, BATCH = 2;
    @TempDir static Path tmp;
    static Path manifest;
    final List<Process> children = new ArrayList<>();
    final List<String> addresses = new ArrayList<>(); // each child's cluster address
    final List<AutoCloseable> closing = new ArrayList<>();

    @BeforeAll
    static void data() throws Exception {
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 7);
    }

    @AfterEach
    void stop() throws Exception {
        for (var c : closing.reversed()) c.close();
        for (var p : children) p.destroy();
        for (var p : children) if (!p.waitFor(20, TimeUnit.SECONDS)) p.destroyForcibly();
    }

    static NodeConfig.Builder job(int ranks) {
        return NodeConfig.builder().data(manifest.toString()).ranks(ranks).batch(BATCH).seed(99).threads(1).set(NodeConfig.FETCH_CONCURRENCY, 4)
                .warmUpMillis(0).pixels(3136, 50176).set(NodeConfig.MAX_IMAGES, 1);
    }

    /** The embedded zero-copy service's digests of each rank's first {@code steps} batches, for the same options. */
    static List<List<String>> embedded(int ranks, int steps, String name) throws Exception {
        var config = job(ranks).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1).steps(steps).build();
        var out = new ArrayList<List<String>>();
        try (var factory = NodeFeeds.open(config); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve(name + ".sock"), service, false)) {
            for (int r = 0; r < ranks; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, ranks, "ref", TrainerClient.Options.SHARED_MEMORY)) {
                    out.add(take(c, steps));
                }
        }
        return out;
    }

    static int freePort() throws Exception {
        try (var s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /** Starts {@code n} node processes (the first is the seed); returns their sockets. */
    List<Path> nodes(int n, int seedPort, int slots) throws Exception { return nodes(n, seedPort, slots, 10_000); }

    /**
     * {@link #nodes(int, int, int)} with nodes marked unreachable after {@code heartbeatPauseMillis} without a heartbeat:
     * short only where a test kills a node (four JVMs share two cores here, and a busy one may miss beats).
     */
    List<Path> nodes(int n, int seedPort, int slots, long heartbeatPauseMillis) throws Exception {
        var sockets = new ArrayList<Path>();
        for (int i = 0; i < n; i++) {
            Path sock = tmp.resolve("n" + i + "-" + seedPort + ".sock");
            var p = node(nodeLog(i, seedPort, ""), sock, seedPort, i == 0 ? seedPort : 0, slots, heartbeatPauseMillis);
            children.add(p);
            sockets.add(sock);
            if (i == 0) ServeProcess.awaitLine(p, nodeLog(i, seedPort, ""), "stoker node: listening on ");
        }
        for (int i = 0; i < n; i++) addresses.add(awaitNode(children.get(i), nodeLog(i, seedPort, "")));
        return sockets;
    }

    static Path nodeLog(int i, int seedPort, String run) { return tmp.resolve("node" + i + "-" + seedPort + run + ".log"); }

    /** A {@code stoker node} process bound to {@code bindPort} (0: any), joining through the seed, serving trainers on {@code socket}. */
    static Process node(Path log, Path socket, int seedPort, int bindPort, int slots, long heartbeatPauseMillis) throws Exception {
        return ServeProcess.start(log, "512m", "node", List.of("--join", "127.0.0.1:" + seedPort,
                "--bind", "127.0.0.1:" + bindPort, "--slots", "" + slots, "--socket", socket.toString(),
                "--node-shm-budget", "512M", "--heartbeat-pause-ms", "" + heartbeatPauseMillis, "--down-after-ms", "2000"));
    }

    /** Waits until the node listens; its cluster address. */
    static String awaitNode(Process p, Path log) throws Exception {
        String text = ServeProcess.awaitLine(p, log, "stoker node: listening on ");
        var m = java.util.regex.Pattern.compile("up as (pekko://\\S+),").matcher(text);
        assertTrue(m.find(), text);
        return m.group(1);
    }

    /** A coordinator in this JVM: a member with no slots, running the job over {@code nodes} worker nodes. */
    ClusterJob coordinator(int seedPort, int ranks, int nodes, Placement placement, int workers, int steps) throws Exception {
        return runJob(coordinatorNode(seedPort, 10_000), "t" + seedPort, ranks, nodes, placement, workers, steps);
    }

    /** A member in this JVM with no slots, for coordinating jobs; it sees a node unreachable after {@code heartbeatPauseMillis}. */
    ClusterNode coordinatorNode(int seedPort, long heartbeatPauseMillis) throws Exception {
        var store = ShmObjectStore.open(new StoreConfig(Files.createDirectories(tmp.resolve("shm")), 64L << 20, "coord"));
        closing.add(store);
        var node = ClusterNode.start(ClusterNode.Options.of("127.0.0.1", 0, List.of("127.0.0.1:" + seedPort), 0)
                .withTimings(Duration.ofSeconds(2), Duration.ofMillis(heartbeatPauseMillis)), store);
        closing.add(node);
        assertTrue(node.awaitUp(Duration.ofSeconds(60)), "the coordinator joined the cluster");
        closingNode = node;
        return node;
    }

    /** Job {@code name} over {@code nodes} worker nodes, coordinated by {@code node}; closed after the test. */
    ClusterJob runJob(ClusterNode node, String name, int ranks, int nodes, Placement placement, int workers, int steps) throws Exception {
        var job = node.runJob(new ClusterJob.Spec(name, job(ranks).build().toJson(), nodes, placement, workers, steps, 2), Duration.ofMinutes(3));
        closing.add(job);
        return job;
    }

    ClusterNode closingNode;

    /** Rank r reads {@code steps} batches from its node's socket, waiting {@code pause} between them; digests in order. */
    static CompletableFuture<List<String>> trainer(Path socket, int rank, int world, int steps, long pauseMillis, AtomicLong progress,
                                                   long[] maxWaitNanos) {
        return CompletableFuture.supplyAsync(() -> {
            try (var c = TrainerClient.connect(socket, rank, world, "t", TrainerClient.Options.SHARED_MEMORY)) {
                var out = new ArrayList<String>();
                for (int s = 0; s < steps; s++) {
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
                throw new java.util.concurrent.CompletionException(e);
            }
        }, r -> Thread.ofPlatform().daemon(true).start(r));
    }

    @Test
    void threeNodesYieldTheEmbeddedBatchesAndRanksPullFromTheOwner() throws Exception {
        int ranks = 3, steps = 6;
        var reference = embedded(ranks, steps, "ref3");
        int seed = freePort();
        var sockets = nodes(3, seed, 2);
        var job = coordinator(seed, ranks, 3, Placement.SPREAD, 3, steps);
        assertEquals(3, job.workerNodes().stream().distinct().count(), "spread: one worker per node " + job.workerNodes());

        var trainers = new ArrayList<CompletableFuture<List<String>>>();
        var progress = new AtomicLong();
        for (int r = 0; r < ranks; r++) trainers.add(trainer(sockets.get(r), r, ranks, steps, 0, progress, new long[1]));
        for (int r = 0; r < ranks; r++) assertEquals(reference.get(r), trainers.get(r).get(180, TimeUnit.SECONDS), "rank " + r + "'s batches");

        // where the bytes went: each batch either leased on its owner (the rank's node made it) or pulled once from the owner
        List<NodeProtocol.NodeStats> stats = job.nodeStats();
        var coordinatorStats = closingNode.stats();
        assertEquals(0, coordinatorStats.flightBytesSent(), "nothing is sent by the coordinator");
        assertEquals(0, coordinatorStats.pulledBytes(), "nothing passes through the coordinator");
        assertEquals(0, coordinatorStats.produced());
        long produced = 0, sent = 0, pulled = 0, local = 0, sentBatches = 0, pulledBatches = 0;
        for (var s : stats) {
            produced += s.produced();
            sent += s.flightBytesSent();
            sentBatches += s.flightBatchesSent();
            pulled += s.pulledBytes();
            pulledBatches += s.pulledBatches();
            local += s.localHandOuts();
        }
        assertEquals((long) ranks * steps, local + pulledBatches, "every batch reached its rank once: leased locally or pulled " + stats);
        assertEquals(sentBatches, pulledBatches, "each pull is one DoGet served by the owner " + stats);
        assertTrue(pulledBatches > 0 && local > 0, "spread over 3 nodes gives both local and remote batches " + stats);
        assertTrue(produced >= (long) ranks * steps, "the nodes made every batch " + stats);
        assertTrue(pulled >= sent && pulled - sent <= pulledBatches * 4096L, "pulled = sent payload + layout headers " + stats);
        assertEquals(0, job.redone());
    }

    @Test
    void packPutsEveryWorkerOnTheFirstNode() throws Exception {
        int ranks = 2, steps = 3;
        var reference = embedded(ranks, steps, "refpack");
        int seed = freePort();
        var sockets = nodes(2, seed, 2);
        var job = coordinator(seed, ranks, 2, Placement.PACK, 2, steps);
        assertEquals(1, job.workerNodes().stream().distinct().count(), "pack: both workers on one node " + job.workerNodes());
        assertEquals(job.nodes().getFirst().address(), job.workerNodes().getFirst());
        var progress = new AtomicLong();
        var t0 = trainer(sockets.get(0), 0, ranks, steps, 0, progress, new long[1]);
        var t1 = trainer(sockets.get(1), 1, ranks, steps, 0, progress, new long[1]);
        assertEquals(reference.get(0), t0.get(180, TimeUnit.SECONDS));
        assertEquals(reference.get(1), t1.get(180, TimeUnit.SECONDS));
        var stats = job.nodeStats();
        var byAddress = new java.util.HashMap<String, NodeProtocol.NodeStats>();
        for (var s : stats) byAddress.put(s.address(), s);
        var owner = byAddress.get(job.workerNodes().getFirst());
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
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(PythonClientTest.PYTHON)), "no /usr/bin/python3");
        int ranks = 2, steps = 4;
        var reference = embedded(ranks, steps, "refpy");
        int seed = freePort();
        var sockets = nodes(2, seed, 1);
        coordinator(seed, ranks, 2, Placement.SPREAD, 2, steps);
        try (var live = TrainerClient.connect(sockets.get(1), 1, ranks, "t", TrainerClient.Options.SHARED_MEMORY)) {
            assertEquals(reference.get(1).subList(0, 1), take(live, 1));
            var twice = python(List.of("expect-error", "--socket", sockets.get(1).toString(), "--world", "" + ranks, "--rank", "1"), 0);
            assertEquals("StokerError", twice.get("error_type").asText(), twice.toString());
            assertTrue(twice.get("message").asText().startsWith("rank 1 is already being fed to a trainer on another, open connection"),
                    twice.toString());

            Path state = tmp.resolve("py-cluster-" + seed + ".json");
            var first = python(sockets.get(0), ranks, 2, List.of("--state-out", state.toString(), "--then-die", "1")); // SIGKILLed
            assertEquals(reference.get(0).subList(0, 3), strings(first.get("digests")));
            var second = python(sockets.get(0), ranks, steps - 2, List.of("--state-in", state.toString()));
            assertEquals(reference.get(0).subList(2, steps), strings(second.get("digests")), "rank 0 resumed from its checkpoint, exactly");
            assertEquals(reference.get(1).subList(1, steps), take(live, steps - 1), "rank 1's live Java trainer: nothing taken from it");
        }
    }

    /** fetch_batches.py take of rank 0 on {@code socket}; its last line's JSON. */
    static com.fasterxml.jackson.databind.JsonNode python(Path socket, int world, int steps, List<String> extra) throws Exception {
        var args = new ArrayList<>(List.of("take", "--socket", socket.toString(), "--world", "" + world, "--rank", "0", "--steps", "" + steps));
        args.addAll(extra);
        return python(args, extra.contains("--then-die") ? 128 + 9 : 0);
    }

    /** fetch_batches.py with {@code args} (job "t"), expected to exit with {@code status}; its last line's JSON. */
    static com.fasterxml.jackson.databind.JsonNode python(List<String> args, int status) throws Exception {
        var cmd = new ArrayList<>(List.of(PythonClientTest.PYTHON, Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py")
                .toString()));
        cmd.addAll(args);
        cmd.addAll(List.of("--job", "t"));
        var p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(status, p.exitValue(), out);
        var lines = out.strip().split("\n");
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
    }

    @Test
    void aNodeKilledMidEpochHasItsWorkRedoneWithNothingLostOrRepeated() throws Exception {
        int ranks = 2, steps = 12;
        var reference = embedded(ranks, steps, "refkill");
        int seed = freePort();
        var sockets = nodes(3, seed, 1, 3000);
        var job = coordinator(seed, ranks, 3, Placement.SPREAD, 3, steps);
        String victim = addresses.get(1); // the second node: the ranks sit on the first and the third
        assertTrue(job.workerNodes().contains(victim), "spread gives every node a worker " + job.workerNodes());

        var progress = new AtomicLong();
        long[] wait0 = new long[1], wait1 = new long[1];
        var t0 = trainer(sockets.get(0), 0, ranks, steps, 150, progress, wait0);
        var t1 = trainer(sockets.get(2), 1, ranks, steps, 150, progress, wait1);
        while (progress.get() < 4) Thread.sleep(20);
        children.get(1).destroyForcibly(); // SIGKILL: no goodbye to the cluster
        assertTrue(children.get(1).waitFor(10, TimeUnit.SECONDS));

        assertEquals(reference.get(0), t0.get(240, TimeUnit.SECONDS), "rank 0: every batch, in order, none twice");
        assertEquals(reference.get(1), t1.get(240, TimeUnit.SECONDS), "rank 1: every batch, in order, none twice");
        assertTrue(job.deadNodes().contains(victim), "the killed node was given up on: " + job.deadNodes());
        assertTrue(job.redone() > 0, "its batches were made again elsewhere: " + job.summary());
        assertTrue(job.workerNodes().stream().noneMatch(victim::equals), "its worker moved: " + job.workerNodes());
        @SuppressWarnings("unchecked")
        var perRank = (List<Map<String, Object>>) job.summary().get("ranks");
        for (var r : perRank) assertEquals((long) steps, r.get("batches"), "batches handed out " + r);
        System.out.printf("ClusterTest: longest wait after the kill: rank 0 %.2f s, rank 1 %.2f s%n", wait0[0] / 1e9, wait1[0] / 1e9);
    }

    /**
     * Audit #16: a node that cannot be heard for longer than {@code --heartbeat-pause-ms} + {@code --down-after-ms} (its
     * JVM stopped with SIGSTOP) is downed and removed; resumed (SIGCONT) it exits with an error saying so rather than linger
     * as a member nobody hears. Started again on the same host and port it joins anew: the next job places a worker on it
     * and feeds its trainer exactly the embedded service's batches (the job it was downed in gave up on it).
     */
    @Test
    void aNodeDownedWhileStoppedExitsWhenResumedAndOneStartedAgainServesTheNextJob() throws Exception {
        int ranks = 2, steps = 3;
        long pauseMillis = 3000;
        var reference = embedded(ranks, steps, "refdown");
        int seed = freePort(), port1 = freePort();
        Path sock0 = tmp.resolve("d0-" + seed + ".sock"), sock1 = tmp.resolve("d1-" + seed + ".sock");
        children.add(node(nodeLog(0, seed, ""), sock0, seed, seed, 1, pauseMillis));
        ServeProcess.awaitLine(children.get(0), nodeLog(0, seed, ""), "stoker node: listening on ");
        children.add(node(nodeLog(1, seed, ""), sock1, seed, port1, 1, pauseMillis));
        String victim = awaitNode(children.get(1), nodeLog(1, seed, ""));
        var coordinator = coordinatorNode(seed, pauseMillis);
        var first = runJob(coordinator, "t" + seed, ranks, 2, Placement.SPREAD, 2, steps);
        var progress = new AtomicLong();
        var t0 = trainer(sock0, 0, ranks, steps, 0, progress, new long[1]);
        var t1 = trainer(sock1, 1, ranks, steps, 0, progress, new long[1]);
        assertEquals(reference.get(0), t0.get(180, TimeUnit.SECONDS));
        assertEquals(reference.get(1), t1.get(180, TimeUnit.SECONDS));

        var stopped = children.get(1);
        long t = System.nanoTime();
        signal("STOP", stopped);
        while (coordinator.members().containsKey(victim)) { // unreachable, downed by the majority's leader, removed
            assertTrue(System.nanoTime() - t < TimeUnit.SECONDS.toNanos(60), "still a member 60 s after SIGSTOP: " + coordinator.members());
            Thread.sleep(100);
        }
        double removedAfter = (System.nanoTime() - t) / 1e9;
        assertTrue(first.deadNodes().contains(victim), "the running job gave up on it: " + first.deadNodes());
        t = System.nanoTime();
        signal("CONT", stopped);
        assertTrue(stopped.waitFor(60, TimeUnit.SECONDS), "the resumed node exits: " + Files.readString(nodeLog(1, seed, "")));
        double exitedAfter = (System.nanoTime() - t) / 1e9;
        String log = Files.readString(nodeLog(1, seed, ""));
        assertEquals(1, stopped.exitValue(), log);
        assertTrue(log.contains("this node was removed from the cluster (downed after it was unreachable)"), log);
        System.out.printf("ClusterTest: a stopped node was removed %.1f s after SIGSTOP and exited %.1f s after SIGCONT%n",
                removedAfter, exitedAfter);

        children.add(node(nodeLog(1, seed, "-again"), sock1, seed, port1, 1, pauseMillis)); // as a supervisor starts it again
        assertEquals(victim, awaitNode(children.getLast(), nodeLog(1, seed, "-again")), "the same host and port");
        first.close();
        var next = runJob(coordinator, "t" + seed + "-next", ranks, 2, Placement.SPREAD, 2, steps);
        assertTrue(next.workerNodes().contains(victim), "the next job places a worker on the node started again: " + next.workerNodes());
        var n0 = trainer(sock0, 0, ranks, steps, 0, progress, new long[1]);
        var n1 = trainer(sock1, 1, ranks, steps, 0, progress, new long[1]);
        assertEquals(reference.get(0), n0.get(180, TimeUnit.SECONDS));
        assertEquals(reference.get(1), n1.get(180, TimeUnit.SECONDS), "the node started again feeds its rank exactly");
    }

    /**
     * Two members (a coordinator and one node) have no majority, and keep-majority keeps the side with the lower address.
     * The node, of lower address, stopped (SIGSTOP) past the down time: the healthy coordinator downs itself, and exits
     * with an error saying so rather than linger with a job no node serves any more (docs/cluster.md, "Split brain").
     */
    @Test
    void withTwoMembersACoordinatorDownedByItsStoppedNodeExitsWithAClearError() throws Exception {
        int a = freePort(), b = freePort();
        int nodePort = Math.min(a, b), coordinatorPort = Math.max(a, b);
        Path sock = tmp.resolve("two-" + nodePort + ".sock");
        var node = node(nodeLog(0, nodePort, ""), sock, nodePort, nodePort, 1, 3000);
        children.add(node);
        awaitNode(node, nodeLog(0, nodePort, ""));
        var coordinator = coordinatorProcess(nodePort, coordinatorPort, 1, 1, 2, tmp.resolve("two-coord-" + nodePort + ".sock"), "1");
        long t = System.nanoTime();
        signal("STOP", node);
        try {
            assertTrue(coordinator.waitFor(60, TimeUnit.SECONDS), "the downed coordinator exits");
            String log = Files.readString(tmp.resolve("coord-" + nodePort + "-1.log"));
            assertEquals(1, coordinator.exitValue(), log);
            assertTrue(log.contains("this node, the job's coordinator, was removed from the cluster"), log);
            System.out.printf("ClusterTest: two members, the node stopped: the coordinator downed itself and exited %.1f s after%n",
                    (System.nanoTime() - t) / 1e9);
        } finally {
            signal("CONT", node);
        }
    }

    /** Sends {@code SIG<name>} to the child's JVM. */
    static void signal(String name, Process p) throws Exception {
        var kill = new ProcessBuilder("kill", "-" + name, "" + p.pid()).inheritIO().start();
        assertTrue(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0, "kill -" + name + " " + p.pid());
    }

    /**
     * A cluster trainer behind the same ledger as a local one: a reconnect from a saved state gets
     * the rest of its batches exactly (the one that arrived after the state again), and a second
     * claim of a live rank is refused with the rank's name while the live trainer goes on.
     */
    @Test
    void aClusterTrainerResumesFromItsStateAndASecondClaimOfItsRankIsRefused() throws Exception {
        int ranks = 2, steps = 8;
        var reference = embedded(ranks, steps, "refresume");
        int seed = freePort();
        var sockets = nodes(2, seed, 1);
        coordinator(seed, ranks, 2, Placement.SPREAD, 2, steps);
        var other = trainer(sockets.get(1), 1, ranks, steps, 0, new AtomicLong(), new long[1]);
        TrainerClient.State saved;
        try (var c = TrainerClient.connect(sockets.get(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY)) {
            assertEquals(reference.get(0).subList(0, 3), take(c, 3));
            saved = c.state();
            var e = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class,
                    () -> TrainerClient.connect(sockets.get(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY));
            assertTrue(e.getMessage().contains("rank 0 is already being fed"), e.getMessage());
            assertEquals(reference.get(0).get(3), take(c, 1).getFirst()); // arrived; the trainer dies before its next checkpoint
        }
        try (var c = TrainerClient.connect(sockets.get(0), 0, ranks, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved))) {
            assertEquals(reference.get(0).subList(3, steps), take(c, steps - 3), "resumed: every batch after the state, none twice");
        }
        assertEquals(reference.get(1), other.get(180, TimeUnit.SECONDS));
    }

    /**
     * Every trainer restarted from an older checkpoint (an elastic restart: all ranks stopped, each
     * resumes from the same saved state, batches after it already confirmed): the job moves back
     * once no node has a trainer connected, and every rank gets exactly what followed the checkpoint.
     */
    @Test
    void clusterTrainersRestartedFromAnOlderCheckpointMoveTheJobBack() throws Exception {
        int ranks = 2, steps = 8;
        var reference = embedded(ranks, steps, "refback");
        int seed = freePort();
        var sockets = nodes(2, seed, 1);
        coordinator(seed, ranks, 2, Placement.SPREAD, 2, steps);
        var saved = new TrainerClient.State[ranks];
        var clients = new ArrayList<TrainerClient>();
        for (int r = 0; r < ranks; r++) {
            var c = TrainerClient.connect(sockets.get(r), r, ranks, "t", TrainerClient.Options.SHARED_MEMORY);
            clients.add(c);
            assertEquals(reference.get(r).subList(0, 2), take(c, 2));
            saved[r] = c.state(); // the checkpoint
        }
        for (int r = 0; r < ranks; r++) assertEquals(reference.get(r).subList(2, 4), take(clients.get(r), 2)); // trained on, then all crash
        for (var c : clients) c.close();
        var resumed = new ArrayList<CompletableFuture<List<String>>>();
        for (int r = 0; r < ranks; r++) resumed.add(resumedTrainer(sockets.get(r), r, ranks, saved[r], steps - 2));
        for (int r = 0; r < ranks; r++)
            assertEquals(reference.get(r).subList(2, steps), resumed.get(r).get(180, TimeUnit.SECONDS), "rank " + r + " from the checkpoint");
    }

    /**
     * The coordinator killed with SIGKILL: every trainer gets an error within 10 s (its nodes see the
     * coordinator unreachable and end the job); a coordinator started again opens the job afresh on
     * every node, and the trainers resume into it from their saved states, exactly.
     */
    @Test
    void aKilledCoordinatorFailsItsTrainersQuicklyAndARestartedOneResumesThemExactly() throws Exception {
        int ranks = 2, steps = 8;
        var reference = embedded(ranks, steps, "refcoord");
        int seed = freePort();
        var sockets = nodes(2, seed, 1, 4000);
        Path coordSocket = tmp.resolve("coord-" + seed + ".sock");
        var coordinator = coordinatorProcess(seed, ranks, steps, coordSocket, "1");
        var saved = new TrainerClient.State[ranks];
        var clients = new ArrayList<TrainerClient>();
        for (int r = 0; r < ranks; r++) {
            var c = TrainerClient.connect(sockets.get(r), r, ranks, "t", TrainerClient.Options.SHARED_MEMORY);
            clients.add(c);
            assertEquals(reference.get(r).subList(0, 3), take(c, 3));
            saved[r] = c.state();
        }
        var failedAfter = new ArrayList<CompletableFuture<Long>>();
        long killed = System.nanoTime();
        coordinator.destroyForcibly();
        for (var c : clients)
            failedAfter.add(CompletableFuture.supplyAsync(() -> {
                try (c) {
                    while (true) c.next().close(); // what was pulled ahead still comes; then the error
                } catch (java.io.IOException e) {
                    return System.nanoTime() - killed;
                }
            }, r -> Thread.ofPlatform().daemon(true).start(r)));
        for (int r = 0; r < ranks; r++) {
            long nanos = failedAfter.get(r).get(60, TimeUnit.SECONDS);
            System.out.printf("ClusterTest: rank %d got its error %.2f s after the coordinator's SIGKILL%n", r, nanos / 1e9);
            assertTrue(nanos < TimeUnit.SECONDS.toNanos(10), "rank " + r + " failed after " + nanos / 1e9 + " s");
        }
        coordinatorProcess(seed, ranks, steps, coordSocket, "2"); // its stale socket is replaced
        var resumed = new ArrayList<CompletableFuture<List<String>>>();
        for (int r = 0; r < ranks; r++) resumed.add(resumedTrainer(sockets.get(r), r, ranks, saved[r], steps - 3));
        for (int r = 0; r < ranks; r++)
            assertEquals(reference.get(r).subList(3, steps), resumed.get(r).get(180, TimeUnit.SECONDS), "rank " + r + " resumed exactly");
    }

    /**
     * The whole cluster killed with SIGKILL (coordinator and nodes) after 3 steps of 2 ranks, then
     * started afresh with 3 nodes and 3 ranks: every new rank resumes from the saved state, and
     * gets exactly what the embedded service gives 3 ranks resumed there (the epoch's order goes on
     * over the new world, nothing lost or repeated). Rank 0 is the Python client both times, resumed
     * from its own state_dict(); the other ranks are Java trainers.
     */
    @Test
    void aWholeClusterKilledAndRestartedWithMoreRanksResumesExactly() throws Exception {
        boolean python = Files.isExecutable(Path.of(PythonClientTest.PYTHON));
        int steps = 6, after = 3;
        int seed = freePort();
        var sockets = nodes(2, seed, 1);
        var coordinator = coordinatorProcess(seed, 2, 0, tmp.resolve("whole-" + seed + ".sock"), "1");
        TrainerClient.State saved = null;
        Path pyState = tmp.resolve("py-whole-" + seed + ".json");
        var reference2 = embedded(2, after, "refwhole2");
        if (python) {
            var first = python(sockets.get(0), 2, after, List.of("--state-out", pyState.toString()));
            assertEquals(reference2.get(0), strings(first.get("digests")), "rank 0 of 2, Python");
        }
        for (int r = python ? 1 : 0; r < 2; r++)
            try (var c = TrainerClient.connect(sockets.get(r), r, 2, "t", TrainerClient.Options.SHARED_MEMORY)) {
                assertEquals(reference2.get(r), take(c, after));
                saved = c.state(); // every rank's state after the same step is the same global cursor
            }
        coordinator.destroyForcibly();
        for (var p : children) p.destroyForcibly();
        for (var p : children) assertTrue(p.waitFor(20, TimeUnit.SECONDS));
        children.clear();
        addresses.clear();

        var resumedAt = saved;
        var reference3 = embeddedFrom(3, steps, resumedAt, "refwhole3");
        int seed2 = freePort();
        var sockets3 = nodes(3, seed2, 1);
        coordinatorProcess(seed2, 3, 0, tmp.resolve("whole-" + seed2 + ".sock"), "2");
        var resumed = new ArrayList<CompletableFuture<List<String>>>();
        for (int r = python ? 1 : 0; r < 3; r++) resumed.add(resumedTrainer(sockets3.get(r), r, 3, resumedAt, steps));
        if (python) {
            var again = python(sockets3.get(0), 3, steps, List.of("--state-in", pyState.toString()));
            assertEquals(reference3.get(0), strings(again.get("digests")), "rank 0 of 3, Python, from its state saved with 2 ranks");
        }
        for (int r = python ? 1 : 0; r < 3; r++)
            assertEquals(reference3.get(r), resumed.get(r - (python ? 1 : 0)).get(180, TimeUnit.SECONDS), "rank " + r + " of 3");
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
                throw new java.util.concurrent.CompletionException(e);
            }
        }, x -> Thread.ofPlatform().daemon(true).start(x));
    }

    /** The embedded service's digests of {@code steps} batches per rank, every rank resumed from {@code state}. */
    static List<List<String>> embeddedFrom(int ranks, int steps, TrainerClient.State state, String name) throws Exception {
        var config = job(ranks).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1).build();
        var out = new ArrayList<List<String>>();
        try (var factory = NodeFeeds.open(config); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve(name + ".sock"), service, false)) {
            for (int r = 0; r < ranks; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, ranks, "ref", TrainerClient.Options.SHARED_MEMORY.resumingFrom(state))) {
                    out.add(take(c, steps));
                }
        }
        return out;
    }

    /** A coordinator as a child process ({@code serve --join}, no worker slots), for a test that kills it. */
    Process coordinatorProcess(int seedPort, int ranks, int steps, Path socket, String run) throws Exception {
        return coordinatorProcess(seedPort, 0, Math.max(2, ranks), ranks, steps, socket, run);
    }

    /** {@link #coordinatorProcess(int, int, int, Path, String)} bound to {@code bindPort} (0: any), over {@code nodes} worker nodes. */
    Process coordinatorProcess(int seedPort, int bindPort, int nodes, int ranks, int steps, Path socket, String run) throws Exception {
        Path log = tmp.resolve("coord-" + seedPort + "-" + run + ".log");
        var p = ServeProcess.start(log, "512m", "serve", List.of("--join", "127.0.0.1:" + seedPort, "--bind", "127.0.0.1:" + bindPort,
                "--slots", "0", "--nodes", "" + nodes, "--job", "t" + seedPort, "--data", manifest.toString(),
                "--ranks", "" + ranks, "--batch", "" + BATCH, "--seed", "99", "--threads", "1", "--fetch-concurrency", "4",
                "--workers", "" + nodes,
                "--warm-up-ms", "0", "--min-pixels", "3136", "--max-pixels", "50176", "--max-images", "1", "--steps", "" + steps,
                "--socket", socket.toString(),
                "--heartbeat-pause-ms", "4000", "--down-after-ms", "2000"));
        children.add(p);
        ServeProcess.awaitLine(p, log, "listening on ");
        return p;
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

    static List<String> strings(com.fasterxml.jackson.databind.JsonNode array) {
        var out = new ArrayList<String>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }
}
