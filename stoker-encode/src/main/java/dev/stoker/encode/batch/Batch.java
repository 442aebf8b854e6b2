package dev.stoker.encode.batch;

import java.util.List;

/**
 * One rank's padded batch for one step, laid out as the official Qwen-VL collator returns it
 * (flat, row-major, C order): {@code input_ids}, {@code labels}, {@code attention_mask} (B, L),
 * {@code position_ids} (3, B, L), {@code pixel_values} (rows, rowLength) and
 * {@code image_grid_thw} (images, 3); under the input contract of transformers 5.3 and later also
 * {@code mm_token_type_ids} (B, L), derived from {@code input_ids} ({@link #mmTokenTypeIds()}).
 *
 * <p>A batch may hold fewer samples than were scheduled for it (the others failed and were recorded
 * as skipped), down to none: {@code samples() + skipped() == scheduled()}, checked on construction.
 *
 * <p>A pack ({@link BatchShape#packed()}, made by {@link PackAssembler}) is one row of whole samples instead:
 * {@code input_ids}, {@code labels} (1, T), {@code position_ids} (4, 1, T) (row 0 each segment's text positions, rows
 * 1–3 its M-RoPE), no {@code attention_mask} (null), and {@code segmentLengths} saying where each segment ends, from
 * which {@code cu_seqlens}, {@code max_seqlen} and {@code seg_ids} follow ({@link #cuSeqlens()}, {@link #segIds()}).
 *
 * <p>Threading: immutable by convention once assembled; the arrays are not copied, so consumers
 * must not modify them.
 *
 * @param epoch           epoch of the global step
 * @param step            step within the epoch
 * @param globalStep      epoch·stepsPerEpoch + step
 * @param rank            the rank it is for
 * @param scheduled       samples the schedule assigned to this rank and step
 * @param sampleIds       ids of the delivered samples, in batch order
 * @param datasetIndices  their dataset indices (manifest line order, 0-based)
 * @param skippedSamples  the scheduled samples left out, in schedule order
 * @param shape          B, L, pixel rows and images
 * @param attentionMask   int64 0/1 = (input_ids != 151643); the official code yields bool
 * @param pixelValues     float32 pixel_values (empty in the compact wire format)
 * @param pixelsU8        in the compact wire format (shape UINT8), every image's resized RGB pixels, HWC, in
 *                        image order ({@code pixel_values_u8}); null in FLOAT32
 * @param after           the state that resumes the job right after this batch's step (the schedule's); null: unknown
 * @param segmentLengths  a pack's segment lengths L_i in order (its samples', then the dummy image's when it has one; the
 *                        tail pad is no segment); null for a padded batch
 * @param videos          the batch's video tensors, its samples' in order (issue 29): exact arrays, null when it holds no
 *                        video ({@link BatchShape#videos()} says how many); in UINT8 the videos' resized frames and frame
 *                        counts ({@code pixel_values_videos_u8}, {@code video_frame_counts})
 * @param audio           the batch's audio tensors, its samples' clips in order (issue 32, {@link BatchSchema}): null when it
 *                        holds no clip ({@link BatchShape#audio()})
 * @param floatPositionIds a Qwen3-Omni batch's float32 (3, B, L) {@code position_ids} ({@link BatchShape.Positions#MROPE_FLOAT}),
 *                        {@code positionIds} then empty; null otherwise. A Qwen2-Audio batch's {@code positionIds} are (B, L)
 */
