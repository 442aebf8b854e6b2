package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.FeedBatch;
import java.util.concurrent.CompletableFuture;

/**
 * One trainer rank's stream inside a {@link Feeder}: its batches in schedule order, one per global step.
 *
 * <p>Every step yields a batch, even when all of its samples failed (then an empty one, B = 0),
 * so that all ranks take the same number of steps and collective operations stay in lockstep;
 * {@code samples() + skipped() == scheduled()} holds for each batch.
 *
 * <p>Threading: {@link #next()} may be called from any thread; calls are served in call order, at
 * most {@link #MAX_OUTSTANDING_REQUESTS} at a time. The returned future may complete on a pipeline
 * thread: do not block in its callbacks (or use the async variants).
 */
interface RankFeed<B extends FeedBatch> extends AutoCloseable {
    int MAX_OUTSTANDING_REQUESTS = 64;

    int rank();

    /** The next batch of this rank; fails with the stream's error, or CancellationException after close. */
    CompletableFuture<B> next();

    /** Fails this and later {@link #next()} calls with {@code cause} and stops the rank's work: the bad-input policy failed the feed. */
    void fail(Throwable cause);

    /** The rank's counters now (delivered batches, its wait, its buffer). */
    FeedMetrics.Rank snapshot();

    /** {batches, bytes, full 1/0} of the rank's buffer now; zeros where nothing is buffered ahead. */
    default long[] bufferState() { return new long[3]; }

    /**
     * Completes when the rank's stream has stopped after {@link #close} or {@link #fail} (at once where nothing runs
     * between requests): the feed waits for it before it stops what the streams use (the CPU pool, the store's writer).
     */
    CompletableFuture<?> terminated();

    /** Stops this rank's work; outstanding and later next() calls fail. */
    @Override
    void close();
}
