package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.Ticker;
import dev.stoker.testkit.FakeTicker;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The claim grace by the ledger's ticker, without sleeping: a trainer that claims a rank whose old connection is still
 * open waits up to {@link RankLedger#LIVE_GRACE_NANOS} for that connection to close — welcomed when it closes within the
 * grace, refused once the grace is over — and no real time need pass for either.
 */
@Timeout(30)
class LedgerGraceTest {
    static final long OLD = 1, NEW = 2;

    /** A hand-moved ticker that counts how often the ledger reads it: a wait has looked at the time when the count rises. */
    static final class Watched implements Ticker {
        final FakeTicker time = new FakeTicker();
        final AtomicLong reads = new AtomicLong();

        @Override
        public long read() {
            reads.incrementAndGet();
            return time.read();
        }

        /** Waits until the ledger has read the time {@code n} more times than {@code since} (10 s at most, by the real clock). */
        void awaitReads(long since, int n) {
            long giveUp = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (reads.get() < since + n) {
                if (System.nanoTime() - giveUp > 0) throw new AssertionError("the ledger did not look at the time: " + reads.get());
                Thread.onSpinWait();
            }
        }

        /** Moves the time on, then waits until the ledger has read it twice since: its wait has seen the new time. */
        void advanceAndAwaitReads(Duration d) {
            time.advance(d);
            awaitReads(reads.get(), 2);
        }
    }

    static RankLedger ledger(Ticker ticker) {
        return new RankLedger(new LedgerAccountingTest.Scripted(c -> c), null, 0, 0, ticker);
    }

    @Test
    void aClaimWaitsThroughTheGraceAndIsWelcomedWhenTheOldConnectionCloses() throws Exception {
        var ticker = new Watched();
        try (var ledger = ledger(ticker)) {
            ledger.join(0, OLD, null, 0);
            long before = ticker.reads.get();
            var claim = CompletableFuture.supplyAsync(() -> ledger.join(0, NEW, null, 0));
            ticker.awaitReads(before, 2); // the claim took its deadline and looked at the time in its wait
            ticker.advanceAndAwaitReads(Duration.ofNanos(RankLedger.LIVE_GRACE_NANOS - 1_000_000)); // a millisecond of it left
            assertFalse(claim.isDone(), "the claim waits while the old connection is open and the grace lasts");
            ledger.leave(0, OLD);
            assertEquals(0, claim.get(5, TimeUnit.SECONDS).nextStep(), "welcomed once the old connection closed");
        }
    }

    @Test
    void aClaimIsRefusedOnceTheGraceIsOverByTheTicker() throws Exception {
        var ticker = new Watched();
        try (var ledger = ledger(ticker)) {
            ledger.join(0, OLD, null, 0);
            long before = ticker.reads.get();
            var claim = CompletableFuture.supplyAsync(() -> ledger.join(0, NEW, null, 0));
            ticker.awaitReads(before, 2); // the claim took its deadline and looked at the time in its wait
            ticker.time.advance(Duration.ofNanos(RankLedger.LIVE_GRACE_NANOS)); // its next look at the time ends the wait
            var e = assertThrows(ExecutionException.class, () -> claim.get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause().getMessage().startsWith("rank 0 is already being fed to a trainer on another, open connection"),
                    e.getCause().getMessage());
            assertNotNull(ledger.next(0, OLD).get(5, TimeUnit.SECONDS), "the old trainer goes on");
        }
    }
}
