package dev.stoker.store;

import static dev.stoker.store.StoreTesting.MIB;
import static dev.stoker.store.StoreTesting.await;
import static dev.stoker.store.StoreTesting.config;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Shares of the budget ({@link ShmObjectStore#shareAmong}): an owner that holds its share waits
 * without holding up the others; without shares, arrival order rules and a stalled owner starves
 * the rest (the control case).
 */
@Timeout(60)
class StoreShareTest {
    @TempDir Path dir;

    /** Owners 0 and 1 each hold 4 × 1 MiB (the whole 8 MiB budget); owner 0 asks for one more, then owner 1 frees one and asks again. */
    private boolean secondOwnerServedAfterItsRelease(ShmObjectStore store) throws Exception {
        var held0 = new ArrayList<StoredObject>();
        var held1 = new ArrayList<StoredObject>();
        for (int i = 0; i < 4; i++) held0.add(await(store.allocate(MIB, 0)).seal());
        for (int i = 0; i < 4; i++) held1.add(await(store.allocate(MIB, 1)).seal());
        var stalled = store.allocate(MIB, 0); // owner 0 stopped reading: this waits
        assertFalse(stalled.isDone());
        held1.removeFirst().release();          // owner 1's consumer frees a batch…
        var next = store.allocate(MIB, 1);      // …and owner 1's producer asks for the next one
        Thread.sleep(50);
        boolean served = next.isDone();
        if (served) next.join().abort();
        stalled.cancel(false);
        held0.forEach(StoredObject::release);
        held1.forEach(StoredObject::release);
        return served;
    }

    @Test
    void anOwnerAtItsShareDoesNotHoldUpTheOthers() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 8 * MIB))) {
            store.shareAmong(2);
            assertTrue(secondOwnerServedAfterItsRelease(store), "owner 1 gets the space it freed");
        }
    }

    @Test
    void withoutSharesArrivalOrderGivesTheSpaceToTheStalledOwner() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 8 * MIB))) {
            assertFalse(secondOwnerServedAfterItsRelease(store), "control: FIFO hands owner 1's space to owner 0");
        }
    }

    @Test
    void anOwnerWithinItsShareKeepsArrivalOrderAndOneHoldingNothingMayExceedIt() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 8 * MIB))) {
            store.shareAmong(2);
            var big = await(store.allocate(6 * MIB, 0)); // more than a share, but owner 0 holds nothing
            var more = store.allocate(MIB, 0);           // over its share now: waits
            var other = await(store.allocate(2 * MIB, 1)); // owner 1 is served beside it
            assertFalse(more.isDone());
            big.abort();
            assertEquals(MIB, await(more).bytes());       // owner 0's release lets its own request in
            other.abort();
            assertEquals(6 * MIB, store.metrics().inUseBytes(), "it took the freed 6 MiB segment (reuse beats a new one)");
            more.join().abort();
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    /**
     * A reused segment larger than the request is charged at its capacity, as its recycle refunds it
     * (audit #3): before, the owner's count drifted below 0 and its share stopped being enforced.
     */
    @Test
    void aReusedLargerSegmentIsChargedWhatItsReleaseRefunds() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 16 * MIB))) {
            store.shareAmong(2);                          // 8 MiB each
            await(store.allocate(8 * MIB, 1)).abort();     // a free 8 MiB segment
            var small = await(store.allocate(2 * MIB, 0)); // reuses it (within 8× its size class)
            assertEquals(8 * MIB, store.ownerHeldBytes(0), "charged the segment it got");
            small.abort();
            assertEquals(0, store.ownerHeldBytes(0), "refunded the same bytes");
            var one = await(store.allocate(MIB, 0)).seal(); // owner 0 holds 1 MiB (a fresh or reused segment)
            var over = store.allocate(8 * MIB, 0);        // 1 + 8 > its 8 MiB share: must wait for its own release
            Thread.sleep(50);
            assertFalse(over.isDone(), "an owner holding objects stays within its share");
            one.release();
            await(over).abort();
        }
    }
    /**
     * Issue 31, item 6: a cluster member whose budget was not given raises it for a job that needs more; its shares grow
     * with it and a request waiting for space is admitted. A lower value leaves the budget as it is.
     */
    @Test
    void raisingTheBudgetGrowsTheSharesAndAdmitsAWaitingRequest() throws Exception {
        try (var store = ShmObjectStore.open(config(dir, 4 * MIB))) {
            store.shareAmong(2);
            var held = new ArrayList<StoredObject>();
            for (int i = 0; i < 2; i++) held.add(await(store.allocate(MIB, 0)).seal());
            var waiting = store.allocate(MIB, 0); // owner 0 holds its 2 MiB share
            assertFalse(waiting.isDone());
            store.raiseBudget(2 * MIB);
            assertEquals(4 * MIB, store.budgetBytes(), "never lowered");
            assertFalse(waiting.isDone());
            store.raiseBudget(8 * MIB);
            assertEquals(8 * MIB, store.budgetBytes());
            await(waiting).abort(); // the share is 4 MiB now
            held.forEach(StoredObject::release);
            assertEquals(Long.MAX_VALUE, store.objectLimitBytes(), "no object limit until one is set");
            store.limitObjects(3 * MIB, "a test's");
            assertEquals(3 * MIB, store.objectLimitBytes());
            assertEquals("a test's", store.objectLimitReason());
        }
    }
}
