package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The ledger's run-time accounting (audit #13): every batch a stream makes is checked against the
 * schedule before a trainer gets it, and each epoch end against the epoch's steps and samples. A
 * stream that hands out a batch twice, or another rank's or step's samples, fails the job: the
 * trainer gets the error, the ledger's failure completes, and no further trainer is admitted.
 */
@Timeout(30)
class LedgerAccountingTest {
    static final SampleSchedule SCHEDULE = new SampleSchedule(7, 13, 1, 2); // 6 steps per epoch, 1 sample dropped
    @TempDir Path tmp;

    /** A stream of heap batches that follows the schedule, except where {@code bend} changes a cursor. */
    static final class Scripted implements BatchStream {
        private final UnaryOperator<ScheduleCursor> bend;
        private ScheduleCursor next = ScheduleCursor.START;

        Scripted(UnaryOperator<ScheduleCursor> bend) { this.bend = bend; }

        @Override public int ranks() { return 1; }

        @Override public SampleSchedule schedule() { return SCHEDULE; }

        @Override public long fingerprint() { return 42; }

        @Override public ScheduleCursor start() { return ScheduleCursor.START; }

        @Override public boolean sharedMemory() { return false; }

        @Override
        public CompletableFuture<Made> next(int rank) {
            var c = bend.apply(next);
            next = SCHEDULE.next(next);
            long step = c.position() / SCHEDULE.positionsPerStep();
            int[] indices = SCHEDULE.batchAt(c, rank);
            long[] ids = new long[indices.length];
            for (int i = 0; i < ids.length; i++) ids[i] = indices[i];
            var meta = new BatchLayout.Meta(c.epoch(), step, rank, 1, ids.length, SCHEDULE.batchSize(),
                    c.epoch() * SCHEDULE.stepsPerEpoch() + step);
            return CompletableFuture.completedFuture(new Heap(new BatchProvider.Prepared(meta,
                    List.of(Tensor.of("sample_index", ids, ids.length).asMetadata()))));
        }

        @Override public void moveTo(ScheduleCursor at, long step) { throw new IllegalArgumentException("cannot move"); }

        @Override public void close() {}
    }

    @Test
    void aStreamThatFollowsTheScheduleIsCheckedAtEveryEpochEnd() throws Exception {
        try (var ledger = new RankLedger(new Scripted(c -> c), null, 0, 0)) {
            ledger.join(0, 1, null, 0);
            for (int i = 0; i < 3 * 6 + 1; i++) ledger.next(0, 1).get(5, TimeUnit.SECONDS);
            assertEquals(3, ledger.epochsChecked());
            assertEquals(null, ledger.ledgerMetrics().get("violation"));
            assertTrue(!ledger.failure().isDone());
        }
    }

    @Test
    void aBatchHandedOutTwiceFailsTheJobAndTheTrainerGetsTheError() throws Exception {
        // step 3 of epoch 0 repeats step 2: the same samples twice, step 3's never
        var twice = new ScheduleCursor(0, 3L * SCHEDULE.positionsPerStep());
        var stream = new Scripted(c -> c.equals(twice) ? new ScheduleCursor(0, 2L * SCHEDULE.positionsPerStep()) : c);
        try (var ledger = new RankLedger(stream, null, 0, 0); var server = new FeedServer(tmp.resolve("a.sock"), ledger, false);
             var trainer = TrainerClient.connect(server.socketPath(), 0, 1, "t")) {
            for (int i = 0; i < 3; i++) trainer.next().close();
            var e = assertThrows(IOException.class, trainer::next);
            assertTrue(e.getMessage().contains("delivery accounting broken: rank 0 epoch 0 step 3"), e.getMessage());
            assertTrue(ledger.failure().isDone(), "the node's failure completes: it exits with the error");
            var refused = assertThrows(IOException.class, () -> TrainerClient.connect(server.socketPath(), 0, 1, "t"));
            assertTrue(refused.getMessage().contains("delivery accounting broken"), refused.getMessage());
        }
    }
}
