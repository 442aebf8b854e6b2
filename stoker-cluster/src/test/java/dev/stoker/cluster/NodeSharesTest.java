package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.store.StoredObject;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A cluster node's store during a job (audit #15): batches made ahead for one rank fill only that
 * rank's share, so the copy another rank's trainer needs now is still pulled; with one FIFO for
 * all (the control) it waits behind them. And budgets whose shares cannot hold what a rank needs
 * are refused with the numbers.
 */
@Timeout(60)
class NodeSharesTest {
    static final long MIB = 1 << 20;
    @TempDir Path tmp;

    /** Rank 1's work made ahead takes the whole budget it may; then rank 0's trainer needs a pulled copy. */
    private boolean pullServedBesideWorkMadeAhead(ShmObjectStore store, int ranks) throws Exception {
        var made = new ArrayList<StoredObject>();
        while (true) { // rank 1's batches made ahead, until its owner is made to wait
            var f = store.allocate(MIB, 1);
            if (!waitDone(f)) {
                f.cancel(false);
                break;
            }
            made.add(f.join().seal());
            if (made.size() > 64) throw new AssertionError("never waited");
        }
        var pull = store.allocate(MIB, NodeShares.pulledOwner(0, ranks));
        boolean served = waitDone(pull);
        if (served) pull.join().abort();
        else pull.cancel(false);
        made.forEach(StoredObject::release);
        return served;
    }

    private static boolean waitDone(java.util.concurrent.CompletableFuture<?> f) throws InterruptedException {
        try {
            f.get(200, TimeUnit.MILLISECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException e) {
            return false;
        } catch (java.util.concurrent.ExecutionException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void workMadeAheadForOneRankLeavesRoomForAnotherRanksPull() throws Exception {
        try (var store = ShmObjectStore.open(new StoreConfig(tmp, 16 * MIB, "shares"))) {
            store.shareAmong(NodeShares.owners(2));
            assertTrue(pullServedBesideWorkMadeAhead(store, 2), "rank 0's pull is served");
        }
    }

    @Test
    void withOneFifoForAllThePullWaitsBehindTheWorkMadeAhead() throws Exception {
        try (var store = ShmObjectStore.open(new StoreConfig(tmp, 16 * MIB, "fifo"))) {
            assertFalse(pullServedBesideWorkMadeAhead(store, 2), "control: the budget went to rank 1's work");
        }
    }

    @Test
    void sharesTooSmallForTheLargestBatchAreRefusedWithTheNumbers() {
        var job = NodeConfig.builder().data("x.jsonl").ranks(2).batch(2).pixels(3136, 50176).set(NodeConfig.MAX_IMAGES, 1).build();
        long largest = ShmObjectStore.sizeClass(job.shm().largestBatchBytes());
        long enough = 3 * largest * NodeShares.owners(2);
        NodeShares.checkMade(job, enough);
        NodeShares.checkPulled(job, enough);
        var e = assertThrows(ConfigException.class, () -> NodeShares.checkPulled(job, enough - 1));
        assertTrue(e.getMessage().contains("--node-shm-budget " + (enough - 1) + " gives each of the 4 shares of a 2-rank job"), e.getMessage());
        assertTrue(e.getMessage().contains("Raise --node-shm-budget to " + enough), e.getMessage());
        NodeShares.checkMade(job, 2 * largest * NodeShares.owners(2));
        assertThrows(ConfigException.class, () -> NodeShares.checkMade(job, 2 * largest * NodeShares.owners(2) - 1));
        assertEquals(2, NodeShares.pulledOwner(0, 2));
    }
    /**
     * Issue 31, item 6: a job whose worst case does not fit a node's store (8,192-token samples full of images at a
     * 451,584-pixel cap) is sized from its data — one- and two-image samples, read by a header scan — and passes; a store
     * too small even for that is refused with the data's figures; one the worst case fits reads nothing.
     */
    @Test
    void aJobWhoseWorstCaseDoesNotFitIsSizedFromItsData() throws Exception {
        Path manifest = dev.stoker.testkit.SmallJpegDataset.write(tmp.resolve("ds"), 16, 31);
        var job = NodeConfig.builder().data(manifest.toString()).ranks(2).batch(4).pixels(3136, 451584)
                .set(NodeConfig.INDEX_CACHE, java.nio.file.Files.createDirectories(tmp.resolve("index")).toString()).build();
        long budget = 2L << 30; // --node-shm-budget's default
        assertThrows(ConfigException.class, () -> NodeShares.checkPulled(job, budget), "the worst case is refused");
        try (var feeds = dev.stoker.node.NodeFeeds.open(job)) {
            var shm = NodeShares.sized(job, feeds, budget, line -> {});
            assertTrue(shm.fromData(), shm.sizedFrom());
            NodeShares.checkPulled(job, shm, budget);
            NodeShares.checkMade(job, shm, budget);
            long need = NodeShares.neededBytes(job, shm);
            assertTrue(need * 10 < NodeShares.neededBytes(job, job.shm()), need + " vs the worst case's " + NodeShares.neededBytes(job, job.shm()));
            var e = assertThrows(ConfigException.class, () -> NodeShares.checkPulled(job, shm, need - 1));
            assertTrue(e.getMessage().contains("sized from the data's largest batch") && e.getMessage().contains("Raise --node-shm-budget to "
                    + need), e.getMessage());
            assertFalse(NodeShares.sized(job, feeds, NodeShares.neededBytes(job, job.shm()), line -> {}).fromData(), "fits as it is");
        }
    }
}
