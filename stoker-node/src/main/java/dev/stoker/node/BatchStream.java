package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.plan.schedule.SampleSchedule;
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
    default dev.stoker.pipeline.feed.RankRange localRanks() { return dev.stoker.pipeline.feed.RankRange.all(ranks()); }

    /** The schedule the stream follows (its cursor arithmetic and sizes); a packed job's: the order its packs are cut from. */
    SampleSchedule schedule();

    /**
     * A packed job's schedule, whose steps the batches follow (each rank's batch its pack, of a size that varies by step
     * and rank); null for an unpacked job, whose steps are {@link #schedule()}'s. After a {@link #moveTo} it is the new
     * pipeline's.
     */
    default dev.stoker.plan.pack.PackedSchedule packed() { return null; }

    /**
     * A packed job's label of the step at {@link #start()} (the global step its batches carry), or −1: the steps from the
     * origin to it ({@link dev.stoker.pipeline.feed.PackedFeed#labelAt}). After a {@link #moveTo} it is the new pipeline's.
     * Unused for an unpacked job, whose labels are {@link #schedule()}'s.
     */
    default long startLabel() { return -1; }

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
