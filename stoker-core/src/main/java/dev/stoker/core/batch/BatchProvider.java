package dev.stoker.core.batch;

import dev.stoker.core.ScheduleCursor;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Rank r's next batch: what every delivery path serves (the Unix socket's {@code FeedServer}, the
 * Arrow Flight server), by value or by reference, or nothing at the end of the rank's feed. A node
 * has one: the local job's ledger, or a cluster node's pulls.
 *
 * <p>Connections: each path names the connection a request comes on by an id unique within it
 * ({@link #NO_CONNECTION} where it has none, as a Flight ticket without a session). A request means
 * the trainer holds every batch the same connection was given before it (one request is in flight
 * at a time); a provider that hands a dead connection's batches out again keys on it.
 */
public interface BatchProvider {
    /** The connection id of a path that has no connections of its own. */
    long NO_CONNECTION = -1;

    /** One ready batch. */
    sealed interface Delivery permits Prepared, Stored {}

    /** A batch to copy to the trainer: its metadata and tensors (heap or native segments), in the schema's order. */
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
     * per global step with which a client follows the cursor.
     */
    record Joined(long nextStep, long fingerprint, long stepsPerEpoch, ScheduleCursor cursor, long datasetSize, long positionsPerStep) {}

    /** Checks that a trainer may join; throws IllegalArgumentException with the reason if not. */
    void validate(int rank, int world);

    /**
     * Admits a validated trainer of {@code rank} on {@code connection}: {@code resume} is null for a
     * fresh start (the trainer takes what comes next), else the cursor of the batch it wants next,
     * from a saved state; {@code fingerprint} is 0 or the fingerprint of the job it saved its state
     * in. Throws IllegalArgumentException when the trainer cannot be served from there.
     */
    Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint);

    /**
     * {@link #join(int, long, ScheduleCursor, long)} with the label the trainer gives the step at
     * {@code resume} ({@code resumeStep}; −1: none): a provider that starts there may count its steps
     * on from it, so that a job resized to another rank count repeats no step label.
     */
    default Joined join(int rank, long connection, ScheduleCursor resume, long resumeStep, long fingerprint) {
        return join(rank, connection, resume, fingerprint);
    }

    /**
     * {@code connection}, admitted for {@code rank}, has closed: the rank may be claimed by another.
     * While a connection is open its rank is refused to any other.
     */
    default void leave(int rank, long connection) {}

    /**
     * The rank's next batch, asked on {@code connection}; completes with {@code null} when the rank's
     * feed is finished. A request on {@link #NO_CONNECTION} that the provider refuses (a connection
     * holds the rank, another such request of the rank is unanswered) throws IllegalArgumentException
     * with the reason.
     */
    CompletableFuture<? extends Delivery> next(int rank, long connection);

    /**
     * What the trainer of {@code rank} on {@code connection} measured for the batch it received last
     * (the protocol's NEXT payload, sent before the request it comes with): {@code waitNanos} blocked
     * waiting for that batch, {@code stepNanos} computing on it. Called on the connection's thread
     * before {@link #next} for the same request; a provider that keeps no record ignores it.
     */
    default void report(int rank, long connection, long waitNanos, long stepNanos) {}

    /**
     * The trainer of {@code rank} on {@code connection} measured its compute floor (headspace analysis, docs/protocol.md
     * NEXT): {@code floorNanos}, the median compute of {@code replayedSteps} steps on batches it replayed from its own
     * copies, without waiting for data. Called on the connection's thread after {@link #report} of the same NEXT; a
     * provider that keeps no record ignores it.
     */
    default void reportHeadspace(int rank, long connection, long floorNanos, long replayedSteps) {}

    /**
     * A size the batches will usually fit in, or 0 when unknown. Server and trainer allocate and
     * touch buffers of this size when the trainer connects, not on its first step: first-touching
     * fresh pages is slow, and a cold start should not pay it.
     */
    default long expectedBatchBytes() { return 0; }

    /**
     * Whether batches come as {@link Stored} shared-memory objects (a trainer that maps memory then
     * gets REFs). Asked when a trainer says hello, before a gated server opens.
     */
    default boolean sharedMemory() { return false; }
}
