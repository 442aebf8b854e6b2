package dev.stoker.flight;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;

/**
 * What a {@link FlightBatchServer} serves: each rank's batches, already laid out in the {@code STKB}
 * layout ({@link dev.stoker.transport.BatchLayout}), for example in a shared-memory segment.
 */
public interface BatchSource {
    /** Checks that a trainer may pull; throws IllegalArgumentException with the reason if not. */
    void validate(int rank, int world);

    /**
     * The rank's next batch in the {@code STKB} layout (a view, e.g. of shared memory), or a future
     * completing with {@code null} at the end of the rank's feed (and again on every later call). The
     * server calls {@link Leased#done()} exactly once, when it has copied the bytes out.
     */
    CompletableFuture<Leased> next(int rank);

    /**
     * What a DoGet whose ticket names {@code job} gets: by default the rank's next batch, whatever
     * the job. A source that serves stored objects by name (a cluster node's object store) reads
     * {@code job} as the object's name instead.
     */
    default CompletableFuture<Leased> next(int rank, int world, String job) { return next(rank); }

    /** A batch lent to the server until it calls {@code done} (which releases the lease). */
    record Leased(MemorySegment batch, Runnable done) {}
}
