package dev.stoker.encode;

/**
 * One sample's model inputs, as the HF Qwen-VL processor and the official SFT code produce them
 * (unpadded): token arrays of length L, 3×L M-RoPE positions (row-major), and the rows of
 * {@code pixel_values} for all of its images in order with one {@code image_grid_thw} row each.
 *
 * <p>{@code pixelValues} holds {@link #pixelFloats()} floats from index 0; it is longer only when
 * the encoder was given a reused buffer ({@link SampleEncoder.PixelBuffers}).
 *
 * <p>In the compact wire format ({@link EncodeOptions.PixelFormat#UINT8}) the images are carried as
 * {@code pixelsU8} instead, each image's resized RGB pixels (HWC) in order, exactly
 * {@link #pixelU8Bytes()} long; {@code pixelValues} is then empty. {@code pixelsU8} is null in FLOAT32.
 *
 * @param pixelRowLength  floats per pixel_values row (3·t·p²), in either format
 * @param sourcePixels    pixels of the source images as stored (before any DCT scaling), for throughput
 * @param videos          the sample's video tensors (issue 29): float32 rows, or in the compact wire format each video's
 *                        resized frames and frame counts ({@link dev.stoker.encode.video.VideoTensors#compact()}); null
 *                        for a sample encoded without video
 * @param audio           an audio family's sample's clips (issue 32: {@code input_features}, {@code feature_attention_mask}
 *                        as {@code encode} writes them); null for a sample without audio
 * @param floatPositionIds Qwen3-Omni's float32 (3, L) positions, row-major (issue 32), {@code positionIds} then empty; null
 *                        for every other family. {@code positionIds} holds L values (one row) for Qwen2-Audio, 3·L for the others
 */
public record EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                            float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels, byte[] pixelsU8,
                            dev.stoker.encode.video.VideoTensors videos, dev.stoker.encode.audio.AudioTensors audio,
                            float[] floatPositionIds) {

    /** A sample with integer positions. */
    public EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                         float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels, byte[] pixelsU8,
                         dev.stoker.encode.video.VideoTensors videos, dev.stoker.encode.audio.AudioTensors audio) {
        this(id, inputIds, labels, attentionMask, positionIds, pixelValues, pixelRowLength, imageGridThw, sourcePixels, pixelsU8, videos, audio, null);
    }

    /** This sample with {@code positions} as its float32 (3, L) positions (Qwen3-Omni) instead of integer ones. */
    public EncodedSample withFloatPositions(float[] positions) {
        return new EncodedSample(id, inputIds, labels, attentionMask, new long[0], pixelValues, pixelRowLength, imageGridThw, sourcePixels,
                pixelsU8, videos, audio, positions);
    }

    /** A sample without audio. */
    public EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                         float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels, byte[] pixelsU8,
                         dev.stoker.encode.video.VideoTensors videos) {
        this(id, inputIds, labels, attentionMask, positionIds, pixelValues, pixelRowLength, imageGridThw, sourcePixels, pixelsU8, videos, null);
    }

    /** This sample carrying {@code a} as its audio (null: none). */
    public EncodedSample withAudio(dev.stoker.encode.audio.AudioTensors a) {
        return new EncodedSample(id, inputIds, labels, attentionMask, positionIds, pixelValues, pixelRowLength, imageGridThw, sourcePixels,
                pixelsU8, videos, a, floatPositionIds);
    }

    /** Clips of {@link #audio()} (0 without audio). */
    public int clips() { return audio == null ? 0 : audio.clips(); }

    /** A sample without video tensors. */
    public EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                         float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels, byte[] pixelsU8) {
        this(id, inputIds, labels, attentionMask, positionIds, pixelValues, pixelRowLength, imageGridThw, sourcePixels, pixelsU8, null);
    }

    /** A FLOAT32 sample. */
    public EncodedSample(String id, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                         float[] pixelValues, int pixelRowLength, long[] imageGridThw, long sourcePixels) {
        this(id, inputIds, labels, attentionMask, positionIds, pixelValues, pixelRowLength, imageGridThw, sourcePixels, null);
    }

    /** Whether the images are carried as resized u8 pixels (the compact wire format). */
    public boolean compact() { return pixelsU8 != null; }

    /** Bytes of {@code pixelsU8} (0 in FLOAT32). */
    public int pixelU8Bytes() { return pixelsU8 == null ? 0 : pixelsU8.length; }

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
