package dev.stoker.plan.schedule;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import java.util.Arrays;
import java.util.HashSet;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class SampleScheduleTest {

    @Test
    void eachEpochIsAPermutation() {
        var s = new SampleSchedule(7, 1000, 4, 8);
        for (long epoch = 0; epoch < 3; epoch++) {
            int[] sorted = s.permutationCopy(epoch);
            Arrays.sort(sorted);
            assertArrayEquals(IntStream.range(0, 1000).toArray(), sorted, "epoch " + epoch);
        }
    }

    @Test
    void sameSeedSameOrderNewPermutationPerEpochAndSeed() {
        var a = new SampleSchedule(42, 500, 2, 4);
        var b = new SampleSchedule(42, 500, 2, 4);
        assertArrayEquals(a.permutationCopy(0), b.permutationCopy(0));
        assertArrayEquals(a.permutationCopy(5), b.permutationCopy(5));
        assertFalse(Arrays.equals(a.permutationCopy(0), a.permutationCopy(1)), "epochs 0 and 1 share an order");
        assertFalse(Arrays.equals(a.permutationCopy(0), new SampleSchedule(43, 500, 2, 4).permutationCopy(0)), "seeds 42 and 43 share an order");
        assertFalse(Arrays.equals(a.permutationCopy(0), IntStream.range(0, 500).toArray()), "not shuffled");
    }

    @Test
    void orderDoesNotDependOnRanksOrBatchSizeOrCacheState() {
        var a = new SampleSchedule(9, 300, 1, 1);
        var b = new SampleSchedule(9, 300, 3, 10);
        for (long e : new long[] {4, 0, 7, 0, 4, 1}) assertArrayEquals(a.permutationCopy(e), b.permutationCopy(e), "epoch " + e);
    }

    /** Pins the generator: a change here would silently change every resumed run's order. */
    @Test
    void orderIsPinned() {
        assertArrayEquals(new int[] {0, 4, 2, 3, 6, 9, 5, 7, 1, 8}, SampleSchedule.shuffle(42, 0, 10));
        assertArrayEquals(new int[] {3, 8, 1, 0, 9, 5, 4, 6, 2, 7}, SampleSchedule.shuffle(42, 1, 10));
    }

    @Test
    void ranksGetDisjointContiguousBlocksOfTheGlobalOrder() {
        int ranks = 3, batch = 5;
        var s = new SampleSchedule(1, 100, ranks, batch);
        assertEquals(6, s.stepsPerEpoch());
        for (long epoch = 0; epoch < 2; epoch++) {
            int[] perm = s.permutationCopy(epoch);
            for (long step = 0; step < s.stepsPerEpoch(); step++) {
                var union = new HashSet<Integer>();
                for (int r = 0; r < ranks; r++) {
                    int[] b = s.batchFor(epoch, step, r);
                    assertEquals(batch, b.length);
                    int from = (int) (step * ranks * batch) + r * batch;
                    assertArrayEquals(Arrays.copyOfRange(perm, from, from + batch), b);
                    for (int i : b) assertTrue(union.add(i), "index " + i + " given twice in step " + step);
                }
                assertEquals(ranks * batch, union.size());
            }
        }
    }

    @Test
    void tailThatDoesNotFillAGlobalStepIsDropped() {
        var s = new SampleSchedule(3, 103, 2, 5);
        assertEquals(10, s.stepsPerEpoch());
        assertEquals(3, s.droppedPerEpoch());
        var it = s.iterator(ScheduleCursor.START, 1);
        var seen = new HashSet<Integer>();
        for (int step = 0; step < 10; step++) {
            var b = it.next();
            assertEquals(0, b.epoch());
            assertEquals(step, b.step());
            for (int i : b.indices()) seen.add(i);
        }
        var first = it.next();
        assertEquals(new ScheduleCursor(1, 0), first.cursor());
        assertEquals(10, first.globalStep());
        assertArrayEquals(s.batchFor(1, 0, 1), first.indices());
        int[] perm = s.permutationCopy(0);
        for (int k = 100; k < 103; k++) {
            final int tail = perm[k];
            assertFalse(seen.contains(tail), "tail index " + tail + " was scheduled");
        }
    }

    @Test
    void iterationFromACursorEqualsTheUninterruptedRun() {
        var s = new SampleSchedule(11, 57, 2, 4);
        long spe = s.stepsPerEpoch();
        var full = s.iterator(ScheduleCursor.START, 1);
        ScheduledBatch[] all = new ScheduledBatch[(int) (3 * spe)];
        for (int g = 0; g < all.length; g++) all[g] = full.next();
        for (long g : new long[] {0, 1, spe - 1, spe, 2 * spe + 3}) {
            var resumed = s.iterator(s.cursorAt(g), 1).next();
            assertEquals(all[(int) g].cursor(), resumed.cursor());
            assertEquals(g, resumed.globalStep());
            assertArrayEquals(all[(int) g].indices(), resumed.indices());
        }
    }

    /**
     * Audit #32: two ranks take 10 steps (labels 0–9, position 40); three ranks resume there. Counted from the origin in
     * steps of 6, the resumed steps would be labelled 6, 7, …: labels already used. Labelled at the cursor they go on 10, 11, …
     * through the epoch's end and into the next epoch, and match the order itself (same cursors and indices).
     */
    @Test
    void aScheduleLabelledAtAResumeCursorCountsOnFromThereAcrossEpochs() {
        var two = new SampleSchedule(5, 100, 2, 2);
        var at = new ScheduleCursor(0, 40);
        assertEquals(10, two.globalStep(at));
        var three = new SampleSchedule(5, 100, 3, 2);
        assertEquals(6, three.globalStep(at), "counted from the origin: a label the two ranks used");
        var labelled = three.labelled(at, 10);
        var it = labelled.iterator(at, 2);
        var plain = three.iterator(at, 2);
        long expected = 10;
        var used = new HashSet<Long>();
        for (long g = 0; g < 10; g++) used.add(g);
        for (int i = 0; i < 30; i++) {
            var b = it.next();
            var p = plain.next();
            assertEquals(p.cursor(), b.cursor());
            assertArrayEquals(p.indices(), b.indices());
            assertEquals(expected++, b.globalStep(), "step " + i + " at " + b.cursor());
            assertTrue(used.add(b.globalStep()), "label " + b.globalStep() + " repeated");
        }
        // (100 − 40) / 6 = 10 steps finish epoch 0 (labels 10–19); epoch 1 starts at label 20
        assertEquals(20, labelled.globalStep(new ScheduleCursor(1, 0)));
        assertEquals(20 + 16 + 3, labelled.globalStep(new ScheduleCursor(2, 18)));
        assertEquals(6, labelled.globalStep(new ScheduleCursor(0, 36)), "before the label cursor: counted from the origin");
        assertEquals(three.globalStep(new ScheduleCursor(1, 0)), labelled.labelled(at, -1).globalStep(new ScheduleCursor(1, 0)));
        assertEquals(at, labelled.labelAt());
        assertEquals(10, labelled.labelStep());
        assertEquals(-1, three.labelStep());
    }

    @Test
    void refusesAStepLargerThanTheDataset() {
        assertThrows(IllegalArgumentException.class, () -> new SampleSchedule(0, 10, 3, 4));
        var s = new SampleSchedule(0, 10, 2, 4);
        assertThrows(IllegalArgumentException.class, () -> s.batchFor(0, 1, 0));
        assertThrows(IllegalArgumentException.class, () -> s.batchFor(0, 0, 2));
        assertThrows(IllegalArgumentException.class, () -> s.batchAt(new ScheduleCursor(0, 3), 0));
    }

    @Test
    void recordsAtAPositionAreTheBatchesRecords() {
        var mix = new SourceMix(4, new int[] {30, 20}, new double[] {1, 0.5});
        for (var s : new SampleSchedule[] {new SampleSchedule(7, 50, 2, 5), new SampleSchedule(7, mix, 2, 5)}) {
            for (long epoch = 0; epoch < 3; epoch++) {
                int[] run = new int[20];
                s.recordsAt(epoch, 10, 20, run);
                for (int rank = 0; rank < 2; rank++) {
                    int[] batch = s.batchAt(new ScheduleCursor(epoch, 10), rank);
                    for (int i = 0; i < 5; i++) {
                        assertEquals(batch[i], s.recordAt(epoch, 10 + rank * 5 + i));
                        assertEquals(batch[i], run[rank * 5 + i]);
                    }
                }
            }
            assertThrows(IllegalArgumentException.class, () -> s.recordAt(0, s.datasetSize()));
            assertThrows(IllegalArgumentException.class, () -> s.recordsAt(0, s.datasetSize() - 2, 3, new int[3]));
        }
        var labelled = new SampleSchedule(7, mix, 2, 5);
        var c = new ScheduleCursor(1, 20);
        var r = labelled.resumeAt(c, 99);
        assertEquals(99, r.step());
        assertEquals(labelled.resumeAt(c).sourcePositions()[1], r.sourcePositions()[1]);
    }
}
