package dev.stoker.encode.batch;

import dev.stoker.core.VisionConfig;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.text.TokenSequenceBuilder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The canonical pack of a packed job ({@code --pack-tokens N}; docs/protocol.md "The canonical pack"): one row of whole
 * samples — the segments — with no padding between them, as the heap batch a rank receives for one step. Segment i
 * occupies tokens {@code [o_i, o_i + L_i)} of the row, T = Σ L_i plus an optional tail pad to a multiple of
 * {@code padTo}:
 *
 * <ul>
 *   <li>{@code input_ids}, {@code labels} (1, T): the samples' own, concatenated; labels unshifted, and every segment's
 *       first label must be −100 (the Qwen-VL templates mask the first token, so Hugging Face's shifted loss never
 *       reaches across a boundary) — a sample whose first label is not is refused, by name;</li>
 *   <li>{@code position_ids} (4, 1, T): row 0 each segment's text positions 0..L_i−1 (what both Hugging Face detectors
 *       of packed rows read: flash attention's {@code pos == 0}, SDPA's {@code diff != 1}), rows 1–3 the segment's
 *       M-RoPE exactly as the sample encoded alone has it;</li>
 *   <li>{@code pixel_values} (or {@code pixel_values_u8}) and {@code image_grid_thw}: the samples' rows concatenated in
 *       segment order, so that the k-th image's rows belong to the k-th vision-start run of {@code input_ids};</li>
 *   <li>an audio family's clips (issue 32, Qwen2.5-Omni): {@code input_features} (clips, 128, T_a) and
 *       {@code feature_attention_mask} (clips, T_a), every clip of the pack segment after segment, each segment's in
 *       placeholder order, stacked as a padded batch stacks them ({@link BatchAssembler#audio}: T_a the longest clip's
 *       frames, a shorter clip's zeros past its own), so that the k-th clip's rows belong to the k-th audio run of
 *       {@code input_ids}; a segment's M-RoPE rows are its own {@code get_rope_index} computed alone, as for any sample;</li>
 *   <li>the other audio families' positions (docs/packing.md "Audio packs"): Qwen2-Audio's int64 (1, T), each segment's
 *       own (1, L_i) row (0..L_i−1), the tail pad 0..p−1; Qwen3-Omni's float32 (4, 1, T), row 0 each segment's 0..L_i−1 (as
 *       floats, exact), rows 1–3 its own float32 (3, L_i) M-RoPE bit for bit, the tail pad 0..p−1 in every row. Qwen3-Omni's
 *       gets the dummy image as its padded batches do (by the text-only policy, or where the planner asks), its positions
 *       those of the Qwen-VL dummy as floats; Qwen2-Audio's (no vision tower) never;</li>
 *   <li>no {@code attention_mask}; the segments' boundaries as metadata: {@code cu_seqlens} (int32, n + 1),
 *       {@code max_seqlen} (int32, 1), {@code seg_ids} (int32, (1, T): 1..n, 0 on the tail pad) and {@code sample_index}
 *       (each segment's data set index, {@value #DUMMY_SAMPLE_INDEX} for the dummy image's).</li>
 * </ul>
 *
 * <p>The tail pad ({@code padTo} > 1): pad tokens ({@link BatchAssembler#PAD_TOKEN_ID}), labels −100, all four position
 * rows 0..p−1 over the pad run, {@code mm_token_type_ids} 0, {@code seg_ids} 0; it is no segment ({@code cu_seqlens}
 * ends at Σ L_i).
 *
 * <p>The dummy image ({@link DummyImage}): a pack of samples without any image gets one more segment at its end when
 * the planner says so (another rank's pack of the step has an image: every rank must run the vision tower) or when the
 * job's text-only policy is DUMMY_IMAGE (as an unpacked batch without images gets the dummy). The segment is the job's
 * dummy image's tokens ({@code <|vision_start|>}, its image pads, {@code <|vision_end|>}), all labels −100, its own
 * positions (row 0 0..d−1, rows 1–3 its M-RoPE computed alone); its pixels and grid come last. It is not a sample: the
 * batch's samples, ids and data set indices leave it out; {@code sample_index} has −1 for it. Otherwise a pack without
 * images carries its empty vision tensors flagged as metadata, as a padded batch does ({@link BatchSchema#isMetadata}).
 *
 * <p>The zero-copy path writes the same bytes in place ({@code StoredBatchWriter} in its packed mode), from the same
 * {@link #shape} and {@link #pack}.
 *
 * <p>Threading: immutable; safe to share.
 */
public final class PackAssembler {
    /** The {@code sample_index} of the dummy-image segment: it is no record of the data set. */
    public static final long DUMMY_SAMPLE_INDEX = -1;

    private final PixelFormat pixelFormat;
    private final EncodeOptions.InputContract contract;
    private final VisionConfig vision;
    private final int padTo;
    /** Whether every pack without images gets the dummy (text-only policy DUMMY_IMAGE), planned or not. */
    private final boolean dummyByPolicy;
    /** The job's dummy image, whatever the policy: the planner may ask for it. */
    private final DummyImage dummy;
    /** Its M-RoPE, (3, d) row-major, computed on its tokens alone. */
    private final long[] dummyPositions;
    /** The layout of the packs' {@code position_ids}: the job's family's ({@link BatchAssembler#positions}). */
    private final BatchShape.Positions positions;

    /**
     * An assembler of packs of samples encoded with {@code options} (pixel format, input contract, vision settings and
     * text-only policy), whose row is padded at its tail to a multiple of {@code padTo} tokens (1: no pad).
     */
    public PackAssembler(EncodeOptions options, int padTo) {
        if (padTo < 1 || padTo > 1 << 16) throw new IllegalArgumentException("--pack-pad-to must be 1 to 65536, not " + padTo);
        this.pixelFormat = options.pixelFormat();
        this.contract = options.inputContract();
        this.vision = options.vision();
        this.padTo = padTo;
        var family = options.audio() == null ? null : options.audio().preset();
        this.positions = BatchAssembler.positions(family);
        // as BatchAssembler: Qwen2-Audio has no vision tower; the Omni thinkers have one and get the dummy by the policy
        this.dummyByPolicy = options.textOnly() == EncodeOptions.TextOnlyPolicy.DUMMY_IMAGE && (family == null || family.hasVision());
        this.dummy = DummyImage.of(vision, options.imageBackend());
        this.dummyPositions = TokenSequenceBuilder.positionIds(dummy.tokens(), List.of(dummy.gridThw()), vision.mergeSize());
    }

    /** The multiple the row's length is padded to (1: none). */
    public int padTo() { return padTo; }

    /** The job's dummy image, the segment a pack without images may get. */
    public DummyImage dummy() { return dummy; }

    /** The dummy segment's M-RoPE position ids, (3, d) row-major, as {@code get_rope_index} gives them for its tokens alone. */
    public long[] dummyPositionIds() { return dummyPositions.clone(); }

    /**
     * Whether a pack of {@code samples} samples holding {@code visualInputs} images and videos gets the dummy-image segment:
     * it has samples and neither (a video runs the vision tower as an image does), and the planner asked for it
     * ({@code planned}) or the text-only policy is DUMMY_IMAGE.
     */
    public boolean getsDummy(boolean planned, int samples, int visualInputs) {
        return samples > 0 && visualInputs == 0 && (planned || dummyByPolicy) && positions != BatchShape.Positions.TEXT;
    }

    /** The layout of this job's packs' {@code position_ids} (its family's). */
    public BatchShape.Positions positions() { return positions; }

    /**
     * Whether the planner asked for the dummy-image segment in {@code scheduled}'s pack
     * ({@code scheduled.pack().dummyImage()[rank]}); false for an unpacked job's batch.
     */
    public static boolean plannedDummy(ScheduledBatch scheduled) {
        var plan = scheduled.pack();
        return plan != null && plan.dummyImage()[scheduled.rank()];
    }

    /** {@link #assemble(ScheduledBatch, int[], List, List, boolean)} with the planner's dummy flag ({@link #plannedDummy}). */
    public Batch assemble(ScheduledBatch scheduled, int[] datasetIndices, List<EncodedSample> segments, List<SkippedSample> skipped) {
        return assemble(scheduled, datasetIndices, segments, skipped, plannedDummy(scheduled));
    }

    /**
     * Packs {@code segments} (the encoded samples of {@code scheduled} in pack order, whose data set indices are
     * {@code datasetIndices}; {@code skipped} are its others) into one row; {@code dummyImage}: the planner's word that
     * this pack gets the dummy-image segment should it hold no image ({@code scheduled.pack().dummyImage()[rank]}).
     *
     * @throws IllegalArgumentException naming the sample, when a segment's first label is not −100 or its arrays disagree
     */
    public Batch assemble(ScheduledBatch scheduled, int[] datasetIndices, List<EncodedSample> segments, List<SkippedSample> skipped,
                          boolean dummyImage) {
        if (datasetIndices.length != segments.size())
            throw new IllegalArgumentException(datasetIndices.length + " dataset indices for " + segments.size() + " samples");
        if (segments.size() + skipped.size() != scheduled.size())
            throw new IllegalArgumentException(segments.size() + " samples + " + skipped.size() + " skipped for a pack of " + scheduled.size());
        var plain = BatchShape.of(segments, pixelFormat, contract); // checks each sample's format and row length
        if (!segments.isEmpty() && plain.positions() != positions)
            throw new IllegalArgumentException("samples with " + plain.positions() + " position_ids in a pack of " + positions);
        if (plain.pixelRows() > 0 && plain.pixelRowLength() != vision.rowLength())
            throw new IllegalArgumentException("the pack's samples have pixel rows of " + plain.pixelRowLength() + " floats, the job's are "
                    + vision.rowLength());
        int n = segments.size();
        boolean withDummy = getsDummy(dummyImage, n, plain.visualInputs());
        long tokens = 0;
        for (var s : segments) tokens += s.length();
        var shape = shape(n, tokens, plain.pixelRows(), plain.images(), plain.pixelU8Bytes(), withDummy).withVideos(plain.videos())
                .withAudio(plain.audio());
        boolean compact = pixelFormat == PixelFormat.UINT8;
        if ((compact ? shape.pixelU8Bytes() : shape.pixelFloats()) > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("pack too large for heap arrays: " + shape);
        var ids = new ArrayList<String>(n);
        var arrays = new ArrayList<long[][]>(n);
        for (var s : segments) {
            ids.add(s.id());
            arrays.add(new long[][] {s.inputIds(), s.labels(), ropeRows(s)});
        }
        var packed = pack(ids, arrays, withDummy ? dummy.tokens() : null, withDummy ? dummyPositions : null, padTo);
        long[] positionIds = packed.positionIds();
        float[] floatPositions = null;
        int t = packed.length();
        if (positions == BatchShape.Positions.TEXT) positionIds = Arrays.copyOfRange(positionIds, t, 2 * t); // row 1: the samples' own
        else if (positions == BatchShape.Positions.MROPE_FLOAT) {
            floatPositions = new float[4 * t];
            for (int k = 0; k < 4 * t; k++) floatPositions[k] = positionIds[k]; // row 0, the dummy's and the tail pad's: small integers
            int at = 0;
            for (var s : segments) { // rows 1–3: each segment's float32 M-RoPE as encoded, bit for bit
                int len = s.length();
                for (int r = 0; r < 3; r++) System.arraycopy(s.floatPositionIds(), r * len, floatPositions, (r + 1) * t + at, len);
                at += len;
            }
            positionIds = new long[0];
        }
        float[] pixels = new float[compact ? 0 : (int) shape.pixelFloats()];
        byte[] pixelsU8 = compact ? new byte[(int) shape.pixelU8Bytes()] : null;
        long[] grid = new long[3 * shape.images()];
        int pixelOffset = 0, gridOffset = 0;
        for (var s : segments) {
            if (compact) {
                System.arraycopy(s.pixelsU8(), 0, pixelsU8, pixelOffset, s.pixelU8Bytes());
                pixelOffset += s.pixelU8Bytes();
            } else {
                System.arraycopy(s.pixelValues(), 0, pixels, pixelOffset, s.pixelFloats());
                pixelOffset += s.pixelFloats();
            }
            System.arraycopy(s.imageGridThw(), 0, grid, gridOffset, s.imageGridThw().length);
            gridOffset += s.imageGridThw().length;
        }
        if (withDummy) { // the last segment's image, after every sample's (there are none: it is the only one)
            if (compact) System.arraycopy(dummy.pixelsU8(), 0, pixelsU8, pixelOffset, (int) dummy.pixelBytes(PixelFormat.UINT8));
            else System.arraycopy(dummy.pixelValues(), 0, pixels, pixelOffset, dummy.rows() * vision.rowLength());
            System.arraycopy(dummy.gridThw(), 0, grid, gridOffset, 3);
        }
        return new Batch(scheduled.epoch(), scheduled.step(), scheduled.globalStep(), scheduled.rank(), scheduled.size(), ids,
                datasetIndices.clone(), skipped, shape, packed.inputIds(), packed.labels(), null, positionIds, pixels, grid,
                pixelsU8, scheduled.after(), packed.segmentLengths(), BatchAssembler.videos(segments, plain.videos()),
                BatchAssembler.audio(segments, plain.audio()), floatPositions);
    }

    /**
     * The three rows {@link #pack} places in rows 1–3 of a segment: its M-RoPE; Qwen2-Audio's one row thrice (row 1 is then
     * the pack's (1, T)); zeros for Qwen3-Omni's float positions, written over afterwards.
     */
    private long[] ropeRows(EncodedSample s) {
        int len = s.length();
        return switch (positions) {
            case MROPE -> s.positionIds();
            case TEXT -> {
                if (s.positionIds().length != len)
                    throw new IllegalArgumentException("sample " + s.id() + ": " + s.positionIds().length + " position_ids for " + len
                            + " tokens; a Qwen2-Audio segment has one row");
                long[] rows = new long[3 * len];
                for (int r = 0; r < 3; r++) System.arraycopy(s.positionIds(), 0, rows, r * len, len);
                yield rows;
            }
            case MROPE_FLOAT -> new long[3 * len];
        };
    }

    /**
     * The shape of a pack of {@code samples} samples of {@code tokens} tokens in all, {@code rows} pixel rows (or
     * {@code u8Bytes} compact bytes) of {@code images} images, with the dummy-image segment or not: the row padded to
     * {@link #padTo()}.
     */
    public BatchShape shape(int samples, long tokens, long rows, int images, long u8Bytes, boolean withDummy) {
        if (withDummy) {
            tokens += dummy.tokenCount();
            rows += dummy.rows();
            images += 1;
            u8Bytes += dummy.pixelBytes(PixelFormat.UINT8);
        }
        return BatchShape.packed(samples, samples + (withDummy ? 1 : 0), paddedLength(tokens, padTo), rows, vision.rowLength(), images,
                pixelFormat, pixelFormat == PixelFormat.UINT8 ? u8Bytes : 0, contract).withPositions(positions);
    }

    /** {@code tokens} rounded up to a multiple of {@code padTo}, refused past what one row of heap arrays can hold. */
    public static int paddedLength(long tokens, int padTo) {
        long t = (tokens + padTo - 1) / padTo * padTo;
        if (tokens < 0 || 4 * t > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("a pack of " + tokens + " tokens is too long");
        return (int) t;
    }

    /**
     * A pack's token tensors, flat: {@code input_ids}, {@code labels} (T), {@code position_ids} (4, 1, T) row-major, and
     * each segment's length (the dummy's last when it has one).
     */
    public record Tokens(int length, int[] segmentLengths, long[] inputIds, long[] labels, long[] positionIds) {}

    /**
     * Concatenates each sample's {input_ids, labels, position_ids (3·L)} — {@code ids} name them in errors — then the
     * dummy segment when {@code dummyTokens} is not null (labels −100, positions {@code dummyPositions}), then the tail
     * pad to a multiple of {@code padTo}.
     *
     * @throws IllegalArgumentException naming the sample, when its first label is not −100 or its arrays disagree
     */
    public static Tokens pack(List<String> ids, List<long[][]> samples, long[] dummyTokens, long[] dummyPositions, int padTo) {
        int n = samples.size(), d = dummyTokens == null ? 0 : dummyTokens.length;
        if (ids.size() != n) throw new IllegalArgumentException(ids.size() + " ids for " + n + " samples");
        if (dummyTokens != null && (dummyPositions == null || dummyPositions.length != 3 * d))
            throw new IllegalArgumentException("the dummy segment needs 3 position rows of its " + d + " tokens");
        long sum = d;
        for (int i = 0; i < n; i++) {
            long[][] s = samples.get(i);
            int len = s[0].length;
            if (len == 0 || s[1].length != len || s[2].length != 3L * len)
                throw new IllegalArgumentException("sample " + ids.get(i) + ": " + len + " input_ids, " + s[1].length + " labels and "
                        + s[2].length + " position_ids (3 rows of its length) cannot be a segment of a pack");
            if (s[1][0] != BatchAssembler.IGNORE_INDEX)
                throw new IllegalArgumentException("sample " + ids.get(i) + ": its first label is " + s[1][0] + ", not "
                        + BatchAssembler.IGNORE_INDEX + "; in a pack each sample's first token must be unsupervised, else the "
                        + "shifted loss of the sample before it would predict it across the boundary (the chat template's "
                        + "<|im_start|> is)");
            sum += len;
        }
        int t = paddedLength(sum, padTo);
        int[] lengths = new int[n + (dummyTokens == null ? 0 : 1)];
        long[] inputIds = new long[t], labels = new long[t], positions = new long[4 * t];
        int at = 0;
        for (int i = 0; i < n; i++) {
            long[][] s = samples.get(i);
            int len = s[0].length;
            put(inputIds, labels, positions, t, at, s[0], s[1], s[2]);
            lengths[i] = len;
            at += len;
        }
        if (dummyTokens != null) {
            long[] unsupervised = new long[d];
            Arrays.fill(unsupervised, BatchAssembler.IGNORE_INDEX);
            put(inputIds, labels, positions, t, at, dummyTokens, unsupervised, dummyPositions);
            lengths[n] = d;
            at += d;
        }
        Arrays.fill(inputIds, at, t, BatchAssembler.PAD_TOKEN_ID);
        Arrays.fill(labels, at, t, BatchAssembler.IGNORE_INDEX);
        for (int r = 0; r < 4; r++)
            for (int k = at; k < t; k++) positions[r * t + k] = k - at;
        return new Tokens(t, lengths, inputIds, labels, positions);
    }

    /** One segment at token {@code at} of a row of {@code t}: row 0 of its positions 0..L−1, rows 1–3 its own three rows. */
    private static void put(long[] inputIds, long[] labels, long[] positions, int t, int at, long[] ids, long[] segmentLabels,
                            long[] rope) {
        int len = ids.length;
        System.arraycopy(ids, 0, inputIds, at, len);
        System.arraycopy(segmentLabels, 0, labels, at, len);
        for (int k = 0; k < len; k++) positions[at + k] = k;
        for (int r = 0; r < 3; r++) System.arraycopy(rope, r * len, positions, (r + 1) * t + at, len);
    }

    /** {@code cu_seqlens}: 0, then the running sum of {@code lengths} (n + 1 values). */
    public static int[] cuSeqlens(int[] lengths) {
        int[] cu = new int[lengths.length + 1];
        for (int i = 0; i < lengths.length; i++) cu[i + 1] = Math.addExact(cu[i], lengths[i]);
        return cu;
    }

    /** {@code max_seqlen}: the longest of {@code lengths}, 0 when there is none. */
    public static int maxSeqlen(int[] lengths) {
        int max = 0;
        for (int l : lengths) max = Math.max(max, l);
        return max;
    }

    /** {@code seg_ids} of a row of {@code length} tokens: i + 1 over segment i, 0 over the tail pad after the last. */
    public static int[] segIds(int[] lengths, int length) {
        int[] seg = new int[length];
        int at = 0;
        for (int i = 0; i < lengths.length; i++) {
            Arrays.fill(seg, at, at + lengths[i], i + 1);
            at += lengths[i];
        }
        return seg;
    }

    /**
     * Bytes of the largest pack a job of {@code options} can make with at most {@code packTokens} tokens per pack (N) and,
     * when {@code packPatches} > 0, at most that many vision patches (P), padded to {@code padTo}: for sizing shared
     * memory as {@code ShmBudget.largestBatchBytes} (stoker-node) does for padded batches. Every sample has at least one token, so a
     * pack has at most N segments; every image token stands for merge² patches, so it has at most N·merge² pixel rows (P
     * when smaller) and at most N images; the dummy segment is counted on top (its tokens, rows and image), whatever the
     * planner reserved for it.
     */
    public static long largestPackBytes(EncodeOptions options, int packTokens, long packPatches, int padTo) {
        if (packTokens < 1) throw new IllegalArgumentException("--pack-tokens must be at least 1, not " + packTokens);
        if (packPatches < 0) throw new IllegalArgumentException("--pack-patches must not be negative: " + packPatches);
        var packer = new PackAssembler(options, padTo);
        var vision = options.vision();
        long perToken = (long) vision.mergeSize() * vision.mergeSize();
        long rows = (long) packTokens * perToken;
        if (packPatches > 0) rows = Math.min(rows, packPatches);
        long u8 = rows * vision.patchSize() * vision.patchSize() * 3;
        var largest = packer.shape(packTokens, packTokens, rows, packTokens, u8, true);
        // with video, the same rows may be split between pixel_values and pixel_values_videos: their grids on top, and in
        // the compact format the frames (a video row is up to temporal-patch frames of its patch: tps times an image's bytes)
        if (options.video() != null) largest = largest.withVideos(new BatchShape.Videos(0, packTokens, true,
                options.pixelFormat() == EncodeOptions.PixelFormat.UINT8 ? Math.multiplyExact(u8, vision.temporalPatchSize()) : 0));
        return largest.sizeBytes();
    }
}
