package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.store.StoredObject;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One rank's batch written once into a sealed shared-memory object, in the {@code STKB} layout
 * ({@code dev.stoker.core.batch.BatchLayout}): trainers read it in place. It carries one reference to
 * the object (the pipeline's hold from sealing); whoever ends up with the batch gives it up exactly
 * once with {@link #release()}: the server after handing out leases of its own, or the feed when
 * the batch is dropped undelivered.
 *
 * @param bytesCopied bytes moved inside the segment after the transform (non-zero only when a
 *                    sample failed after its rows were placed and the rows behind it were compacted)
 */
public record StoredBatch(long epoch, long step, long globalStep, int rank, int scheduled, List<String> sampleIds,
                          int[] datasetIndices, List<SkippedSample> skippedSamples, int samples, long sizeBytes,
                          long bytesCopied, StoredObject object, AtomicBoolean released) implements FeedBatch {

    public StoredBatch {
        sampleIds = List.copyOf(sampleIds);
        skippedSamples = List.copyOf(skippedSamples);
        if (sampleIds.size() != samples || datasetIndices.length != samples || samples + skippedSamples.size() != scheduled)
            throw new IllegalArgumentException("batch of " + samples + " samples (" + sampleIds.size() + " ids) + "
                    + skippedSamples.size() + " skipped != " + scheduled + " scheduled");
    }

    /** Drops the pipeline's reference to the object (idempotent); leases taken before stay valid. */
    public void release() {
        if (released.compareAndSet(false, true)) object.release();
    }

    @Override
    public void discard() { release(); }
}
