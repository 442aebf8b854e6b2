package dev.stoker.pipeline.feed;

import java.util.List;

/**
 * The feed stopped because of bad input, as its {@link ErrorPolicy} asks: the first broken sample under
 * {@link ErrorPolicy#FAIL}; under {@link ErrorPolicy#SKIP}, too large a share of broken samples for
 * {@link FeedConfig#maxErrorRate()}, or a source whose first {@link FeedErrors#EARLY_SAMPLES} samples all failed. Every rank's {@code next()} fails with the same instance;
 * the message is one line that names the sample(s), the stage and the cause, since it travels to the
 * trainer as the text of an ERROR frame.
 */
public final class BadInputException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final transient List<FeedError> samples;

    BadInputException(String message, List<FeedError> samples) {
        super(message);
        this.samples = List.copyOf(samples);
    }

    /**
     * The sample(s) that failed the feed (FAIL), the last errors before the rate was exceeded (SKIP), or the source's
     * first failed samples (SKIP, judged early).
     */
    public List<FeedError> samples() { return samples; }
}
