package dev.stoker.pipeline.batch;

import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.EncodeOptions.InputContract;
import dev.stoker.pipeline.EncodeOptions.PixelFormat;
import dev.stoker.pipeline.EncodedSample;
import java.util.List;

/**
 * The shape of a padded batch, known before any array is filled, so a destination (heap arrays or
 * a shared-memory object) can be sized first and written once; {@link BatchSchema} turns it into tensors.
 *
 * @param samples         B, the samples in the batch
 * @param length          L, the longest sample's token count (0 for an empty batch)
 * @param pixelRows       rows of {@code pixel_values}, all images of all samples (in either pixel format)
 * @param pixelRowLength  floats per row (3·temporal·patch²; 0 when no sample has an image)
 * @param images          rows of {@code image_grid_thw}
 * @param pixelFormat     FLOAT32: {@code pixel_values}; UINT8: {@code pixel_values_u8} of {@code pixelU8Bytes}
 * @param pixelU8Bytes    bytes of the resized u8 pixels of all images (0 in FLOAT32)
 * @param inputContract   which model inputs the batch carries ({@code mm_token_type_ids} or not) and how it is padded
 */
public record BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat,
                          long pixelU8Bytes, InputContract inputContract) {
    public BatchShape {
        java.util.Objects.requireNonNull(pixelFormat, "pixelFormat");
        java.util.Objects.requireNonNull(inputContract, "inputContract");
    }

    /** A FLOAT32 layout of the default input contract. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images) {
        this(samples, length, pixelRows, pixelRowLength, images, PixelFormat.FLOAT32, 0);
    }

    /** A layout of the default input contract. */
    public BatchShape(int samples, int length, long pixelRows, int pixelRowLength, int images, PixelFormat pixelFormat, long pixelU8Bytes) {
        this(samples, length, pixelRows, pixelRowLength, images, pixelFormat, pixelU8Bytes, EncodeOptions.DEFAULT_INPUT_CONTRACT);
    }

    /** The layout of a FLOAT32 batch of {@code batch}. */
    public static BatchShape of(List<EncodedSample> batch) { return of(batch, PixelFormat.FLOAT32); }

    /** The layout of a batch of {@code batch} in {@code format}, of the default input contract. */
    public static BatchShape of(List<EncodedSample> batch, PixelFormat format) { return of(batch, format, EncodeOptions.DEFAULT_INPUT_CONTRACT); }

    /** The layout of a batch of {@code batch} in {@code format} under {@code contract}; every sample must have been encoded in the format. */
    public static BatchShape of(List<EncodedSample> batch, PixelFormat format, InputContract contract) {
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
        return new BatchShape(batch.size(), length, rows, rowLength, images, format, u8, contract);
    }

    /** This shape with {@code length} tokens per sample and the one image of {@code rows} rows and {@code u8Bytes} compact bytes. */
    BatchShape withOneImage(int length, long rows, int rowLength, long u8Bytes) {
        return new BatchShape(samples, length, rows, rowLength, 1, pixelFormat, pixelFormat == PixelFormat.UINT8 ? u8Bytes : 0, inputContract);
    }

    /** B·L, the elements of input_ids, labels and attention_mask. */
    public long tokens() { return (long) samples * length; }

    /** Floats of pixel_values in FLOAT32 (what the trainer's conversion yields in UINT8). */
    public long pixelFloats() { return pixelRows * pixelRowLength; }

    /** Bytes of the batch in the {@code STKB} layout of {@link BatchSchema}: header, descriptors, tensors and alignment. */
    public long sizeBytes() { return BatchSchema.plan(this, pixelRowLength).totalBytes(); }
}
