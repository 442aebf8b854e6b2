package dev.stoker.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The on-disk cache: entries read back bit for bit, damaged ones never served, the budget, sharing, restarts. */
@Timeout(60)
class SampleCacheTest {
    @TempDir Path dir;

    /** Bytes like a resized photo's: flat runs of random length and level, so that zstd has something to do. */
    private static byte[] pixels(long seed, int n) {
        var r = new Random(seed);
        byte[] b = new byte[n];
        for (int i = 0; i < n; ) {
            int run = 1 + r.nextInt(12), v = r.nextInt(256);
            for (int j = 0; j < run && i < n; j++) b[i++] = (byte) v;
        }
        return b;
    }

    private static CacheKey key(String name) { return CacheKey.of("test", "settings", CacheKey.sha256(name.getBytes())); }

    @ParameterizedTest
    @ValueSource(booleans = {true, false})
    void anEntryReadsBackBitForBitInThisAndANewInstance(boolean compress) throws IOException {
        byte[] raw = pixels(1, 300_000);
        try (var cache = SampleCache.open(dir, 1L << 30, 1, compress, System::currentTimeMillis)) {
            byte[] out = new byte[raw.length];
            assertFalse(cache.read(key("a"), out, 0, out.length), "nothing there yet");
            assertTrue(cache.write(key("a"), raw, 0, raw.length));
            assertTrue(cache.read(key("a"), out, 0, out.length));
            assertArrayEquals(raw, out);
            var s = cache.stats();
            assertEquals(1, s.hits());
            assertEquals(1, s.misses());
            assertEquals(1, s.written());
            assertEquals(1, s.entries());
            if (compress) assertTrue(s.storedBytesWritten() < raw.length, "compressed: " + s.storedBytesWritten());
        }
        try (var restarted = SampleCache.open(dir, 1L << 30, 1, compress, System::currentTimeMillis)) {
            assertEquals(1, restarted.stats().entries(), "a new service lists what the first one wrote");
            byte[] out = new byte[raw.length];
            assertTrue(restarted.read(key("a"), out, 0, out.length));
            assertArrayEquals(raw, out);
            // read into a slice of a larger array, and into native memory
            byte[] big = new byte[raw.length + 10];
            assertTrue(restarted.read(key("a"), big, 5, raw.length));
            assertArrayEquals(raw, java.util.Arrays.copyOfRange(big, 5, 5 + raw.length));
            try (var arena = java.lang.foreign.Arena.ofConfined()) {
                var seg = arena.allocate(raw.length);
                assertTrue(restarted.read(key("a"), seg));
                assertArrayEquals(raw, seg.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
            }
        }
    }

    /**
     * {@code readView}: a hit hands over the entry's exact bytes — an uncompressed one mapped in place (no fallback buffer
     * asked for), a compressed one read into the fallback — counted as a read is; a miss calls nothing; a flipped byte of
     * a mapped entry, or a torn one, is never handed over, and is counted as corrupt and removed as a read's is.
     */
    @ParameterizedTest
    @ValueSource(booleans = {true, false})
    void aViewOfAnEntryIsItsBytesAndNeverABadOnes(boolean compress) throws IOException {
        byte[] raw = pixels(7, 200_000);
        try (var cache = SampleCache.open(dir, 1L << 30, 1, compress, System::currentTimeMillis);
             var arena = java.lang.foreign.Arena.ofConfined()) {
            var fallbacks = new java.util.concurrent.atomic.AtomicInteger();
            java.util.function.Supplier<java.lang.foreign.MemorySegment> fallback = () -> {
                fallbacks.incrementAndGet();
                return arena.allocate(raw.length);
            };
            var seen = new ArrayList<byte[]>();
            java.util.function.Consumer<java.lang.foreign.MemorySegment> view = v -> seen.add(v.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
            assertFalse(cache.readView(key("v"), raw.length, fallback, view), "nothing there yet");
            assertEquals(0, seen.size());
            assertTrue(cache.write(key("v"), raw, 0, raw.length));
            assertTrue(cache.readView(key("v"), raw.length, fallback, view));
            assertEquals(1, seen.size());
            assertArrayEquals(raw, seen.get(0));
            assertEquals(compress ? 1 : 0, fallbacks.get(), "a fallback buffer only for a compressed entry");
            assertEquals(1, cache.stats().hits());
            assertEquals(raw.length, cache.stats().rawBytesRead());

            Path file = entryFile();
            byte[] good = Files.readAllBytes(file);
            for (int at : new int[] {8, 45, 56, 64, good.length / 2, good.length - 1}) {
                byte[] bad = good.clone();
                bad[at] ^= 0x04;
                Files.write(file, bad);
                assertFalse(cache.readView(key("v"), raw.length, fallback, view), "handed over an entry with byte " + at + " flipped");
                assertFalse(Files.exists(file), "a corrupt entry is removed");
                Files.write(file, good);
            }
            Files.write(file, java.util.Arrays.copyOf(good, good.length - 1));
            assertFalse(cache.readView(key("v"), raw.length, fallback, view), "handed over a torn entry");
            assertEquals(1, seen.size(), "no bad entry was handed over");
            assertEquals(7, cache.stats().corrupt());
        }
    }

    /** An entry of a length the reader does not know beforehand: read whole, within a bound; longer ones refused. */
    @Test
    void anEntryOfUnknownLengthIsReadWithinABound() throws IOException {
        byte[] raw = pixels(9, 12_345);
        try (var cache = SampleCache.open(dir, 1L << 30)) {
            assertEquals(null, cache.read(key("u"), 1 << 20));
            assertTrue(cache.write(key("u"), raw, 0, raw.length));
            assertArrayEquals(raw, cache.read(key("u"), raw.length));
            assertArrayEquals(raw, cache.read(key("u"), 1 << 20));
            assertEquals(null, cache.read(key("u"), raw.length - 1), "longer than the bound: refused");
            assertEquals(1, cache.stats().corrupt());
        }
    }

    /** Every byte of an entry's file flipped in turn (sampled): each is found, counted as corrupt, never served. */
    @Test
    void aFlippedByteAnywhereIsFoundAndTheEntryRecomputed() throws IOException {
        byte[] raw = pixels(2, 50_000);
        try (var cache = SampleCache.open(dir, 1L << 30)) {
            assertTrue(cache.write(key("b"), raw, 0, raw.length));
            Path file = entryFile();
            byte[] good = Files.readAllBytes(file);
            int corrupt = 0;
            for (int at = 0; at < good.length; at += at < 64 ? 1 : Math.max(1, good.length / 300)) {
                byte[] bad = good.clone();
                bad[at] ^= 0x10;
                Files.write(file, bad);
                byte[] out = new byte[raw.length];
                assertFalse(cache.read(key("b"), out, 0, out.length), "served an entry with byte " + at + " flipped");
                assertFalse(Files.exists(file), "a corrupt entry is removed");
                corrupt++;
                assertTrue(cache.write(key("b"), raw, 0, raw.length), "recomputed and written again");
            }
            assertEquals(corrupt, cache.stats().corrupt());
            byte[] out = new byte[raw.length];
            assertTrue(cache.read(key("b"), out, 0, out.length));
            assertArrayEquals(raw, out);
        }
    }

    /** A write torn at any length (a crash before the data reached the disk): never served. */
    @Test
    void aTornEntryIsNeverServed() throws IOException {
        byte[] raw = pixels(3, 80_000);
        try (var cache = SampleCache.open(dir, 1L << 30)) {
            assertTrue(cache.write(key("c"), raw, 0, raw.length));
            Path file = entryFile();
            byte[] good = Files.readAllBytes(file);
            for (int len : new int[] {0, 10, 63, 64, 65, good.length / 2, good.length - 1}) {
                Files.write(file, java.util.Arrays.copyOf(good, len));
                assertFalse(cache.read(key("c"), new byte[raw.length], 0, raw.length), "served a file torn at " + len);
                // zeros where the data never reached the disk
                byte[] zeros = good.clone();
                java.util.Arrays.fill(zeros, Math.min(len, good.length - 1), good.length, (byte) 0);
                Files.write(file, zeros);
                assertFalse(cache.read(key("c"), new byte[raw.length], 0, raw.length), "served a file zeroed from " + len);
            }
            assertEquals(14, cache.stats().corrupt());
        }
    }

    /** An entry read under another key (a file renamed), or as another length, is refused. */
    @Test
    void anEntryIsServedOnlyAsItsOwnKeyAndLength() throws IOException {
        byte[] raw = pixels(4, 10_000);
        try (var cache = SampleCache.open(dir, 1L << 30)) {
            assertTrue(cache.write(key("d"), raw, 0, raw.length));
            assertFalse(cache.read(key("d"), new byte[raw.length + 1], 0, raw.length + 1), "another length");
            assertTrue(cache.write(key("d"), raw, 0, raw.length));
            Path file = entryFile();
            Path other = cache.root().resolve(key("e").hex().substring(0, 2)).resolve(key("e").hex() + ".stc");
            Files.createDirectories(other.getParent());
            Files.move(file, other);
            assertFalse(cache.read(key("e"), new byte[raw.length], 0, raw.length), "served under another key");
            assertEquals(2, cache.stats().corrupt());
        }
    }

    /**
     * The budget: entries of earlier runs make room, least recently used first; entries this run used are never evicted
     * for new ones, and a new entry that finds no room is not admitted (a cyclic scan keeps a stable part cached).
     */
    @Test
    void evictionPrefersEntriesThisRunHasNotUsed() throws IOException {
        var clock = new AtomicLong(1_000_000);
        byte[] raw = pixels(5, 20_000);
        long budget;
        try (var first = SampleCache.open(dir, 1L << 30, 1, false, clock::get)) {
            for (String k : new String[] {"k1", "k2", "k3"}) {
                clock.addAndGet(1000);
                assertTrue(first.write(key(k), raw, 0, raw.length));
            }
            budget = first.stats().storedBytes(); // three entries fill it
        }
        clock.addAndGet(60_000);
        try (var second = SampleCache.open(dir, budget, 1, false, clock::get)) {
            assertEquals(3, second.stats().entries());
            clock.addAndGet(1000);
            assertTrue(second.read(key("k1"), new byte[raw.length], 0, raw.length), "k1 used by this run");
            clock.addAndGet(1000);
            assertTrue(second.write(key("k4"), raw, 0, raw.length), "room made from the entries this run has not used");
            assertFalse(Files.exists(fileOf(second, "k2")), "k2, the least recently used of those, went first");
            assertTrue(Files.exists(fileOf(second, "k1")), "k1 (used by this run) stays");
            assertTrue(Files.exists(fileOf(second, "k4")));
            // k3 may have gone too (room is made down to 90% of the budget); what remains is this run's
            clock.addAndGet(1000);
            second.write(key("k5"), raw, 0, raw.length);
            clock.addAndGet(1000);
            assertFalse(second.write(key("k6"), raw, 0, raw.length), "no room left but this run's entries: not admitted");
            var s = second.stats();
            assertTrue(s.rejected() >= 1, s.toString());
            assertTrue(s.storedBytes() <= budget, s.toString());
            assertTrue(second.read(key("k1"), new byte[raw.length], 0, raw.length), "this run's entries were kept");
            assertTrue(second.read(key("k4"), new byte[raw.length], 0, raw.length));
        }
    }

    /** Two services (two instances) and several threads writing and reading the same keys: every hit is whole. */
    @Test
    void servicesSharingAFolderNeverSeeAPartialEntry() throws Exception {
        int keys = 8;
        byte[][] raws = new byte[keys][];
        for (int k = 0; k < keys; k++) raws[k] = pixels(100 + k, 40_000 + k);
        try (var a = SampleCache.open(dir, 1L << 30); var b = SampleCache.open(dir, 1L << 30);
             var pool = Executors.newFixedThreadPool(4)) {
            var results = new ArrayList<Future<Integer>>();
            for (int t = 0; t < 4; t++) {
                var cache = t % 2 == 0 ? a : b;
                int seed = t;
                results.add(pool.submit(() -> {
                    var r = new Random(seed);
                    int hits = 0;
                    for (int i = 0; i < 200; i++) {
                        int k = r.nextInt(keys);
                        byte[] out = new byte[raws[k].length];
                        if (cache.read(key("s" + k), out, 0, out.length)) {
                            assertArrayEquals(raws[k], out, "a hit returned other bytes");
                            hits++;
                        } else {
                            cache.write(key("s" + k), raws[k], 0, raws[k].length);
                        }
                    }
                    return hits;
                }));
            }
            int hits = 0;
            for (var f : results) hits += f.get();
            assertTrue(hits > 0);
            assertEquals(0, a.stats().corrupt() + b.stats().corrupt(), "no reader saw a partial entry");
        }
        try (Stream<Path> files = Files.walk(dir)) {
            assertEquals(0, files.filter(p -> p.toString().endsWith(".tmp")).count(), "no temporary file left");
        }
    }

    private Path entryFile() throws IOException {
        try (Stream<Path> files = Files.walk(dir)) {
            var entries = files.filter(p -> p.toString().endsWith(".stc")).toList();
            assertEquals(1, entries.size(), entries.toString());
            return entries.getFirst();
        }
    }

    private static Path fileOf(SampleCache cache, String name) {
        String hex = key(name).hex();
        return cache.root().resolve(hex.substring(0, 2)).resolve(hex + ".stc");
    }
}
