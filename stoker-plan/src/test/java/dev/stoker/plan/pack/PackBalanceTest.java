package dev.stoker.plan.pack;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackPlanner.Balance;
import dev.stoker.plan.schedule.SampleSchedule;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * On a synthetic distribution like the reference data set (tokens 100 … 1400, one image of 64 … 2304 patches, 8 ranks,
 * N = 16384), cost balancing evens the predicted step cost to within 5% and at least twice as close to 1 as count
 * balancing, and the packs waste at most 5% of the token budget. Deterministic: a property of the plans, no timing.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PackBalanceTest {
    record Stats(double imbalance, double padding, double samplesPerPack, int steps) { }

    static Stats walk(ShapeIndex shapes, Balance balance, int ranks, int tokens, int patches, long seed, int epochs) {
        var order = new SampleSchedule(seed, shapes.size(), 1, 1);
        var planner = new PackPlanner(order, shapes, ranks, tokens, patches, balance, PackCost.QWEN2_VL_2B, Shapes.DUMMY);
        double imbalance = 0, padding = 0, samples = 0;
        int steps = 0;
        ScheduleCursor c = ScheduleCursor.START;
        while (c.epoch() < epochs) {
            PackedStep s = planner.plan(c, steps);
            imbalance += s.imbalance();
            padding += 1 - (double) s.totalTokens() / ((long) ranks * tokens);
            samples += (double) s.samples() / ranks;
            steps++;
            c = s.next();
        }
        return new Stats(imbalance / steps, padding / steps, samples / steps, steps);
    }

    @Test
    void costBalanceIsEvenAndPacksAreFull() {
        ShapeIndex shapes = Shapes.referenceLike(20_000, 7, 5);
        Stats cost = walk(shapes, Balance.COST, 8, 16384, 0, 42, 1);
        Stats count = walk(shapes, Balance.COUNT, 8, 16384, 0, 42, 1);
        assertTrue(cost.imbalance() <= 1.05, "cost imbalance " + cost.imbalance());
        assertTrue(cost.imbalance() - 1 <= (count.imbalance() - 1) / 2, "cost " + cost.imbalance() + " vs count " + count.imbalance());
        assertTrue(cost.padding() <= 0.05, "padding " + cost.padding());
    }
}