public record Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                    List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                    long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                    float[] pixelValues, long[] imageGridThw, byte[] pixelsU8, dev.stoker.core.batch.BatchLayout.Resume after,
                    int[] segmentLengths, dev.stoker.encode.video.VideoTensors videos, dev.stoker.encode.audio.AudioTensors audio,
                    float[] floatPositionIds)
        implements FeedBatch {

    /** A batch with integer positions. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw, byte[] pixelsU8, dev.stoker.core.batch.BatchLayout.Resume after,
                 int[] segmentLengths, dev.stoker.encode.video.VideoTensors videos, dev.stoker.encode.audio.AudioTensors audio) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, pixelsU8, after, segmentLengths, videos, audio, null);
    }

    /** A batch without audio. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw, byte[] pixelsU8, dev.stoker.core.batch.BatchLayout.Resume after,
                 int[] segmentLengths, dev.stoker.encode.video.VideoTensors videos) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, pixelsU8, after, segmentLengths, videos, null);
    }

    /** A batch without videos. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw, byte[] pixelsU8, dev.stoker.core.batch.BatchLayout.Resume after,
                 int[] segmentLengths) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, pixelsU8, after, segmentLengths, null);
    }

    /** A padded batch. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw, byte[] pixelsU8, dev.stoker.core.batch.BatchLayout.Resume after) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, pixelsU8, after, null);
    }

    /** A batch that does not say where the job resumes after it. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw, byte[] pixelsU8) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, pixelsU8, null);
    }

    public Batch {
        sampleIds = List.copyOf(sampleIds);
        skippedSamples = List.copyOf(skippedSamples);
        if (sampleIds.size() != shape.samples() || datasetIndices.length != shape.samples()
                || shape.samples() + skippedSamples.size() != scheduled)
            throw new IllegalArgumentException("batch of " + shape.samples() + " samples (" + sampleIds.size() + " ids, "
                    + datasetIndices.length + " indices) + " + skippedSamples.size() + " skipped != " + scheduled + " scheduled");
        var v = shape.videos();
        boolean compact = shape.pixelFormat() == dev.stoker.encode.EncodeOptions.PixelFormat.UINT8;
        if (v.count() == 0 ? videos != null : videos == null || videos.videos() != v.count() || videos.rows() != v.rows()
                || videos.compact() != compact
                || (compact ? videos.pixelsU8().length != v.u8Bytes() : videos.pixelValuesVideos().length != v.rows() * videos.rowLength())
                || videos.secondPerGridTs().length != (v.seconds() ? v.count() : 0))
            throw new IllegalArgumentException("a " + shape.pixelFormat() + " batch of " + v + " has video tensors " + (videos == null
                    ? "none" : videos.videos() + " videos of " + videos.rows() + " rows" + (videos.compact() ? ", "
                    + videos.pixelsU8().length + " u8 bytes" : "")));
        var a = shape.audio();
        if (a.clips() == 0 ? audio != null : audio == null || audio.clips() != a.clips() || audio.frames() != a.frames())
            throw new IllegalArgumentException("a batch of " + a + " has audio tensors " + (audio == null ? "none"
                    : audio.clips() + " clips × " + audio.frames() + " frames"));
        if (compact != (pixelsU8 != null) || compact && pixelsU8.length != shape.pixelU8Bytes())
            throw new IllegalArgumentException("a " + shape.pixelFormat() + " batch of " + shape.pixelU8Bytes() + " u8 pixel bytes has "
                    + (pixelsU8 == null ? "none" : pixelsU8.length));
        if (shape.packed()) {
            if (segmentLengths == null || segmentLengths.length != shape.segments() || attentionMask != null)
                throw new IllegalArgumentException("a pack of " + shape.segments() + " segments needs as many segment lengths ("
                        + (segmentLengths == null ? "none" : segmentLengths.length) + ") and no attention_mask");
            long sum = 0;
            for (int l : segmentLengths) sum += l;
            var p = shape.positions();
            long want = (long) p.packRows() * shape.length();
            boolean floats = p == BatchShape.Positions.MROPE_FLOAT;
            if (sum > shape.length() || inputIds.length != shape.length() || floats != (floatPositionIds != null)
                    || (floats ? floatPositionIds.length != want || positionIds.length != 0 : positionIds.length != want))
                throw new IllegalArgumentException("a pack of " + shape.length() + " tokens with " + p + " positions has segments of "
                        + sum + ", " + inputIds.length + " input_ids, " + positionIds.length + " integer and "
                        + (floatPositionIds == null ? "no" : floatPositionIds.length + "") + " float position_ids");
        } else if (segmentLengths != null) {
            throw new IllegalArgumentException("a padded batch has no segment lengths");
        } else if (shape.positions() != BatchShape.Positions.MROPE || floatPositionIds != null) { // an audio family's
            var p = shape.positions();
            long want = (long) p.rows() * shape.tokens();
            boolean floats = p == BatchShape.Positions.MROPE_FLOAT;
            if (floats != (floatPositionIds != null) || (floats ? floatPositionIds.length != want || positionIds.length != 0 : positionIds.length != want))
                throw new IllegalArgumentException("a padded batch of " + shape.tokens() + " tokens with " + p + " positions has "
                        + positionIds.length + " integer and " + (floatPositionIds == null ? "no" : floatPositionIds.length + "") + " float position_ids");
        }
    }

    /** A FLOAT32 batch. */
    public Batch(long epoch, long step, long globalStep, int rank, int scheduled,
                 List<String> sampleIds, int[] datasetIndices, List<SkippedSample> skippedSamples, BatchShape shape,
                 long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds,
                 float[] pixelValues, long[] imageGridThw) {
        this(epoch, step, globalStep, rank, scheduled, sampleIds, datasetIndices, skippedSamples, shape, inputIds, labels,
                attentionMask, positionIds, pixelValues, imageGridThw, null, null);
    }

    /**
     * The batch's {@code mm_token_type_ids} (B, L) under an input contract that carries them ({@link BatchShape#inputContract()}),
     * made from {@code input_ids} ({@link BatchAssembler#mmTokenTypeIds}); null otherwise.
     */
    public long[] mmTokenTypeIds() { return shape.inputContract().mmTokenTypeIds() ? BatchAssembler.mmTokenTypeIds(inputIds) : null; }

    /** A pack's {@code cu_seqlens} (segments + 1, int32): 0 and each segment's end; null for a padded batch. */
    public int[] cuSeqlens() { return segmentLengths == null ? null : PackAssembler.cuSeqlens(segmentLengths); }

    /** A pack's {@code max_seqlen}: its longest segment (0 when empty); -1 for a padded batch. */
    public int maxSeqlen() { return segmentLengths == null ? -1 : PackAssembler.maxSeqlen(segmentLengths); }

    /** A pack's {@code seg_ids} (1, T), int32: 1..n per segment, 0 on the tail pad; null for a padded batch. */
    public int[] segIds() { return segmentLengths == null ? null : PackAssembler.segIds(segmentLengths, shape.length()); }

    /**
     * The {@code sample_index} tensor's values: each sample's data set index, and for a pack with the dummy-image segment
     * {@value PackAssembler#DUMMY_SAMPLE_INDEX} after them (one per segment).
     */
    public long[] sampleIndex() {
        long[] index = BatchSchema.sampleIndex(datasetIndices);
        if (shape.segments() == datasetIndices.length) return index;
        long[] withDummy = java.util.Arrays.copyOf(index, shape.segments());
        withDummy[datasetIndices.length] = PackAssembler.DUMMY_SAMPLE_INDEX;
        return withDummy;
    }

    /** B, the samples delivered. */
    public int samples() { return shape.samples(); }

    /** L, the padded sequence length; a pack's T. */
    public int length() { return shape.length(); }

    @Override
    public int skipped() { return skippedSamples.size(); }

    public long sizeBytes() { return shape.sizeBytes(); }
}
