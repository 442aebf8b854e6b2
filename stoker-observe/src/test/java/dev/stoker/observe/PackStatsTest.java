package dev.stoker.observe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedStep;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The per-step record of packing: figures against hand computation, first call per step wins, the window's bound. */
@Timeout(30)
class PackStatsTest {
    /** A step of {@code costs.length} ranks, each pack with {@code tokens[r]} tokens and {@code perPack} samples. */
    static PackedStep step(long label, double[] costs, int[] tokens, int perPack) {
        int r = costs.length;
        var records = new int[r][];
        for (int i = 0; i < r; i++) {
            records[i] = new int[perPack];
            for (int k = 0; k < perPack; k++) records[i][k] = (int) (label * 1000 + i * perPack + k);
        }
        return new PackedStep(new ScheduleCursor(0, label * 100), new ScheduleCursor(0, label * 100 + 100), label, records, costs, tokens,
                new int[r], new boolean[r], new int[] {7}, new int[0]);
    }

    @Test
    void figuresMatchTheHandComputation() {
        var stats = new PackStats();
        assertNull(stats.summary(), "nothing before the first step: an unpacked job's snapshot has no pack");
        assertNull(stats.packing());
        // step 0: costs 4, 2, 2, 0 → mean 2, max 4: imbalance 2, loss 1 − 2/4 = 0.5; tokens 90 of 4·100: padding 1 − 90/400
        assertTrue(stats.record(step(0, new double[] {4, 2, 2, 0}, new int[] {30, 20, 20, 20}, 2), 100, PackPlanner.Balance.COUNT));
        // step 1: even costs 3 each: imbalance 1, loss 0; tokens 400 of 400: padding 0
        assertTrue(stats.record(step(1, new double[] {3, 3, 3, 3}, new int[] {100, 100, 100, 100}, 3), 100, PackPlanner.Balance.COUNT));
        var s = stats.summary();
        assertEquals(4, s.ranks());
        assertEquals(100, s.packTokens());
        assertEquals("count", s.balance());
        assertEquals(2, s.steps());
        assertEquals(8 + 12, s.samples());
        assertEquals(490, s.tokens());
        assertEquals(2, s.filtered());
        assertEquals((2.0 + 1.0) / 2, s.meanImbalance(), 1e-12);
        assertEquals((0.5 + 0) / 2, s.meanImbalanceLoss(), 1e-12);
        assertEquals((1 - 90.0 / 400 + 0) / 2, s.meanPaddingFraction(), 1e-12);
        assertEquals(s.meanImbalance(), s.recentImbalance(), 1e-12, "the window holds every step so far");
        assertEquals(s.meanImbalanceLoss(), s.recentImbalanceLoss(), 1e-12);
        assertEquals(1, s.lastStep());
        assertArrayEquals(new double[] {3, 3, 3, 3}, s.lastCosts());
        assertArrayEquals(new long[] {0, 1}, s.series().step());
        assertArrayEquals(new double[] {2, 1}, s.series().imbalance(), 1e-12);
        assertArrayEquals(new double[] {1 - 90.0 / 400, 0}, s.series().paddingFraction(), 1e-12);
        assertArrayEquals(new long[] {90, 400}, s.series().tokens());
        assertArrayEquals(new int[] {8, 12}, s.series().samples());
        assertArrayEquals(new double[] {4, 2, 2, 0}, s.series().costs()[0]);
        var p = stats.packing();
        assertEquals(2, p.steps());
        assertEquals(0.25, p.imbalanceLoss(), 1e-12);
        assertEquals(1.5, p.imbalance(), 1e-12);
        assertEquals(PackPlanner.Balance.COUNT, p.balance());
        assertEquals(PackPlanner.Balance.COUNT, Bottleneck.Packing.of(s).balance());
    }

    @Test
    void theFirstCallForAStepWinsAndLaterCallsChangeNothing() {
        var stats = new PackStats();
        var first = step(5, new double[] {2, 1}, new int[] {50, 50}, 1);
        assertTrue(stats.record(first, 100));
        // another local rank takes the same step: the same label, ignored even with other figures
        assertFalse(stats.record(step(5, new double[] {9, 1}, new int[] {10, 10}, 4), 100));
        assertFalse(stats.record(first, 100));
        var s = stats.summary();
        assertEquals(1, s.steps());
        assertEquals(2, s.samples());
        assertArrayEquals(new double[] {2, 1}, s.lastCosts());
        assertNull(s.balance(), "not told how the job balances");
        // the record keeps its own copy: the step's arrays changing later do not change it
        first.costs()[0] = 100;
        assertArrayEquals(new double[] {2, 1}, stats.lastCosts());
    }

