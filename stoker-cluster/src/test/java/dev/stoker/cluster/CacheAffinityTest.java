package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cache.AffineCache;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.memory.RootAllocator;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cache's affinity on a cluster (issue 31 item 7): three worker members on loopback in this JVM, each with a cache
 * folder of its own (a node's own {@code --cache-dir}); the first one coordinates the jobs, one after the other. Rank r's
 * step s is made by worker (r + s) mod 3, one per node (spread), and each batch is taken over Flight from its maker. Job 1
 * fills the caches: what a node computes for an image homed elsewhere goes to that home. Job 2, another seed (another
 * epoch's order: most samples made on another node than in job 1), finds every image entry, at its maker or at its home,
 * and its batches are a local uncached service's bit for bit; job 3, the same with {@code --cache-affinity off}, finds only
 * what its makers happen to hold (about a third). Job 4 is packed, and a home stops in its middle: its entries are computed
 * by the makers, and the packs are still a local uncached service's bit for bit.
 */
@Tag("slow")
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class CacheAffinityTest {
    static final int SAMPLES = 24, RANKS = 2, BATCH = 2, NODES = 3;
    @TempDir Path tmp;

    /** The job's options as every node reads them: the data, the processor, the cache on. */
    static NodeConfig.Builder job(Path manifest, long seed) { return common(manifest, seed).batch(BATCH); }

    /** The same, packed: packs of at most 384 tokens a rank. */
    static NodeConfig.Builder packed(Path manifest, long seed) { return common(manifest, seed).packTokens(384); }

    private static NodeConfig.Builder common(Path manifest, long seed) {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).seed(seed).pixels(3136, 50176).threads(1).warmUpMillis(0)
                .set(NodeConfig.MAX_IMAGES, 1);
    }

    /** Job {@code name} of {@code options}, the cache on (1 GiB), over the three members: a worker on each, spread; {@code steps} a rank (0: no end). */
    static ClusterJob start(ClusterNode coordinator, String name, NodeConfig.Builder options, long steps) throws Exception {
        var config = options.set(NodeConfig.CACHE, true).set(NodeConfig.CACHE_BYTES, 1L << 30).build()
                .only(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));
        return coordinator.runJob(new ClusterJob.Spec(name, config.toJson(), NODES, Placement.SPREAD, NODES, steps, 2), Duration.ofSeconds(60));
    }

    /** As {@link #start}, over {@code nodes} members (a worker each). */
    static ClusterJob startOn(ClusterNode coordinator, String name, NodeConfig.Builder options, long steps, int nodes) throws Exception {
        var config = options.set(NodeConfig.CACHE, true).set(NodeConfig.CACHE_BYTES, 1L << 30).build()
                .only(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));
        return coordinator.runJob(new ClusterJob.Spec(name, config.toJson(), nodes, Placement.SPREAD, nodes, steps, 2), Duration.ofSeconds(60));
    }

    /**
     * {@code steps} steps of every rank of {@code job}, each batch asked of the coordinator as a rank's node asks it and taken
     * from its maker over Flight; {@code before} runs before each step. Their digests (every tensor) by "step/rank".
     */
    static Map<String, String> take(ClusterNode via, ClusterJob job, String name, int steps, java.util.function.IntConsumer before) {
        var out = new TreeMap<String, String>();
        var clients = new java.util.HashMap<String, FlightBatchClient>();
        try (var alloc = new RootAllocator()) {
            try {
                for (int s = 0; s < steps; s++) {
                    before.accept(s);
                    for (int r = 0; r < RANKS; r++) {
                        int rank = r;
                        var ref = AskPattern.<CoordinatorProtocol.Command, CoordinatorProtocol.BatchRef>ask(job.coordinator(),
                                x -> new CoordinatorProtocol.NextBatch(name, rank, 0, x), Duration.ofSeconds(60), via.system().scheduler())
                                .toCompletableFuture().join();
                        assertEquals(null, ref.error(), "step " + s + " of rank " + r);
                        var client = clients.computeIfAbsent(ref.flightHost() + ":" + ref.flightPort(),
                                e -> FlightBatchClient.connect(ref.flightHost(), ref.flightPort(), via.flightClientOptions(), alloc));
                        var batch = client.next(0, 1, name + "/" + ref.key());
                        out.put(ref.globalStep() + "/" + r, BatchDigest.of(batch));
                    }
                }
            } finally {
                clients.values().forEach(FlightBatchClient::close);
            }
        }
        return out;
    }

    /** The batches a local zero-copy service without the cache gives {@code config}'s ranks, {@code steps} each, by "step/rank". */
    Map<String, String> uncached(NodeConfig.Builder config, int steps, String name) throws Exception {
        var built = config.set(NodeConfig.CACHE, false).shmDir(Files.createDirectories(tmp.resolve("shm-local-" + name)))
                .shmBudgetBytes(256L << 20).build();
        var out = new TreeMap<String, String>();
        try (var factory = NodeFeeds.open(built); var service = factory.start(dev.stoker.pipeline.feed.FeedMode.ZERO_COPY, null);
             var server = new dev.stoker.transport.FeedServer(tmp.resolve("local-" + name + ".sock"), service, false)) {
            for (int r = 0; r < built.ranks(); r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, built.ranks(), name, TrainerClient.Options.SHARED_MEMORY)) {
                    for (int i = 0; i < steps; i++)
                        try (var got = c.next()) {
                            out.put(got.batch().meta().globalStep() + "/" + r, BatchDigest.of(got.batch()));
                        }
                }
        }
        return out;
    }

    /** The members' affinity counters now, added up (one reading of each). */
    static AffineCache.Stats stats(List<ClusterNode> members) {
        long[] t = new long[13];
        for (var m : members) {
            var s = m.cacheAffinityStats();
            if (s == null) continue;
            long[] v = {s.localHits(), s.localMisses(), s.remoteHits(), s.remoteMisses(), s.fallbacks(), s.fetchedBytes(), s.offered(),
                    s.outboxDropped(), s.taken(), s.takenBytes(), s.takeDropped(), s.served(), s.servedBytes()};
            for (int i = 0; i < t.length; i++) t[i] += v[i];
        }
        return new AffineCache.Stats(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12]);
    }

    /** Media reads that hit (locally or at the home) over all media reads, over the members; printed for the docs. */
    static double hitRate(String job, List<ClusterNode> members) {
        var s = stats(members);
        long reads = s.localHits() + s.localMisses() + s.remoteHits() + s.remoteMisses() + s.fallbacks();
        assertTrue(reads >= SAMPLES / 2, "the samples' images were read: " + s);
        System.err.printf(java.util.Locale.ROOT, "cache affinity, job %s: %d of %d media reads hit (%d at the maker, %d at their home), "
                + "%d fallbacks, %d bytes from homes%n", job, s.localHits() + s.remoteHits(), reads, s.localHits(), s.remoteHits(),
                s.fallbacks(), s.fetchedBytes());
        return s.hitRate();
    }

    /** Waits until every entry offered to a home was taken by it (or dropped), 30 s at most. */
    static void awaitTaken(List<ClusterNode> members) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        for (var s = stats(members); s.taken() + s.takeDropped() + s.outboxDropped() < s.offered(); s = stats(members)) {
            if (System.nanoTime() > deadline) throw new AssertionError("homes took " + s.taken() + " of " + s.offered() + " entries offered");
            Thread.sleep(20); // polling a condition under a deadline
        }
    }

    /** A member of the cluster of {@code seed} on {@code port} (0: any), a worker, its store and cache in folders of its own. */
    ClusterNode member(String name, int port, String seed, List<AutoCloseable> toClose) throws Exception {
        var store = ShmObjectStore.open(new dev.stoker.store.StoreConfig(Files.createDirectories(tmp.resolve("shm-" + name)), 256L << 20, name));
        synchronized (toClose) {
            toClose.add(store);
        }
        var node = ClusterNode.start(ClusterNode.Options.of("127.0.0.1", port, List.of(seed), 1), store);
        synchronized (toClose) {
            toClose.add(node);
        }
        node.useCacheDir(tmp.resolve("cache-" + name));
        assertTrue(node.awaitUp(Duration.ofSeconds(60)), name + " is up");
        return node;
    }

    /** Closes the members at once (each waits for its actor system to end), then their stores. */
    static void closeAll(List<AutoCloseable> toClose) throws Exception {
        var nodes = new ArrayList<Thread>();
        Exception[] failed = new Exception[1];
        for (var c : toClose)
            if (c instanceof ClusterNode n) nodes.add(Thread.ofPlatform().start(n::close));
        for (var t : nodes) t.join();
        for (var c : toClose)
            if (!(c instanceof ClusterNode))
                try {
                    c.close();
                } catch (Exception e) {
                    failed[0] = e;
                }
        if (failed[0] != null) throw failed[0];
    }

    /**
     * Video entries take the affinity path too: two worker members, eight samples of a video each (distinct clips made with
     * the ffmpeg CLI now). Job 1 (a worker on each) decodes every clip once and sends the frames of those homed on the other
     * node there: each node then holds exactly the clips homed on it. Job 2, another order, its one worker on the oldest member
     * (pack), finds every video entry — those homed on the other node at their home — and decodes none, and its batches —
     * {@code pixel_values_videos}, {@code video_grid_thw} and the rest — are a local uncached service's bit for bit.
     *
     * <p>The homes hash the members' names, which hold their ports (random each run): which clips are homed where, and so
     * how many a spread job makes away from their home, is the run's draw (all eight at their maker: 1 run in 256). The
     * counts are therefore checked against the homes of this run, read from the nodes' own counters, never a fixed split.
     */
    @Test
    void aVideosEntryIsFoundAtItsHomeInAnotherOrderAndTheBatchesStayExact() throws Exception {
        dev.stoker.testkit.FfmpegClips.require();
        Path ds = Files.createDirectories(tmp.resolve("videos"));
        int clips = 8;
        var lines = new StringBuilder();
        for (int i = 0; i < clips; i++) { // each clip its own length: its own frames, its own cache entry
            dev.stoker.testkit.FfmpegClips.h264(ds.resolve("c" + i + ".mp4"), "160x120", "10", 0.6 + 0.2 * i);
            lines.append("{\"id\": \"v").append(i).append("\", \"video\": \"c").append(i).append(".mp4\", \"conversations\": [{\"from\": ")
                    .append("\"human\", \"value\": \"<video>\\nWhat moves ").append(i).append("?\"}, {\"from\": \"gpt\", \"value\": ")
                    .append("\"Colours.\"}]}\n");
        }
        Path manifest = Files.writeString(ds.resolve("train.jsonl"), lines);
        java.util.function.LongFunction<NodeConfig.Builder> video = seed -> job(manifest, seed).set(NodeConfig.MAX_SEQ_LEN, 1024)
                .set(NodeConfig.VIDEO_DECODE, dev.stoker.encode.video.VideoEncoding.Decode.IN_PROCESS);
        int perEpoch = clips / (RANKS * BATCH);
        String seed = "127.0.0.1:" + TensorOrderTest.freePort();
        var toClose = new ArrayList<AutoCloseable>();
        try {
            var a = member("va", InProcessClusterTest.port(seed), seed, toClose);
            var b = member("vb", 0, seed, toClose);
            var members = List.of(a, b);
            long heldByA, heldByB;
            try (var job = startOn(a, "vwarm", video.apply(1), perEpoch, 2)) {
                take(a, job, "vwarm", perEpoch, s -> {});
                awaitTaken(members);
                var s = stats(members);
                var onA = a.cacheAffinityStats();
                var onB = b.cacheAffinityStats();
                assertEquals(clips, s.localMisses() + s.remoteMisses(), "job 1 decodes every clip once: " + s);
                // a clip made away from its home is a remote miss there, then offered to its home, which takes it
                assertEquals(onA.remoteMisses(), onA.offered(), "A offered every clip it made for B: " + onA);
                assertEquals(onB.remoteMisses(), onB.offered(), "B offered every clip it made for A: " + onB);
                assertEquals(onA.offered(), onB.taken(), "B took every clip homed on it that A made: " + onA + " " + onB);
                assertEquals(onB.offered(), onA.taken(), "A took every clip homed on it that B made: " + onA + " " + onB);
                assertEquals(0, s.takeDropped() + s.outboxDropped(), "no clip lost on its way home: " + s);
                heldByA = onA.localMisses() + onA.taken(); // made at home, or taken from the other node
                heldByB = onB.localMisses() + onB.taken();
                assertEquals(clips, heldByA + heldByB, "each clip is held by its home alone: " + onA + " " + onB);
            }
            // one worker, packed onto the oldest member (A): the clips homed on B are found there
            var config = video.apply(7).set(NodeConfig.CACHE, true).set(NodeConfig.CACHE_BYTES, 1L << 30).build()
                    .only(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));
            try (var job = a.runJob(new ClusterJob.Spec("vepoch2", config.toJson(), 2, Placement.PACK, 1, perEpoch, 2), Duration.ofSeconds(60))) {
                var got = take(a, job, "vepoch2", perEpoch, s -> {});
                var s = stats(members);
                var onA = a.cacheAffinityStats();
                System.err.printf("cache affinity, video job: %d of %d clips at the maker, %d at their home, %d bytes from homes%n",
                        s.localHits(), clips, s.remoteHits(), s.fetchedBytes());
                assertEquals(clips, s.localHits() + s.remoteHits(), "every clip's frames found: " + s);
                assertEquals(0, s.localMisses() + s.remoteMisses() + s.fallbacks(), "no clip decoded again: " + s);
                assertEquals(heldByA, onA.localHits(), "A, the only maker, found the clips homed on it in its own cache: " + onA);
                assertEquals(heldByB, onA.remoteHits(), "and every clip homed on B at B: " + onA);
                assertEquals(heldByB > 0, onA.fetchedBytes() > 0, "the frames of the clips homed on B came from B: " + onA);
                var expected = uncached(video.apply(7), perEpoch, "vepoch2");
                assertEquals(expected, got, "cached video batches are uncached ones, bit for bit");
            }
        } finally {
            closeAll(toClose);
        }
    }

    /**
     * A home that stops answering in a running job while the coordinator still names it home (it stays a member and goes on
     * making its batches; only its cache's Flight actions hang, as a node whose cache disk stalls): the other node's fetches
     * of the entries homed there end at the 5 s deadline as counted fallbacks (the home is then down while its probes hang), the
     * maker decodes those images itself, nothing is missed or taken wrong, and the batches are an uncached service's bit for bit.
     *
     * <p>The home that goes silent is the first one asked for an entry in epoch two, from that ask on (both members answer
     * until then): which node needs which other's entries, and when, is the draw of the homes (the members' names hold their
     * random ports) and of the task split, so a fixed node silenced at a fixed step can find every ask already answered — the
     * worker prefetches — or none to make. Here the silent home's first ask is always one that hangs; no ask at all would need
     * every sample of each node homed on itself (about 2^-20).
     */
    @Test
    void aHomeThatStopsAnsweringMidJobIsACountedFallbackAndTheBatchesStayExact() throws Exception {
        int samples = 24;
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("fds"), samples, 3);
        int perEpoch = samples / (RANKS * BATCH);
        String seed = "127.0.0.1:" + TensorOrderTest.freePort();
        var toClose = new ArrayList<AutoCloseable>();
        var release = new java.util.concurrent.CountDownLatch(1);
        try {
            var a = member("fa", InProcessClusterTest.port(seed), seed, toClose);
            var b = member("fb", 0, seed, toClose);
            var members = List.of(a, b);
            try (var job = startOn(a, "fwarm", job(manifest, 1), perEpoch, 2)) {
                take(a, job, "fwarm", perEpoch, s -> {});
                awaitTaken(members);
            }
            var silent = new java.util.concurrent.atomic.AtomicReference<ClusterNode>();
            var hanging = new java.util.concurrent.atomic.AtomicInteger();
            for (var node : members) {
                var answering = node.cacheActions();
                node.flightServer().serveActions((type, body, results) -> {
                    if (type.equals(CacheAffinity.GET)) silent.compareAndSet(null, node); // the first home asked for an entry
                    if (silent.get() != node) return answering.answer(type, body, results);
                    hanging.incrementAndGet();
                    try {
                        release.await(60, TimeUnit.SECONDS); // hangs past every deadline of the asker, until the test ends
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    return true;
                });
            }
            try (var job = startOn(a, "fepoch2", job(manifest, 2), perEpoch, 2)) {
                var got = take(a, job, "fepoch2", perEpoch, s -> {});
                var s = stats(members);
                assertTrue(silent.get() != null, "a home was asked for an entry: " + s);
                var asker = silent.get() == a ? b : a;
                var onAsker = asker.cacheAffinityStats();
                long reads = s.localHits() + s.localMisses() + s.remoteHits() + s.remoteMisses() + s.fallbacks();
                System.err.printf("cache affinity, a home that stops answering: %d fallbacks, %d hits of %d reads (%d asks hung)%n",
                        s.fallbacks(), s.localHits() + s.remoteHits(), reads, hanging.get());
                assertTrue(onAsker.fallbacks() > 0 && hanging.get() > 0, "the asker asked its silent home and fell back: " + onAsker);
                assertEquals(0, s.localMisses() + s.remoteMisses(), "every entry was there to find: " + s);
                assertEquals(reads, s.localHits() + s.remoteHits() + s.fallbacks(), s.toString());
                assertEquals(2, job.nodes().size(), "the coordinator still names both nodes: " + job.nodes());
                assertEquals(uncached(job(manifest, 2), perEpoch, "fepoch2"), got, "the batches are uncached ones, bit for bit");
            }
        } finally {
            release.countDown();
            closeAll(toClose);
        }
    }

    @Test
    void inEpochTwoEveryNodeFindsEveryImageAtItsHomeAndBatchesAndPacksStayExactThroughAHomesLoss() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        int perEpoch = SAMPLES / (RANKS * BATCH);
        String seed = "127.0.0.1:" + TensorOrderTest.freePort();
        var toClose = new ArrayList<AutoCloseable>();
        try {
            var a = member("a", InProcessClusterTest.port(seed), seed, toClose);
            // the other two join at once (a join takes seconds)
            var joining = java.util.concurrent.Executors.newFixedThreadPool(2);
            ClusterNode b, d;
            try {
                var fb = joining.submit(() -> member("b", 0, seed, toClose));
                var fd = joining.submit(() -> member("d", 0, seed, toClose));
                b = fb.get();
                d = fd.get();
            } finally {
                joining.shutdown();
            }
            var members = List.of(a, b, d);

            // job 1: the caches are cold; what a node computes for an image homed elsewhere goes to that home
            try (var job = start(a, "warm", job(manifest, 1), perEpoch)) {
                take(a, job, "warm", perEpoch, s -> {});
                awaitTaken(members);
                var s = stats(members);
                assertTrue(s.offered() > 0, "some images were made on another node than their home: " + s);
                assertEquals(0, s.takeDropped() + s.outboxDropped(), "no entry lost on its way home: " + s);
                assertEquals(0, s.localHits() + s.remoteHits(), "cold caches hit nothing: " + s);
            }

            // job 2, another order: every image found, at its maker or its home; the batches exact
            try (var job = start(a, "epoch2", job(manifest, 2), perEpoch)) {
                var got = take(a, job, "epoch2", perEpoch, s -> {});
                double rate = hitRate("epoch2", members);
                var s = stats(members);
                assertTrue(rate >= 0.95, "with affinity: hit rate " + rate + " " + s);
                assertTrue(s.remoteHits() > 0 && s.fetchedBytes() > 0 && s.served() >= s.remoteHits(), "entries came from their homes: " + s);
                assertEquals(0, s.fallbacks());
                var asked = job.nodeStats(); // what the coordinator's metrics show: each node's figures, asked over the cluster
                assertEquals(NODES, asked.size(), "every node answered: " + asked);
                long remote = 0;
                for (var n : asked) remote += n.cacheAffinity().remoteHits();
                assertEquals(s.remoteHits(), remote, "the coordinator's figures are the nodes': " + asked);
                var summed = ClusteredNode.cacheAffinity(asked); // serve --join's metrics
                assertEquals(s.remoteHits(), summed.get("remoteHits"));
                assertEquals(s.hitRate(), (Double) summed.get("hit_rate"), 1e-9);
                // the report renders them as serve --join --report-dir writes them (job-pipeline.json: nodes, cache_affinity)
                Path reportDir = Files.createDirectories(tmp.resolve("report"));
                dev.stoker.core.io.AtomicFiles.writeJson(reportDir.resolve("job-pipeline.json"), Map.of("nodes", asked, "cache_affinity", summed));
                String html = dev.stoker.report.RunReport.render(dev.stoker.report.RunData.load(reportDir));
                String table = html.substring(html.indexOf("<table id=\"cache-affinity-table\">"));
                table = table.substring(0, table.indexOf("</table>"));
                for (var n : asked) assertTrue(table.contains("<td>" + n.address() + "</td>"), "a row per node: " + table);
                assertTrue(table.contains("<td>all nodes</td><td>" + summed.get("localHits") + " / " + summed.get("localMisses") + "</td><td>"
                        + summed.get("remoteHits") + " / " + summed.get("remoteMisses") + "</td><td>0</td><td>"
                        + String.format(java.util.Locale.ROOT, "%.1f%%", 100 * (Double) summed.get("hit_rate")) + "</td>"), table);
                assertEquals(uncached(job(manifest, 2), perEpoch, "epoch2"), got, "cached batches are uncached ones, bit for bit");
            }

            // job 3, affinity off: a node finds only the entries homed on it (about a third)
            try (var job = start(a, "off", job(manifest, 3).set(NodeConfig.CACHE_AFFINITY, false), perEpoch)) {
                take(a, job, "off", perEpoch, s -> {});
                double rate = hitRate("off", members);
                var s = stats(members);
                assertTrue(rate < 0.7, "without affinity: hit rate " + rate + " " + s);
                assertEquals(0, s.remoteHits() + s.offered() + s.fallbacks(), "nothing asked of another node: " + s);
            }

            // job 4, packed: a home stops after the first steps; the makers compute its entries, the packs exact
            int steps = 6;
            try (var job = start(a, "packed", packed(manifest, 4), 0)) {
                var got = take(a, job, "packed", steps, s -> {
                    if (s == 2) { // D's entries go with it; its batches are made again elsewhere
                        synchronized (toClose) {
                            toClose.remove(d);
                        }
                        d.close();
                    }
                });
                double rate = hitRate("packed", List.of(a, b));
                assertTrue(rate > 0.3, "the live homes' entries still hit: " + stats(List.of(a, b)));
                assertEquals(uncached(packed(manifest, 4), steps, "packed"), got, "cached packs are uncached ones, bit for bit, through a home's loss");
            }
        } finally {
            closeAll(toClose);
        }
    }
}
