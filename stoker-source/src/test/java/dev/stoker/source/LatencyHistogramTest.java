package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class LatencyHistogramTest {
    @Test
    void percentilesAreWithinTheBucketPrecision() {
        var h = new LatencyHistogram();
        for (long ms = 1; ms <= 1000; ms++) h.record(ms * 1_000_000);
        assertEquals(1000, h.count());
        assertEquals(500_500L * 1_000_000, h.sumNanos());
        assertEquals(1_000_000, h.minNanos());
        assertEquals(1_000_000_000, h.maxNanos());
        assertWithin(500e6, h.percentileNanos(0.5), 0.125);
        assertWithin(990e6, h.percentileNanos(0.99), 0.125);
        assertEquals(1_000_000_000, h.percentileNanos(1.0));
        assertEquals(1_000_000, h.percentileNanos(0.0));
    }

    @Test
    void bucketsCoverEveryValueInOrder() {
        long previousUpper = -1;
        for (int b = 0; b < 60 * 8; b++) {
            long upper = LatencyHistogram.upperBound(b);
            assertTrue(upper > previousUpper, "bucket " + b);
            assertEquals(b, LatencyHistogram.bucket(upper));
            assertEquals(b, LatencyHistogram.bucket(previousUpper + 1));
            previousUpper = upper;
        }
    }

    @Test
    void emptyHistogramReadsZero() {
        var h = new LatencyHistogram();
        assertEquals(0, h.percentileNanos(0.99));
        assertEquals(0, h.minNanos());
        assertEquals(0, h.meanNanos());
    }

    private static void assertWithin(double expected, long actual, double relative) {
        assertTrue(Math.abs(actual - expected) <= expected * relative, "expected ~" + expected + ", got " + actual);
    }
}
