package dev.stoker.pipeline.batch;

import dev.stoker.pipeline.EncodedSample;
import java.util.List;

/**
 * The shape of a padded batch, known before any array is filled, so a destination (heap arrays now,
 * a shared-memory segment later) can be sized first and written once.
 *
 * @param samples         B, the samples in the batch
 * @param length          L, the longest sample's token count (0 for an empty batch)
 * @param pixelRows       rows of {@code pixel_values}, all images of all samples
 * @param pixelRowLength  floats per row (3·temporal·patch²; 0 when no sample has an image)
 * @param images          rows of {@code image_grid_thw}
 */
public record BatchLayout(int samples, int length, long pixelRows, int pixelRowLength, int images) {

    public static BatchLayout of(List<EncodedSample> batch) {
        int length = 0, rowLength = 0, images = 0;
        long rows = 0;
        for (var s : batch) {
            length = Math.max(length, s.length());
            rows += s.pixelRows();
            images += s.images();
            if (s.pixelRows() > 0) {
                if (rowLength != 0 && rowLength != s.pixelRowLength())
                    throw new IllegalArgumentException("sample " + s.id() + " has pixel rows of " + s.pixelRowLength()
                            + " floats, the batch has " + rowLength);
                rowLength = s.pixelRowLength();
            }
        }
        return new BatchLayout(batch.size(), length, rows, rowLength, images);
    }

    /** B·L, the elements of input_ids, labels and attention_mask. */
    public long tokens() { return (long) samples * length; }

    public long pixelFloats() { return pixelRows * pixelRowLength; }

    /** input_ids, labels, attention_mask (int64 B·L each), position_ids (int64 3·B·L), pixel_values (float32), image_grid_thw (int64 n·3). */
    public long sizeBytes() { return 8 * (3 * tokens() + 3 * tokens() + 3L * images) + 4 * pixelFloats(); }
}
