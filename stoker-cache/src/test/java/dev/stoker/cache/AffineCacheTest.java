package dev.stoker.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Affinity over real caches in folders of their own, the peers wired in process (the Flight transport is the cluster's
 * test): entries computed anywhere in epoch 1 end up at their home, epoch 2 finds every one from any node, and a home
 * that fails is a fallback, never a wrong entry.
 */
@Timeout(60)
class AffineCacheTest {
    @TempDir Path dir;

    private static final int ENTRIES = 60, BYTES = 4096;

    private static byte[] entry(int i) {
        byte[] b = new byte[BYTES + i]; // lengths differ: a read of the wrong length must miss
        new Random(i).nextBytes(b);
        return b;
    }

    private static CacheKey key(int i) { return CacheKey.of("image-resized-u8", "t", CacheKey.sha256(("img" + i).getBytes())); }

    /**
     * N nodes whose peers call each other's serve and take directly; {@code broken} names members whose fetches and offers
     * throw, {@code unreachable} those whose probes ({@link AffineCache.Peers#reach}) throw; {@code calls} counts fetches and
     * offers, {@code reaches} probes.
     */
    private record Cluster(List<AffineCache> nodes, List<SampleCache> locals, Map<String, AffineCache> byName, java.util.Set<String> broken,
                           java.util.Set<String> unreachable, AtomicInteger calls, AtomicInteger reaches) implements AutoCloseable {
        static Cluster of(Path dir, int n) throws Exception {
            var byName = new ConcurrentHashMap<String, AffineCache>();
            var broken = ConcurrentHashMap.<String>newKeySet();
            var unreachable = ConcurrentHashMap.<String>newKeySet();
            var calls = new AtomicInteger();
            var reaches = new AtomicInteger();
            var members = new ArrayList<CacheHomes.Member>();
            for (int i = 0; i < n; i++) members.add(new CacheHomes.Member("node" + i, "127.0.0.1", 1 + i));
            var nodes = new ArrayList<AffineCache>();
            var locals = new ArrayList<SampleCache>();
            for (int i = 0; i < n; i++) {
                String self = "node" + i;
                var local = SampleCache.open(dir.resolve(self), 1L << 30, 1, false, System::currentTimeMillis);
                locals.add(local);
                var node = new AffineCache(local, new AffineCache.Peers() {
                    @Override
                    public boolean fetch(CacheHomes.Member m, CacheKey key, MemorySegment dst) {
                        calls.incrementAndGet();
                        if (broken.contains(m.name())) throw new IllegalStateException(m.name() + " is gone");
                        return byName.get(m.name()).serve(key, dst);
                    }

                    @Override
                    public boolean offer(CacheHomes.Member home, CacheKey key, long length) {
                        calls.incrementAndGet();
                        if (broken.contains(home.name())) throw new IllegalStateException(home.name() + " is gone");
                        return byName.get(home.name()).take(self, key, length);
                    }

                    @Override
                    public void reach(CacheHomes.Member m, boolean first) {
                        reaches.incrementAndGet();
                        if (unreachable.contains(m.name())) throw new IllegalStateException(m.name() + " does not answer");
                    }
                }, 8L << 20);
                node.homes(new CacheHomes(self, members));
                byName.put(self, node);
                nodes.add(node);
            }
            return new Cluster(nodes, locals, byName, broken, unreachable, calls, reaches);
        }

        /** Reads entry i on node {@code at}, computing and writing it on a miss, as an encoder does; checks the bytes. */
        boolean use(int at, int i) {
            byte[] want = entry(i), got = new byte[want.length];
            if (nodes.get(at).read(key(i), got, 0, got.length)) {
                assertArrayEquals(want, got, "entry " + i + " on node " + at);
                return true;
            }
            nodes.get(at).write(key(i), want, 0, want.length);
            return false;
        }

        long held() {
            long n = 0;
            for (var l : locals) n += l.stats().entries();
            return n;
        }

        @Override
        public void close() {
            for (var n : nodes) n.close();
            for (var l : locals) l.close();
        }
    }

