package dev.stoker.tune;

/**
 * What {@link Autotuner} reads from the feed at one tick.
 *
 * @param nanos            the tick's time on the tuner's clock (any monotonic origin)
 * @param deliveredSamples samples handed to trainers so far (cumulative)
 * @param waitNanos        time trainers spent waiting for their batches so far, all ranks summed (cumulative)
 * @param ranks            ranks fed (the wait share divides by them, the fetch limit multiplies by them)
 * @param cpuBusy          CPU-pool threads running a task now
 * @param fetchInFlight    samples whose bytes are in flight now, all ranks
 * @param anyBufferFull    whether some rank's prefetch buffer had no room for the next batch
 * @param allBuffersEmpty  whether every rank's prefetch buffer was empty
 */
public record Observation(long nanos, long deliveredSamples, long waitNanos, int ranks, long cpuBusy, long fetchInFlight,
                          boolean anyBufferFull, boolean allBuffersEmpty) {
    public Observation {
        if (ranks <= 0) throw new IllegalArgumentException("ranks must be positive, got " + ranks);
    }
}
