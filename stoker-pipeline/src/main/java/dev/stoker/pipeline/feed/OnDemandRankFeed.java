package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.Batch;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.Iterator;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import org.apache.pekko.NotUsed;
import org.apache.pekko.stream.Materializer;
import org.apache.pekko.stream.javadsl.Flow;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;

/**
 * SERIAL and CONCURRENT: nothing runs until {@link #next()}; each call takes the rank's next
 * scheduled batch and runs one short stream over its samples (Source.single(batch) through the
 * shared flow). Calls are chained, so a second call starts its work only when the first is done.
 *
 * <p>Once the feed has failed ({@link #fail}), every call fails with its cause; a batch still being
 * made is refused when it is delivered (RankState).
 *
 * <p>Threading: the schedule iterator and the chain are guarded by {@code lock}.
 */
final class OnDemandRankFeed implements RankFeed<Batch> {
    private final RankState state;
    private final Iterator<ScheduledBatch> schedule;
    private final Flow<ScheduledBatch, Batch, NotUsed> flow;
    private final Materializer materializer;
    private final Object lock = new Object();
    private CompletableFuture<?> tail = CompletableFuture.completedFuture(null);
    private int outstanding;
    private volatile boolean closed;
    private volatile Throwable failure;

    OnDemandRankFeed(RankState state, Iterator<ScheduledBatch> schedule, Flow<ScheduledBatch, Batch, NotUsed> flow,
                     Materializer materializer) {
        this.state = state;
        this.schedule = schedule;
        this.flow = flow;
        this.materializer = materializer;
    }

    @Override
    public int rank() { return state.rank; }

    @Override
    public CompletableFuture<Batch> next() {
        CompletableFuture<Batch> run;
        synchronized (lock) {
            if (closed) return CompletableFuture.failedFuture(new CancellationException("rank " + state.rank + " feed closed"));
            if (failure != null) return CompletableFuture.failedFuture(failure);
            if (outstanding >= MAX_OUTSTANDING_REQUESTS)
                return CompletableFuture.failedFuture(new IllegalStateException(
                        "more than " + MAX_OUTSTANDING_REQUESTS + " next() calls outstanding on rank " + state.rank));
            outstanding++;
            var scheduled = schedule.next();
            run = tail.handle((ignored, err) -> null).thenCompose(v -> run(scheduled));
            tail = run;
        }
        boolean first = state.requested();
        return state.deliver(run, first, false, () -> {
            synchronized (lock) {
                outstanding--;
            }
        });
    }

    private CompletableFuture<Batch> run(ScheduledBatch scheduled) {
        if (closed) return CompletableFuture.failedFuture(new CancellationException("rank " + state.rank + " feed closed"));
        if (failure != null) return CompletableFuture.failedFuture(failure);
        return Source.single(scheduled).via(flow).runWith(Sink.head(), materializer).toCompletableFuture();
    }

    @Override
    public void close() { closed = true; }

    /** Fails this and later {@link #next()} calls with {@code cause} (queued ones when their turn comes). */
    @Override
    public void fail(Throwable cause) { failure = cause; }

    @Override
    public FeedMetrics.Rank snapshot() { return state.snapshot(null); }

    /** The last request's run: nothing runs between requests, and requests run one after another. */
    @Override
    public CompletableFuture<?> terminated() {
        synchronized (lock) {
            return tail.handle((ignored, err) -> null);
        }
    }
}
