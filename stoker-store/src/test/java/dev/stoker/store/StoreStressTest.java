package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.config;
import static dev.stoker.store.StoreTesting.segmentFileBytes;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(30)
class StoreStressTest {
    private static final int THREADS = 6;
    private static final int ROUNDS = 150;
    private static final long BUDGET = 24 * MIB;

    @TempDir Path dir;

    @Test
    void budgetHoldsAndLeasedBytesStayIntactUnderConcurrentUse() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, BUDGET)); var pool = Executors.newFixedThreadPool(THREADS + 2)) {
            AtomicBoolean running = new AtomicBoolean(true);
            AtomicLong checks = new AtomicLong();
            Future<?> monitor = pool.submit(() -> {
                while (running.get()) {
                    StoreMetrics m = store.metrics();
                    assertTrue(m.mappedBytes() <= BUDGET, "mapped " + m.mappedBytes());
                    assertTrue(m.inUseBytes() <= m.mappedBytes(), m.toString());
                    long files = segmentFileBytes(store.arenaDir());
                    assertTrue(files <= BUDGET, "segment files hold " + files + " bytes");
                    checks.incrementAndGet();
                }
                return null;
            });
            List<Future<?>> workers = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                int worker = t;
                workers.add(pool.submit(() -> {
                    var random = ThreadLocalRandom.current();
                    for (int round = 0; round < ROUNDS; round++) {
                        long bytes = 64 + random.nextLong(5 * MIB - 64);
                        Allocation a = store.allocate(bytes).get(20, TimeUnit.SECONDS);
                        if (random.nextInt(10) == 0) {
                            a.abort();
                            continue;
                        }
                        long tag = ((long) worker << 32) | round;
                        stamp(a.segment(), tag);
                        StoredObject o = a.seal();
                        try (Lease lease = o.lease()) {
                            o.release();
                            if (random.nextBoolean()) Thread.onSpinWait();
                            assertEquals(tag, readStamp(lease.object().segment()), "bytes of a leased object changed");
                        }
                    }
                    return null;
                }));
            }
            try {
                for (Future<?> w : workers) w.get();
            } finally {
                running.set(false);
            }
            monitor.get();
            assertTrue(checks.get() > 0);

            StoreMetrics m = store.metrics();
            assertEquals(0, m.objects());
            assertEquals(0, m.leases());
            assertEquals(0, m.inUseBytes());
            assertTrue(m.mappedBytes() <= BUDGET);
            // a segment passed over is deleted on the maker thread and counted until its file is gone: await that
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (store.metrics().mappedBytes() != segmentFileBytes(store.arenaDir()) && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(store.metrics().mappedBytes(), segmentFileBytes(store.arenaDir()));
            assertEquals((long) THREADS * ROUNDS, m.allocations());
            assertTrue(m.segmentsReused() > 0, m.toString());
        }
    }

    /** Writes {@code tag} at the start, the middle and the end, where the next writer would overwrite it. */
    private static void stamp(MemorySegment s, long tag) {
        long n = s.byteSize();
        for (long at : new long[] {0, n / 2 - 8, n - 8}) s.set(ValueLayout.JAVA_LONG_UNALIGNED, at, tag);
    }

    private static long readStamp(MemorySegment s) {
        long n = s.byteSize();
        long tag = s.get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
        boolean same = s.get(ValueLayout.JAVA_LONG_UNALIGNED, n / 2 - 8) == tag && s.get(ValueLayout.JAVA_LONG_UNALIGNED, n - 8) == tag;
        return same ? tag : -1;
    }
}
