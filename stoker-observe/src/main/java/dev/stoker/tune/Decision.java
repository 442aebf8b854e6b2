package dev.stoker.tune;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * One change the tuner tried, with its evidence: the window measured before it and the window after it.
 *
 * @param index              1, 2, … in the order they were decided
 * @param atMillis           when it was decided, in ms since the tuner's first tick
 * @param knob               the knob changed
 * @param from               its value before
 * @param to                 its value tried
 * @param kept               whether {@code to} was kept (else {@code from} was restored)
 * @param beforeSamplesPerS  delivered samples/s over the window before
 * @param afterSamplesPerS   delivered samples/s over the window after
 * @param noiseSamplesPerS   the difference that counts as noise: z × the two windows' combined standard error
 * @param beforeWaitShare    the trainers' share of time spent waiting for data, before (0..1)
 * @param afterWaitShare     the same, after
 * @param why                the evidence that chose the knob and the reading of the result, in words
 */
public record Decision(int index, long atMillis, Knob knob, int from, int to, boolean kept, double beforeSamplesPerS,
                       double afterSamplesPerS, double noiseSamplesPerS, double beforeWaitShare, double afterWaitShare, String why) {

    /** {@code kept} or {@code rolled back}. */
    public String outcome() { return kept ? "kept" : "rolled back"; }

    /** One line: "threads 1 → 2 kept: 30.1 → 55.2 samples/s (noise ±3.0), wait 80% → 52%; CPU-bound: …". */
    public String text() {
        return String.format(Locale.ROOT, "%s %d → %d %s: %.1f → %.1f samples/s (noise ±%.1f), wait %.0f%% → %.0f%%; %s", knob.option(), from, to,
                outcome(), beforeSamplesPerS, afterSamplesPerS, noiseSamplesPerS, 100 * beforeWaitShare, 100 * afterWaitShare, why);
    }

    /** The {@code autotune.decisions[]} object of {@code docs/run-data.md}. */
    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        m.put("index", index);
        m.put("at_ms", atMillis);
        m.put("knob", knob.option());
        m.put("from", from);
        m.put("to", to);
        m.put("outcome", outcome());
        m.put("before_samples_per_s", round(beforeSamplesPerS));
        m.put("after_samples_per_s", round(afterSamplesPerS));
        m.put("noise_samples_per_s", round(noiseSamplesPerS));
        m.put("before_wait_share", round(beforeWaitShare));
        m.put("after_wait_share", round(afterWaitShare));
        m.put("why", why);
        return m;
    }

    @Override
    public String toString() { return text(); }

    private static double round(double v) { return Double.isFinite(v) ? Math.round(v * 1000) / 1000.0 : 0; }
}
