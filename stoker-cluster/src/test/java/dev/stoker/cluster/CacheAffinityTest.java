package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.node.StokerNode;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cache's affinity on a cluster (issue 31 item 7): three worker members on loopback in this JVM, each with a cache
 * folder of its own (a node's own {@code --cache-dir}), and a coordinator without workers that runs one job after the
 * other over them. Job 1 fills the caches; its entries go to their homes, whichever node made the batch. Job 2, another
 * seed (another epoch's order: each sample made on another node than in job 1), finds nearly every image entry, locally or
 * at its home, and its batches are a local uncached service's bit for bit; job 3, the same with {@code --cache-affinity
 * off}, finds only what its makers happen to hold (about a third). Job 4 is packed, and a home is stopped in the middle of
 * it: the makers compute what it held, and the packs are still a local uncached service's bit for bit.
 */
@Tag("slow")
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class CacheAffinityTest {
    static final int SAMPLES = 24, RANKS = 2, BATCH = 2;
    @TempDir Path tmp;

    static String loopback() throws Exception { return "127.0.0.1:" + CoordinatorTimingsTest.freePort(); }

    /** The job's options as every node reads them: the data, the processor, the cache on. */
    static NodeConfig.Builder job(Path manifest, long seed) { return common(manifest, seed).batch(BATCH); }

    /** The same, packed: packs of at most 384 tokens a rank. */
    static NodeConfig.Builder packed(Path manifest, long seed) { return common(manifest, seed).packTokens(384); }

    private static NodeConfig.Builder common(Path manifest, long seed) {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).seed(seed).pixels(3136, 50176).threads(1).warmUpMillis(0)
                .set(NodeConfig.MAX_IMAGES, 1);
    }

    /** {@code base} as a member of the cluster of {@code seed}, on {@code self}, with {@code slots} workers, its cache in a folder of its own. */
    NodeConfig.Builder member(NodeConfig.Builder base, String seed, String self, int slots, String name) throws Exception {
        return base.set(NodeConfig.JOIN, List.of(seed)).set(NodeConfig.BIND, self).set(NodeConfig.SLOTS, slots)
                .set(NodeConfig.HEARTBEAT_PAUSE_MS, 3000L).set(NodeConfig.DOWN_AFTER_MS, 2000L)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-" + name))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .set(NodeConfig.CACHE_DIR, tmp.resolve("cache-" + name)).socket(tmp.resolve(name + ".sock"));
    }

    /** A coordinator (no workers) running {@code options} as job {@code name} over the three members, the cache on. */
    StokerNode coordinator(NodeConfig.Builder options, String name, String seed, long steps) throws Exception {
        var b = member(options.set(NodeConfig.JOB, name).set(NodeConfig.NODES, 3).set(NodeConfig.WORKERS, 3).set(NodeConfig.CACHE, true)
                .set(NodeConfig.CACHE_BYTES, 1L << 30).set(NodeConfig.PREFETCH_BATCHES, 2), seed, loopback(), 0, "coord-" + name);
        if (steps > 0) b.set(NodeConfig.STEPS, steps);
        return ClusteredNode.launchCoordinator(b.build(), line -> {});
    }

    /** {@code n} batches of each rank, rank r's trainer on {@code sockets[r]}: their digests (every tensor) by "step/rank". */
    static Map<String, String> take(List<Path> sockets, String job, int n) throws Exception {
        var out = new TreeMap<String, String>();
        for (int r = 0; r < RANKS; r++)
            try (var t = TrainerClient.connect(sockets.get(r), r, RANKS, job, TrainerClient.Options.SHARED_MEMORY)) {
                for (int i = 0; i < n; i++)
                    try (var got = t.next()) {
                        out.put(got.batch().meta().globalStep() + "/" + r, BatchDigest.of(got.batch()));
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

    /** A member's affinity counters now (its node's stats), by name; empty when no job with the cache is open there. */
    @SuppressWarnings("unchecked")
    static Map<String, Number> affinity(StokerNode member) {
        var m = (Map<String, Number>) member.metrics().get("cacheAffinity");
        return m == null ? Map.of() : m;
    }

    static long sum(List<StokerNode> members, String counter) {
        long n = 0;
        for (var m : members) n += affinity(m).getOrDefault(counter, 0).longValue();
        return n;
    }

    /** Media reads that hit (locally or at the home) over all media reads, over the members. */
    static double hitRate(List<StokerNode> members) {
        long hits = sum(members, "localHits") + sum(members, "remoteHits");
        long reads = hits + sum(members, "localMisses") + sum(members, "remoteMisses") + sum(members, "fallbacks");
        assertTrue(reads >= SAMPLES / 2, "the samples' images were read: " + reads);
        System.err.printf(java.util.Locale.ROOT, "cache affinity: %d of %d media reads hit (%d at the maker, %d at their home), %d fallbacks%n",
                hits, reads, sum(members, "localHits"), sum(members, "remoteHits"), sum(members, "fallbacks"));
        return (double) hits / reads;
    }

    /** Waits until every entry offered to a home was taken by it (or dropped), 30 s at most. */
    static void awaitTaken(List<StokerNode> members) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (sum(members, "taken") + sum(members, "takeDropped") + sum(members, "outboxDropped") < sum(members, "offered")) {
            if (System.nanoTime() > deadline)
                throw new AssertionError("homes took " + sum(members, "taken") + " of " + sum(members, "offered") + " entries offered");
            Thread.sleep(20); // polling a condition under a deadline
        }
    }

    private final java.util.Set<StokerNode> closed = new java.util.HashSet<>();

    private void closeOnce(StokerNode n) throws Exception {
        if (closed.add(n)) n.close();
    }

    @Test
    void inEpochTwoEveryNodeFindsEveryImageAtItsHomeAndBatchesAndPacksStayExactThroughAHomesLoss() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        int perEpoch = SAMPLES / (RANKS * BATCH);
        String seed = loopback();
        try (var a = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, seed, 1, "a").build(), line -> {});
             var b = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, loopback(), 1, "b").build(), line -> {})) {
            var d = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, loopback(), 1, "d").build(), line -> {});
            try {
                var members = List.of(a, b, d);
                var sockets = List.of(a.socket(), b.socket());

                // job 1: the caches are cold; what a node computes for an image homed elsewhere goes to that home
                try (var c = coordinator(job(manifest, 1), "warm", seed, perEpoch)) {
                    take(sockets, "warm", perEpoch);
                    awaitTaken(members);
                    assertTrue(sum(members, "offered") > 0, "some images were made on another node than their home");
                    assertEquals(0, sum(members, "takeDropped") + sum(members, "outboxDropped"), "no entry lost on its way home");
                    assertEquals(0, sum(members, "localHits") + sum(members, "remoteHits"), "cold caches hit nothing");
                }

                // job 2, another order: every image found, at its maker or its home; the batches exact
                try (var c = coordinator(job(manifest, 2), "epoch2", seed, perEpoch)) {
                    var got = take(sockets, "epoch2", perEpoch);
                    double rate = hitRate(members);
                    assertTrue(rate >= 0.95, "with affinity: hit rate " + rate + " " + affinity(a) + affinity(b) + affinity(d));
                    assertTrue(sum(members, "remoteHits") > 0 && sum(members, "fetchedBytes") > 0, "entries came from their homes");
                    assertEquals(0, sum(members, "fallbacks"));
                    assertEquals(uncached(job(manifest, 2), perEpoch, "epoch2"), got, "cached batches are uncached ones, bit for bit");
                }

                // job 3, affinity off: a node finds only the entries homed on it (about a third)
                try (var c = coordinator(job(manifest, 3).set(NodeConfig.CACHE_AFFINITY, false), "off", seed, perEpoch)) {
                    take(sockets, "off", perEpoch);
                    double rate = hitRate(members);
                    assertTrue(rate < 0.7, "without affinity: hit rate " + rate + " " + affinity(a) + affinity(b) + affinity(d));
                    assertEquals(0, sum(members, "remoteHits") + sum(members, "offered"), "nothing asked of another node");
                }

                // job 4, packed: a home stops after the first steps; its entries are computed by the makers, the packs exact
                try (var c = coordinator(packed(manifest, 4), "packed", seed, 0);
                     var t0 = TrainerClient.connect(a.socket(), 0, RANKS, "packed", TrainerClient.Options.SHARED_MEMORY);
                     var t1 = TrainerClient.connect(b.socket(), 1, RANKS, "packed", TrainerClient.Options.SHARED_MEMORY)) {
                    var got = new TreeMap<String, String>();
                    int steps = 6;
                    for (int s = 0; s < steps; s++) {
                        if (s == 2) closeOnce(d); // D's entries go with it: asks for them fail (fallbacks) until the homes are named again
                        for (var t : List.of(t0, t1))
                            try (var p = t.next()) {
                                got.put(p.batch().meta().globalStep() + "/" + p.batch().meta().rank(), BatchDigest.of(p.batch()));
                            }
                    }
                    var live = List.of(a, b);
                    assertTrue(hitRate(live) > 0.3, "the live homes' entries still hit: " + affinity(a) + affinity(b));
                    assertEquals(uncached(packed(manifest, 4), steps, "packed"), got, "cached packs are uncached ones, bit for bit, through a home's loss");
                }
            } finally {
                closeOnce(d);
            }
        }
    }
}
