package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cache.AffineCache;
import dev.stoker.cache.CacheHomes;
import dev.stoker.cache.CacheKey;
import dev.stoker.cache.SampleCache;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cache's affinity over real Flight servers on loopback (plaintext here; the cluster's are TLS with a token, the same
 * calls): an entry computed on one node travels to its home and back bit for bit; a home that stopped, one that does not
 * answer, and one that sends another length are each a counted fallback within the deadline, never a hang or a wrong entry;
 * malformed and unbounded requests are refused.
 */
@Timeout(60)
class CacheAffinityFlightTest {
    static final String JOB = "j";
    @TempDir Path dir;
    private final List<AutoCloseable> open = new ArrayList<>();
    private final RootAllocator allocator = new RootAllocator();

    /** A node: its cache, its affine cache for job j, its Flight server answering the cache's actions. */
    record Node(String name, SampleCache local, AffineCache affine, CacheAffinity affinity, FlightBatchServer server) {
        CacheHomes.Member member() { return new CacheHomes.Member(name, "127.0.0.1", server.port()); }
    }

    Node node(String name, FlightBatchServer.Actions override) throws Exception {
        return node(name, override, CacheAffinity.FETCH_TIMEOUT_MS);
    }

    /** A node whose fetches give up after {@code fetchTimeoutMillis}; {@code override} (null: none) answers its actions instead. */
    Node node(String name, FlightBatchServer.Actions override, long fetchTimeoutMillis) throws Exception {
        var local = SampleCache.open(dir.resolve(name), 1L << 30, 1, false, System::currentTimeMillis);
        AffineCache[] affine = new AffineCache[1];
        var affinity = new CacheAffinity(FlightBatchClient.Options.PLAINTEXT, allocator, job -> JOB.equals(job) ? affine[0] : null, fetchTimeoutMillis,
                CacheAffinity.OFFER_TIMEOUT_MS);
        affine[0] = new AffineCache(local, affinity.peers(JOB, name), 16L << 20);
        var server = FlightBatchServer.start(Location.forGrpcInsecure("127.0.0.1", 0), null, n -> {
            throw new IllegalArgumentException("no object " + n);
        }, allocator, FlightBatchServer.Security.NONE);
        server.serveActions(override != null ? override : affinity);
        open.add(local);
        open.add(affine[0]);
        open.add(affinity);
        open.add(server);
        return new Node(name, local, affine[0], affinity, server);
    }

    /** Both nodes see both as homes. */
    static void homes(Node... nodes) {
        var members = new ArrayList<CacheHomes.Member>();
        for (var n : nodes) members.add(n.member());
        for (var n : nodes) n.affine().homes(new CacheHomes(n.name(), members));
    }

    static byte[] entry(int i, int n) {
        byte[] b = new byte[n];
        new Random(i).nextBytes(b);
        return b;
    }

    static CacheKey key(int i) { return CacheKey.of("image-resized-u8", "t", CacheKey.sha256(("img" + i).getBytes())); }

    /** A key homed on {@code home}, by the homes {@code at} sees. */
    static int homedOn(Node at, Node home) {
        int i = 0;
        while (!at.affine().homes().home(key(i)).name().equals(home.name())) i++;
        return i;
    }

    @AfterEach
    void close() throws Exception {
        for (int i = open.size() - 1; i >= 0; i--) open.get(i).close();
        allocator.close();
    }

