package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The ledger's audit on its own, over both kinds of schedule: honest batches pass and each epoch end is checked; a batch
 * of another step or rank, a sample that is not its share's, a count that does not add up, or an epoch left before its
 * last step fails with a message naming the rank, epoch and step.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DeliveryAuditTest {
    static final SampleSchedule BATCHES = new SampleSchedule(7, 13, 2, 2); // 3 steps per epoch, 1 sample dropped

    /** The metadata and sample indices of an honest batch of {@code b}: every sample but every 5th record delivered. */
    static BatchLayout.Meta meta(ScheduledBatch b, int world) {
        return new BatchLayout.Meta(b.epoch(), b.step(), b.rank(), world, delivered(b).length, b.size(), b.globalStep());
    }

    static long[] delivered(ScheduledBatch b) { return Arrays.stream(b.indices()).filter(i -> i % 5 != 0).asLongStream().toArray(); }

    static List<ScheduledBatch> walk(StepSchedule s, int rank, int n) {
        var it = s.iterator(ScheduleCursor.START, rank);
        var out = new ArrayList<ScheduledBatch>();
        for (int i = 0; i < n; i++) out.add(it.next());
        return out;
    }

    @Test
    void honestBatchesOfBothKindsPassAndEachEpochEndIsChecked() {
        for (StepSchedule s : List.of(BATCHES, PackedLedgerTest.packed())) {
            var audit = new DeliveryAudit(s.ranks(), s);
            int epochs = 0;
            long last = 0;
            for (int r = 0; r < s.ranks(); r++) {
                var steps = walk(s, r, 40);
                for (var b : steps) audit.check(b, meta(b, s.ranks()), delivered(b));
                epochs += (int) steps.getLast().epoch();
                last = steps.getLast().epoch();
            }
            assertEquals(epochs, audit.epochsChecked(), s.name() + ": every epoch a rank left");
            var tally = audit.tally(0);
            assertEquals(last, tally.epoch());
            assertTrue(tally.delivered() > 0, s.name());
        }
    }

    @Test
    void aBatchOfAnotherStepOrASampleNotItsSharesFailsNamingWhere() {
        for (StepSchedule s : List.of(BATCHES, PackedLedgerTest.packed())) {
            var steps = walk(s, 1, 4);
            var audit = new DeliveryAudit(s.ranks(), s);
            audit.check(steps.get(0), meta(steps.get(0), s.ranks()), delivered(steps.get(0)));
            var second = steps.get(1);
            var third = steps.get(2);
            var e = assertThrows(IllegalStateException.class, () -> audit.check(second, meta(third, s.ranks()), delivered(third)));
            assertTrue(e.getMessage().startsWith("delivery accounting broken: rank 1 epoch 0 step 1 (global step 1): the batch made is"),
                    e.getMessage());
            long[] foreign = delivered(second).clone();
            foreign[0] = -7;
            e = assertThrows(IllegalStateException.class, () -> audit.check(second, meta(second, s.ranks()), foreign));
            assertTrue(e.getMessage().contains("sample -7 is not one of this " + s.unit() + "'s"), e.getMessage());
            var fewer = new BatchLayout.Meta(0, second.step(), 1, s.ranks(), delivered(second).length, second.size() - 1,
                    second.globalStep());
            e = assertThrows(IllegalStateException.class, () -> audit.check(second, fewer, delivered(second)));
            String gives = s.name() + " gives this rank's " + s.unit() + " " + second.size() + " samples";
            assertTrue(e.getMessage().contains(gives), e.getMessage());
        }
    }

    /**
     * A pack with the dummy-image segment lists −1 last in its sample_index (PackAssembler.DUMMY_SAMPLE_INDEX): no record,
     * so the audit passes it; a batch's −1, or a pack's −1 before its samples, is foreign.
     */
    @Test
    void aPacksDummySegmentIsNoSampleButABatchsMinusOneIs() {
        var packed = PackedLedgerTest.packed();
        var step = walk(packed, 0, 1).getFirst();
        long[] honest = delivered(step);
        assertTrue(honest.length > 0);
        long[] withDummy = Arrays.copyOf(honest, honest.length + 1);
        withDummy[honest.length] = -1;
        new DeliveryAudit(packed.ranks(), packed).check(step, meta(step, packed.ranks()), withDummy);
        long[] dummyFirst = withDummy.clone();
        dummyFirst[0] = -1;
        dummyFirst[dummyFirst.length - 1] = honest[0];
        var e = assertThrows(IllegalStateException.class,
                () -> new DeliveryAudit(packed.ranks(), packed).check(step, meta(step, packed.ranks()), dummyFirst));
        assertTrue(e.getMessage().contains("sample -1 is not one of this pack's"), e.getMessage());
        var batch = walk(BATCHES, 0, 1).getFirst();
        long[] minusOne = Arrays.copyOf(delivered(batch), delivered(batch).length);
        minusOne[minusOne.length - 1] = -1;
        e = assertThrows(IllegalStateException.class, () -> new DeliveryAudit(BATCHES.ranks(), BATCHES).check(batch, meta(batch, BATCHES.ranks()), minusOne));
        assertTrue(e.getMessage().contains("sample -1 is not one of this"), e.getMessage());
    }

    /** A rank that enters the next epoch without the last step of its epoch: the epoch's tally does not close. */
    @Test
    void anEpochLeftBeforeItsLastStepFails() {
        var steps = walk(BATCHES, 0, 4); // epoch 0: steps 0, 1, 2; then epoch 1, step 0
        var audit = new DeliveryAudit(2, BATCHES);
        audit.check(steps.get(0), meta(steps.get(0), 2), delivered(steps.get(0)));
        audit.check(steps.get(1), meta(steps.get(1), 2), delivered(steps.get(1)));
        var next = steps.get(3);
        var e = assertThrows(IllegalStateException.class, () -> audit.check(next, meta(next, 2), delivered(next)));
        assertTrue(e.getMessage().contains("rank 0 epoch 0: ") && e.getMessage().contains("did not end with the last of them"),
                e.getMessage());
    }

    /** A step skipped within an epoch: the tally expects the steps one after another. */
    @Test
    void aStepSkippedWithinAnEpochFails() {
        var steps = walk(BATCHES, 0, 3);
        var audit = new DeliveryAudit(2, BATCHES);
        audit.check(steps.get(0), meta(steps.get(0), 2), delivered(steps.get(0)));
        var third = steps.get(2);
        var e = assertThrows(IllegalStateException.class, () -> audit.check(third, meta(third, 2), delivered(third)));
        assertTrue(e.getMessage().contains("expected step 1 of the epoch"), e.getMessage());
    }

    /** After a move the tallies start afresh: a rank may begin an epoch anywhere. */
    @Test
    void aMoveBeginsEveryRanksEpochAfresh() {
        var steps = walk(BATCHES, 0, 3);
        var audit = new DeliveryAudit(2, BATCHES);
        audit.check(steps.get(0), meta(steps.get(0), 2), delivered(steps.get(0)));
        audit.moved(BATCHES);
        assertNull(audit.tally(0));
        audit.check(steps.get(2), meta(steps.get(2), 2), delivered(steps.get(2)));
        assertEquals(0, audit.tally(0).epoch());
    }
}
