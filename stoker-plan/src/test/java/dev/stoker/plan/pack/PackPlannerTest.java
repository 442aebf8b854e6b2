package dev.stoker.plan.pack;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackPlanner.Balance;
import dev.stoker.plan.schedule.SampleSchedule;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The planner's rules: budgets, coverage of the order, determinism, resume, resize, tie-breaks, dummy images, steps that
 * run across an epoch's end (the tail of one epoch and the head of the next, no record twice, nothing dropped).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PackPlannerTest {
    static final int N = 16384;

    static PackPlanner planner(ShapeIndex shapes, long seed, int ranks, int tokens, int patches, Balance balance) {
        return new PackPlanner(new SampleSchedule(seed, shapes.size(), 1, 1), shapes, ranks, tokens, patches, balance,
                PackCost.QWEN2_VL_2B, Shapes.DUMMY);
    }

    /** Reference-like shapes with a few error, filtered and over-long records among them. */
    static ShapeIndex mixedShapes(int n, long seed) {
        ShapeIndex base = Shapes.referenceLike(n, seed, 5);
        List<SampleShape> shapes = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            if (i % 97 == 3) shapes.add(new SampleShape(SampleShape.Kind.ERROR, 0, null));
            else if (i % 89 == 5) shapes.add(new SampleShape(SampleShape.Kind.FILTERED, 500, new int[] {400}));
            else if (i % 101 == 7) shapes.add(SampleShape.of(N + 1, 64));
            else shapes.add(base.shape(i));
        }
        return ShapeIndex.of(shapes);
    }

    /** The steps from {@code c} that start in its epoch (the last of them runs into the next epoch). */
    static List<PackedStep> epochSteps(PackPlanner p, ScheduleCursor c) {
        var steps = new ArrayList<PackedStep>();
        long epoch = p.aligned(c).epoch();
        while (c.epoch() == epoch) {
            PackedStep s = p.plan(c, steps.size());
            steps.add(s);
            c = s.next();
        }
        return steps;
    }

    /** The steps from {@code c} while they start before epoch {@code untilEpoch}. */
    static List<PackedStep> stepsUntil(PackPlanner p, ScheduleCursor c, long untilEpoch) {
        var steps = new ArrayList<PackedStep>();
        while (c.epoch() < untilEpoch) {
            PackedStep s = p.plan(c, steps.size());
            steps.add(s);
            c = s.next();
        }
        return steps;
    }

    /** The records at the positions {@code [from, to)} of the global order, epoch after epoch, sorted. */
    static int[] recordsBetween(SampleSchedule order, ScheduleCursor from, ScheduleCursor to) {
        var out = new ArrayList<Integer>();
        long e = from.epoch(), pos = from.position();
        while (e < to.epoch() || (e == to.epoch() && pos < to.position())) {
            out.add(order.recordAt(e, (int) pos));
            if (++pos == order.datasetSize()) {
                e++;
                pos = 0;
            }
        }
        return out.stream().mapToInt(Integer::intValue).sorted().toArray();
    }

    /** A step's records: its packs', its filtered and its skipped ones, sorted. */
    static int[] stepRecords(PackedStep s) {
        int[] out = new int[0];
        for (int[] pack : s.records()) out = concat(out, pack);
        out = concat(concat(out, s.filtered()), s.skipped());
        Arrays.sort(out);
        return out;
    }

    /**
     * The steps follow each other, and each holds exactly the records at its positions {@code [cursor, next)} (so the
     * steps together cover those positions once, across epoch ends), none of them twice (one source: every record is
     * once in an epoch).
     */
    static void assertCoverTheirPositions(SampleSchedule order, List<PackedStep> steps) {
        for (int k = 0; k < steps.size(); k++) {
            PackedStep s = steps.get(k);
            if (k > 0) assertEquals(steps.get(k - 1).next(), s.cursor(), "step " + k + " follows the one before");
            int[] records = stepRecords(s);
            assertArrayEquals(recordsBetween(order, s.cursor(), s.next()), records, "step " + k + " holds its positions' records");
            for (int i = 1; i < records.length; i++) assertTrue(records[i] != records[i - 1], "record " + records[i] + " twice in step " + k);
        }
    }

    @ParameterizedTest
    @EnumSource(Balance.class)
    void packsStayWithinTheirBudgetsAndDummiesGoWhereAnImageIsMissing(Balance balance) {
        ShapeIndex shapes = mixedShapes(6000, 3);
        int patchBudget = 30_000;
        PackPlanner p = planner(shapes, 11, 8, N, patchBudget, balance);
        for (PackedStep s : epochSteps(p, ScheduleCursor.START)) {
            boolean stepImage = false;
            for (int[] pack : s.records()) for (int rec : pack) stepImage |= shapes.shape(rec).hasImage();
            for (int r = 0; r < 8; r++) {
                int tokens = 0, patches = 0;
                boolean image = false;
                double cost = 0;
                for (int rec : s.records()[r]) {
                    SampleShape sh = shapes.shape(rec);
                    tokens += sh.tokens();
                    patches += sh.patches();
                    image |= sh.hasImage();
                    cost += PackCost.QWEN2_VL_2B.flops(sh);
                }
                assertEquals(stepImage && !image, s.dummyImage()[r], "dummy flag of rank " + r);
                if (s.dummyImage()[r]) {
                    tokens += Shapes.DUMMY.tokens();
                    patches += Shapes.DUMMY.patches();
                    cost += PackCost.QWEN2_VL_2B.flops(Shapes.DUMMY);
                }
                assertEquals(tokens, s.tokens()[r]);
                assertEquals(patches, s.patches()[r]);
                assertEquals(cost, s.costs()[r], cost * 1e-12);
                assertTrue(tokens <= N, "rank " + r + " has " + tokens + " tokens");
                assertTrue(patches <= patchBudget, "rank " + r + " has " + patches + " patches");
                assertTrue(s.records()[r].length >= 1, "every rank gets a sample");
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Balance.class)
    void everyPositionOfEveryEpochIsPackedFilteredOrSkippedOnceAcrossEpochEnds(Balance balance) {
        ShapeIndex shapes = mixedShapes(5000, 5);
        PackPlanner p = planner(shapes, 13, 8, N, 0, balance);
        List<PackedStep> steps = stepsUntil(p, ScheduleCursor.START, 4);
        assertCoverTheirPositions(p.order(), steps);
        int[][] seen = new int[5][shapes.size()];
        int crossings = 0;
        for (PackedStep s : steps) {
            for (int rec : s.filtered()) {
                SampleShape sh = shapes.shape(rec);
                assertTrue(sh.tokens() > N || (!sh.hasImage() && sh.tokens() + Shapes.DUMMY.tokens() > N), "filtered " + sh);
            }
            for (int rec : s.skipped()) assertTrue(shapes.shape(rec).kind() != SampleShape.Kind.OK);
            long e = s.cursor().epoch();
            if (s.next().epoch() != e) {
                crossings++;
                assertEquals(e + 1, s.next().epoch(), "one epoch end at most");
            }
            for (long pos = s.cursor().position(), end = s.next().epoch() == e ? s.next().position() : shapes.size(); pos < end; pos++)
                seen[(int) e][p.order().recordAt(e, (int) pos)]++;
            if (s.next().epoch() != e) for (long pos = 0; pos < s.next().position(); pos++) seen[(int) e + 1][p.order().recordAt(e + 1, (int) pos)]++;
        }
        assertEquals(4, crossings, "a step across each of the four epoch ends");
        for (int epoch = 0; epoch < 4; epoch++)
            for (int rec = 0; rec < shapes.size(); rec++) assertEquals(1, seen[epoch][rec], "record " + rec + " of epoch " + epoch);
    }

    @ParameterizedTest
    @EnumSource(Balance.class)
    void aStepAcrossAnEpochsEndHoldsItsTailAndTheNextEpochsHead(Balance balance) {
        ShapeIndex shapes = mixedShapes(3000, 6);
        PackPlanner p = planner(shapes, 19, 8, N, 0, balance);
        List<PackedStep> steps = epochSteps(p, ScheduleCursor.START);
        PackedStep last = steps.getLast();
        assertEquals(1, last.next().epoch(), "the epoch's last step ends in the next epoch");
        assertTrue(last.next().position() > 0, "it took some of epoch 1's head: " + last.next());
        assertArrayEquals(recordsBetween(p.order(), last.cursor(), last.next()), stepRecords(last));
        // it went on into epoch 1 until its budget or the first record it already held from epoch 0, whichever came first
        var tail = new java.util.HashSet<Integer>();
        for (long pos = last.cursor().position(); pos < shapes.size(); pos++) tail.add(p.order().recordAt(0, (int) pos));
        int repeat = 0;
        while (!tail.contains(p.order().recordAt(1, repeat))) repeat++;
        assertTrue(last.next().position() <= repeat, "stopped at " + last.next() + ", epoch 1's first repeat at " + repeat);
        PackedStep first = p.plan(last.next(), steps.size());
        assertEquals(last.next(), first.cursor(), "epoch 1's first step starts where the step across the end stopped");
    }

    @ParameterizedTest
    @EnumSource(Balance.class)
    void aRecordOfTheNextEpochsHeadAlreadyInTheWindowEndsIt(Balance balance) {
        // 10 samples of 1000 tokens, 2 ranks, N = 4000: a window of 8. The step at (0, 8) holds the epoch's last two
        // records; epoch 1's head joins it up to 8 samples, or up to the first of those two records it meets.
        ShapeIndex shapes = Shapes.same(10, SampleShape.of(1000));
        int shorter = 0;
        for (long seed = 1; seed <= 40; seed++) {
            PackPlanner p = planner(shapes, seed, 2, 4000, 0, balance);
            var order = p.order();
            int a = order.recordAt(0, 8), b = order.recordAt(0, 9);
            int q = 0;
            while (q < 6 && order.recordAt(1, q) != a && order.recordAt(1, q) != b) q++;
            PackedStep s = p.plan(new ScheduleCursor(0, 8), 1);
            int kept = balance == Balance.COUNT ? (2 + q) / 2 * 2 : 2 + q; // COUNT keeps a multiple of R
            assertEquals(new ScheduleCursor(1, kept - 2), s.next(), "seed " + seed);
            assertEquals(kept, s.samples(), "seed " + seed);
            int[] records = stepRecords(s);
            for (int i = 1; i < records.length; i++) assertTrue(records[i] != records[i - 1], "seed " + seed + ": record twice");
            if (q < 6) {
                shorter++;
                PackedStep after = p.plan(s.next(), 2);
                assertTrue(contains(after.records()[0], order.recordAt(1, q)) || contains(after.records()[1], order.recordAt(1, q)),
                        "seed " + seed + ": the repeated record starts the next step");
            }
        }
        assertTrue(shorter > 0 && shorter < 40, "some seeds repeat a record at epoch 1's head, some do not: " + shorter);
    }

    @Test
    void aRepeatMetBeforeEveryRankHasASampleJoinsTheWindow() {
        // 4 ranks from (0, 9): one sample left in epoch 0, so the window must take at least three of epoch 1's; when
        // the record at (0, 9) is among them it joins (every rank needs a sample) — the one case of a record twice.
        ShapeIndex shapes = Shapes.same(10, SampleShape.of(1000));
        int repeated = 0;
        for (long seed = 1; seed <= 60; seed++) {
            PackPlanner p = planner(shapes, seed, 4, 2000, 0, Balance.COST);
            int a = p.order().recordAt(0, 9);
            PackedStep s = p.plan(new ScheduleCursor(0, 9), 0);
            int q = 0;
            while (q < 7 && p.order().recordAt(1, q) != a) q++;
            int times = 0;
            for (int[] pack : s.records()) for (int rec : pack) if (rec == a) times++;
            if (q < 3) {
                repeated++;
                assertEquals(2, times, "seed " + seed + ": the repeat at epoch 1's position " + q + " joins");
            } else {
                assertEquals(1, times, "seed " + seed);
                assertEquals(new ScheduleCursor(1, Math.min(q, 7)), s.next(), "seed " + seed + ": ends before the repeat, or full");
            }
        }
        assertTrue(repeated > 0, "some seed puts the record at epoch 1's head");
    }

    @Test
    void twoPlannersPlanTheSameSteps() {
        ShapeIndex shapes = mixedShapes(3000, 9);
        List<PackedStep> a = epochSteps(planner(shapes, 21, 8, N, 0, Balance.COST), ScheduleCursor.START);
        List<PackedStep> b = epochSteps(planner(shapes, 21, 8, N, 0, Balance.COST), ScheduleCursor.START);
        assertEquals(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) assertSame(a.get(i), b.get(i));
        List<PackedStep> other = epochSteps(planner(shapes, 22, 8, N, 0, Balance.COST), ScheduleCursor.START);
        assertFalse(Arrays.deepEquals(a.getFirst().records(), other.getFirst().records()), "another seed, another order");
    }

    @Test
    void planningFromAnyStepsNextGivesTheSameFollowingSteps() {
        ShapeIndex shapes = mixedShapes(3000, 4);
        PackPlanner p = planner(shapes, 5, 8, N, 0, Balance.COST);
        List<PackedStep> steps = new ArrayList<>(epochSteps(p, ScheduleCursor.START));
        steps.addAll(epochSteps(p, steps.getLast().next()));
        int crossing = epochSteps(p, ScheduleCursor.START).size() - 1;
        var from = new ArrayList<Integer>(List.of(crossing - 1, crossing));
        for (int k = 0; k + 3 < steps.size(); k += 7) from.add(k);
        for (int k : from) {
            PackPlanner fresh = planner(shapes, 5, 8, N, 0, Balance.COST);
            ScheduleCursor c = steps.get(k).next();
            for (int j = k + 1; j <= k + 3; j++) {
                PackedStep s = fresh.plan(c, steps.get(j).globalStep());
                assertSame(steps.get(j), s);
                c = s.next();
            }
        }
    }

    @Test
    void aJobResizedMidEpochCoversTheRestOfTheOrderOnce() {
        ShapeIndex shapes = mixedShapes(4000, 8);
        PackPlanner eight = planner(shapes, 17, 8, N, 0, Balance.COST);
        List<PackedStep> before = epochSteps(eight, ScheduleCursor.START).subList(0, 5);
        int[] seen = new int[shapes.size()];
        for (PackedStep s : before) mark(s, seen);
        for (int newRanks : new int[] {3, 16}) {
            int[] copy = seen.clone();
            PackPlanner resized = eight.withRanks(newRanks);
            List<PackedStep> after = epochSteps(resized, before.getLast().next());
            assertCoverTheirPositions(eight.order(), after);
            PackedStep last = after.getLast();
            for (PackedStep s : after) {
                assertEquals(newRanks, s.ranks());
                if (s != last) mark(s, copy);
            }
            for (long pos = last.cursor().position(); pos < shapes.size(); pos++) copy[eight.order().recordAt(0, (int) pos)]++;
            for (int rec = 0; rec < copy.length; rec++) assertEquals(1, copy[rec], "record " + rec + " resized to " + newRanks);
        }
    }

    @Test
    void aJobResizedAtAnEpochsEndCoversTheOrderAcrossItOnce() {
        ShapeIndex shapes = mixedShapes(4000, 10);
        PackPlanner eight = planner(shapes, 23, 8, N, 0, Balance.COST);
        PackedStep crossing = epochSteps(eight, ScheduleCursor.START).getLast();
        // from the crossing step's cursor (the tail of epoch 0) and from a few positions later (a cursor no step of these
        // rank counts starts at), on to the end of epoch 1
        long tail = shapes.size() - crossing.cursor().position();
        for (ScheduleCursor from : List.of(crossing.cursor(), new ScheduleCursor(0, crossing.cursor().position() + tail / 2))) {
            for (int newRanks : new int[] {3, 16}) {
                PackPlanner resized = eight.withRanks(newRanks);
                List<PackedStep> after = stepsUntil(resized, from, 2);
                assertEquals(from, after.getFirst().cursor());
                assertCoverTheirPositions(eight.order(), after);
                int crossings = 0;
                for (PackedStep s : after) if (s.next().epoch() != s.cursor().epoch()) crossings++;
                assertEquals(2, crossings, newRanks + " ranks from " + from + ": across the ends of epochs 0 and 1");
                assertEquals(2, after.getLast().next().epoch());
            }
        }
    }

    private static void mark(PackedStep s, int[] seen) {
        for (int[] pack : s.records()) for (int rec : pack) seen[rec]++;
        for (int rec : s.filtered()) seen[rec]++;
        for (int rec : s.skipped()) seen[rec]++;
    }

    @Test
    void countModeGivesEveryRankTheSameNumberOfSamples() {
        ShapeIndex shapes = mixedShapes(4000, 12);
        for (PackedStep s : epochSteps(planner(shapes, 3, 8, N, 0, Balance.COUNT), ScheduleCursor.START)) {
            for (int[] pack : s.records()) assertEquals(s.records()[0].length, pack.length);
            assertTrue(s.records()[0].length >= 1);
        }
    }

    @ParameterizedTest
    @EnumSource(Balance.class)
    void equalShapesAreDealtRoundRobinInPositionOrder(Balance balance) {
        // 24 equal samples of 1000 tokens, 4 ranks, N = 5000: 20 fit (5 per rank); ties go to the fewest samples, then
        // the lowest rank, so position k goes to rank k mod 4.
        ShapeIndex shapes = Shapes.same(24, SampleShape.of(1000, 256));
        PackPlanner p = planner(shapes, 1, 4, 5000, 0, balance);
        PackedStep s = p.plan(ScheduleCursor.START, 0);
        assertEquals(20, s.samples());
        for (int r = 0; r < 4; r++) {
            int[] expected = new int[5];
            for (int k = 0; k < 5; k++) expected[k] = p.order().recordAt(0, r + 4 * k);
            if (balance == Balance.COUNT) expected = snake(p, r);
            assertArrayEquals(expected, s.records()[r], "rank " + r);
        }
        assertEquals(new ScheduleCursor(0, 20), s.next());
        assertEquals(1.0, s.imbalance());
    }

    /** COUNT deals equal tokens snake-wise: round 0 ranks 0..3, round 1 ranks 3..0, … — then each pack in position order. */
    private static int[] snake(PackPlanner p, int rank) {
        var out = new ArrayList<Integer>();
        for (int k = 0; k < 20; k++) {
            int round = k / 4, slot = k % 4;
            if (((round & 1) == 0 ? slot : 3 - slot) == rank) out.add(p.order().recordAt(0, k));
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    @Test
    void aPackWithoutAnImageGetsTheDummyOnlyWhenAnotherHasOne() {
        // Two ranks; records 0..3 text, 4 with an image. Identity-like checks go through the order's permutation.
        List<SampleShape> list = new ArrayList<>();
        for (int i = 0; i < 4; i++) list.add(SampleShape.of(500));
        list.add(SampleShape.of(900, 2048));
        ShapeIndex withImage = ShapeIndex.of(list);
        PackedStep s = planner(withImage, 2, 2, 4000, 0, Balance.COST).plan(ScheduleCursor.START, 0);
        assertEquals(5, s.samples());
        int imageRank = contains(s.records()[0], 4) ? 0 : 1;
        assertFalse(s.dummyImage()[imageRank]);
        assertTrue(s.dummyImage()[1 - imageRank]);
        assertEquals(Shapes.DUMMY.patches(), s.patches()[1 - imageRank]);

        PackedStep text = planner(Shapes.same(6, SampleShape.of(500)), 2, 2, 4000, 0, Balance.COST).plan(ScheduleCursor.START, 0);
        assertFalse(text.dummyImage()[0] || text.dummyImage()[1], "no image in the step: no dummy");
        assertEquals(0, text.patches()[0] + text.patches()[1]);
    }

    private static boolean contains(int[] a, int v) {
        for (int x : a) if (x == v) return true;
        return false;
    }

    @Test
    void samplesOverABudgetAloneAreFilteredAndCounted() {
        int budget = 2000;
        List<SampleShape> list = new ArrayList<>();
        list.add(SampleShape.of(2001, 64));                 // over N
        list.add(SampleShape.of(1998));                     // text beside the dummy's 6 tokens: over N
        list.add(SampleShape.of(1994));                     // text that fits beside the dummy
        list.add(SampleShape.of(800, 5000));                // over P
        list.add(SampleShape.of(2000, 4000));               // exactly N and P: fits
        list.add(new SampleShape(SampleShape.Kind.ERROR, 10, null));
        for (int i = 0; i < 6; i++) list.add(SampleShape.of(300, 100));
        ShapeIndex shapes = ShapeIndex.of(list);
        PackPlanner p = planner(shapes, 3, 2, budget, 4000, Balance.COST);
        int[] filtered = new int[0], skipped = new int[0];
        int packed = 0;
        for (PackedStep s : epochSteps(p, ScheduleCursor.START)) {
            filtered = concat(filtered, s.filtered());
            skipped = concat(skipped, s.skipped());
            packed += s.samples();
            for (int r = 0; r < 2; r++) {
                assertTrue(s.tokens()[r] <= budget);
                assertTrue(s.patches()[r] <= 4000);
            }
        }
        Arrays.sort(filtered);
        assertArrayEquals(new int[] {0, 1, 3}, filtered);
        assertArrayEquals(new int[] {5}, skipped);
        assertTrue(packed >= 6, "packed " + packed);
    }

    private static int[] concat(int[] a, int[] b) {
        int[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    @Test
    void theRestOfAnEpochTooShortForEveryRankRunsIntoTheNextEpoch() {
        // 10 samples of 1000 tokens, 4 ranks, N = 2000: a step of 8 (2 per rank), then 2 left < 4 ranks: the next step
        // takes them and the head of epoch 1 (nothing dropped).
        ShapeIndex shapes = Shapes.same(10, SampleShape.of(1000));
        PackPlanner p = planner(shapes, 1, 4, 2000, 0, Balance.COST);
        PackedStep s = p.plan(ScheduleCursor.START, 0);
        assertEquals(8, s.samples());
        assertEquals(new ScheduleCursor(0, 8), s.next());
        PackedStep across = p.plan(s.next(), 1);
        assertEquals(1, across.next().epoch());
        assertTrue(across.samples() >= 4, "every rank gets a sample");
        assertEquals(across.samples(), 2 + across.next().position());
        assertEquals(new ScheduleCursor(0, 7), p.aligned(new ScheduleCursor(0, 7)), "a cursor is valid anywhere in its epoch");
        assertEquals(new ScheduleCursor(0, 9), p.aligned(new ScheduleCursor(0, 9)));
        assertEquals(new ScheduleCursor(1, 0), p.aligned(new ScheduleCursor(0, 10)), "the epoch's end is the next one's start");
        assertEquals(new ScheduleCursor(1, 0), p.aligned(new ScheduleCursor(0, 12)));
        PackedStep fromPastTheEnd = p.plan(new ScheduleCursor(0, 10), 5);
        assertEquals(new ScheduleCursor(1, 0), fromPastTheEnd.cursor());
        assertEquals(5, fromPastTheEnd.globalStep());
    }

    @Test
    void badInputIsRefusedWithItsCause() {
        ShapeIndex small = Shapes.same(3, SampleShape.of(100));
        var order = new SampleSchedule(1, 10, 1, 1);
        var p = new PackPlanner(order, small, 1, 1000, 0, Balance.COST, PackCost.QWEN2_VL_2B, Shapes.DUMMY);
        var e = assertThrows(IllegalStateException.class, () -> p.plan(ScheduleCursor.START, 0));
        assertTrue(e.getMessage().contains("outside the shape index"), e.getMessage());
        var tooFew = planner(Shapes.same(3, SampleShape.of(100)), 1, 4, 1000, 0, Balance.COST);
        var e2 = assertThrows(IllegalStateException.class, () -> tooFew.plan(ScheduleCursor.START, 0));
        assertTrue(e2.getMessage().contains("fewer than 4 samples"), e2.getMessage());
        assertThrows(IllegalArgumentException.class, () -> planner(small, 1, 2, 6, 0, Balance.COST), "N must exceed the dummy's tokens");
        assertThrows(IllegalArgumentException.class, () -> planner(small, 1, 2, 1000, 8, Balance.COST), "P below the dummy's patches");
        assertThrows(IllegalArgumentException.class, () -> SampleShape.of(-1));
        assertThrows(IllegalArgumentException.class, () -> SampleShape.of(10, -4));
    }

    static void assertSame(PackedStep a, PackedStep b) {
        assertEquals(a.cursor(), b.cursor());
        assertEquals(a.next(), b.next());
        assertEquals(a.globalStep(), b.globalStep());
        assertTrue(Arrays.deepEquals(a.records(), b.records()), "records");
        assertArrayEquals(a.costs(), b.costs());
        assertArrayEquals(a.tokens(), b.tokens());
        assertArrayEquals(a.patches(), b.patches());
        assertArrayEquals(a.dummyImage(), b.dummyImage());
        assertArrayEquals(a.filtered(), b.filtered());
        assertArrayEquals(a.skipped(), b.skipped());
    }
}
