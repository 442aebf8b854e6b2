package dev.stoker.source;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters of one source: fetches, bytes, retries, failures, in-flight now and at peak, waits for an
 * in-flight slot, and first-byte and total latency.
 *
 * <p>Latencies are measured from the moment a fetch holds an in-flight slot (so they include
 * {@link SourceConfig#fetchLatencyMillis()} and retry backoff but not the wait for the slot, which
 * {@link #permitWaits()} counts). First byte is the response head for S3 and the first read for a file.
 *
 * <p>Threading: all methods are thread-safe and lock-free.
 */
public final class SourceMetrics {
    private final LongAdder requests = new LongAdder();
    private final LongAdder completed = new LongAdder();
    private final LongAdder failures = new LongAdder();
    private final LongAdder retries = new LongAdder();
    private final LongAdder bytesFetched = new LongAdder();
    private final LongAdder permitWaits = new LongAdder();
    private final AtomicLong inFlight = new AtomicLong();
    private final AtomicLong inFlightPeak = new AtomicLong();
    private final LatencyHistogram firstByteLatency = new LatencyHistogram();
    private final LatencyHistogram totalLatency = new LatencyHistogram();

    /** Fetches asked for (manifest included), refused ones too. */
    public long requests() { return requests.sum(); }

    /** Fetches that returned bytes. */
    public long completed() { return completed.sum(); }

    /** Fetches that ended in an error, refusals included. */
    public long failures() { return failures.sum(); }

    /** Attempts repeated after a retryable failure. */
    public long retries() { return retries.sum(); }

    public long bytesFetched() { return bytesFetched.sum(); }

    /** Fetches that found every in-flight slot taken and waited for one. */
    public long permitWaits() { return permitWaits.sum(); }

    public long inFlight() { return inFlight.get(); }

    public long inFlightPeak() { return inFlightPeak.get(); }

    public LatencyHistogram firstByteLatency() { return firstByteLatency; }

    public LatencyHistogram totalLatency() { return totalLatency; }

    void onRequest() { requests.increment(); }

    void onPermitWait() { permitWaits.increment(); }

    void onStart() {
        long now = inFlight.incrementAndGet();
        inFlightPeak.accumulateAndGet(now, Math::max);
    }

    void onFirstByte(long latencyNanos) { firstByteLatency.record(latencyNanos); }

    void onRetry() { retries.increment(); }

    void onEnd(byte[] bytes, long latencyNanos) {
        inFlight.decrementAndGet();
        totalLatency.record(latencyNanos);
        if (bytes != null) {
            completed.increment();
            bytesFetched.add(bytes.length);
        } else {
            failures.increment();
        }
    }

    void onRefused() { failures.increment(); }

    @Override
    public String toString() {
        return "requests=" + requests() + " completed=" + completed() + " failures=" + failures() + " retries=" + retries()
                + " bytes=" + bytesFetched() + " inFlight=" + inFlight() + " peak=" + inFlightPeak() + " permitWaits=" + permitWaits()
                + " firstByte[" + firstByteLatency + "] total[" + totalLatency + "]";
    }
}
