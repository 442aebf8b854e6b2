package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.FeedBatch;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Per-rank delivery accounting and time-to-first-batch stamps, shared by both rank feed kinds.
 * Skipped samples are recorded when their batch is delivered, not when it is assembled, so a batch
 * prefetched but never taken does not count and delivered + skipped = scheduled holds per rank.
 * The bad-input policy ({@link FeedErrors}) is judged at both points: a batch it refuses is not
 * delivered, its memory is given back, and the consumer gets the {@link BadInputException}.
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

    /**
     * A rank's stream produced {@code b} (PREFETCH, ZERO_COPY): returns the feed's failure when the
     * policy refuses it (or already failed the feed), having discarded {@code b}; else null.
     */
    BadInputException produced(FeedBatch b) {
        var failure = errors.produced(b);
        if (failure != null) b.discard();
        return failure;
    }

    /** Records {@code b} as delivered; returns the policy's failure instead (and discards {@code b}) when it refuses it. */
    private BadInputException delivered(FeedBatch b) {
        var failure = errors.delivered(b);
        if (failure != null) {
            b.discard();
            return failure;
        }
        delivered.incrementAndGet();
        metrics.deliveredBatches.increment();
        metrics.deliveredSamples.add(b.samples());
        metrics.skippedSamples.add(b.skipped());
        metrics.countSources(b);
        return null;
    }

    /**
     * The consumer's future for {@code produced}: accounting is done before it completes, and a
     * failure arrives unwrapped (a CancellationException stays one for {@code get()}). With
     * {@code awaitEarly} (the streaming modes, whose pipeline runs ahead of the trainer), a batch whose
     * every sample failed waits for the early judgement first ({@link FeedErrors#afterEarlyJudgement}).
     */
    <B extends FeedBatch> CompletableFuture<B> deliver(CompletableFuture<B> produced, boolean firstRequest, boolean awaitEarly, Runnable always) {
        var out = new CompletableFuture<B>();
        long askedNanos = System.nanoTime();
        (awaitEarly ? produced.thenCompose(errors::afterEarlyJudgement) : produced).whenComplete((b, err) -> {
            always.run();
            if (err != null) {
                Throwable cause = err;
                while (cause instanceof CompletionException && cause.getCause() != null) cause = cause.getCause();
                out.completeExceptionally(cause);
                return;
            }
            var refused = delivered(b);
            if (refused != null) {
                out.completeExceptionally(refused);
                return;
            }
            batchReady();
            long waited = System.nanoTime() - askedNanos;
            metrics.deliverLatency.record(waited);
            metrics.deliverWaitNanos.add(waited);
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
