package dev.stoker.transport;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/** What a {@link FeedServer} serves: each rank's next batch, as tensors, or empty at the end. */
public interface BatchProvider {
    /** A batch ready to send: its metadata and tensors (heap or native segments). */
    record Prepared(BatchLayout.Meta meta, List<Tensor> tensors) {}

    /** Checks that a trainer may join; throws IllegalArgumentException with the reason if not. */
    void validate(int rank, int world);

    /** The rank's next batch; completes with {@code null} when the rank's feed is finished. */
    CompletableFuture<Prepared> next(int rank);
}
