package dev.stoker.text;

/**
 * The token-side model inputs of one sample, unpadded: ids, labels, attention mask and the 3×L
 * M-RoPE position ids stored row-major ({@code positionIds[r * length() + i]}, rows t, h, w).
 *
 * <p>{@code imagesKept} is the number of leading images whose tokens are present; it is below the
 * sample's image count only after truncation, and the caller then drops the pixel rows and grid rows
 * of the later images. {@code videosKept} is the same for videos (their {@code pixel_values_videos} and
 * {@code video_grid_thw} rows). Arrays are not copied; equality is identity.
 */
public record TextFeatures(long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds, int imagesKept,
                           int videosKept) {

    /** Features of a sample without videos. */
    public TextFeatures(long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds, int imagesKept) {
        this(inputIds, labels, attentionMask, positionIds, imagesKept, 0);
    }

    public TextFeatures {
        int n = inputIds.length;
        if (labels.length != n || attentionMask.length != n || positionIds.length != 3L * n)
            throw new IllegalArgumentException("inconsistent lengths: ids " + n + ", labels " + labels.length
                    + ", mask " + attentionMask.length + ", positions " + positionIds.length);
    }

    public int length() { return inputIds.length; }

    /** Number of positions with a label other than {@link QwenTokenIds#IGNORE_INDEX}. */
    public int supervisedCount() {
        int c = 0;
        for (long l : labels) if (l != QwenTokenIds.IGNORE_INDEX) c++;
        return c;
    }

    /** {@code max(position) + 1 − L}, the offset generation would continue from (0 for text only). */
    public long ropeDelta() {
        long max = -1;
        for (long p : positionIds) max = Math.max(max, p);
        return max + 1 - inputIds.length;
    }
}
