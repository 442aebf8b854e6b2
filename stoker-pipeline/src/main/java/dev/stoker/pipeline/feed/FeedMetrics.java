package dev.stoker.pipeline.feed;

import java.util.List;
import java.util.concurrent.atomic.LongAdder;

/**
 * Per-stage counters of a feed (fetch, encode, assemble, deliver) and, per rank, buffer occupancy
 * and time to first batch; read as a {@link Snapshot}.
 *
 * <p>Threading: counters are {@link LongAdder}s written by pipeline threads; snapshots are not atomic
 * across counters.
 */
public final class FeedMetrics {
    final LongAdder fetchStarted = new LongAdder();
    final LongAdder fetchFailed = new LongAdder();
    final LongAdder fetchedSamples = new LongAdder();
    final LongAdder fetchedBytes = new LongAdder();
    final LongAdder fetchNanos = new LongAdder();
    final LongAdder encodeStarted = new LongAdder();
    final LongAdder encodedSamples = new LongAdder();
    final LongAdder encodeFailed = new LongAdder();
    final LongAdder encodeNanos = new LongAdder();
    final LongAdder assembledBatches = new LongAdder();
    final LongAdder assembledBytes = new LongAdder();
    final LongAdder assembleNanos = new LongAdder();
    final LongAdder copiedBytes = new LongAdder();
    final LongAdder deliveredBatches = new LongAdder();
    final LongAdder deliveredSamples = new LongAdder();
    final LongAdder skippedSamples = new LongAdder();

    FeedMetrics() {}

    /**
     * Counters since the feed started.
     *
     * @param fetchStarted    samples whose fetch began
     * @param fetchedSamples  samples whose bytes all arrived
     * @param fetchNanos      summed latency of those fetches (request to last byte)
     * @param encodeStarted   samples handed to the CPU pool
     * @param encodedSamples  samples encoded successfully
     * @param fetchFailed     samples whose line or an image could not be read (counted when it happened, prefetched or not)
     * @param encodeNanos     summed CPU-pool time of encodes (successful or not)
     * @param skippedSamples  samples left out of delivered batches because they failed
     * @param copiedBytes     bytes copied after the transform to build batches: every tensor byte when batches are
     *                        assembled on the heap; in ZERO_COPY only rows moved to close a gap left by a failed sample
     */
    public record Snapshot(long fetchStarted, long fetchedSamples, long fetchFailed, long fetchedBytes, long fetchNanos,
                           long encodeStarted, long encodedSamples, long encodeFailed, long encodeNanos,
                           long assembledBatches, long assembledBytes, long assembleNanos, long copiedBytes,
                           long deliveredBatches, long deliveredSamples, long skippedSamples, List<Rank> ranks) {

        public long bufferedBatches() { return ranks.stream().mapToLong(Rank::bufferedBatches).sum(); }

        public long bufferedBytes() { return ranks.stream().mapToLong(Rank::bufferedBytes).sum(); }
    }

    /**
     * One rank's buffer and start-up figures.
     *
     * @param bufferedBatches      batches ready in its buffer now (the buffer figures are 0 outside PREFETCH)
     * @param bufferedBytes        their bytes
     * @param peakBufferedBytes    the most bytes its buffer held at once
     * @param producerWaits        times a ready batch had to wait for buffer space (back-pressure)
     * @param consumerWaits        times next() found no batch ready
     * @param deliveredBatches     batches handed to the trainer
     * @param firstBatchReadyNanos from feeder start (pipeline up) to the first batch ready; -1 before it
     * @param firstRequestNanos    from the first next() to its completion; -1 before it
     */
    public record Rank(int rank, long bufferedBatches, long bufferedBytes, long peakBufferedBytes, long producerWaits,
                       long consumerWaits, long deliveredBatches, long firstBatchReadyNanos, long firstRequestNanos) {}

    Snapshot snapshot(List<Rank> ranks) {
        return new Snapshot(fetchStarted.sum(), fetchedSamples.sum(), fetchFailed.sum(), fetchedBytes.sum(), fetchNanos.sum(),
                encodeStarted.sum(), encodedSamples.sum(), encodeFailed.sum(), encodeNanos.sum(),
                assembledBatches.sum(), assembledBytes.sum(), assembleNanos.sum(), copiedBytes.sum(),
                deliveredBatches.sum(), deliveredSamples.sum(), skippedSamples.sum(), List.copyOf(ranks));
    }
}
