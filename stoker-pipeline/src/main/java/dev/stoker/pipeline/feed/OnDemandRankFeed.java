package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.batch.Batch;
import dev.stoker.pipeline.schedule.ScheduledBatch;
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
            if (outstanding >= MAX_OUTSTANDING_REQUESTS)
                return CompletableFuture.failedFuture(new IllegalStateException(
                        "more than " + MAX_OUTSTANDING_REQUESTS + " next() calls outstanding on rank " + state.rank));
            outstanding++;
            var scheduled = schedule.next();
            run = tail.handle((ignored, err) -> null).thenCompose(v -> run(scheduled));
            tail = run;
        }
        boolean first = state.requested();
        return state.deliver(run, first, () -> {
            synchronized (lock) {
                outstanding--;
            }
        });
    }

    private CompletableFuture<Batch> run(ScheduledBatch scheduled) {
        if (closed) return CompletableFuture.failedFuture(new CancellationException("rank " + state.rank + " feed closed"));
        return Source.single(scheduled).via(flow).runWith(Sink.head(), materializer).toCompletableFuture();
    }

    @Override
    public void close() { closed = true; }

    FeedMetrics.Rank snapshot() { return state.snapshot(null); }
}
