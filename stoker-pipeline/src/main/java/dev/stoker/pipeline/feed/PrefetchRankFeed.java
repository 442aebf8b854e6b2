package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.Iterator;
import java.util.concurrent.CompletableFuture;
import org.apache.pekko.Done;
import org.apache.pekko.NotUsed;
import org.apache.pekko.stream.KillSwitches;
import org.apache.pekko.stream.Materializer;
import org.apache.pekko.stream.UniqueKillSwitch;
import org.apache.pekko.stream.javadsl.Flow;
import org.apache.pekko.stream.javadsl.Keep;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;

/**
 * PREFETCH: one stream per rank, started with the feeder, runs ahead of the trainer into the
 * rank's {@link PrefetchBuffer}:
 * <pre>
 *  schedule(rank) ─▶ shared flow (fetch F, encode T, grouped B, assemble) ─mapAsync(1) admit─▶ kill switch ─▶ ignore
 * </pre>
 * A batch the bad-input policy refuses (a bad sample under FAIL) fails the stream at the admit step;
 * the feeder then {@link #fail}s every rank.
 * When the buffer is full the admit future stays open, the mapAsync stops pulling, and demand stops
 * all the way up to the schedule: in flight are then at most F fetches, T encodes, B−1 grouped
 * samples and one parked batch.
 *
 * <p>Threading: the stream runs on the Pekko dispatcher and the CPU pool; {@link #next()} only
 * touches the buffer.
 */
final class PrefetchRankFeed<B extends FeedBatch> implements RankFeed<B> {
    private final RankState state;
    private final PrefetchBuffer<B> buffer;
    private final UniqueKillSwitch killSwitch;
    private final CompletableFuture<?> terminated;

    PrefetchRankFeed(RankState state, Iterator<ScheduledBatch> schedule, Flow<ScheduledBatch, B, NotUsed> flow,
                     Materializer materializer, PrefetchBuffer<B> buffer) {
        this.state = state;
        this.buffer = buffer;
        var running = Source.fromIterator(() -> schedule)
                .via(flow)
                .mapAsync(1, b -> {
                    var refused = state.produced(b);
                    if (refused != null) return CompletableFuture.<Done>failedFuture(refused);
                    state.batchReady();
                    return buffer.admit(b).thenApply(v -> Done.done());
                })
                .viaMat(KillSwitches.single(), Keep.right())
                .toMat(Sink.ignore(), Keep.both())
                .run(materializer);
        this.killSwitch = running.first();
        // on the stream's own thread as it ends, not on the common pool (PekkoFutures says why)
        this.terminated = PekkoFutures.direct(running.second()).whenComplete((done, err) ->
                buffer.fail(err != null ? err : new IllegalStateException("rank " + state.rank + " stream ended")));
    }

    @Override
    public int rank() { return state.rank; }

    @Override
    public CompletableFuture<B> next() {
        boolean first = state.requested();
        return state.deliver(buffer.take(), first, true, () -> { });
    }

    @Override
    public void close() {
        buffer.close();
        killSwitch.shutdown();
    }

    /** Fails waiting and later {@link #next()} calls with {@code cause}, drops the buffered batches and stops the stream. */
    @Override
    public void fail(Throwable cause) {
        buffer.fail(cause);
        killSwitch.abort(cause);
    }

    @Override
    public FeedMetrics.Rank snapshot() { return state.snapshot(buffer); }

    @Override
    public long[] bufferState() { return buffer.state(); }

    @Override
    public CompletableFuture<?> terminated() { return terminated; }
}
