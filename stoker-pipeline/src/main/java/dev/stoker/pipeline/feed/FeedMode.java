package dev.stoker.pipeline.feed;

/** The rungs of the wait-time ladder: how far the pipeline may work ahead of the trainer. */
public enum FeedMode {
    /** On request only, one sample at a time: fetch sample 1, encode it, fetch sample 2, … (the baseline). */
    SERIAL,
    /** On request only, the batch's samples fetched and encoded concurrently; nothing runs ahead. */
    CONCURRENT,
    /** Runs ahead continuously into a per-rank buffer bounded in batches and bytes. */
    PREFETCH
}
