package dev.stoker.encode.batch;

import java.util.List;

/**
 * What a rank receives for one step, whatever holds its tensors: heap arrays ({@link Batch}) or a
 * sealed shared-memory object (the feed's {@code StoredBatch}). {@code samples() + skipped() == scheduled()}.
 */
public interface FeedBatch {
    long epoch();

    long step();

    long globalStep();

    int rank();

    int scheduled();

    List<String> sampleIds();

    int[] datasetIndices();

    List<SkippedSample> skippedSamples();

    /** B, the samples delivered. */
    int samples();

    default int skipped() { return skippedSamples().size(); }

    /** Bytes of the batch's tensors. */
    long sizeBytes();

    /**
     * Gives up the pipeline's hold on the batch's memory when it is dropped without being delivered
     * (a feed closed with batches still buffered). A no-op for heap batches.
     */
    default void discard() {}
}
