package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.batch.FeedBatch;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Per-rank delivery accounting and time-to-first-batch stamps, shared by both rank feed kinds.
 * Skipped samples are recorded when their batch is delivered, not when it is assembled, so a batch
 * prefetched but never taken does not count and delivered + skipped = scheduled holds per rank.
 */
final class RankState {
    final int rank;
    final long feederStartNanos;
    private final AtomicLong firstReadyNanos = new AtomicLong(-1);
    private final AtomicLong firstRequestStartNanos = new AtomicLong(-1);
    private final AtomicLong firstRequestNanos = new AtomicLong(-1);
    private final AtomicLong delivered = new AtomicLong();

    private final FeedMetrics metrics;
    private final FeedErrors errors;

    RankState(int rank, long feederStartNanos, FeedMetrics metrics, FeedErrors errors) {
        this.rank = rank;
        this.feederStartNanos = feederStartNanos;
        this.metrics = metrics;
        this.errors = errors;
    }

    void batchReady() { firstReadyNanos.compareAndSet(-1, System.nanoTime() - feederStartNanos); }

    /** Stamps the first request; returns whether this call is it. */
    boolean requested() { return firstRequestStartNanos.compareAndSet(-1, System.nanoTime()); }

    void firstRequestDone() { firstRequestNanos.compareAndSet(-1, System.nanoTime() - firstRequestStartNanos.get()); }

    private void delivered(FeedBatch b) {
        delivered.incrementAndGet();
        metrics.deliveredBatches.increment();
        metrics.deliveredSamples.add(b.samples());
        metrics.skippedSamples.add(b.skipped());
        for (var s : b.skippedSamples())
            errors.record(new FeedError(s.sampleId(), s.datasetIndex(), b.epoch(), b.step(), b.rank(), s.stage(), s.cause()));
    }

    /**
     * The consumer's future for {@code produced}: accounting is done before it completes, and a
     * failure arrives unwrapped (a CancellationException stays one for {@code get()}).
     */
    <B extends FeedBatch> CompletableFuture<B> deliver(CompletableFuture<B> produced, boolean firstRequest, Runnable always) {
        var out = new CompletableFuture<B>();
        long askedNanos = System.nanoTime();
        produced.whenComplete((b, err) -> {
            always.run();
            if (err != null) {
                Throwable cause = err;
                while (cause instanceof CompletionException && cause.getCause() != null) cause = cause.getCause();
                out.completeExceptionally(cause);
                return;
            }
            batchReady();
            metrics.deliverLatency.record(System.nanoTime() - askedNanos);
            delivered(b);
            if (firstRequest) firstRequestDone();
            out.complete(b);
        });
        return out;
    }

    FeedMetrics.Rank snapshot(PrefetchBuffer<?> buffer) {
        return new FeedMetrics.Rank(rank, buffer == null ? 0 : buffer.batches(), buffer == null ? 0 : buffer.bytes(),
                buffer == null ? 0 : buffer.peakBytes(), buffer == null ? 0 : buffer.producerWaits(),
                buffer == null ? 0 : buffer.consumerWaits(), delivered.get(), firstReadyNanos.get(), firstRequestNanos.get());
    }
}
