package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A free segment that no request took for a while is deleted when another segment comes back (issue 30's memory item):
 * a segment left over from a burst no longer stays resident for the whole job, while one that turns over stays.
 */
@Timeout(60)
class ShmIdleSegmentsTest {
    @TempDir Path dir;

    @Test
    void aSegmentIdleLongerThanTheLimitIsDeletedWhenAnotherComesBack() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 64 * MIB))) {
            store.idleAfter(TimeUnit.MILLISECONDS.toNanos(200));
            StoredObject a = await(store.allocate(8 * MIB)).seal(), b = await(store.allocate(8 * MIB)).seal();
            Path aFile = a.file(), bFile = b.file();
            a.release();
            Thread.sleep(400);
            b.release(); // a has been free for 400 ms: deleted; b just came back: kept
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (store.metrics().segmentsDeleted() < 1 && System.nanoTime() < deadline) Thread.sleep(10);
            StoreMetrics m = store.metrics();
            assertEquals(1, m.segmentsDeleted());
            assertEquals(8 * MIB, m.mappedBytes(), "only b's segment is left");
            assertFalse(Files.exists(aFile));
            assertTrue(Files.exists(bFile));
            StoredObject c = await(store.allocate(8 * MIB)).seal(); // b's segment serves the next object
            assertEquals(bFile, c.file());
            assertEquals(1, store.metrics().segmentsReused());
            c.release();
        }
    }

    @Test
    void aSegmentPassedOverByEnoughAllocationsIsDeletedOneInRotationStays() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 64 * MIB))) {
            store.limitResident(1L << 40); // the rule trades pages for memory: only under a limit, never reached here
            StoredObject big = await(store.allocate(16 * MIB)).seal(), small = await(store.allocate(8 * MIB)).seal();
            Path bigFile = big.file(), smallFile = small.file();
            big.release();
            small.release();
            // smaller objects: the 8 MiB segment serves each, the 16 MiB one is passed over
            int limit = ShmObjectStore.PASSED_OVER_PER_SHARE;
            for (int i = 0; i < limit; i++) {
                assertEquals(0, store.metrics().segmentsDeleted(), "passed over " + i + " times: kept");
                StoredObject o = await(store.allocate(8 * MIB)).seal();
                assertEquals(smallFile, o.file());
                o.release();
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (store.metrics().segmentsDeleted() < 1 && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(1, store.metrics().segmentsDeleted(), "passed over " + limit + " times: deleted");
            while (store.metrics().mappedBytes() > 8 * MIB && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(8 * MIB, store.metrics().mappedBytes(), "only the segment in use is left");
            assertFalse(Files.exists(bigFile));
            // two segments taken in turn by two objects in flight are each taken every other admission: both stay
            StoredObject x = await(store.allocate(8 * MIB)).seal();
            for (int i = 0; i < 4 * limit; i++) {
                StoredObject y = await(store.allocate(8 * MIB)).seal();
                x.release();
                x = y;
            }
            x.release();
            assertEquals(1, store.metrics().segmentsDeleted(), "none of the segments in rotation went");
            assertEquals(3, store.metrics().segmentsCreated(), "the two, and one made for the second object in flight");
        }
    }

    /**
     * Without a resident limit (the default) the store keeps its pages for speed: a free segment passed over by many
     * allocations stays, and a new larger segment is made beside the free smaller ones, which stay for the next small batch.
     */
    @Test
    void withoutAResidentLimitPassedOverAndSmallerFreeSegmentsStay() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            StoredObject big = await(store.allocate(16 * MIB)).seal(), small = await(store.allocate(8 * MIB)).seal();
            Path bigFile = big.file(), smallFile = small.file();
            big.release();
            small.release();
            for (int i = 0; i < 4 * ShmObjectStore.PASSED_OVER_PER_SHARE; i++) {
                StoredObject o = await(store.allocate(8 * MIB)).seal();
                assertEquals(smallFile, o.file());
                o.release();
            }
            StoredObject larger = await(store.allocate(24 * MIB)).seal(); // no free one fits: made beside them
            StoreMetrics m = store.metrics();
            assertEquals(0, m.segmentsDeleted(), m.toString());
            assertEquals(0, m.segmentsReplaced(), m.toString());
            assertEquals(3, m.segmentsCreated(), m.toString());
            assertTrue(Files.exists(bigFile) && Files.exists(smallFile));
            assertEquals(48 * MIB, m.residentBytes(), "every page kept: " + m);
            larger.release();
        }
    }

    /**
     * A new segment for a larger object is made in the stead of the largest free segment too small for it: a store whose
     * batches grow keeps as many segments as objects in flight, not one more per size it met; a free segment the new one
     * could not stand in for (over {@link ShmObjectStore#REUSE_FACTOR} smaller) stays.
     */
    @Test
    void aNewLargerSegmentReplacesTheLargestFreeOneTooSmallForIt() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 256 * MIB))) {
            store.limitResident(1L << 40); // the rule trades pages for memory: only under a limit, never reached here
            StoredObject tiny = await(store.allocate(1 * MIB)).seal(), small = await(store.allocate(8 * MIB)).seal(),
                    mid = await(store.allocate(12 * MIB)).seal();
            Path tinyFile = tiny.file(), smallFile = small.file(), midFile = mid.file();
            tiny.release();
            small.release();
            mid.release();
            StoredObject big = await(store.allocate(20 * MIB)).seal(); // none of the three fits: a new one, in mid's stead
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (Files.exists(midFile) && System.nanoTime() < deadline) Thread.sleep(10);
            StoreMetrics m = store.metrics();
            assertEquals(4, m.segmentsCreated());
            assertEquals(1, m.segmentsReplaced());
            assertEquals(1, m.segmentsDeleted());
            assertFalse(Files.exists(midFile), "the largest free segment too small for it went");
            assertTrue(Files.exists(smallFile) && Files.exists(tinyFile), "the others stay");
            assertEquals(ShmObjectStore.sizeClass(20 * MIB) + 8 * MIB + 1 * MIB, m.mappedBytes());
            big.release();
            StoredObject again = await(store.allocate(12 * MIB)).seal(); // the big one serves what mid served
            assertEquals(big.file(), again.file());
            again.release();
            // a 104 MiB segment stands in for the 20 MiB one, not for the 8 MiB and 1 MiB ones (over REUSE_FACTOR smaller)
            StoredObject huge = await(store.allocate(100 * MIB)).seal();
            while (store.metrics().segmentsReplaced() < 2 && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(2, store.metrics().segmentsReplaced(), "the 20 MiB one replaced, the largest too small");
            assertTrue(Files.exists(tinyFile) && Files.exists(smallFile), "more than eight times smaller: kept");
            huge.release();
        }
    }
}
