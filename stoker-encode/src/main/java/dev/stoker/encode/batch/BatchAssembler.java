package dev.stoker.encode.batch;

import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.text.QwenTokenIds;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Padding collation as in the official Qwen-VL SFT collator: right-pad {@code input_ids} with
 * 151643 and {@code labels} with −100 to the batch's longest sample, {@code attention_mask =
 * (input_ids != 151643)} (so a literal {@code <|endoftext|>} inside a sample is masked too, as
 * there), {@code position_ids} right-padded with 1 to (3, B, L), {@code pixel_values} and
 * {@code image_grid_thw} concatenated in batch order. No truncation: over-long samples were
 * refused by the encoder.
 *
 * <p>Under the input contract of transformers 5.3 and later ({@link EncodeOptions.InputContract#TRANSFORMERS_5_3})
 * {@code position_ids} are padded with 0, as 5.x's {@code get_rope_index} leaves them, and the batch carries
 * {@code mm_token_type_ids} ({@link #mmTokenTypeIds}).
 *
 * In the compact wire format the samples' u8 pixels are concatenated instead of pixel_values rows, and their videos'
 * resized frames and frame counts instead of pixel_values_videos rows.
 *
 * <p>Under {@link EncodeOptions.TextOnlyPolicy#DUMMY_IMAGE} a batch of samples none of which has an image gets the
 * {@link DummyImage}: its tokens after the first sample's (label −100, attention 0, the padding's position), its pixels
 * and grid as the batch's only image.
 *
 * <p>Threading: stateless; safe to share.
 */
public final class BatchAssembler {
    public static final long PAD_TOKEN_ID = QwenTokenIds.ENDOFTEXT;
    public static final long IGNORE_INDEX = -100;
    /** The {@code position_ids} padding of the default input contract (the official collator's); see {@link EncodeOptions.InputContract#positionPad()}. */
    public static final long POSITION_PAD = 1;
    /** {@code mm_token_type_ids} of a text token, an image pad and a video pad ({@code ProcessorMixin.create_mm_token_type_ids}). */
    public static final long MM_TEXT = 0, MM_IMAGE = 1, MM_VIDEO = 2;

    private final EncodeOptions.PixelFormat pixelFormat;
    private final EncodeOptions.InputContract contract;
    /** What a batch without images gets; null: nothing (ALLOW, and the audio families that take no image). */
    private final DummyImage dummy;
    /** The layout of every batch's {@code position_ids}, an empty one's too (the job's family's). */
    private final BatchShape.Positions positions;

    /** An assembler of FLOAT32 batches that adds nothing to batches without images (ALLOW). */
    public BatchAssembler() {
        this.pixelFormat = EncodeOptions.PixelFormat.FLOAT32;
        this.contract = EncodeOptions.DEFAULT_INPUT_CONTRACT;
        this.dummy = null;
        this.positions = BatchShape.Positions.MROPE;
    }

    /** An assembler of batches of samples encoded with {@code options}: its pixel format, input contract and text-only policy. */
    public BatchAssembler(EncodeOptions options) {
        this.pixelFormat = options.pixelFormat();
        this.contract = options.inputContract();
        var family = options.audio() == null ? null : options.audio().preset();
        // Qwen2-Audio has no vision tower: no dummy image; the Omni thinkers have one, fed as a Qwen-VL one (docs/audio.md)
        this.dummy = family == null || family.hasVision()
                ? DummyImage.forPolicy(options.textOnly(), options.vision(), options.imageBackend()) : null;
        this.positions = positions(family);
    }

    /** The layout of the {@code position_ids} of a batch of {@code family}'s samples (null: a Qwen-VL processor). */
    public static BatchShape.Positions positions(dev.stoker.core.AudioPreset family) {
        if (family == null) return BatchShape.Positions.MROPE;
        return switch (family.positionRule()) {
            case TEXT_1D -> BatchShape.Positions.TEXT;
            case QWEN2_5_OMNI -> BatchShape.Positions.MROPE;
            case QWEN3_OMNI -> BatchShape.Positions.MROPE_FLOAT;
        };
    }

    /**
     * Collates {@code samples} (those of {@code scheduled} that encoded, in schedule order) whose
     * dataset indices are {@code datasetIndices}; {@code skipped} are the others.
     */
    public Batch assemble(ScheduledBatch scheduled, int[] datasetIndices, List<EncodedSample> samples, List<SkippedSample> skipped) {
        if (datasetIndices.length != samples.size())
            throw new IllegalArgumentException(datasetIndices.length + " dataset indices for " + samples.size() + " samples");
        if (samples.size() + skipped.size() != scheduled.size())
            throw new IllegalArgumentException(samples.size() + " samples + " + skipped.size() + " skipped for a batch of " + scheduled.size());
        var layout = BatchShape.of(samples, pixelFormat, contract);
        if (samples.isEmpty()) layout = layout.withPositions(positions);
        else if (layout.positions() != positions)
            throw new IllegalArgumentException("samples with " + layout.positions() + " position_ids in a batch of " + positions);
        boolean withDummy = DummyImage.needed(dummy, layout.samples(), layout.visualInputs());
        if (withDummy) layout = dummy.addTo(layout, samples.get(0).length());
        boolean compact = pixelFormat == EncodeOptions.PixelFormat.UINT8;
        if ((compact ? layout.pixelU8Bytes() : layout.pixelFloats()) > Integer.MAX_VALUE - 8 || 3 * layout.tokens() > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("batch too large for heap arrays: " + layout);
        int b = layout.samples();
        var tokens = positions == BatchShape.Positions.MROPE
                ? collate(samples.stream().map(s -> new long[][] {s.inputIds(), s.labels(), s.positionIds()}).toList(),
                        withDummy ? dummy.tokens() : null, contract.positionPad())
                : collate(samples.stream().map(s -> new long[][] {s.inputIds(), s.labels(), new long[0]}).toList(),
                        withDummy ? dummy.tokens() : null, contract.positionPad()); // Qwen3-Omni's dummy image; none for Qwen2-Audio
        long[] positionIds = tokens.positionIds();
        float[] floatPositions = null;
        // both pad with 1 whatever the input contract: what transformers 5.18 leaves there for these families (the javadocs)
        if (positions == BatchShape.Positions.TEXT) positionIds = textPositions(samples, tokens.length(), POSITION_PAD);
        else if (positions == BatchShape.Positions.MROPE_FLOAT) {
            positionIds = new long[0];
            floatPositions = floatPositions(samples, tokens.length(), POSITION_PAD);
        }
        float[] pixels = new float[compact ? 0 : (int) layout.pixelFloats()];
        byte[] pixelsU8 = compact ? new byte[(int) layout.pixelU8Bytes()] : null;
        long[] grid = new long[3 * layout.images()];
        var sampleIds = new ArrayList<String>(b);
        int pixelOffset = 0, gridOffset = 0;
        for (int i = 0; i < b; i++) {
            var s = samples.get(i);
            if (compact) {
                System.arraycopy(s.pixelsU8(), 0, pixelsU8, pixelOffset, s.pixelU8Bytes());
                pixelOffset += s.pixelU8Bytes();
            } else {
                System.arraycopy(s.pixelValues(), 0, pixels, pixelOffset, s.pixelFloats());
                pixelOffset += s.pixelFloats();
            }
            System.arraycopy(s.imageGridThw(), 0, grid, gridOffset, s.imageGridThw().length);
            gridOffset += s.imageGridThw().length;
            sampleIds.add(s.id());
        }
        if (withDummy) { // the batch's only image
            if (compact) System.arraycopy(dummy.pixelsU8(), 0, pixelsU8, 0, pixelsU8.length);
            else System.arraycopy(dummy.pixelValues(), 0, pixels, 0, pixels.length);
            System.arraycopy(dummy.gridThw(), 0, grid, 0, 3);
        }
        return new Batch(scheduled.epoch(), scheduled.step(), scheduled.globalStep(), scheduled.rank(), scheduled.size(),
                sampleIds, datasetIndices.clone(), skipped, layout, tokens.inputIds(), tokens.labels(), tokens.attentionMask(),
                positionIds, pixels, grid, pixelsU8, scheduled.after(), null, videos(samples, layout.videos()),
                audio(samples, layout.audio()), floatPositions);
    }

    /**
     * Qwen2-Audio's {@code position_ids} (B, L): each sample's one row {@code 0 … L_i−1}, right-padded with {@code pad} (1,
     * as Hugging Face's {@code Qwen2AudioModel._merge_input_ids_with_audio_features} pads the positions it makes).
     */
    static long[] textPositions(List<EncodedSample> samples, int len, long pad) {
        long[] out = new long[samples.size() * len];
        Arrays.fill(out, pad);
        for (int i = 0; i < samples.size(); i++) {
            var s = samples.get(i);
            System.arraycopy(s.positionIds(), 0, out, i * len, s.length());
        }
        return out;
    }

    /**
     * Qwen3-Omni's {@code position_ids} float32 (3, B, L): each sample's (3, L_i) right-padded with {@code pad}, as the
     * thinker's {@code get_rope_index} leaves a batch's padding in the branch of a batch without image or video (its
     * {@code attention_mask.cumsum(-1) − 1} filled with 1 where the mask is 0); its image/video branch leaves 0 there,
     * and Stoker keeps 1.0 for both (a token of attention 0, the dummy image's included: its position is never read).
     */
    static float[] floatPositions(List<EncodedSample> samples, int len, long pad) {
        int b = samples.size();
        float[] out = new float[3 * b * len];
        Arrays.fill(out, (float) pad);
        for (int i = 0; i < b; i++) {
            var s = samples.get(i);
            int n = s.length();
            for (int c = 0; c < 3; c++) System.arraycopy(s.floatPositionIds(), c * n, out, (c * b + i) * len, n);
        }
        return out;
    }

    /**
     * The audio tensors of {@code samples} stacked in order ({@link BatchSchema}: every clip a row, {@code audio.frames()}
     * wide, a shorter clip's frames past its own 0 in both tensors), or null when {@code audio} says there is none.
     */
    public static dev.stoker.encode.audio.AudioTensors audio(List<EncodedSample> samples, BatchShape.Audio audio) {
        if (audio.clips() == 0) return null;
        int bins = dev.stoker.core.AudioPreset.MEL_BINS, t = audio.frames();
        if ((long) audio.clips() * bins * t > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("input_features of " + audio + " too large for heap arrays");
        float[] features = new float[audio.clips() * bins * t];
        int[] mask = new int[audio.clips() * t];
        int row = 0;
        for (var s : samples) {
            var a = s.audio();
            if (a == null) continue;
            int f = a.frames();
            if (f > t) throw new IllegalArgumentException("sample " + s.id() + " has clips of " + f + " frames, the batch " + t);
            for (int k = 0; k < a.clips(); k++, row++) {
                for (int m = 0; m < bins; m++)
                    System.arraycopy(a.inputFeatures(), (k * bins + m) * f, features, (row * bins + m) * t, f);
                System.arraycopy(a.featureMask(), k * f, mask, row * t, f);
            }
        }
        if (row != audio.clips()) throw new IllegalArgumentException(row + " clips in the samples, " + audio + " in the shape");
        return new dev.stoker.encode.audio.AudioTensors(features, audio.clips(), t, mask);
    }

    /**
     * The video tensors of {@code samples} concatenated in order ({@code pixel_values_videos}, {@code video_grid_thw},
     * {@code second_per_grid_ts}; frame indices too; in the compact format the resized frames and their frame counts
     * instead of the rows), or null when {@code videos} says there is none.
     */
    public static dev.stoker.encode.video.VideoTensors videos(List<EncodedSample> samples, BatchShape.Videos videos) {
        if (videos.count() == 0) return null;
        int rowLength = 0;
        boolean compact = false;
        for (var s : samples)
            if (s.videos() != null && s.videos().videos() > 0) {
                rowLength = s.videos().rowLength();
                compact = s.videos().compact();
            }
        if (compact ? videos.u8Bytes() > Integer.MAX_VALUE - 8 : videos.rows() * rowLength > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("video rows too large for heap arrays: " + videos);
        float[] pixels = new float[compact ? 0 : (int) (videos.rows() * rowLength)];
        byte[] u8 = compact ? new byte[(int) videos.u8Bytes()] : null;
        long[] counts = compact ? new long[videos.count()] : null;
        long[] grid = new long[3 * videos.count()];
        float[] seconds = new float[videos.seconds() ? videos.count() : 0];
        var frames = java.util.stream.LongStream.builder();
        int p = 0, g = 0, t = 0;
        for (var s : samples) {
            var v = s.videos();
            if (v == null || v.videos() == 0) continue;
            if (v.compact() != compact) throw new IllegalArgumentException("sample " + s.id() + "'s videos are in the other pixel format");
            if (compact) {
                System.arraycopy(v.pixelsU8(), 0, u8, p, v.pixelsU8().length);
                System.arraycopy(v.frameCounts(), 0, counts, g / 3, v.frameCounts().length);
                p += v.pixelsU8().length;
            } else {
                int floats = v.rows() * rowLength;
                System.arraycopy(v.pixelValuesVideos(), 0, pixels, p, floats);
                p += floats;
            }
            System.arraycopy(v.videoGridThw(), 0, grid, g, v.videoGridThw().length);
            g += v.videoGridThw().length;
            System.arraycopy(v.secondPerGridTs(), 0, seconds, t, v.secondPerGridTs().length);
            t += v.secondPerGridTs().length;
            for (long f : v.frameIndices()) frames.add(f);
        }
        return new dev.stoker.encode.video.VideoTensors(pixels, rowLength, grid, seconds, frames.build().toArray(), u8, counts);
    }

    /** The padded token tensors of a batch, flat and row-major: (B, L) ×3 and (3, B, L). */
    public record Tokens(int samples, int length, long[] inputIds, long[] labels, long[] attentionMask, long[] positionIds) {}

    /** Pads and stacks each sample's {input_ids, labels, position_ids (3·n)} as the official collator does. */
    public static Tokens collate(List<long[][]> samples) { return collate(samples, null, POSITION_PAD); }

    /**
     * {@link #collate(List)} with {@code position_ids} padded with {@code positionPad}, and {@code dummyTokens} (when not
     * null and there is a sample) appended after the first sample's last token: label −100, attention 0, the padding's
     * position, so that no other token changes.
     */
    public static Tokens collate(List<long[][]> samples, long[] dummyTokens, long positionPad) {
        int b = samples.size(), len = 0;
        int dummy = dummyTokens == null || b == 0 ? 0 : dummyTokens.length;
        for (long[][] s : samples) len = Math.max(len, s[0].length);
        if (dummy > 0) len = Math.max(len, samples.get(0)[0].length + dummy);
        if (3L * b * len > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("batch of " + b + " x " + len + " tokens is too large");
        long[] ids = new long[b * len];
        long[] labels = new long[b * len];
        long[] mask = new long[b * len];
        long[] positions = new long[3 * b * len];
        Arrays.fill(ids, PAD_TOKEN_ID);
        Arrays.fill(labels, IGNORE_INDEX);
        Arrays.fill(positions, positionPad);
        for (int i = 0; i < b; i++) {
            long[][] s = samples.get(i);
            int n = s[0].length;
            System.arraycopy(s[0], 0, ids, i * len, n);
            System.arraycopy(s[1], 0, labels, i * len, n);
            if (s[2].length == 0) continue; // an audio family's positions, collated apart (textPositions, floatPositions)
            for (int c = 0; c < 3; c++) System.arraycopy(s[2], c * n, positions, (c * b + i) * len, n);
        }
        for (int k = 0; k < ids.length; k++) mask[k] = ids[k] != PAD_TOKEN_ID ? 1 : 0;
        if (dummy > 0) { // labels and positions stay the padding's
            int at = samples.get(0)[0].length;
            System.arraycopy(dummyTokens, 0, ids, at, dummy);
            Arrays.fill(mask, at, at + dummy, 0);
        }
        return new Tokens(b, len, ids, labels, mask, positions);
    }

    /**
     * The {@code mm_token_type_ids} of padded {@code inputIds}, as transformers 5.x's {@code ProcessorMixin.create_mm_token_type_ids}
     * builds them: {@value #MM_IMAGE} where the token is the image pad 151655, {@value #MM_VIDEO} where it is the video pad
     * 151656, {@value #MM_TEXT} elsewhere (text, vision start and end, padding).
     */
    public static long[] mmTokenTypeIds(long[] inputIds) {
        long[] types = new long[inputIds.length];
        for (int k = 0; k < inputIds.length; k++)
            types[k] = inputIds[k] == QwenTokenIds.IMAGE_PAD ? MM_IMAGE : inputIds[k] == QwenTokenIds.VIDEO_PAD ? MM_VIDEO : MM_TEXT;
        return types;
    }
}
