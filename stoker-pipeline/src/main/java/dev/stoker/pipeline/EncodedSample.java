package dev.stoker.pipeline;

/**
 * One sample's model inputs, as the HF Qwen-VL processor and the official SFT code produce them
 * (unpadded): token arrays of length L, 3×L M-RoPE positions (row-major), and the rows of
 * {@code pixel_values} for all of its images in order with one {@code image_grid_thw} row each.
 *
 * @param sourcePixels  pixels of the source images as stored (before any DCT scaling), for throughput
 */
public record EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                            float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels) {

    public int length() { return inputIds.length; }

    public int images() { return imageGridThw.length / 3; }

    public int pixelRows() { return pixelRowLength == 0 ? 0 : pixelValues.length / pixelRowLength; }
}
