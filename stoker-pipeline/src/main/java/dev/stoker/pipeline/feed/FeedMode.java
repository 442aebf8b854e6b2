package dev.stoker.pipeline.feed;

/** The rungs of the wait-time ladder: how far the pipeline may work ahead of the trainer. */
public enum FeedMode {
    /** On request only, one sample at a time: fetch sample 1, encode it, fetch sample 2, … (the baseline). */
    SERIAL,
    /** On request only, the batch's samples fetched and encoded concurrently; nothing runs ahead. */
    CONCURRENT,
    /** Runs ahead continuously into a per-rank buffer bounded in batches and bytes; batches are heap arrays, copied to the trainer. */
    PREFETCH,
    /**
     * Runs ahead like PREFETCH, but each batch is written once, in place, into the shared-memory
     * object store; trainers get references and read it there (no copy after the transform).
     */
    ZERO_COPY
}
