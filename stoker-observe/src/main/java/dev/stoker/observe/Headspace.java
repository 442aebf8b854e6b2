package dev.stoker.observe;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * How much of a training step the data side can still win at most: the trainer's mean step (its wait for a batch plus its
 * compute) minus its compute floor, the median compute it measured on batches it replayed from its own copies without
 * waiting for data (headspace analysis, after SPDL's {@code CacheDataLoader}; docs/protocol.md, NEXT). With no wait at all
 * and nothing else changed a step cannot be shorter than the floor, so {@link #headroomNanos()} bounds what any data-side
 * change (more threads, the cache, another mode) can gain per step.
 *
 * <p>Several ranks ({@link #overall}): a synchronous data-parallel step waits for its slowest rank, so the floor of all is
 * the largest rank floor, and the mean step is pooled over the ranks' steps.
 *
 * @param floorNanos    the compute floor: the median compute of the replayed steps
 * @param replayedSteps how many replayed steps the floor is the median of
 * @param meanStepNanos the mean step (wait + compute) of the steps the trainer reported on batches from the service
 * @param meanWaitNanos the mean wait of those steps
 * @param steps         how many such steps the means are over
 */
public record Headspace(long floorNanos, long replayedSteps, long meanStepNanos, long meanWaitNanos, long steps) {
    public Headspace {
        if (floorNanos < 0 || replayedSteps <= 0 || meanStepNanos < 0 || meanWaitNanos < 0 || meanWaitNanos > meanStepNanos || steps <= 0)
            throw new IllegalArgumentException("not a headspace measurement: floor " + floorNanos + " ns of " + replayedSteps
                    + " replayed steps, mean step " + meanStepNanos + " ns with mean wait " + meanWaitNanos + " ns over " + steps + " steps");
    }

    /**
     * The figures of a trainer from its totals: {@code waitNanos} and {@code computeNanos} summed over {@code steps} steps on
     * the service's batches, and its floor.
     */
    public static Headspace of(long floorNanos, long replayedSteps, long waitNanos, long computeNanos, long steps) {
        return new Headspace(floorNanos, replayedSteps, Math.round((double) (waitNanos + computeNanos) / steps),
                Math.round((double) waitNanos / steps), steps);
    }

    /** What the data side can win at most per step: the mean step minus the floor, 0 when the step is at the floor already. */
    public long headroomNanos() { return Math.max(0, meanStepNanos - floorNanos); }

    /** {@link #headroomNanos()} as a share of the mean step. */
    public double headroomFraction() { return meanStepNanos == 0 ? 0 : (double) headroomNanos() / meanStepNanos; }

    /** The mean wait as a share of the mean step (the wait ratio of the steps the means are over). */
    public double waitRatio() { return meanStepNanos == 0 ? 0 : (double) meanWaitNanos / meanStepNanos; }

    /**
     * All ranks together: the largest floor (a synchronous step waits for the slowest rank), the mean step and wait pooled over
     * the ranks' steps, the replayed steps summed; null when {@code ranks} is empty.
     */
    public static Headspace overall(Collection<Headspace> ranks) {
        if (ranks.isEmpty()) return null;
        long floor = 0, replayed = 0, steps = 0;
        double step = 0, wait = 0;
        for (var r : ranks) {
            floor = Math.max(floor, r.floorNanos());
            replayed += r.replayedSteps();
            steps += r.steps();
            step += (double) r.meanStepNanos() * r.steps();
            wait += (double) r.meanWaitNanos() * r.steps();
        }
        return new Headspace(floor, replayed, Math.round(step / steps), Math.round(wait / steps), steps);
    }

    /** The verdict's figures: {@code compute_floor_ms}, {@code mean_step_ms}, {@code data_headroom_ms}, {@code data_headroom_fraction}. */
    public Map<String, Double> figures() {
        var m = new LinkedHashMap<String, Double>();
        m.put("compute_floor_ms", ms3(floorNanos));
        m.put("mean_step_ms", ms3(meanStepNanos));
        m.put("data_headroom_ms", ms3(headroomNanos()));
        m.put("data_headroom_fraction", Math.round(headroomFraction() * 1000) / 1000.0);
        return m;
    }

    /** "compute floor 80.1 ms (median of 20 replayed steps), mean step 120.4 ms: the data side can win at most 40.3 ms per step (33%)". */
    public String text() {
        return String.format(Locale.ROOT, "compute floor %.1f ms (median of %d replayed step%s), mean step %.1f ms: the data side can win "
                        + "at most %.1f ms per step (%d%%)", floorNanos / 1e6, replayedSteps, replayedSteps == 1 ? "" : "s", meanStepNanos / 1e6,
                headroomNanos() / 1e6, Math.round(headroomFraction() * 100));
    }

    /** The JSON object of the metrics file's {@code trainers.headspace} (docs/run-data.md). */
    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        m.put("compute_floor_ns", floorNanos);
        m.put("replayed_steps", replayedSteps);
        m.put("mean_step_ns", meanStepNanos);
        m.put("mean_wait_ns", meanWaitNanos);
        m.put("steps", steps);
        m.put("wait_ratio", Math.round(waitRatio() * 10_000) / 10_000.0);
        m.put("data_headroom_ns", headroomNanos());
        m.put("data_headroom_fraction", Math.round(headroomFraction() * 10_000) / 10_000.0);
        return m;
    }

    private static double ms3(long nanos) { return Math.round(nanos / 1e3) / 1e3; }
}
