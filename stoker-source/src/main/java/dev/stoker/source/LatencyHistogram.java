package dev.stoker.source;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;

/**
 * A lock-free latency histogram with log-linear buckets (8 per power of two, so a percentile is
 * within 12.5% of the true value) plus exact count, sum, min and max.
 *
 * <p>Threading: {@link #record} may be called from any thread; readers see a consistent-enough
 * view (each counter is exact, they are not read atomically together).
 */
public final class LatencyHistogram {
    private static final int SUB_BITS = 3;
    private static final int SUB_BUCKETS = 1 << SUB_BITS;
    private static final int BUCKETS = (64 - SUB_BITS + 1) * SUB_BUCKETS;

    private final AtomicLongArray counts = new AtomicLongArray(BUCKETS);
    private final LongAdder count = new LongAdder();
    private final LongAdder sumNanos = new LongAdder();
    private final AtomicLong minNanos = new AtomicLong(Long.MAX_VALUE);
    private final AtomicLong maxNanos = new AtomicLong();

    /** Adds one observation; negative values count as 0. */
    public void record(long nanos) {
        long v = Math.max(0, nanos);
        counts.incrementAndGet(bucket(v));
        count.increment();
        sumNanos.add(v);
        minNanos.accumulateAndGet(v, Math::min);
        maxNanos.accumulateAndGet(v, Math::max);
    }

    public long count() { return count.sum(); }

    public long sumNanos() { return sumNanos.sum(); }

    /** 0 when empty. */
    public long minNanos() { long m = minNanos.get(); return m == Long.MAX_VALUE ? 0 : m; }

    public long maxNanos() { return maxNanos.get(); }

    /** 0 when empty. */
    public long meanNanos() { long n = count(); return n == 0 ? 0 : sumNanos() / n; }

    /**
     * The value at quantile {@code q} in [0, 1]: the upper bound of the bucket holding it, clamped
     * to [min, max]; 0 when empty.
     */
    public long percentileNanos(double q) {
        if (q < 0 || q > 1 || Double.isNaN(q)) throw new IllegalArgumentException("quantile must be in [0, 1]: " + q);
        long total = 0;
        long[] snapshot = new long[BUCKETS];
        for (int i = 0; i < BUCKETS; i++) total += snapshot[i] = counts.get(i);
        if (total == 0) return 0;
        if (q == 0) return minNanos();
        long rank = Math.max(1, (long) Math.ceil(q * total));
        long seen = 0;
        for (int i = 0; i < BUCKETS; i++) {
            seen += snapshot[i];
            if (seen >= rank) return Math.clamp(upperBound(i), minNanos(), maxNanos());
        }
        return maxNanos();
    }

    static int bucket(long v) {
        if (v < SUB_BUCKETS) return (int) v;
        int exp = 63 - Long.numberOfLeadingZeros(v);
        int sub = (int) (v >>> (exp - SUB_BITS)) & (SUB_BUCKETS - 1);
        return (exp - SUB_BITS + 1) * SUB_BUCKETS + sub;
    }

    static long upperBound(int bucket) {
        if (bucket < SUB_BUCKETS) return bucket;
        int exp = bucket / SUB_BUCKETS + SUB_BITS - 1;
        long sub = bucket % SUB_BUCKETS;
        long lower = (SUB_BUCKETS + sub) << (exp - SUB_BITS);
        long width = 1L << (exp - SUB_BITS);
        return lower + width - 1 < 0 ? Long.MAX_VALUE : lower + width - 1;
    }

    @Override
    public String toString() {
        return String.format("n=%d mean=%.2fms p50=%.2fms p99=%.2fms max=%.2fms", count(), meanNanos() / 1e6,
                percentileNanos(0.5) / 1e6, percentileNanos(0.99) / 1e6, maxNanos() / 1e6);
    }
}
