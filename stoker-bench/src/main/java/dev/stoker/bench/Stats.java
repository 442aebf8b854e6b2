package dev.stoker.bench;

import java.util.Arrays;

/** The summaries the benchmarks report: medians of repeated measurements, percentiles of latencies. */
public final class Stats {
    private Stats() {}

    /** The median of {@code v} (the mean of the middle two for an even count); 0 for none. */
    public static double median(double[] v) {
        if (v.length == 0) return 0;
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    /** The {@code q} quantile of {@code sorted} (ascending), by nearest rank; NaN for none. */
    public static double percentile(double[] sorted, double q) {
        if (sorted.length == 0) return Double.NaN;
        return sorted[Math.min(sorted.length - 1, (int) Math.floor(q * (sorted.length - 1) + 0.5))];
    }
}