    @Test
    void anEntryComputedOnOneNodeTravelsToItsHomeAndBackBitForBit() throws Exception {
        var a = node("a", null);
        var b = node("b", null);
        homes(a, b);
        int i = homedOn(a, b);
        byte[] want = entry(i, 700_000), got = new byte[want.length]; // more than two of the answer's 256 KiB results
        assertFalse(a.affine().read(key(i), got, 0, got.length), "nothing anywhere yet");
        assertEquals(1, a.affine().stats().remoteMisses());
        assertTrue(a.affine().write(key(i), want, 0, want.length), "offered to its home");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!b.local().holds(key(i))) {
            assertTrue(System.nanoTime() < deadline, "the home took the entry: " + b.affine().stats());
            Thread.sleep(10); // polling a condition under a deadline
        }
        assertFalse(a.local().holds(key(i)), "kept only at its home");
        assertTrue(a.affine().read(key(i), got, 0, got.length));
        assertArrayEquals(want, got);
        var s = a.affine().stats();
        assertEquals(1, s.remoteHits());
        assertEquals(want.length, s.fetchedBytes());
        assertEquals(0, s.fallbacks());
        assertEquals(1, b.affine().stats().taken());
        // asked with another length (another entry's size): a miss, never the bytes of this one
        assertFalse(a.affine().read(key(i), new byte[want.length - 1], 0, want.length - 1));
    }

    @Test
    void aHomeThatStoppedIsAFallbackAndItsEntriesAreKeptLocally() throws Exception {
        var a = node("a", null);
        var b = node("b", null);
        homes(a, b);
        int i = homedOn(a, b);
        b.server().close();
        byte[] want = entry(i, 1000), got = new byte[want.length];
        long t0 = System.nanoTime();
        assertFalse(a.affine().read(key(i), got, 0, got.length));
        assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5), "no hang");
        assertEquals(1, a.affine().stats().fallbacks());
        assertTrue(a.affine().write(key(i), want, 0, want.length));
        assertTrue(a.local().holds(key(i)), "its home down: kept here");
        assertTrue(a.affine().read(key(i), got, 0, got.length));
        assertArrayEquals(want, got);
    }

    @Test
    void aHomeThatDoesNotAnswerIsGivenUpAtTheDeadline() throws Exception {
        var stuck = new CountDownLatch(1);
        var a = node("a", null, 300);
        var b = node("b", (type, body, results) -> {
            try {
                stuck.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return true;
        });
        try {
            homes(a, b);
            int i = homedOn(a, b);
            byte[] got = new byte[1000];
            long t0 = System.nanoTime();
            assertFalse(a.affine().read(key(i), got, 0, got.length));
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(tookMillis >= 250 && tookMillis < 5000, "given up at the 300 ms deadline: " + tookMillis + " ms");
            assertEquals(1, a.affine().stats().fallbacks());
        } finally {
            stuck.countDown();
        }
    }

    /**
     * The channels are opened ahead (a ping as soon as the homes are named), and a home that hung is asked again as soon
     * as it answers a probe: one fallback for the hang, then hits from it again, not ten seconds of fallbacks.
     */
    @Test
    void theChannelIsOpenedAheadAndAHomeThatHungIsAskedAgainOnceItAnswersAProbe() throws Exception {
        var pings = new java.util.concurrent.atomic.AtomicInteger();
        var hang = new java.util.concurrent.atomic.AtomicBoolean();
        var release = new CountDownLatch(1);
        CacheAffinity[] own = new CacheAffinity[1];
        var a = node("a", null, 300);
        var b = node("b", (type, body, results) -> {
            if (type.equals(CacheAffinity.PING)) pings.incrementAndGet();
            if (hang.get()) {
                try {
                    release.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return true;
            }
            return own[0].answer(type, body, results);
        });
        own[0] = b.affinity();
        try {
            homes(a, b);
            await(() -> pings.get() >= 1, "a pinged its home b ahead");
            assertEquals(java.util.Set.of(), a.affine().downHomes());
            int i = homedOn(a, b), j = i + 1;
            while (!a.affine().homes().home(key(j)).name().equals("b")) j++;
            byte[] want = entry(j, 5000), got = new byte[want.length];
            assertTrue(b.affine().write(key(j), want, 0, want.length), "stored at its home");
            hang.set(true);
            assertFalse(a.affine().read(key(i), new byte[1000], 0, 1000), "the home hangs: given up at the deadline");
            assertEquals(java.util.Set.of("b"), a.affine().downHomes());
            hang.set(false);
            release.countDown();
            await(() -> a.affine().downHomes().isEmpty(), "b answered a probe: up");
            assertTrue(a.affine().read(key(j), got, 0, got.length), "asked again at once");
            assertArrayEquals(want, got);
            var s = a.affine().stats();
            assertEquals(1, s.fallbacks());
            assertEquals(1, s.remoteHits());
        } finally {
            release.countDown();
        }
    }

    private static void await(java.util.function.BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within 30 s: " + what);
            Thread.sleep(5); // polling a condition under a deadline
        }
    }

    @Test
    void anAnswerOfAnotherLengthIsAFallbackNeverAnEntry() throws Exception {
        var a = node("a", null);
        for (int extra : new int[] {1, -1}) {
            var b = node("b" + extra, (type, body, results) -> { // a peer that sends one byte more, or one less, than asked
                if (!type.equals(CacheAffinity.GET)) return true;
                String[] f = new String(body).split("\n");
                results.accept(new byte[Integer.parseInt(f[2]) + extra]);
                return true;
            });
            homes(a, b);
            int i = homedOn(a, b);
            byte[] got = new byte[1000];
            long before = a.affine().stats().fallbacks();
            assertFalse(a.affine().read(key(i), got, 0, got.length), "extra " + extra);
            assertEquals(before + 1, a.affine().stats().fallbacks());
        }
    }

    @Test
    void aServerWithATokenAnswersTheCacheActionsOnlyToCallersWithIt() throws Exception {
        String token = FlightBatchServer.newToken();
        var a = node("a", null);
        try (var guarded = FlightBatchServer.start(Location.forGrpcInsecure("127.0.0.1", 0), null, n -> {
                 throw new IllegalArgumentException("no object " + n);
             }, allocator, new FlightBatchServer.Security(token, null, null));
             var without = FlightBatchClient.connect("127.0.0.1", guarded.port(), FlightBatchClient.Options.PLAINTEXT, allocator);
             var with = FlightBatchClient.connect("127.0.0.1", guarded.port(), new FlightBatchClient.Options(token, false, null), allocator)) {
            guarded.serveActions(a.affinity());
            byte[] body = (JOB + "\n" + key(1).hex() + "\n10").getBytes();
            var dst = MemorySegment.ofArray(new byte[10]);
            var refused = assertThrows(FlightRuntimeException.class, () -> without.action(CacheAffinity.GET, body, 10_000, dst));
            assertEquals(org.apache.arrow.flight.FlightStatusCode.UNAUTHENTICATED, refused.status().code());
            assertEquals(0, with.action(CacheAffinity.GET, body, 10_000, dst), "with the token: asked, a miss");
        }
    }

    @Test
    void malformedAndUnboundedRequestsAreRefused() throws Exception {
        var a = node("a", null);
        try (var client = FlightBatchClient.connect("127.0.0.1", a.server().port(), FlightBatchClient.Options.PLAINTEXT, allocator)) {
            var dst = MemorySegment.ofArray(new byte[16]);
            for (String body : List.of("j\nnot-hex\n10", "j\n" + key(1).hex() + "\n-1", "j\n" + key(1).hex() + "\n" + (AffineCache.MAX_ENTRY_BYTES + 1),
                    "j\n" + key(1).hex(), "j\nfrom\n" + key(1).hex() + "\nx"))
                assertThrows(FlightRuntimeException.class, () -> client.action(CacheAffinity.GET, body.getBytes(), 10_000, dst), body);
            assertThrows(FlightRuntimeException.class, () -> client.action(CacheAffinity.GET, new byte[CacheAffinity.MAX_REQUEST_BYTES + 1], 10_000, dst));
            assertEquals(0, client.action(CacheAffinity.GET, ("other-job\n" + key(1).hex() + "\n10").getBytes(), 10_000, dst), "no such job: a miss");
        }
    }
}
