package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The per-rank record of the trainers' reports: totals, the recent window, the steady state, the bounded step list. */
@Timeout(30)
class TrainerTimingsTest {
    @Test
    void eachRanksStepsCarryTheBatchHandedOutBeforeAndTheRatiosFollowTheRunDataRule() {
        var t = new TrainerTimings();
        assertTrue(t.waitRatio().isEmpty() && t.recentWaitRatio().isEmpty() && !t.any());
        t.requested(3); // a global rank: a node may serve only some of the world's ranks
        t.handedOut(3, 1000, 4);
        t.report(3, 900, 100); // cold start
        for (int i = 0; i < 5; i++) {
            t.handedOut(3, 2000, 3);
            t.report(3, 10, 90);
        }
        assertTrue(t.any());
        var r = t.ranks().getFirst();
        assertEquals(3, r.rank());
        assertEquals(6, r.steps());
        assertEquals(950, r.waitNanos());
        assertEquals(550, r.stepNanos());
        assertEquals(11000, r.bytes());
        assertEquals(19, r.samples());
        assertEquals(950.0 / 1500, r.waitRatio(), 1e-12);
        assertEquals(950.0 / 1500, t.waitRatio().getAsDouble(), 1e-12);
        assertEquals(30.0 / 300, t.steadyWaitRatio(3).getAsDouble(), 1e-12, "steps 3, 4 and 5");
        // the running totals a cluster node sends its coordinator: the steady ones are the same steps' as steadyWaitRatio(3)
        assertEquals(List.of(new TrainerTimings.Totals(3, 6, 950, 550, 30, 270)), t.totals());
        Map<String, Object> file = t.rankFile(3, 8, false);
        assertEquals(8, file.get("world"));
        assertEquals(11000L, file.get("bytes_received"));
        @SuppressWarnings("unchecked") var steps = (List<long[]>) file.get("steps");
        assertEquals(6, steps.size());
        assertEquals(List.of(900L, 100L, 1000L, 4L, 0L, 0L), java.util.Arrays.stream(steps.getFirst()).boxed().toList());
    }

    @Test
    void theRecentWindowAndTheStepListAreBoundedTheTotalsAreNot() {
        var t = new TrainerTimings();
        int n = TrainerTimings.KEPT_STEPS + 10;
        for (int i = 0; i < n; i++) t.report(0, i < TrainerTimings.KEPT_STEPS ? 50 : 0, 50); // the last 10 steps do not wait
        var r = t.ranks().getFirst();
        assertEquals(n, r.steps());
        assertEquals(50L * TrainerTimings.KEPT_STEPS, r.waitNanos());
        double recentWaits = TrainerTimings.RECENT_STEPS - 10;
        assertEquals(recentWaits * 50 / (recentWaits * 50 + TrainerTimings.RECENT_STEPS * 50), r.recentWaitRatio().getAsDouble(), 1e-12);
        var file = t.rankFile(0, 1, true);
        assertEquals(TrainerTimings.KEPT_STEPS, ((List<?>) file.get("steps")).size());
        assertEquals((long) n, file.get("steps_reported"));
        assertEquals((long) n, file.get("refs_received"), "shared memory: every reported batch came by reference");
        assertFalse(t.toJson().get("ranks").toString().isEmpty());
    }
}