    private static void awaitHeld(Cluster c, long n) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (c.held() < n) {
            if (System.nanoTime() > deadline) throw new AssertionError("homes hold " + c.held() + " of " + n + " entries");
            Thread.onSpinWait();
            Thread.sleep(5); // polling a condition with a deadline, not a synchronisation
        }
    }

    @Test
    void entriesMadeAnywhereInEpochOneAreFoundFromAnyNodeInEpochTwo() throws Exception {
        try (var c = Cluster.of(dir, 3)) {
            var r = new Random(7);
            for (int i = 0; i < ENTRIES; i++) assertFalse(c.use(r.nextInt(3), i), "epoch 1 hits nothing");
            awaitHeld(c, ENTRIES); // every entry stored once, at its home
            assertEquals(ENTRIES, c.held(), "no entry stored twice");
            for (int n = 0; n < 3; n++)
                for (int i = 0; i < ENTRIES; i++)
                    if (c.nodes().get(n).homes().homedHere(key(i))) assertTrue(c.locals().get(n).holds(key(i)), "entry " + i + " at its home");
            for (int i = 0; i < ENTRIES; i++) assertTrue(c.use(r.nextInt(3), i), "epoch 2, entry " + i);
            long remote = 0, local = 0;
            for (var n : c.nodes()) {
                var s = n.stats();
                remote += s.remoteHits();
                local += s.localHits();
                assertEquals(0, s.fallbacks());
            }
            assertEquals(ENTRIES, remote + local);
            assertTrue(remote > ENTRIES / 2, "most entries come from another node's cache: " + remote);
        }
    }

    @Test
    void aHomeThatFailsIsAFallbackAskedNoMoreAndItsEntriesAreKeptLocally() throws Exception {
        try (var c = Cluster.of(dir, 2)) {
            int i = 0;
            while (c.nodes().get(0).homes().homedHere(key(i))) i++; // an entry homed on node1, used on node0
            c.broken().add("node1");
            c.unreachable().add("node1"); // its probes fail too: it stays down
            assertFalse(c.use(0, i));
            var s = c.nodes().get(0).stats();
            assertEquals(1, s.fallbacks());
            assertTrue(c.locals().get(0).holds(key(i)), "written locally while its home is down");
            int callsBefore = c.calls().get();
            assertTrue(c.use(0, i), "read back locally, exact");
            int j = i + 1;
            while (c.nodes().get(0).homes().homedHere(key(j))) j++;
            assertFalse(c.use(0, j));
            assertEquals(callsBefore, c.calls().get(), "a home that failed is not asked again while its probes fail");
            assertEquals(java.util.Set.of("node1"), c.nodes().get(0).downHomes());
            assertEquals(2, c.nodes().get(0).stats().fallbacks());
            // new homes (the failed one gone): every entry is homed here, read and written locally
            c.nodes().get(0).homes(new CacheHomes("node0", List.of(new CacheHomes.Member("node0", "127.0.0.1", 1))));
            assertTrue(c.use(0, j));
            assertEquals(callsBefore, c.calls().get());
        }
    }

    @Test
    void theChannelsToTheHomesAreOpenedAheadWhenTheHomesAreNamed() throws Exception {
        try (var c = Cluster.of(dir, 3)) {
            await(() -> c.reaches().get() >= 3 * 2, "each node reaches the two other homes before any read: " + c.reaches());
            assertEquals(0, c.calls().get(), "no fetch or offer yet");
            for (var n : c.nodes()) assertEquals(java.util.Set.of(), n.downHomes());
        }
    }

    @Test
    void aHomeThatCannotBeReachedAheadIsDownUntilAProbeAnswers() throws Exception {
        try (var c = Cluster.of(dir, 2)) {
            await(() -> c.reaches().get() >= 2, "reached ahead");
            c.unreachable().add("node1");
            var n0 = c.nodes().get(0);
            n0.homes(n0.homes()); // named again: reached ahead again, and this time it fails
            await(() -> n0.downHomes().contains("node1"), "down after the reach ahead failed");
            int i = 0;
            while (n0.homes().homedHere(key(i))) i++;
            int calls = c.calls().get();
            assertFalse(c.use(0, i));
            assertEquals(calls, c.calls().get(), "a reader never asks a home that is down");
            assertEquals(1, n0.stats().fallbacks());
            c.unreachable().remove("node1");
            await(() -> n0.downHomes().isEmpty(), "up at the first probe it answers");
            int j = i + 1;
            while (n0.homes().homedHere(key(j))) j++;
            assertFalse(c.use(0, j)); // asked of its home again: a miss there, offered to it
            assertEquals(1, n0.stats().remoteMisses());
            assertEquals(1, n0.stats().fallbacks());
        }
    }

    @Test
    void aHomeThatFailsAgainAfterItsProbeAnsweredStaysDownTwiceAsLong() throws Exception {
        try (var c = Cluster.of(dir, 2)) {
            var n0 = c.nodes().get(0);
            await(() -> c.reaches().get() >= 2, "reached ahead");
            int i = 0;
            while (n0.homes().homedHere(key(i))) i++;
            c.broken().add("node1"); // answers its probes, fails its fetches: a failure, probed up, a failure again
            assertFalse(c.use(0, i));
            assertEquals(AffineCache.MIN_DOWN_NANOS, n0.downNanos("node1"));
            await(() -> n0.downHomes().isEmpty(), "up after its probe answered");
            int j = i + 1;
            while (n0.homes().homedHere(key(j))) j++;
            assertFalse(c.use(0, j));
            assertEquals(2 * AffineCache.MIN_DOWN_NANOS, n0.downNanos("node1"), "down at least twice as long");
            assertEquals(2, n0.stats().fallbacks());
            c.broken().remove("node1");
            await(() -> n0.downHomes().isEmpty(), "up again");
            int k = j + 1;
            while (n0.homes().homedHere(key(k))) k++;
            assertFalse(c.use(0, k)); // answered: a miss at the home, and the failures in a row start again from one
            c.broken().add("node1");
            int m = k + 1;
            while (n0.homes().homedHere(key(m))) m++;
            assertFalse(c.use(0, m));
            assertEquals(AffineCache.MIN_DOWN_NANOS, n0.downNanos("node1"), "an answered fetch reset the count");
        }
    }

    /** Waits for {@code condition}, polling, with a deadline far past what it needs. */
    private static void await(java.util.function.BooleanSupplier condition, Object what) throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("not within 30 s: " + what);
            Thread.sleep(5); // polling a condition with a deadline, not a synchronisation
        }
    }

    @Test
    void anEntryOfAnotherLengthIsNeverServedAndAnOfferFromANonMemberIsIgnored() throws Exception {
        try (var c = Cluster.of(dir, 2)) {
            int i = 0;
            while (!c.nodes().get(1).homes().homedHere(key(i))) i++;
            byte[] e = entry(i);
            c.locals().get(1).write(key(i), e, 0, e.length);
            byte[] got = new byte[e.length];
            assertTrue(c.nodes().get(1).serve(key(i), MemorySegment.ofArray(got)));
            assertArrayEquals(e, got);
            assertFalse(c.nodes().get(1).take("node0", key(i), e.length), "held already");
            // a length the entry does not have: a miss (the home's cache takes it for a damaged entry, as a local read does)
            assertFalse(c.nodes().get(1).serve(key(i), MemorySegment.ofArray(new byte[e.length + 1])));
            int j = i + 1;
            while (!c.nodes().get(1).homes().homedHere(key(j))) j++;
            assertFalse(c.nodes().get(1).take("intruder", key(j), 10), "not a member");
            assertFalse(c.nodes().get(1).take("node0", key(j), AffineCache.MAX_ENTRY_BYTES + 1), "too long");
            assertFalse(c.nodes().get(0).take("node1", key(j), 10), "not homed there");
            assertTrue(c.nodes().get(1).take("node0", key(j), 10), "a member's offer of an entry homed here is taken");
        }
    }
}
