package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.store.Lease;
import dev.stoker.store.StoredObject;
import java.util.concurrent.CompletableFuture;

/**
 * What a {@link RankLedger} hands out: each rank's batches in the schedule's order, from the cursor
 * the stream starts at. A local job's stream is its pipeline ({@code Feeder}); a cluster node's is
 * the batches its ranks pull from their owners. The ledger keeps the record of what went to whom;
 * the stream only makes batches.
 *
 * <p>Threading: {@link #next} is called for one rank at a time, in order (the ledger chains each
 * rank's requests); different ranks may call at once.
 */
public interface BatchStream extends AutoCloseable {
    /** One batch made: by value, or an object in shared memory held by {@code hold}, which the ledger now owns. */
    sealed interface Made permits Heap, InStore {}

    /** A batch by value, its tensors in the schema's order. */
    record Heap(BatchProvider.Prepared prepared) implements Made {}

    /** A batch in shared memory: {@code bytes} bytes of {@code object}, kept while {@code hold} is open. */
    record InStore(StoredObject object, long bytes, Lease hold) implements Made {}

    /** The world size: the schedule's ranks. */
    int ranks();

    /** The ranks this stream makes batches for (a node of a multi-node job: its own); every rank by default. */
    default RankRange localRanks() { return RankRange.all(ranks()); }

    /**
     * The steps the batches follow, labelled as the batches are (batches of B samples, or packs whose sizes vary by step
     * and rank: the ledger checks each batch against its rank's share of the step). After a {@link #moveTo} it is the
     * new pipeline's.
     */
    StepSchedule schedule();

    long fingerprint();

    /** The cursor of each rank's first batch. */
    ScheduleCursor start();

    /** Whether batches come {@link InStore}. */
    boolean sharedMemory();

    /** Rank {@code rank}'s next batch; completes with null when the rank's feed has ended. */
    CompletableFuture<Made> next(int rank);

    /**
     * Starts every rank afresh at {@code at}, whose step is labelled {@code step} (a resumed trainer's
     * count; −1: labels count from the origin), after which {@link #schedule()} has the labels the
     * batches carry. Throws IllegalArgumentException, with the reason, when the stream cannot.
     */
    void moveTo(ScheduleCursor at, long step);

    @Override
    void close();
}
