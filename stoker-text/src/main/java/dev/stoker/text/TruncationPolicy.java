package dev.stoker.text;

/** What {@link TokenSequenceBuilder} does with a sample longer than its token limit. */
public enum TruncationPolicy {
    /**
     * Refuse the sample with a {@link dev.stoker.core.SampleException} naming its length and the limit; a feed
     * counts it as filtered ({@link dev.stoker.core.SampleException.Kind#FILTERED}), not as an error.
     */
    REJECT,
    /**
     * Keep a prefix of at most the limit, never cutting inside an image's
     * {@code <|vision_start|>…<|vision_end|>} run; images past the cut are dropped and
     * {@link TextFeatures#imagesKept()} says how many remain.
     */
    TRUNCATE
}
