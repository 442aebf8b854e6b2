package dev.stoker.pipeline.pack;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.pipeline.pack.PackPlanner.Balance;
import dev.stoker.pipeline.schedule.SampleSchedule;
import dev.stoker.pipeline.schedule.ScheduledBatch;
import dev.stoker.pipeline.schedule.SourceMix;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Rank iterators of a packed job: each rank's pack, the resume state after each step, resuming mid-epoch, mixed sources. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PackedScheduleTest {
    static PackedSchedule schedule(SampleSchedule order, ShapeIndex shapes, int ranks) {
        return new PackedSchedule(new PackPlanner(order, shapes, ranks, 16384, 0, Balance.COST, PackCost.QWEN2_VL_2B, Shapes.DUMMY));
    }

    static List<ScheduledBatch> take(Iterator<ScheduledBatch> it, int n) {
        var out = new ArrayList<ScheduledBatch>();
        for (int i = 0; i < n; i++) out.add(it.next());
        return out;
    }

    @Test
    void eachRankGetsItsPackOfTheSameStepsWithTheResumeStateAfterThem() {
        ShapeIndex shapes = Shapes.referenceLike(1500, 2, 5);
        PackedSchedule ps = schedule(new SampleSchedule(9, shapes.size(), 1, 1), shapes, 4);
        int steps = 60; // past an epoch's end (about 27 steps per epoch)
        List<List<ScheduledBatch>> ranks = new ArrayList<>();
        for (int r = 0; r < 4; r++) ranks.add(take(ps.iterator(ScheduleCursor.START, 0, r), steps));
        long expectedInEpoch = 0;
        for (int k = 0; k < steps; k++) {
            ScheduledBatch b0 = ranks.get(0).get(k);
            PackedStep s = b0.pack();
            if (k > 0 && s.cursor().epoch() != ranks.get(0).get(k - 1).epoch()) {
                assertEquals(0, s.cursor().position());
                expectedInEpoch = 0;
            }
            for (int r = 0; r < 4; r++) {
                ScheduledBatch b = ranks.get(r).get(k);
                assertSame(s, b.pack(), "all ranks share the step's plan");
                assertArrayEquals(s.records()[r], b.indices());
                assertEquals(k, b.globalStep());
                assertEquals(expectedInEpoch, b.step());
                assertEquals(s.cursor(), b.cursor());
                assertEquals(r, b.rank());
                var after = b.after();
                assertEquals(s.next().epoch(), after.epoch());
                assertEquals(s.next().position(), after.position());
                assertEquals(k + 1, after.step());
            }
            if (k + 1 < steps) assertEquals(s.next(), ranks.get(0).get(k + 1).cursor());
            assertEquals(s.cursor(), ps.cursorAt(k));
            expectedInEpoch++;
        }
    }

    @Test
    void aJobResumedFromABatchsResumeStateContinuesWithTheSameBatches() {
        ShapeIndex shapes = Shapes.referenceLike(1500, 4, 5);
        var order = new SampleSchedule(3, shapes.size(), 1, 1);
        List<ScheduledBatch> straight = take(schedule(order, shapes, 4).iterator(ScheduleCursor.START, 0, 2), 40);
        for (int k : new int[] {0, 9, 26, 31}) {
            var at = straight.get(k).after();
            var resumed = take(schedule(order, shapes, 4).iterator(new ScheduleCursor(at.epoch(), at.position()), at.step(), 2), 5);
            for (int j = 0; j < 5; j++) {
                ScheduledBatch a = straight.get(k + 1 + j), b = resumed.get(j);
                assertEquals(a.cursor(), b.cursor());
                assertEquals(a.step(), b.step(), "step within the epoch, counted as the uninterrupted job did");
                assertEquals(a.globalStep(), b.globalStep());
                assertArrayEquals(a.indices(), b.indices());
                assertEquals(a.after(), b.after());
            }
        }
    }

    @Test
    void theResumeStateOfMixedSourcesIsTheOrdersAtTheNextCursor() {
        var mix = new SourceMix(5, new int[] {700, 500}, new double[] {1, 0.5});
        var order = new SampleSchedule(5, mix, 1, 1);
        ShapeIndex shapes = Shapes.referenceLike(mix.records(), 6, 5);
        PackedSchedule ps = schedule(order, shapes, 2);
        for (ScheduledBatch b : take(ps.iterator(ScheduleCursor.START, 0, 1), 30)) {
            var next = b.pack().next();
            assertEquals(order.resumeAt(next, b.globalStep() + 1), b.after());
            for (int rec : b.indices()) assertEquals(true, rec >= 0 && rec < mix.records());
        }
    }

    @Test
    void ranksOutsideTheJobAreRefused() {
        ShapeIndex shapes = Shapes.referenceLike(200, 1, 0);
        PackedSchedule ps = schedule(new SampleSchedule(1, shapes.size(), 1, 1), shapes, 2);
        assertThrows(IllegalArgumentException.class, () -> ps.iterator(ScheduleCursor.START, 0, 2));
        assertThrows(IllegalArgumentException.class, () -> ps.cursorAt(-1));
    }
}
