package dev.stoker.transport;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/** What a {@link FeedServer} serves: each rank's next batch, as tensors, or empty at the end. */
public interface BatchProvider {
    /** A batch ready to send: its metadata and tensors (heap or native segments). */
    record Prepared(BatchLayout.Meta meta, List<Tensor> tensors) {}

    /** Checks that a trainer may join; throws IllegalArgumentException with the reason if not. */
    void validate(int rank, int world);

    /**
     * A size the batches will usually fit in, or 0 when unknown. Server and trainer allocate and
     * touch buffers of this size when the trainer connects, not on its first step: first-touching
     * fresh pages is slow on some machines (~75 MB/s measured here), and a cold start should not pay it.
     */
    default long expectedBatchBytes() { return 0; }

    /** The rank's next batch; completes with {@code null} when the rank's feed is finished. */
    CompletableFuture<Prepared> next(int rank);
}
