package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Who may take a rank's batches from the ledger: a request without a connection (a Flight ticket
 * without a session) is refused while a trainer holds the rank, and while the rank's previous such
 * request is unanswered; a trainer that claims the rank meanwhile waits for that request's batch
 * and is welcomed after it, never at a batch that goes elsewhere.
 */
@Timeout(30)
class LedgerClaimsTest {
    static final long SOCKET = 1, SESSION = 1L << 48;

    /** {@link LedgerAccountingTest.Scripted}'s batches (one rank), each made when the test says so. */
    static final class Gated implements BatchStream {
        final LedgerAccountingTest.Scripted batches = new LedgerAccountingTest.Scripted(c -> c);
        final ConcurrentLinkedQueue<Runnable> waiting = new ConcurrentLinkedQueue<>();

        @Override public int ranks() { return batches.ranks(); }

        @Override public dev.stoker.plan.schedule.SampleSchedule schedule() { return batches.schedule(); }

        @Override public long fingerprint() { return batches.fingerprint(); }

        @Override public ScheduleCursor start() { return batches.start(); }

        @Override public boolean sharedMemory() { return false; }

        @Override
        public CompletableFuture<Made> next(int rank) {
            var made = batches.next(rank).join();
            var out = new CompletableFuture<Made>();
            waiting.add(() -> out.complete(made));
            return out;
        }

        @Override public void moveTo(ScheduleCursor at, long step) { batches.moveTo(at, step); }

        @Override public void close() {}

        /** Makes the batches asked for so far. */
        void release() {
            for (Runnable r; (r = waiting.poll()) != null; ) r.run();
        }
    }

    static long step(BatchProvider.Delivery d) { return ((BatchProvider.Prepared) d).meta().globalStep(); }

    @Test
    void aRequestWithoutAConnectionIsRefusedWhileATrainerHoldsTheRankThatTrainerGoesOn() throws Exception {
        try (var ledger = new RankLedger(new LedgerAccountingTest.Scripted(c -> c), null, 0, 0)) {
            for (long trainer : new long[] {SOCKET, SESSION}) {
                long first = ledger.join(0, trainer, null, 0).nextStep();
                assertEquals(first, step(ledger.next(0, trainer).get(5, TimeUnit.SECONDS)));
                var e = assertThrows(IllegalArgumentException.class, () -> ledger.next(0, BatchProvider.NO_CONNECTION));
                assertTrue(e.getMessage().startsWith("rank 0 is being fed to a trainer on an open connection or session"), e.getMessage());
                assertEquals(first + 1, step(ledger.next(0, trainer).get(5, TimeUnit.SECONDS)), "the trainer's next batch is still its own");
                ledger.leave(0, trainer);
            }
            assertEquals(4, step(ledger.next(0, BatchProvider.NO_CONNECTION).get(5, TimeUnit.SECONDS)), "a rank nobody holds is served");
        }
    }

    @Test
    void oneRequestWithoutAConnectionPerRankIsUnansweredAtATime() throws Exception {
        var stream = new Gated();
        try (var ledger = new RankLedger(stream, null, 0, 0)) {
            var first = ledger.next(0, BatchProvider.NO_CONNECTION);
            var e = assertThrows(IllegalArgumentException.class, () -> ledger.next(0, BatchProvider.NO_CONNECTION));
            assertTrue(e.getMessage().startsWith("rank 0 has a request without a session unanswered already"), e.getMessage());
            stream.release();
            assertEquals(0, step(first.get(5, TimeUnit.SECONDS)));
            var second = ledger.next(0, BatchProvider.NO_CONNECTION);
            stream.release();
            assertEquals(1, step(second.get(5, TimeUnit.SECONDS)), "answered, the rank may be asked again");
        }
    }

    /**
     * A trainer claiming a rank whose batch is being made for a request without a connection waits
     * for it: that batch is the request's, so the trainer is welcomed at the one after (its state
     * would otherwise run a batch ahead of what it got, and a resume from it skip one).
     */
    @Test
    void aTrainerClaimingARankWhileARequestWithoutAConnectionIsUnansweredIsWelcomedAfterItsBatch() throws Exception {
        var stream = new Gated();
        try (var ledger = new RankLedger(stream, null, 0, 0)) {
            var plain = ledger.next(0, BatchProvider.NO_CONNECTION);
            var joined = CompletableFuture.supplyAsync(() -> ledger.join(0, SOCKET, null, 0));
            Thread.sleep(200);
            assertFalse(joined.isDone(), "the trainer waits for the request's batch");
            stream.release();
            assertEquals(0, step(plain.get(5, TimeUnit.SECONDS)), "the request gets its batch");
            assertEquals(1, joined.get(5, TimeUnit.SECONDS).nextStep(), "the trainer is welcomed at the batch after it");
            var got = ledger.next(0, SOCKET);
            stream.release();
            assertEquals(1, step(got.get(5, TimeUnit.SECONDS)));

            ledger.leave(0, SOCKET);
            var held = ledger.next(0, BatchProvider.NO_CONNECTION); // not answered within the grace: the claim is refused, naming the rank
            var e = assertThrows(IllegalArgumentException.class, () -> ledger.join(0, SOCKET + 1, null, 0));
            assertTrue(e.getMessage().startsWith("rank 0's next batch is being taken by a request without a session"), e.getMessage());
            stream.release();
            held.get(5, TimeUnit.SECONDS);
        }
    }
}
