package dev.stoker.pipeline.batch;

import dev.stoker.pipeline.EncodeOptions.PixelFormat;
import dev.stoker.pipeline.EncodedSample;
import java.util.List;

/**
 * The shape of a padded batch, known before any array is filled, so a destination (heap arrays now,
 * a shared-memory segment later) can be sized first and written once.
 *
 * @param samples         B, the samples in the batch
 * @param length          L, the longest sample's token count (0 for an empty batch)
 * @param pixelRows       rows of {@code pixel_values}, all images of all samples (in either pixel format)
 * @param pixelRowLength  floats per row (3·temporal·patch²; 0 when no sample has an image)
 * @param images          rows of {@code image_grid_thw}
 * @param pixelFormat     FLOAT32: {@code pixel_values}; UINT8: {@code pixel_values_u8} of {@code pixelU8Bytes}
 * @param pixelU8Bytes    bytes of the resized u8 pixels of all images (0 in FLOAT32)
 */
public record BatchLayout(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                          long pixelU8Bytes) {
    /** Bytes of the compact format's small tensors: {@code pixel_norm} (2×3 float32) and {@code pixel_patch} (3 int64). */
    public static final long PIXEL_META_BYTES = 6 * Float.BYTES + 3 * Long.BYTES;

    /** A FLOAT32 layout. */
    public BatchLayout(int samples, int length, long pixelRows, int pixelRowLength, int images) {
        this(samples, length, pixelRows, pixelRowLength, images, PixelFormat.FLOAT32, 0);
    }

    /** The layout of a FLOAT32 batch of {@code batch}. */
    public static BatchLayout of(List<EncodedSample> batch) { return of(batch, PixelFormat.FLOAT32); }

    /** The layout of a batch of {@code batch} in {@code format}; every sample must have been encoded in it. */
    public static BatchLayout of(List<EncodedSample> batch, PixelFormat format) {
        int length = 0, rowLength = 0, images = 0;
        long rows = 0, u8 = 0;
        for (var s : batch) {
            if (s.compact() != (format == PixelFormat.UINT8))
                throw new IllegalArgumentException("sample " + s.id() + " was encoded " + (s.compact() ? "as UINT8" : "as FLOAT32")
                        + ", the batch is " + format);
            length = Math.max(length, s.length());
            rows += s.pixelRows();
            u8 += s.pixelU8Bytes();
            images += s.images();
            if (s.pixelRows() > 0) {
                if (rowLength != 0 && rowLength != s.pixelRowLength())
                    throw new IllegalArgumentException("sample " + s.id() + " has pixel rows of " + s.pixelRowLength()
                            + " floats, the batch has " + rowLength);
                rowLength = s.pixelRowLength();
            }
        }
        return new BatchLayout(batch.size(), length, rows, rowLength, images, format, u8);
    }

    /** B·L, the elements of input_ids, labels and attention_mask. */
    public long tokens() { return (long) samples * length; }

    /** Floats of pixel_values in FLOAT32 (what the trainer's conversion yields in UINT8). */
    public long pixelFloats() { return pixelRows * pixelRowLength; }

    /**
     * input_ids, labels, attention_mask (int64 B·L each), position_ids (int64 3·B·L), image_grid_thw (int64 n·3),
     * and pixel_values (float32) or pixel_values_u8 with pixel_norm and pixel_patch.
     */
    public long sizeBytes() {
        long pixels = pixelFormat == PixelFormat.UINT8 ? pixelU8Bytes + PIXEL_META_BYTES : 4 * pixelFloats();
        return 8 * (3 * tokens() + 3 * tokens() + 3L * images) + pixels;
    }
}
