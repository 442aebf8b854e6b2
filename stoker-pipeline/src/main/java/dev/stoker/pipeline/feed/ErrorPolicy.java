package dev.stoker.pipeline.feed;

/** What a feed does with a sample that cannot be turned into model inputs (a bad record, a broken image). */
public enum ErrorPolicy {
    /**
     * Leave it out of its batch, record it ({@link FeedErrors}, the errors file) and go on; the run
     * fails only when the share of errors exceeds {@link FeedConfig#maxErrorRate()}, or when a source's
     * first {@link FeedErrors#EARLY_SAMPLES} samples all fail.
     */
    SKIP,
    /**
     * Fail the feed at the first broken sample: every rank's {@code next()} fails with a {@link BadInputException} naming it.
     * Filtered samples (dropped by a limit the user set) are left out and recorded as under SKIP.
     */
    FAIL
}
