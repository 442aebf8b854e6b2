package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static dev.stoker.store.StoreTesting.failure;
import static dev.stoker.store.StoreTesting.fill;
import static dev.stoker.store.StoreTesting.readAsAnotherProcess;
import static dev.stoker.store.StoreTesting.segmentFileBytes;
import static dev.stoker.store.StoreTesting.segmentFileCount;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(20)
class ShmObjectStoreTest {
    @TempDir Path dir;

    @Test
    void sealedObjectReadsBackThroughAFreshMappingOfItsFile() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 16 * MIB))) {
            long bytes = 3 * MIB + 12345;
            Allocation a = await(store.allocate(bytes));
            assertEquals(bytes, a.bytes());
            assertEquals(bytes, a.segment().byteSize());
            assertEquals(0, a.segment().address() % 64, "64-byte aligned start");
            fill(a.segment(), 7);
            byte[] written = a.segment().toArray(ValueLayout.JAVA_BYTE);

            StoredObject o = a.seal();
            assertEquals(1, o.references());
            assertTrue(o.segment().isReadOnly());
            assertEquals(bytes, o.bytes());
            assertTrue(o.file().startsWith(store.arenaDir()));
            try (Lease lease = o.lease()) {
                assertEquals(o.id(), lease.objectId());
                assertEquals(2, o.references());
                o.release();
                StoredObject seen = lease.object();
                assertArrayEquals(written, readAsAnotherProcess(seen.file(), seen.offset(), seen.bytes()));
                assertArrayEquals(written, seen.segment().toArray(ValueLayout.JAVA_BYTE));
            }
            assertEquals(0, o.references());
            StoreMetrics m = store.metrics();
            assertEquals(1, m.allocations());
            assertEquals(1, m.segmentsCreated());
            assertEquals(0, m.objects());
            assertEquals(0, m.leases());
            assertEquals(0, m.inUseBytes());
            assertEquals(4 * MIB, m.mappedBytes());
        }
    }

    @Test
    void arenaIsPrivateToTheUser() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject o = await(store.allocate(MIB)).seal();
            Path arena = store.arenaDir();
            assertEquals(dir, arena.getParent());
            assertTrue(arena.getFileName().toString().matches("stoker-" + ProcessHandle.current().pid() + "-[0-9a-f]+"), arena.toString());
            assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(arena, LinkOption.NOFOLLOW_LINKS)));
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(o.file(), LinkOption.NOFOLLOW_LINKS)));
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(arena.resolve("arena.lock"))));
            assertEquals("seg-0", o.file().getFileName().toString());
            o.release();
        }
    }

    @Test
    void leasedSegmentIsNotReusedAndIsReusedOnceReleased() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 16 * MIB))) {
            Allocation first = await(store.allocate(MIB));
            fill(first.segment(), 1);
            byte[] firstBytes = first.segment().toArray(ValueLayout.JAVA_BYTE);
            StoredObject o1 = first.seal();
            Lease lease = o1.lease();
            o1.release();

            StoredObject o2 = await(store.allocate(MIB)).seal();
            assertNotEquals(o1.file(), o2.file(), "a leased segment must not be handed out");
            assertEquals(0, store.metrics().segmentsReused());
            assertArrayEquals(firstBytes, readAsAnotherProcess(o1.file(), 0, MIB));

            lease.close();
            lease.close(); // idempotent
            assertEquals(0, o1.references());
            Allocation third = await(store.allocate(MIB - 100));
            StoredObject o3 = third.seal();
            assertEquals(o1.file(), o3.file(), "the released segment is reused");
            assertNotEquals(o1.id(), o3.id());
            StoreMetrics m = store.metrics();
            assertEquals(1, m.segmentsReused());
            assertEquals(2, m.segmentsCreated());
            assertEquals(2, m.objects());
            o2.release();
            o3.release();
        }
    }

    @Test
    void referenceCountingMisuseIsRefused() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject o = await(store.allocate(MIB)).seal();
            Lease lease = o.lease();
            o.release();
            assertThrows(IllegalStateException.class, o::release, "second release by the creator");
            assertEquals(1, o.references());
            lease.close();
            var e = assertThrows(IllegalStateException.class, o::lease);
            assertTrue(e.getMessage().contains("already released"), e.getMessage());
            assertEquals(0, o.references());
        }
    }

    @Test
    void abortGivesTheSpaceBack() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 2 * MIB))) {
            Allocation a = await(store.allocate(2 * MIB));
            CompletableFuture<Allocation> waiting = store.allocate(2 * MIB);
            assertFalse(waiting.isDone());
            a.abort();
            a.abort();
            assertThrows(IllegalStateException.class, a::seal);
            Allocation b = await(waiting);
            StoredObject o = b.seal();
            b.abort(); // no-op after seal
            assertEquals(1, o.references());
            assertThrows(IllegalStateException.class, b::seal);
            assertEquals(2 * MIB, store.metrics().inUseBytes());
            o.release();
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    @Test
    void waiterCompletesWhenAReleaseFreesSpace() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 2 * MIB))) {
            StoredObject held = await(store.allocate(2 * MIB)).seal();
            CompletableFuture<Allocation> waiter = store.allocate(MIB);
            Thread.sleep(20);
            assertFalse(waiter.isDone(), "nothing is free: the request must wait");
            held.release();
            Allocation a = await(waiter);
            assertEquals(held.file(), a.seal().file());
            StoreMetrics m = store.metrics();
            assertEquals(1, m.allocationWaits());
            assertTrue(m.waitNanos() >= 20_000_000L, "waitNanos " + m.waitNanos());
            assertTrue(m.mappedBytes() <= m.budgetBytes());
        }
    }

    @Test
    void waitersAreServedInArrivalOrder() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject x = await(store.allocate(2 * MIB)).seal();
            StoredObject y = await(store.allocate(2 * MIB)).seal();
            CompletableFuture<Allocation> big = store.allocate(3 * MIB);
            CompletableFuture<Allocation> small = store.allocate(MIB);
            y.release(); // 2 MiB free: enough for `small`, not for `big`, which came first
            Thread.sleep(50);
            assertFalse(big.isDone());
            assertFalse(small.isDone(), "a later request must not overtake a waiting one");
            x.release(); // now both free segments go to make room for `big`, then `small` gets a new one
            Allocation b = await(big);
            Allocation s = await(small);
            StoredObject bo = b.seal();
            StoredObject so = s.seal();
            assertEquals("seg-2", bo.file().getFileName().toString());
            assertEquals("seg-3", so.file().getFileName().toString());
            StoreMetrics m = store.metrics();
            assertEquals(2, m.allocationWaits());
            assertEquals(2, m.segmentsDeleted());
            assertEquals(4 * MIB, m.mappedBytes());
            assertEquals(4 * MIB, segmentFileBytes(store.arenaDir()));
            assertEquals(2, segmentFileCount(store.arenaDir()));
        }
    }

    @Test
    void freeSegmentsAreDeletedToMakeRoomForALargerClass() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject[] small = new StoredObject[4];
            for (int i = 0; i < 4; i++) small[i] = await(store.allocate(MIB)).seal();
            for (StoredObject o : small) o.release();
            assertEquals(4 * MIB, store.metrics().mappedBytes());

            StoredObject big = await(store.allocate(3 * MIB)).seal();
            StoreMetrics m = store.metrics();
            assertEquals(3, m.segmentsDeleted(), "least recently released first, only as many as needed");
            assertEquals(4 * MIB, m.mappedBytes());
            assertEquals(3 * MIB, m.inUseBytes());
            assertTrue(Files.exists(small[3].file()), "the most recently released segment stays");
            for (int i = 0; i < 3; i++) assertFalse(Files.exists(small[i].file()));
            assertEquals(4 * MIB, segmentFileBytes(store.arenaDir()));
            assertEquals(0, m.allocationWaits());
            big.release();
        }
    }

    @Test
    void requestOverTheBudgetFailsAtOnce() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            CompletableFuture<Allocation> f = store.allocate(4 * MIB + 1);
            assertTrue(f.isCompletedExceptionally());
            Throwable e = failure(f);
            assertInstanceOf(StoreException.class, e);
            assertEquals("object of 4194305 bytes exceeds the store budget of 4194304 bytes (--shm-budget)", e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> store.allocate(-1));
        }
    }

    @Test
    void aBudgetBetweenSizeClassesStillAdmitsAnObjectOfTheWholeBudget() throws Exception {
        long budget = 5 * MIB + 100;
        try (var store = ShmObjectStore.open(config(dir, budget))) {
            StoredObject o = await(store.allocate(budget)).seal();
            assertEquals(budget, Files.size(o.file()));
            assertEquals(budget, store.metrics().mappedBytes());
            o.release();
            StoredObject again = await(store.allocate(5 * MIB)).seal(); // reuses the clamped segment
            assertEquals(o.file(), again.file());
            again.release();
        }
    }

    @Test
    void emptyObjectsAreAllowed() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            StoredObject o = await(store.allocate(0)).seal();
            assertEquals(0, o.bytes());
            assertEquals(0, o.segment().byteSize());
            o.release();
        }
    }

    @Test
    void cancelledWaiterGivesUpItsTurn() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 2 * MIB))) {
            StoredObject held = await(store.allocate(2 * MIB)).seal();
            CompletableFuture<Allocation> cancelled = store.allocate(2 * MIB);
            CompletableFuture<Allocation> next = store.allocate(2 * MIB);
            assertTrue(cancelled.cancel(false));
            held.release();
            await(next).seal().release();
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    @Test
    void sizeClassesGroupSimilarSizes() {
        assertEquals(MIB, ShmObjectStore.sizeClass(0));
        assertEquals(MIB, ShmObjectStore.sizeClass(1));
        assertEquals(MIB, ShmObjectStore.sizeClass(MIB));
        assertEquals(2 * MIB, ShmObjectStore.sizeClass(MIB + 1));
        assertEquals(8 * MIB, ShmObjectStore.sizeClass(8 * MIB));
        assertEquals(9 * MIB, ShmObjectStore.sizeClass(8 * MIB + 1));
        assertEquals(16 * MIB, ShmObjectStore.sizeClass(16 * MIB));
        assertEquals(18 * MIB, ShmObjectStore.sizeClass(16 * MIB + 1));
        assertEquals(1152 * MIB, ShmObjectStore.sizeClass(1100 * MIB)); // steps of 128 MiB above 1 GiB
        long previous = 0;
        for (long b = 1; b < 1L << 40; b = b * 3 / 2 + 1) {
            long c = ShmObjectStore.sizeClass(b);
            assertTrue(c >= b && c >= previous && c - b <= Math.max(MIB, b / 8), b + " -> " + c);
            previous = c;
        }
        assertEquals(Long.MAX_VALUE, ShmObjectStore.sizeClass(Long.MAX_VALUE));
    }

    @Test
    void closeFailsWaitersAndDeletesTheArena() throws Exception {
        var store = ShmObjectStore.open(config(dir, 2 * MIB));
        Path arena = store.arenaDir();
        Allocation open = await(store.allocate(MIB));
        StoredObject leased = await(store.allocate(MIB)).seal();
        Lease lease = leased.lease();
        CompletableFuture<Allocation> waiter = store.allocate(2 * MIB);
        assertTrue(Files.isDirectory(arena));

        store.close();
        Throwable e = failure(waiter);
        assertInstanceOf(StoreException.class, e);
        assertEquals("store closed", e.getMessage());
        assertFalse(Files.exists(arena), "arena directory removed");
        try (var left = Files.list(dir)) {
            assertEquals(0, left.count());
        }
        assertEquals("store closed", failure(store.allocate(MIB)).getMessage());
        assertThrows(IllegalStateException.class, open::seal);
        assertThrows(IllegalStateException.class, () -> leased.segment().get(ValueLayout.JAVA_BYTE, 0), "unmapped, not a crash");
        lease.close(); // harmless after close
        leased.release();
        open.abort();
        store.close(); // idempotent
        assertEquals(0, store.metrics().mappedBytes());
    }

    @Test
    void prewarmedSegmentsServeTheFirstObjectsWithinHalfTheBudget() throws Exception {
        try (var store = ShmObjectStore.open(StoreTesting.config(dir, 16 * StoreTesting.MIB))) {
            assertEquals(2, store.prewarm(3 * StoreTesting.MIB, 10), "at most half the budget");
            var m = store.metrics();
            assertEquals(2, m.segmentsCreated());
            assertEquals(0, m.inUseBytes());
            var a = StoreTesting.await(store.allocate(3 * StoreTesting.MIB));
            assertEquals(1, store.metrics().segmentsReused(), "the first object takes a prepared segment");
            a.abort();
        }
    }
}
