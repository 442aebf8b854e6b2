package dev.stoker.flight;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;

/** A test's rank batches for a Flight server: STKB segments lent until the server has copied them. */
interface FlightTestSource extends BatchProvider {
    CompletableFuture<Stored> next(int rank);

    @Override
    default CompletableFuture<Stored> next(int rank, long connection) { return next(rank); }

    @Override
    default Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        throw new UnsupportedOperationException("Flight trainers do not join");
    }

    /** {@code batch} (an STKB segment) lent until the server calls {@code done}. */
    static Stored lent(MemorySegment batch, Runnable done) { return new Stored(null, 0, batch.byteSize(), batch, done); }
}
