package dev.stoker.plan.pack;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackPlanner.Balance;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Video in the packing cost model (issue 29): a sample's video rows ({@code t·h·w} per video) count in its patches
 * beside its image rows, its vision cost is the tower's over each temporal group ({@link PackCost#videoFlops}), and
 * the planner's packs, budgets, dummy images and balance see both.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VideoShapeCostTest {
    static final PackCost COST = PackCost.QWEN2_VL_2B;

    @Test
    void aVideosRowsCountWithTheImagesRows() {
        var s = SampleShape.of(900, new int[] {256}, new int[] {3 * 120, 2 * 80}, new int[] {3, 2});
        assertEquals(256 + 360 + 160, s.patches(), "pixel_values and pixel_values_videos rows together");
        assertEquals(520, s.videoRows());
        assertEquals(2, s.videos());
        assertEquals(3, s.videoGroups(0));
        assertTrue(s.hasImage() && s.hasVideo() && s.hasVision());
        var videoOnly = SampleShape.of(900, new int[0], new int[] {360}, new int[] {3});
        assertTrue(!videoOnly.hasImage() && videoOnly.hasVision());
        assertEquals(360, videoOnly.patches());
        assertNotEquals(SampleShape.of(900, 256), SampleShape.of(900, new int[] {256}, new int[] {360}, new int[] {3}));
        assertEquals(SampleShape.of(900, 256), new SampleShape(SampleShape.Kind.OK, 900, new int[] {256}, null, null));
        // t·h·w must be a multiple of t, at least one group, the two lists of one length
        assertThrows(IllegalArgumentException.class, () -> SampleShape.of(9, new int[0], new int[] {361}, new int[] {3}));
        assertThrows(IllegalArgumentException.class, () -> SampleShape.of(9, new int[0], new int[] {360}, new int[] {0}));
        assertThrows(IllegalArgumentException.class, () -> SampleShape.of(9, new int[0], new int[] {360}, new int[0]));
    }

    @Test
    void aVideosCostIsTheTowerOverEachTemporalGroup() {
        // 6·639170560·3072 + 12·32·1280·3072·(3072/3), Qwen2-VL-2B: attention inside each of 3 groups of 1024 patches
        assertEquals(6 * 639_170_560d * 3072 + 12d * 32 * 1280 * 3072 * 1024, COST.videoFlops(3072, 3));
        assertEquals(13_327_379_988_480d, COST.videoFlops(3072, 3));
        assertEquals(3 * COST.imageFlops(1024), COST.videoFlops(3072, 3), 1e-3, "3 groups of 1024 = 3 images of 1024");
        assertEquals(COST.imageFlops(3072), COST.videoFlops(3072, 1), "one group: an image");
        var s = SampleShape.of(1000, new int[] {512}, new int[] {3072, 800}, new int[] {3, 4});
        assertEquals(COST.tokenFlops(1000) + COST.imageFlops(512) + COST.videoFlops(3072, 3) + COST.videoFlops(800, 4), COST.flops(s));
        assertTrue(COST.flops(s) > COST.flops(SampleShape.of(1000, 512)));
        assertEquals(COST.withVisionTrained(false).videoFlops(3072, 3), COST.videoFlops(3072, 3) / 3, 1e-3);
        assertThrows(IllegalArgumentException.class, () -> COST.videoFlops(10, 0));
    }

    /** Text-only samples, and samples of the same tokens with a heavy video (every 6th) or an image (every 9th). */
    static ShapeIndex videoMix(int n) {
        var shapes = new ArrayList<SampleShape>();
        for (int i = 0; i < n; i++) {
            if (i % 6 == 1) shapes.add(SampleShape.of(1200, new int[0], new int[] {8 * 1200}, new int[] {8}));
            else if (i % 9 == 2) shapes.add(SampleShape.of(1200, 400));
            else shapes.add(SampleShape.of(1200));
        }
        return ShapeIndex.of(shapes);
    }

    @Test
    void packsCountVideoRowsAndCostAndAVideoNeedsNoDummyImage() {
        ShapeIndex shapes = videoMix(3000);
        int patchBudget = 30_000;
        for (Balance balance : Balance.values()) {
            PackPlanner p = PackPlannerTest.planner(shapes, 5, 8, 8192, patchBudget, balance);
            int steps = 0, dummies = 0;
            for (PackedStep s : PackPlannerTest.epochSteps(p, ScheduleCursor.START)) {
                boolean stepVision = false;
                for (int[] pack : s.records()) for (int rec : pack) stepVision |= shapes.shape(rec).hasVision();
                for (int r = 0; r < 8; r++) {
                    int tokens = 0, patches = 0;
                    boolean vision = false;
                    double cost = 0;
                    for (int rec : s.records()[r]) {
                        SampleShape sh = shapes.shape(rec);
                        tokens += sh.tokens();
                        patches += sh.patches();
                        vision |= sh.hasVision();
                        cost += COST.flops(sh);
                    }
                    assertEquals(stepVision && !vision, s.dummyImage()[r], balance + ": dummy flag of rank " + r
                            + " (a pack with a video runs the vision tower and needs none)");
                    if (s.dummyImage()[r]) {
                        dummies++;
                        tokens += Shapes.DUMMY.tokens();
                        patches += Shapes.DUMMY.patches();
                        cost += COST.flops(Shapes.DUMMY);
                    }
                    assertEquals(patches, s.patches()[r], balance + ": video rows counted in the pack's patches");
                    assertEquals(cost, s.costs()[r], cost * 1e-12, balance + ": video cost counted in the pack's");
                    assertTrue(patches <= patchBudget, balance + ": rank " + r + " has " + patches + " patches");
                }
                steps++;
            }
            assertTrue(steps > 10 && dummies > 0, balance + ": " + steps + " steps, " + dummies + " dummies");
        }
    }

    @Test
    void aVideoOverThePatchBudgetIsFilteredAndCostBalanceSpreadsTheVideos() {
        var shapes = new ArrayList<SampleShape>(List.of(SampleShape.of(300, new int[0], new int[] {40_000}, new int[] {10})));
        for (int i = 1; i < 400; i++) shapes.add(SampleShape.of(300));
        PackPlanner p = PackPlannerTest.planner(ShapeIndex.of(shapes), 1, 4, 8192, 30_000, Balance.COST);
        boolean filtered = false;
        for (PackedStep s : PackPlannerTest.epochSteps(p, ScheduleCursor.START)) for (int rec : s.filtered()) filtered |= rec == 0;
        assertTrue(filtered, "40,000 video rows > --pack-patches 30,000: filtered");

        // the same tokens everywhere: counting samples ignores the videos, balancing cost spreads them
        ShapeIndex mix = videoMix(4000);
        double count = meanImbalance(PackPlannerTest.planner(mix, 9, 8, 8192, 0, Balance.COUNT));
        double cost = meanImbalance(PackPlannerTest.planner(mix, 9, 8, 8192, 0, Balance.COST));
        assertTrue(cost < count, "cost balance " + cost + " vs count " + count);
        // seed 9: count 1.52, cost 1.16; were the videos' cost unseen, every sample would cost the same and LPT deal them as count does
        assertTrue(cost - 1 < (count - 1) / 2, "cost balance at least halves the imbalance the videos make: " + cost + " vs " + count);
    }

    private static double meanImbalance(PackPlanner p) {
        double sum = 0;
        int n = 0;
        for (PackedStep s : PackPlannerTest.epochSteps(p, ScheduleCursor.START)) {
            double max = 0, mean = 0;
            for (double c : s.costs()) {
                max = Math.max(max, c);
                mean += c / s.costs().length;
            }
            sum += max / mean;
            n++;
        }
        return sum / n;
    }
}
