package dev.stoker.plan;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.pack.Shapes;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The one factory of a job's steps, and the face both kinds show through it: the factory returns the order itself for
 * batches (and never asks for shapes) or a packed schedule over it for packs; through {@link StepSchedule} both label,
 * walk, count, leave out and describe their steps the same way, so that a caller never needs to know which it holds.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class StepSchedulesTest {
    static final int RANKS = 3;
    static final Packing PACKS = Packing.of(4096, PackCost.QWEN2_VL_2B);

    static StepSchedule batches() throws Exception {
        var order = StepSchedules.order(7, null, 40, RANKS, 4, Packing.OFF);
        return StepSchedules.of(order, Packing.OFF, () -> { throw new AssertionError("a batch schedule needs no shapes"); }, Shapes.DUMMY);
    }

    static StepSchedule packs(ShapeIndex shapes) throws Exception {
        var order = StepSchedules.order(7, null, shapes.size(), RANKS, 4, PACKS);
        return StepSchedules.of(order, PACKS, () -> shapes, Shapes.DUMMY);
    }

    static List<ScheduledBatch> take(StepSchedule s, ScheduleCursor from, int rank, int n) {
        var it = s.iterator(from, rank);
        var out = new ArrayList<ScheduledBatch>();
        for (int i = 0; i < n; i++) out.add(it.next());
        return out;
    }

    @Test
    void batchesAreTheOrderItselfAndNeverAskForShapes() throws Exception {
        var asked = new AtomicInteger();
        var order = StepSchedules.order(7, null, 40, RANKS, 4, Packing.OFF);
        var steps = StepSchedules.of(order, Packing.OFF, () -> {
            asked.incrementAndGet();
            return Shapes.same(40, SampleShape.of(10));
        }, Shapes.DUMMY);
        assertSame(order, steps);
        assertEquals(0, asked.get());
        assertEquals(4, order.batchSize());
        assertEquals(RANKS * 4, steps.positionsPerStep());
        assertEquals(40 / 12, steps.stepsPerEpoch());
    }

    @Test
    void packsArePlannedOverAnOrderOfOnePositionARankForItsRanks() throws Exception {
        var shapes = Shapes.referenceLike(300, 3, 5);
        var order = StepSchedules.order(7, null, shapes.size(), RANKS, 400, PACKS); // a batch of 400 would not fit 300 samples
        assertEquals(1, order.batchSize(), "a packed job's steps are cut by the planner: its batch size plays no part");
        var steps = StepSchedules.of(order, PACKS, () -> shapes, Shapes.DUMMY);
        var packed = assertInstanceOf(PackedSchedule.class, steps);
        assertSame(order, steps.order());
        assertEquals(RANKS, steps.ranks());
        assertEquals(0, steps.stepsPerEpoch(), "a step's positions vary");
        assertEquals(0, steps.positionsPerStep());
        var direct = new PackedSchedule(new PackPlanner(order, shapes, RANKS, 4096, 0, PackPlanner.Balance.COST, PackCost.QWEN2_VL_2B,
                Shapes.DUMMY));
        for (int r = 0; r < RANKS; r++) {
            var a = take(steps, ScheduleCursor.START, r, 30);
            var b = take(direct, ScheduleCursor.START, r, 30);
            for (int k = 0; k < a.size(); k++) assertArrayEquals(b.get(k).indices(), a.get(k).indices(), "rank " + r + " step " + k);
        }
        assertSame(order, packed.planner().order());
        var wrong = Shapes.referenceLike(299, 3, 5);
        var e = assertThrows(IllegalArgumentException.class, () -> StepSchedules.of(order, PACKS, () -> wrong, Shapes.DUMMY));
        assertTrue(e.getMessage().contains("299"), e.getMessage());
    }

    /** Both kinds, labelled at a step's cursor: that step has the label given, each later one more, across an epoch's end. */
    @Test
    void aLabelledScheduleCountsItsStepsOnFromTheLabelItWasGiven() throws Exception {
        for (var plain : List.of(batches(), packs(Shapes.referenceLike(300, 3, 5)))) {
            var at = take(plain, ScheduleCursor.START, 0, 5).get(4).cursor();
            var labelled = plain.labelled(at, 100);
            assertEquals(at, labelled.labelAt());
            assertEquals(100, labelled.labelStep());
            assertEquals(100, labelled.globalStep(at));
            var walk = take(labelled, at, 1, 40);
            Set<Long> epochs = new java.util.TreeSet<>();
            for (int k = 0; k < walk.size(); k++) {
                var b = walk.get(k);
                epochs.add(b.epoch());
                assertEquals(100 + k, b.globalStep(), plain.name() + ": step " + k + " from the label");
                assertEquals(100 + k, labelled.globalStep(b.cursor()), plain.name() + ": the label of its cursor");
                assertEquals(100 + k + 1, b.after().step(), plain.name() + ": the resume state labels the next step");
            }
            assertTrue(epochs.size() > 1, plain.name() + ": the walk crossed an epoch's end");
            assertEquals(4, plain.globalStep(at), plain.name() + ": unlabelled, steps count from the origin");
            assertSame(plain.labelled(at, -1).labelAt(), null);
        }
    }

    /** How far a move back goes, for both kinds: the steps walked from one cursor to the other, at most the steps taken. */
    @Test
    void theStepsBetweenTwoCursorsAreThoseAWalkTakes() throws Exception {
        for (var s : List.of(batches(), packs(Shapes.referenceLike(300, 3, 5)))) {
            var walk = take(s, ScheduleCursor.START, 0, 30);
            var from = walk.get(3).cursor();
            for (int k = 3; k < walk.size(); k++) {
                var to = walk.get(k).cursor();
                assertEquals(k - 3, s.stepsBetween(from, to, Long.MAX_VALUE), s.name() + ": from step 3 to step " + k);
                assertEquals(Math.min(k - 3, 2), s.stepsBetween(from, to, 2), s.name() + ": at most the steps taken");
            }
            assertEquals(0, s.stepsBetween(walk.get(9).cursor(), from, 100), s.name() + ": a cursor before: none");
        }
    }

    /** The batch schedule's walk counts each batch's resume state on from the one before; it is the order's, epoch after epoch. */
    @Test
    void aWalkOfMixedSourcesResumesAsTheOrderSays() {
        var mix = new SourceMix(5, new int[] {30, 11, 7}, new double[] {1, 2.5, 0.5});
        var s = new SampleSchedule(5, mix, 2, 3);
        for (var start : List.of(ScheduleCursor.START, s.cursorAt(7))) {
            var it = s.iterator(start, 1);
            for (int k = 0; k < 60; k++) {
                var b = it.next();
                assertEquals(s.scheduled(b.cursor(), 1).after(), b.after(), "step " + k + " from " + start);
                assertArrayEquals(s.batchAt(b.cursor(), 1), b.indices());
            }
        }
    }

    @Test
    void aBatchLeavesNothingOutAPackedStepItsFilteredSamplesAndNeitherTakesTheOthersSteps() throws Exception {
        var list = new ArrayList<SampleShape>();
        var base = Shapes.referenceLike(300, 3, 5);
        for (int i = 0; i < 300; i++) list.add(base.shape(i));
        list.set(5, SampleShape.of(5000, 64));
        list.set(9, new SampleShape(SampleShape.Kind.ERROR, 0, null));
        var packs = packs(ShapeIndex.of(list));
        var batches = batches();
        var left = new ArrayList<StepSchedule.LeftOut>();
        var it = packs.iterator(ScheduleCursor.START, 0);
        for (var b = it.next(); b.epoch() == 0; b = it.next()) left.addAll(packs.leftOut(b));
        assertEquals(2, left.size(), left.toString());
        for (var l : left) {
            if (l.record() == 5) {
                assertEquals("5000 tokens > --pack-tokens 4096", l.cause());
                assertEquals("over --pack-tokens", l.reason());
            } else {
                assertEquals(9, l.record());
                assertEquals("marked an error by the shape index", l.cause());
            }
        }
        var batch = batches.iterator(ScheduleCursor.START, 0).next();
        assertTrue(batches.leftOut(batch).isEmpty());
        var pack = packs.iterator(ScheduleCursor.START, 0).next();
        assertThrows(IllegalArgumentException.class, () -> batches.leftOut(pack));
        assertThrows(IllegalArgumentException.class, () -> packs.leftOut(batch));
    }

    /** What {@code stoker plan} prints: a batch's samples, or a pack's segments (its dummy image's too) and the step's figures. */
    @Test
    void eachKindDescribesItsSharesAndSteps() throws Exception {
        var batches = batches();
        var b = batches.iterator(ScheduleCursor.START, 2).next();
        var lines = batches.describe(b);
        assertEquals(4, lines.size());
        assertEquals(List.of("step", "rank", "source", "sample"), List.copyOf(lines.getFirst().keySet()));
        for (int i = 0; i < 4; i++) assertEquals(b.indices()[i], lines.get(i).get("sample"));
        assertTrue(batches.describeStep(b).isEmpty());

        var packs = packs(Shapes.referenceLike(300, 3, 60)); // many text-only samples: some packs hold no image
        int dummies = 0;
        for (int r = 0; r < RANKS; r++) {
            var it = packs.iterator(ScheduleCursor.START, r);
            for (int k = 0; k < 40; k++) dummies += checkSegments(packs, it.next());
        }
        assertTrue(dummies > 0, "some pack of the walks gets the dummy image");
        assertFalse(packs.name().equals(batches.name()));
    }

    /** Checks a pack's description against its plan; returns 1 when it has the dummy image's segment, else 0. */
    private static int checkSegments(StepSchedule packs, ScheduledBatch p) {
        var segments = packs.describe(p);
        boolean dummy = p.pack().dummyImage()[p.rank()];
        assertEquals(p.size() + (dummy ? 1 : 0), segments.size());
        int tokens = 0;
        for (var seg : segments) tokens += (int) seg.get("tokens");
        assertEquals(p.pack().tokens()[p.rank()], tokens, "the segments' tokens are the pack's");
        if (dummy) assertEquals(-1, segments.getLast().get("sample"));
        var step = packs.describeStep(p);
        assertEquals(1, step.size());
        assertEquals(List.of("step", "costs", "imbalance", "tokens", "filtered"), List.copyOf(step.getFirst().keySet()));
        return dummy ? 1 : 0;
    }
}
