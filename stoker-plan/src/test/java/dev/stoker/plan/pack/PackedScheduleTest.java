package dev.stoker.plan.pack;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackPlanner.Balance;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.SourceMix;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Rank iterators of a packed job: each rank's pack, the resume state after each step, resuming mid-epoch and at a step
 * across an epoch's end, the step within the epoch counted on the walk from the origin, mixed sources.
 */
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
        int crossings = 0;
        for (int k = 0; k < steps; k++) {
            ScheduledBatch b0 = ranks.get(0).get(k);
            PackedStep s = b0.pack();
            if (k > 0 && s.cursor().epoch() != ranks.get(0).get(k - 1).epoch()) {
                assertEquals(ranks.get(0).get(k - 1).pack().next(), s.cursor(), "the epoch's first step starts where the one across its start stopped");
                assertTrue(s.cursor().position() > 0, "a step ran across the epoch's end: " + s.cursor());
                crossings++;
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
        assertEquals(2, crossings, "60 steps run across two epoch ends");
    }

    @Test
    void labelsAndStepsWithinTheEpochAreCountedOnTheWalkFromTheOrigin() {
        ShapeIndex shapes = Shapes.referenceLike(1500, 2, 5);
        var order = new SampleSchedule(9, shapes.size(), 1, 1);
        List<ScheduledBatch> straight = take(schedule(order, shapes, 4).iterator(ScheduleCursor.START, 0, 0), 70);
        // a fresh schedule for each question: nothing walked before, the walk from the origin is its own
        for (int k : new int[] {69, 3, 40, 27, 28, 55}) {
            ScheduledBatch b = straight.get(k);
            ScheduleCursor c = b.cursor();
            assertEquals(k, schedule(order, shapes, 4).stepsBefore(c), "steps before step " + k);
            assertEquals(k, schedule(order, shapes, 4).labelAt(c, -1), "label of step " + k);
            assertEquals(41, schedule(order, shapes, 4).labelAt(c, 41), "a saved label is kept");
            assertEquals(b.step(), schedule(order, shapes, 4).stepInEpoch(c), "step within the epoch of step " + k);
            assertEquals(c, schedule(order, shapes, 4).cursorAt(k));
            // a cursor no step starts at (saved with another rank count): the steps that start before it
            var inside = new ScheduleCursor(c.epoch(), c.position() + 1);
            assertEquals(k + 1, schedule(order, shapes, 4).stepsBefore(inside));
            assertEquals(b.step() + 1, schedule(order, shapes, 4).stepInEpoch(inside));
        }
        // one schedule asked in any order gives the same answers (what it walked is kept)
        PackedSchedule one = schedule(order, shapes, 4);
        for (int k : new int[] {60, 5, 33, 69, 0, 26, 27}) {
            assertEquals(k, one.stepsBefore(straight.get(k).cursor()));
            assertEquals(straight.get(k).step(), one.stepInEpoch(straight.get(k).cursor()));
            assertEquals(straight.get(k).cursor(), one.cursorAt(k));
        }
        // an epoch's start is no step boundary: its first step starts later, and no step starts before (e, 0) in e
        long e2 = straight.get(69).epoch();
        assertEquals(0, one.stepInEpoch(new ScheduleCursor(e2, 0)));
    }

    @Test
    void aJobResizedToACursorNoStepStartsAtNumbersItsStepsOnceEachAcrossEpochEnds() {
        ShapeIndex shapes = Shapes.referenceLike(1500, 5, 5);
        var order = new SampleSchedule(7, shapes.size(), 1, 1);
        List<ScheduledBatch> straight = take(schedule(order, shapes, 4).iterator(ScheduleCursor.START, 0, 0), 6);
        var at = new ScheduleCursor(0, straight.get(5).cursor().position() + 3); // inside step 5
        List<ScheduledBatch> resized = take(schedule(order, shapes, 3).iterator(at, 100, 1), 70);
        assertEquals(schedule(order, shapes, 3).stepInEpoch(at), resized.getFirst().step());
        var keys = new HashSet<String>();
        for (int k = 0; k < resized.size(); k++) {
            ScheduledBatch b = resized.get(k);
            assertEquals(100 + k, b.globalStep());
            assertTrue(keys.add(b.epoch() + "/" + b.step()), "(epoch, step) " + b.epoch() + "/" + b.step() + " twice");
            if (k > 0 && b.epoch() == resized.get(k - 1).epoch()) assertEquals(resized.get(k - 1).step() + 1, b.step());
            else if (k > 0) assertEquals(schedule(order, shapes, 3).stepInEpoch(b.cursor()), b.step(), "counted on entering epoch " + b.epoch());
        }
        assertTrue(resized.getLast().epoch() >= 2, "the walk crossed two epoch ends");
    }

    @Test
    void aJobResumedFromABatchsResumeStateContinuesWithTheSameBatches() {
        ShapeIndex shapes = Shapes.referenceLike(1500, 4, 5);
        var order = new SampleSchedule(3, shapes.size(), 1, 1);
        List<ScheduledBatch> straight = take(schedule(order, shapes, 4).iterator(ScheduleCursor.START, 0, 2), 40);
        int crossing = 0;
        while (straight.get(crossing).pack().next().epoch() == straight.get(crossing).epoch()) crossing++;
        for (int k : new int[] {0, 9, crossing - 1, crossing, crossing + 1, 31}) {
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
