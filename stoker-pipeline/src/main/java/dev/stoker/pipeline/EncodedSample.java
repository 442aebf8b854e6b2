package dev.stoker.pipeline;

/**
 * One sample's model inputs, as the HF Qwen-VL processor and the official SFT code produce them
 * (unpadded): token arrays of length L, 3×L M-RoPE positions (row-major), and the rows of
 * {@code pixel_values} for all of its images in order with one {@code image_grid_thw} row each.
 *
 * <p>{@code pixelValues} holds {@link #pixelFloats()} floats from index 0; it is longer only when
 * the encoder was given a reused buffer ({@link SampleEncoder.PixelBuffers}).
 *
 * @param sourcePixels  pixels of the source images as stored (before any DCT scaling), for throughput
 */
public record EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                            float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels) {

    public int length() { return inputIds.length; }

    public int images() { return imageGridThw.length / 3; }

    /** Rows of pixel_values: Σ t·h·w over the images. */
    public int pixelRows() {
        long rows = 0;
        for (int i = 0; i < imageGridThw.length; i += 3) rows += imageGridThw[i] * imageGridThw[i + 1] * imageGridThw[i + 2];
        return (int) rows;
    }

    /** Floats of pixel_values in use: rows · row length. */
    public int pixelFloats() { return pixelRows() * pixelRowLength; }
}
