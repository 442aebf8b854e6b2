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
}
