package dev.stoker.bench;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;

/**
 * The feed of a hand-over benchmark: batches made before timing starts, handed to any rank as
 * {@code batches} gives them, forever; a trainer starts fresh (a saved position is refused).
 */
public record ReadyBatches(Supplier<? extends BatchProvider.Delivery> batches, boolean sharedMemory, long expectedBatchBytes)
        implements BatchProvider {
    @Override
    public void validate(int rank, int world) {}

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        if (resume != null) throw new IllegalArgumentException("a benchmark's batches cannot be resumed");
        return new Joined(0, 0, 0, ScheduleCursor.START, 0, 0);
    }

    @Override
    public CompletableFuture<Delivery> next(int rank, long connection) { return CompletableFuture.completedFuture(batches.get()); }
}