    @Test
    void theWindowIsBoundedAndKeepsTheLastStepsInOrderWhileTotalsCoverTheRun() {
        var stats = new PackStats(8);
        for (int i = 0; i < 30; i++) {
            double c = 1 + (i % 3); // rank 0 costs c, rank 1 costs 1: imbalance 2c/(c+1)
            assertTrue(stats.record(step(i, new double[] {c, 1}, new int[] {10 * (i + 1), 0}, 1), 1000));
            assertFalse(stats.record(step(i, new double[] {c, 1}, new int[] {10, 0}, 1), 1000), "a second rank's call for step " + i);
        }
        var s = stats.summary();
        assertEquals(30, s.steps());
        assertEquals(8, s.recentSteps());
        assertArrayEquals(new long[] {22, 23, 24, 25, 26, 27, 28, 29}, s.series().step());
        assertEquals(8, s.series().costs().length);
        double sumAll = 0, sumRecent = 0;
        for (int i = 0; i < 30; i++) {
            double c = 1 + (i % 3), imb = 2 * c / (c + 1);
            sumAll += imb;
            if (i >= 22) sumRecent += imb;
        }
        assertEquals(sumAll / 30, s.meanImbalance(), 1e-12);
        assertEquals(sumRecent / 8, s.recentImbalance(), 1e-12);
        assertEquals(1 - 300.0 / 2000, s.series().paddingFraction()[7], 1e-12, "step 29: 300 tokens of 2·1000");
        // a label older than the window: taken already (or too late to matter), ignored
        assertFalse(stats.record(step(3, new double[] {5, 1}, new int[] {1, 1}, 1), 1000));
        assertEquals(30, stats.steps());
        // memory bounded however long the run
        for (int i = 30; i < 10_000; i++) stats.record(step(i, new double[] {1, 1}, new int[] {1, 1}, 1), 1000);
        assertEquals(8, stats.summary().series().step().length);
        assertEquals(9_999, stats.summary().lastStep());
    }

    @Test
    void paddingIsNeverNegativeAndBadFiguresAreRefused() {
        var stats = new PackStats();
        stats.record(step(0, new double[] {1, 1}, new int[] {120, 100}, 1), 100);
        assertEquals(0, stats.summary().meanPaddingFraction());
        var e = assertThrows(IllegalArgumentException.class, () -> stats.record(step(1, new double[] {1, 1}, new int[] {1, 1}, 1), 0));
        assertTrue(e.getMessage().contains("step 1"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> stats.record(step(2, new double[] {1, Double.NaN}, new int[] {1, 1}, 1), 10));
        assertTrue(e.getMessage().contains("step 2: rank 1"), e.getMessage());
        assertEquals(1, stats.steps(), "a refused step is not recorded");
        assertThrows(IllegalArgumentException.class, () -> new PackStats(0));
    }

    /** The names docs/run-data.md gives {@code pipeline.pack}: the snapshot is written by Jackson, as the metrics file is. */
    @Test
    void theSummaryIsWrittenWithTheDocumentedKeys() {
        var stats = new PackStats();
        stats.record(step(4, new double[] {2, 1}, new int[] {50, 40}, 2), 100, PackPlanner.Balance.COST);
        var json = new com.fasterxml.jackson.databind.ObjectMapper().valueToTree(stats.summary());
        for (String key : java.util.List.of("ranks", "packTokens", "balance", "steps", "samples", "tokens", "filtered", "skipped",
                "meanImbalance", "meanPaddingFraction", "meanImbalanceLoss", "recentSteps", "recentImbalance", "recentPaddingFraction",
                "recentImbalanceLoss", "lastStep", "lastCosts", "series"))
            assertTrue(json.has(key), key + " in " + json);
        assertEquals(18, json.size(), "no other key: " + json);
        assertEquals("cost", json.get("balance").asText());
        var series = json.get("series");
        for (String key : java.util.List.of("step", "imbalance", "paddingFraction", "tokens", "samples", "costs"))
            assertTrue(series.get(key).isArray(), key + " in " + series);
        assertEquals(1.0, series.get("costs").get(0).get(1).asDouble());
        assertEquals(4, series.get("step").get(0).asLong());
    }

    @Test
    void allZeroCostsAreEven() {
        var stats = new PackStats();
        stats.record(step(0, new double[] {0, 0, 0}, new int[] {5, 5, 5}, 1), 10);
        assertEquals(1, stats.meanImbalance());
        assertEquals(0, stats.meanImbalanceLoss());
        assertEquals(0, stats.packing().imbalanceLoss());
    }
}
