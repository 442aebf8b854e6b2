package dev.stoker.pipeline.feed;

/** What a feed does with a sample that cannot be turned into model inputs (a bad record, a broken image). */
public enum ErrorPolicy {
    /**
     * Leave it out of its batch, record it ({@link FeedErrors}, the errors file) and go on; the run
     * fails only when the share of skipped samples exceeds {@link FeedConfig#maxErrorRate()}.
     */
    SKIP,
    /** Fail the feed at the first bad sample: every rank's {@code next()} fails with a {@link BadInputException} naming it. */
    FAIL
}
