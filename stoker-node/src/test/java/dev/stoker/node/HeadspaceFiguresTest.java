package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.observe.BottleneckVerdict;
import dev.stoker.observe.Headspace;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Headspace arithmetic on constructed numbers: a rank's compute floor against the mean of its steady steps (the first
 * {@link TrainerTimings#STEADY_SKIP_STEPS} left out), all ranks together (the largest floor, the pooled mean step), and
 * what the verdict, the metrics JSON and the figures say.
 */
@Timeout(60)
class HeadspaceFiguresTest {
    @Test
    void aRanksHeadroomIsItsSteadyMeanStepMinusItsFloor() {
        var t = new TrainerTimings();
        t.handedOut(0, 100, 2);
        t.report(0, 5_000_000_000L, 1_000_000); // the cold start: left out
        t.report(0, 1_000_000, 1_000_000);
        t.report(0, 1_000_000, 1_000_000);
        assertNull(t.headspace(), "no floor reported yet");
        for (int i = 0; i < 4; i++) t.report(0, 30_000_000, 70_000_000); // steps 3 to 6: 100 ms, 30 of it waiting
        t.headspace(0, 60_000_000, 20);
        var h = t.ranks().getFirst().headspace();
        assertEquals(60_000_000, h.floorNanos());
        assertEquals(20, h.replayedSteps());
        assertEquals(4, h.steps());
        assertEquals(100_000_000, h.meanStepNanos());
        assertEquals(30_000_000, h.meanWaitNanos());
        assertEquals(40_000_000, h.headroomNanos(), "100 ms steps with a 60 ms floor: 40 ms to win at most");
        assertEquals(0.4, h.headroomFraction(), 1e-12);
        assertEquals(0.3, h.waitRatio(), 1e-12);
        assertEquals(h, t.headspace(), "one rank: all ranks' is its own");
        t.headspace(0, 55_000_000, 10); // a later report replaces the earlier
        assertEquals(45_000_000, t.headspace().headroomNanos());
        assertThrows(IllegalArgumentException.class, () -> t.headspace(0, 1, 0));
    }

    @Test
    void allRanksTakeTheLargestFloorAndThePooledMeanStep() {
        var t = new TrainerTimings();
        for (int i = 0; i < 3; i++) t.report(1, 0, 100); // only 3 steps: none left out
        t.report(2, 0, 1); // reported steps, no floor: not in the headspace
        t.headspace(1, 50, 4);
        assertEquals(new Headspace(50, 4, 100, 0, 3), t.headspace());
        for (int i = 0; i < 6; i++) t.report(0, 40, 160); // rank 0: 6 steps of 200 ns, the first 3 left out
        t.headspace(0, 150, 6);
        var all = t.headspace();
        assertEquals(150, all.floorNanos(), "a synchronous step waits for the slowest rank's compute");
        assertEquals(150, all.meanStepNanos(), "(3 x 200 + 3 x 100) / 6");
        assertEquals(20, all.meanWaitNanos());
        assertEquals(10, all.replayedSteps());
        assertEquals(0, all.headroomNanos(), "a mean step at the floor: nothing left to win");
        @SuppressWarnings("unchecked") var json = (Map<String, Object>) t.toJson().get("headspace");
        assertEquals(150L, json.get("compute_floor_ns"));
        assertEquals(0L, json.get("data_headroom_ns"));
        @SuppressWarnings("unchecked") var ranks = (List<Map<String, Object>>) t.toJson().get("ranks");
        assertNull(ranks.get(2).get("headspace"));
        @SuppressWarnings("unchecked") var rank1 = (Map<String, Object>) ranks.get(1).get("headspace");
        assertEquals(50L, rank1.get("data_headroom_ns"));
        assertEquals(0.5, rank1.get("data_headroom_fraction"));
    }

    @Test
    void theVerdictSaysHowMuchTheDataSideCanWinAtMost() {
        var v = new BottleneckVerdict(BottleneckVerdict.Kind.CPU_BOUND, "encode", "decode pool busy 98% on 2 threads", "more threads",
                Map.of("cpu_busy_fraction", 0.98));
        assertSame(v, v.withHeadspace(null));
        var h = Headspace.of(80_000_000, 20, 36_000_000, 84_000_000, 1); // a 120 ms step, 36 ms of it waiting, floor 80 ms
        var with = v.withHeadspace(h);
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND, with.kind());
        assertEquals("more threads", with.advice());
        assertEquals(0.98, with.figures().get("cpu_busy_fraction"));
        assertEquals(80.0, with.figures().get("compute_floor_ms"));
        assertEquals(120.0, with.figures().get("mean_step_ms"));
        assertEquals(40.0, with.figures().get("data_headroom_ms"));
        assertEquals(0.333, with.figures().get("data_headroom_fraction"));
        assertTrue(with.evidence().startsWith("decode pool busy 98% on 2 threads; compute floor 80.0 ms (median of 20 replayed steps), "
                + "mean step 120.0 ms: the data side can win at most 40.0 ms per step (33%)"), with.evidence());
        assertEquals(40.0, with.toJson().get("data_headroom_ms"));
    }

    @Test
    void figuresThatCannotBeAMeasurementAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> new Headspace(-1, 1, 10, 0, 1));
        assertThrows(IllegalArgumentException.class, () -> new Headspace(1, 0, 10, 0, 1));
        assertThrows(IllegalArgumentException.class, () -> new Headspace(1, 1, 10, 11, 1), "a wait longer than the step");
        assertThrows(IllegalArgumentException.class, () -> new Headspace(1, 1, 10, 0, 0));
        assertNull(Headspace.overall(List.of()));
    }
}
