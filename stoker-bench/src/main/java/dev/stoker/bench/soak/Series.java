package dev.stoker.bench.soak;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.ToLongFunction;

/**
 * Start, median, max and end of one series of a soak, and its least-squares slope per 10 minutes
 * after the warm-up (NaN with fewer than two samples after it). Flat: the slope is at most
 * {@value #FLAT_FRACTION} of the median or {@value #FLAT_FLOOR_BYTES} bytes, whichever is larger.
 */
public record Series(long start, long median, long max, long end, double slopePer10Min, boolean flat) {
    public static final double FLAT_FRACTION = 0.01;
    public static final long FLAT_FLOOR_BYTES = 4L << 20;

    /** The series {@code f} of {@code samples}; the slope is fitted over the samples at or after {@code warmUpSeconds}. */
    public static Series of(List<ServiceSample> samples, double warmUpSeconds, ToLongFunction<ServiceSample> f) {
        var valid = samples.stream().filter(s -> f.applyAsLong(s) >= 0).toList();
        if (valid.isEmpty()) return new Series(-1, -1, -1, -1, Double.NaN, false);
        long[] sorted = valid.stream().mapToLong(f).sorted().toArray();
        long median = sorted[(sorted.length - 1) / 2];
        var steady = valid.stream().filter(s -> s.tSeconds() >= warmUpSeconds).toList();
        double slope = Double.NaN;
        if (steady.size() >= 2) {
            double mt = steady.stream().mapToDouble(ServiceSample::tSeconds).average().orElseThrow();
            double mv = steady.stream().mapToDouble(s -> f.applyAsLong(s)).average().orElseThrow();
            double num = 0, den = 0;
            for (ServiceSample s : steady) {
                num += (s.tSeconds() - mt) * (f.applyAsLong(s) - mv);
                den += (s.tSeconds() - mt) * (s.tSeconds() - mt);
            }
            slope = den == 0 ? Double.NaN : num / den * 600;
        }
        boolean flat = !Double.isNaN(slope) && slope <= Math.max(FLAT_FRACTION * median, FLAT_FLOOR_BYTES);
        return new Series(f.applyAsLong(valid.getFirst()), median, sorted[sorted.length - 1], f.applyAsLong(valid.getLast()), slope, flat);
    }

    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        m.put("start", start);
        m.put("median", median);
        m.put("max", max);
        m.put("end", end);
        m.put("slope_per_10min", Double.isNaN(slopePer10Min) ? null : Math.round(slopePer10Min));
        m.put("flat", flat);
        return m;
    }
}
