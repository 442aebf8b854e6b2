package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.concurrent.CompletableFuture;
import java.util.function.BiFunction;

/**
 * A local job's {@link BatchStream}: its running {@link Feeder}, which a move restarts at the
 * cursor (by {@code reopen}: an equivalent feeder started there, its steps labelled from the given one).
 */
final class FeederStream implements BatchStream {
    private final BiFunction<ScheduleCursor, Long, Feeder> reopen;
    private volatile Feeder feeder;

    /** {@code reopen} may be null: the stream cannot move. */
    FeederStream(Feeder feeder, BiFunction<ScheduleCursor, Long, Feeder> reopen) {
        this.feeder = feeder;
        this.reopen = reopen;
    }

    Feeder feeder() { return feeder; }

    @Override public int ranks() { return feeder.config().ranks(); }

    @Override public RankRange localRanks() { return feeder.config().localRanks(); }

    @Override public StepSchedule schedule() { return feeder.schedule(); }

    @Override public long fingerprint() { return feeder.fingerprint(); }

    @Override public ScheduleCursor start() { return feeder.config().start(); }

    @Override public boolean sharedMemory() { return feeder.config().mode() == FeedMode.ZERO_COPY; }

    @Override
    public CompletableFuture<Made> next(int rank) {
        var f = feeder;
        if (sharedMemory())
            return f.nextStored(rank).thenApply(b -> {
                var hold = b.object().lease(); // the ledger's; the pipeline's reference goes
                b.release();
                return new InStore(b.object(), b.sizeBytes(), hold);
            });
        return f.next(rank).thenApply(b -> new Heap(BatchSchema.tensors(b, ranks(), f.config().encode().vision())));
    }

    @Override
    public void moveTo(ScheduleCursor at, long step) {
        if (reopen == null)
            throw new IllegalArgumentException("this service cannot move its pipeline to epoch " + at.epoch() + " position "
                    + at.position() + "; start it there");
        feeder.close();
        feeder = reopen.apply(at, step);
    }

    @Override
    public void close() { feeder.close(); }
}
