package dev.stoker.pipeline.feed;

import java.util.List;

/**
 * The feed stopped because of bad input, as its {@link ErrorPolicy} asks: the first bad sample under
 * {@link ErrorPolicy#FAIL}, or too large a share of skipped samples under {@link ErrorPolicy#SKIP}
 * with a {@link FeedConfig#maxErrorRate()}. Every rank's {@code next()} fails with the same instance;
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

    /** The sample that failed the feed (FAIL), or the last ones skipped before the rate was exceeded (SKIP). */
    public List<FeedError> samples() { return samples; }
}
