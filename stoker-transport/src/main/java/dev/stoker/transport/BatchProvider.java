package dev.stoker.transport;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** What a {@link FeedServer} serves: each rank's next batch, by value or by reference, or nothing at the end. */
public interface BatchProvider {
    /** One ready batch. */
    sealed interface Delivery permits Prepared, Stored {}

    /** A batch to copy to the trainer: its metadata and tensors (heap or native segments). */
    record Prepared(BatchLayout.Meta meta, List<Tensor> tensors) implements Delivery {}

    /**
     * A batch already laid out ({@link BatchLayout}) in a shared-memory segment file: the trainer
     * gets a reference and reads it in place. {@code batch} is the service's view of the same bytes
     * ({@code length} bytes at {@code offset} of {@code file}); {@code release} ends the service's
     * hold on them and must be called exactly once, when the trainer releases the batch or goes away.
     */
    record Stored(Path file, long offset, long length, MemorySegment batch, Runnable release) implements Delivery {}

    /**
     * What a trainer that says hello is told: the step label of its next batch, the job's
     * fingerprint, steps per epoch, the cursor of its next batch, and the data set size and samples
     * per global step with which a client follows the cursor (see {@link FeedProtocol.Welcome#advance}).
     */
    record Joined(long nextStep, long fingerprint, long stepsPerEpoch, FeedProtocol.Cursor cursor, long datasetSize, long positionsPerStep) {
        /** A fresh start with nothing known about the schedule. */
        public static final Joined FRESH = new Joined(0, 0, 0, new FeedProtocol.Cursor(0, 0), 0, 0);
    }

    /** Checks that a trainer may join; throws IllegalArgumentException with the reason if not. */
    void validate(int rank, int world);

    /**
     * Admits a validated trainer of {@code rank}: {@code resume} is null for a fresh start (the
     * trainer takes what comes next), else the cursor of the batch it wants next, from a saved
     * state; {@code fingerprint} is 0 or the fingerprint of the job it saved its state in. Throws
     * IllegalArgumentException when the trainer cannot be served from there. The default serves
     * fresh starts only.
     */
    default Joined join(int rank, FeedProtocol.Cursor resume, long fingerprint) {
        if (resume != null) throw new IllegalArgumentException("this service cannot resume a trainer (asked for " + resume + ")");
        return Joined.FRESH;
    }

    /**
     * {@link #join(int, FeedProtocol.Cursor, long)} by connection {@code connection} (an id unique
     * within the server): a provider that keeps per-connection state (what a dead connection was
     * given, to hand it out again) overrides this and {@link #next(int, long)}.
     */
    default Joined join(int rank, long connection, FeedProtocol.Cursor resume, long fingerprint) {
        return join(rank, resume, fingerprint);
    }

    /**
     * {@link #next(int)} asked by connection {@code connection}. Each request means the trainer
     * holds every batch the connection was given before it (one request is in flight at a time).
     */
    default CompletableFuture<? extends Delivery> next(int rank, long connection) { return next(rank); }

    /**
     * A size the batches will usually fit in, or 0 when unknown. Server and trainer allocate and
     * touch buffers of this size when the trainer connects, not on its first step: first-touching
     * fresh pages is slow on some machines (~75 MB/s measured here), and a cold start should not pay it.
     */
    default long expectedBatchBytes() { return 0; }

    /**
     * Whether batches come as {@link Stored} shared-memory objects (a trainer that maps memory then
     * gets REFs). Asked when a trainer says hello, before a gated server opens.
     */
    default boolean sharedMemory() { return false; }

    /** The rank's next batch; completes with {@code null} when the rank's feed is finished. */
    CompletableFuture<? extends Delivery> next(int rank);
}
