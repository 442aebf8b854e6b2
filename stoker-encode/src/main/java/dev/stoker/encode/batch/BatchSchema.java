package dev.stoker.encode.batch;

import dev.stoker.core.VisionConfig;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.image.qwenvl.CompactPixels;
import java.util.ArrayList;
import java.util.List;

/**
 * The tensor table of a batch: every tensor's name, dtype and shape, in the one order that every
 * writer uses (heap batches copied through the socket, batches written in place into shared
 * memory, Arrow Flight, the cluster's pulls) and that trainers receive (the Python client's dict
 * keeps it). The model inputs come first, in the official Qwen-VL collator's order, then the
 * batch's metadata (flagged so in the layout, {@link Tensor#metadata()}: clients keep it out of the
 * dict a trainer hands to {@code forward} and expose it as the batch's metadata):
 *
 * <pre>
 *  input_ids          int64   (B, L)                                                      model inputs
 *  labels             int64   (B, L)
 *  attention_mask     int64   (B, L)
 *  position_ids       int64   (3, B, L)       Qwen2-Audio: int64 (B, L); Qwen3-Omni: float32 (3, B, L) (issue 32)
 *  mm_token_type_ids  int64   (B, L)          transformers 5.3 and later only (InputContract)
 *  pixel_values       float32 (rows, rowLength)  or, in the compact format, pixel_values_u8 uint8 (Σ H·W, 3)
 *  image_grid_thw     int64   (images, 3)
 *  pixel_values_videos float32 (video rows, rowLength)  only in a batch that holds a video (issue 29); or, in the
 *                                             compact format, pixel_values_videos_u8 uint8 (Σ T·H·W, 3)
 *  video_grid_thw     int64   (videos, 3)     only in a batch that holds a video
 *  second_per_grid_ts float32 (videos)        only in a Qwen2.5-VL batch that holds a video
 *  input_features     float32 (clips, 128, T) only in a batch that holds an audio clip (issue 32, docs/audio.md); float32
 *                                             in the compact format too
 *  feature_attention_mask int32 (clips, T)    only in a batch that holds an audio clip
 *  sample_index       int64   (B)             each sample's line in the manifest           metadata
 *  pixel_norm         float32 (2, 3)          compact format only: mean and std per channel
 *  pixel_patch        int64   (3)             compact format only: patch, temporal patch, merge size
 *  video_frame_counts int64   (videos)        compact format only, in a batch that holds a video: T per video
 * </pre>
 *
 * The row length of {@code pixel_values} is the model's ({@link VisionConfig#rowLength()}) even when
 * a batch has no image, so that every batch of a job has the same tensors, in the same order, with
 * the same second dimension. A batch without any image (possible under {@code --text-only allow})
 * flags its empty pixel tensor and {@code image_grid_thw} as metadata, where they are: Hugging Face's
 * vision tower fails on {@code pixel_values} (0, R) with {@code image_grid_thw} (0, 3) in every
 * release (docs/model-inputs.md §4), and leaves the tower out when they are absent, so clients hand
 * such a batch to {@code forward} without them.
 *
 * <p>The video tensors are the one exception to "every batch has the same tensors": a batch carries them only when one
 * of its samples has a video ({@link BatchShape#videos()}), as the Hugging Face processors return them only then and
 * every Qwen-VL {@code forward} takes them as optional keyword arguments. A batch with videos and no image still flags
 * its empty image tensors as metadata; it gets no dummy image (its videos run the vision tower).
 *
 * <p>The audio tensors (issue 32, an audio family's batches) follow the video rule: present only when a sample of the batch
 * has a clip, as the Hugging Face processors return them only then. They stack every clip of the batch, sample after
 * sample in batch order and each sample's clips in placeholder order, as the processor stacks the clips of all the texts
 * of one call: row k of {@code input_features} is clip k's log-mel (128 × T), T the longest sample's frames (under
 * {@code --audio-pad valid} its valid frames, under {@code --audio-pad hf} the processor's padded length), a shorter clip's
 * frames past its own zeros and masked 0 in {@code feature_attention_mask}. So each sample's rows are {@code encode}'s
 * {@code input_features.npy} and {@code feature_attention_mask.npy} widened with zeros to T, and
 * {@code input_features.permute(0, 2, 1)[feature_attention_mask.bool()]}, what the Omni thinkers' audio encoder reads, is
 * the same as for the samples one by one. The compact format ({@code --pixel-format uint8}) changes only the pixels: a batch's
 * images and videos travel as their resized u8 pixels as above, and its audio tensors stay float32 and int32, the same bytes
 * as in a float32 batch (the trainer's conversion of u8 pixels is a per-pixel affine map; log-mel features have none). A
 * pack stacks its segments' clips the same way, segment after segment.
 *
 * <p>{@code position_ids} follow each audio family's model ({@link BatchShape.Positions}, docs/audio.md "Serving"):
 * Qwen2.5-Omni's are the Qwen-VL int64 (3, B, L); Qwen3-Omni's float32 (3, B, L), as its thinker's {@code get_rope_index}
 * returns them (a temporal index may be fractional), right-padded with 1.0 as it pads a batch without image or video;
 * Qwen2-Audio's int64 (B, L), each sample's {@code 0 … L_i−1} right-padded with 1, the {@code position_ids} that
 * {@code Qwen2AudioForConditionalGeneration.forward} hands its Qwen2 language model (which numbers a right-padded row
 * {@code 0 … L−1} itself when given none, so the sample's tokens get the same positions either way). Qwen2-Audio gets no
 * dummy image (it has no vision tower); Qwen2.5-Omni and Qwen3-Omni get it as a Qwen-VL batch does, their thinkers' vision
 * towers being what it keeps in every rank's forward.
 *
 * <p>In the compact format a video travels as its kept frames resized ({@code pixel_values_videos_u8}: video k's T_k
 * frames of H·W pixels, HWC, frame after frame, after the videos before it; H, W from its {@code video_grid_thw} row
 * times the patch size), what the video processor normalizes and patchifies; {@code video_frame_counts} gives each T_k,
 * since a T that is not a multiple of the temporal patch size is padded with its last frame by the conversion, not on
 * the wire. The trainer's conversion ({@code stoker.pixels.to_pixel_values_videos}, {@code
 * CompactPixels#toPixelValuesVideos}) normalizes with the video processors' fused table from the same {@code pixel_norm}
 * ({@link dev.stoker.image.qwenvl.VideoPatchWriter} normalizes with the job's one {@link VisionConfig}, images' and
 * videos' alike, as {@code FAMILIES} of ref_qwenvl_video.py gives each family one mean and std), giving
 * {@code pixel_values_videos} bit for bit.
 *
 * <p>A pack ({@link BatchShape#packed()}, {@link PackAssembler}; docs/protocol.md "The canonical pack") has its own
 * table, n its segments and T its row's tokens:
 *
 * <pre>
 *  input_ids          int64   (1, T)                                                      model inputs
 *  labels             int64   (1, T)          unshifted; every segment's first label −100
 *  position_ids       int64   (4, 1, T)       row 0 each segment's 0..L_i−1, rows 1–3 its M-RoPE computed alone;
 *                                             Qwen2-Audio: int64 (1, T), each segment's 0..L_i−1; Qwen3-Omni: float32
 *                                             (4, 1, T), row 0 as above, rows 1–3 its float M-RoPE (docs/packing.md)
 *  mm_token_type_ids  int64   (1, T)          transformers 5.3 and later only (InputContract)
 *  pixel_values       float32 (rows, rowLength)  or pixel_values_u8 uint8 (Σ H·W, 3): segment order
 *  image_grid_thw     int64   (images, 3)
 *  pixel_values_videos, video_grid_thw, second_per_grid_ts   as above, segment order, only in a pack that holds a video
 *  input_features, feature_attention_mask                    as above, segment order, only in a pack that holds a clip
 *  sample_index       int64   (n)             each segment's data set index, −1 for the dummy image's   metadata
 *  cu_seqlens         int32   (n + 1)         0, L_1, L_1+L_2, …, Σ L_i (the tail pad is no segment)
 *  max_seqlen         int32   (1)             max L_i
 *  seg_ids            int32   (1, T)          1..n per token, 0 on the tail pad
 *  pixel_norm         float32 (2, 3)          compact format only
 *  pixel_patch        int64   (3)             compact format only
 *  video_frame_counts int64   (videos)        compact format only, in a pack that holds a video
 * </pre>
 *
 * No {@code attention_mask}: Hugging Face's flash-attention path must get {@code attention_mask=None} for a pack (a 2-D
 * mask would rebuild the boundaries from itself); the client adapters build what each consumer takes from the metadata.
 */
public final class BatchSchema {
    public static final String INPUT_IDS = "input_ids";
    public static final String LABELS = "labels";
    public static final String ATTENTION_MASK = "attention_mask";
    public static final String POSITION_IDS = "position_ids";
    public static final String MM_TOKEN_TYPE_IDS = "mm_token_type_ids";
    public static final String PIXEL_VALUES = "pixel_values";
    public static final String PIXEL_VALUES_U8 = "pixel_values_u8";
    public static final String IMAGE_GRID_THW = "image_grid_thw";
    /** A batch's video tensors (present only when it holds a video). */
    public static final String PIXEL_VALUES_VIDEOS = "pixel_values_videos", VIDEO_GRID_THW = "video_grid_thw",
            SECOND_PER_GRID_TS = "second_per_grid_ts";
    /** The compact format's video tensors: the videos' resized frames (a model input until converted) and their frame counts (metadata). */
    public static final String PIXEL_VALUES_VIDEOS_U8 = "pixel_values_videos_u8", VIDEO_FRAME_COUNTS = "video_frame_counts";
    /** A batch's audio tensors (present only when it holds an audio clip, issue 32). */
    public static final String INPUT_FEATURES = "input_features", FEATURE_ATTENTION_MASK = "feature_attention_mask";
    public static final String SAMPLE_INDEX = BatchLayout.SAMPLE_INDEX;
    public static final String PIXEL_NORM = BatchLayout.PIXEL_NORM;
    public static final String PIXEL_PATCH = BatchLayout.PIXEL_PATCH;
    /** A pack's segment boundaries (int32, n + 1), longest segment (int32, 1) and per-token segment numbers (int32, (1, T)). */
    public static final String CU_SEQLENS = "cu_seqlens", MAX_SEQLEN = "max_seqlen", SEG_IDS = "seg_ids";

    private BatchSchema() {}

    /**
     * The names of the model inputs of a batch with images in {@code format} under {@code contract}, in order: the keys of
     * the trainer's dict.
     */
    public static List<String> inputNames(PixelFormat format, InputContract contract) {
        var names = new ArrayList<>(List.of(INPUT_IDS, LABELS, ATTENTION_MASK, POSITION_IDS));
        if (contract.mmTokenTypeIds()) names.add(MM_TOKEN_TYPE_IDS);
        names.addAll(List.of(pixelTensor(format), IMAGE_GRID_THW));
        return List.copyOf(names);
    }

    /** The names of the model inputs of a batch of {@code images} images: without any, its vision tensors are metadata. */
    public static List<String> inputNames(PixelFormat format, InputContract contract, int images) {
        return names(format, contract).stream().filter(n -> !isMetadata(n, images)).toList();
    }

    /** The names of the metadata tensors of a batch of {@code images} images in {@code format}, in the layout's order. */
    public static List<String> metadataNames(PixelFormat format, InputContract contract, int images) {
        return names(format, contract).stream().filter(n -> isMetadata(n, images)).toList();
    }

    /** The names of the tensors that are a batch's metadata whatever it holds, in order. */
    private static List<String> alwaysMetadata(PixelFormat format) {
        return format == PixelFormat.UINT8 ? List.of(SAMPLE_INDEX, PIXEL_NORM, PIXEL_PATCH) : List.of(SAMPLE_INDEX);
    }

    /** The names of a pack's model inputs with images in {@code format} under {@code contract}, in order: no attention_mask. */
    public static List<String> packedInputNames(PixelFormat format, InputContract contract) {
        var names = new ArrayList<>(List.of(INPUT_IDS, LABELS, POSITION_IDS));
        if (contract.mmTokenTypeIds()) names.add(MM_TOKEN_TYPE_IDS);
        names.addAll(List.of(pixelTensor(format), IMAGE_GRID_THW));
        return List.copyOf(names);
    }

    /** The names of a pack's model inputs when it holds {@code images} images: without any, its vision tensors are metadata. */
    public static List<String> packedInputNames(PixelFormat format, InputContract contract, int images) {
        return packedNames(format, contract).stream().filter(n -> !isMetadata(n, images)).toList();
    }

    /** The names of a pack's metadata tensors when it holds {@code images} images, in the layout's order. */
    public static List<String> packedMetadataNames(PixelFormat format, InputContract contract, int images) {
        return packedNames(format, contract).stream().filter(n -> isMetadata(n, images)).toList();
    }

    /**
     * Every tensor name of a pack in {@code format} under {@code contract} as laid out: the inputs, then {@code sample_index},
     * {@code cu_seqlens}, {@code max_seqlen}, {@code seg_ids} and the compact format's {@code pixel_norm}, {@code pixel_patch}.
     */
    public static List<String> packedNames(PixelFormat format, InputContract contract) {
        var names = new ArrayList<>(packedInputNames(format, contract));
        names.addAll(List.of(SAMPLE_INDEX, CU_SEQLENS, MAX_SEQLEN, SEG_IDS));
        if (format == PixelFormat.UINT8) names.addAll(List.of(PIXEL_NORM, PIXEL_PATCH));
        return List.copyOf(names);
    }

    /**
     * Every tensor name of a batch of {@code shape}, padded or packed, as laid out: its video tensors after the images',
     * and in the compact format {@code video_frame_counts} last.
     */
    public static List<String> names(BatchShape shape) {
        var names = shape.packed() ? packedNames(shape.pixelFormat(), shape.inputContract()) : names(shape.pixelFormat(), shape.inputContract());
        var v = shape.videos();
        boolean audio = shape.audio().clips() > 0;
        if (v.count() == 0 && !audio) return names;
        var out = new ArrayList<String>(names.size() + 6);
        for (String n : names) {
            out.add(n);
            if (n.equals(IMAGE_GRID_THW)) {
                if (v.count() > 0) {
                    out.add(videoPixelTensor(shape.pixelFormat()));
                    out.add(VIDEO_GRID_THW);
                    if (v.seconds()) out.add(SECOND_PER_GRID_TS);
                }
                if (audio) {
                    out.add(INPUT_FEATURES);
                    out.add(FEATURE_ATTENTION_MASK);
                }
            }
        }
        if (v.count() > 0 && shape.pixelFormat() == PixelFormat.UINT8) out.add(VIDEO_FRAME_COUNTS);
        return List.copyOf(out);
    }

    /**
     * Whether tensor {@code name} is flagged as metadata in a batch of {@code images} images: the batch's facts always,
     * and its empty vision inputs ({@code pixel_values} or {@code pixel_values_u8}, {@code image_grid_thw}) when it has no
     * image, so that no client hands them to {@code forward}.
     */
    public static boolean isMetadata(String name, int images) {
        return name.equals(SAMPLE_INDEX) || name.equals(PIXEL_NORM) || name.equals(PIXEL_PATCH) || name.equals(VIDEO_FRAME_COUNTS)
                || name.equals(CU_SEQLENS) || name.equals(MAX_SEQLEN) || name.equals(SEG_IDS)
                || images == 0 && (name.equals(PIXEL_VALUES) || name.equals(PIXEL_VALUES_U8) || name.equals(IMAGE_GRID_THW));
    }

    /**
     * Every tensor name of a batch in {@code format} under {@code contract} as laid out: the inputs, then the metadata
     * (which, in a batch without images, also takes in the vision inputs where they are: {@link #isMetadata}).
     */
    public static List<String> names(PixelFormat format, InputContract contract) {
        var names = new ArrayList<>(inputNames(format, contract));
        names.addAll(alwaysMetadata(format));
        return List.copyOf(names);
    }

    /** The name of the tensor that holds a batch's pixels in {@code format}. */
    public static String pixelTensor(PixelFormat format) { return format == PixelFormat.UINT8 ? PIXEL_VALUES_U8 : PIXEL_VALUES; }

    /** The name of the tensor that holds a batch's video pixels in {@code format}. */
    public static String videoPixelTensor(PixelFormat format) {
        return format == PixelFormat.UINT8 ? PIXEL_VALUES_VIDEOS_U8 : PIXEL_VALUES_VIDEOS;
    }

    /** Every tensor of a batch of {@code shape}, in order; {@code rowLength} is the model's pixel_values row. */
    public static List<BatchLayout.Spec> specs(BatchShape shape, int rowLength) {
        if (shape.packed()) return packedSpecs(shape, rowLength);
        long b = shape.samples(), len = shape.length();
        int images = shape.images();
        var specs = new ArrayList<BatchLayout.Spec>(13);
        var v = shape.videos();
        for (String name : names(shape)) {
            specs.add(switch (name) {
                case INPUT_IDS, LABELS, ATTENTION_MASK, MM_TOKEN_TYPE_IDS -> spec(name, images, Tensor.DType.INT64, b, len);
                case POSITION_IDS -> switch (shape.positions()) {
                    case MROPE -> spec(name, images, Tensor.DType.INT64, 3, b, len);
                    case TEXT -> spec(name, images, Tensor.DType.INT64, b, len);
                    case MROPE_FLOAT -> spec(name, images, Tensor.DType.FLOAT32, 3, b, len);
                };
                case PIXEL_VALUES -> spec(name, images, Tensor.DType.FLOAT32, shape.pixelRows(), rowLength);
                case PIXEL_VALUES_U8 -> spec(name, images, Tensor.DType.UINT8, shape.pixelU8Bytes() / 3, 3);
                case IMAGE_GRID_THW -> spec(name, images, Tensor.DType.INT64, images, 3);
                case PIXEL_VALUES_VIDEOS -> spec(name, images, Tensor.DType.FLOAT32, v.rows(), rowLength);
                case PIXEL_VALUES_VIDEOS_U8 -> spec(name, images, Tensor.DType.UINT8, v.u8Bytes() / 3, 3);
                case VIDEO_FRAME_COUNTS -> spec(name, images, Tensor.DType.INT64, v.count());
                case VIDEO_GRID_THW -> spec(name, images, Tensor.DType.INT64, v.count(), 3);
                case SECOND_PER_GRID_TS -> spec(name, images, Tensor.DType.FLOAT32, v.count());
                case INPUT_FEATURES -> spec(name, images, Tensor.DType.FLOAT32, shape.audio().clips(), dev.stoker.core.AudioPreset.MEL_BINS,
                        shape.audio().frames());
                case FEATURE_ATTENTION_MASK -> spec(name, images, Tensor.DType.INT32, shape.audio().clips(), shape.audio().frames());
                case SAMPLE_INDEX -> spec(name, images, Tensor.DType.INT64, b);
                case PIXEL_NORM -> spec(name, images, Tensor.DType.FLOAT32, 2, 3);
                case PIXEL_PATCH -> spec(name, images, Tensor.DType.INT64, 3);
                default -> throw new IllegalStateException("no spec for " + name);
            });
        }
        return specs;
    }

    /** Every tensor of a pack of {@code shape} ({@link BatchShape#packed()}), in order. */
    private static List<BatchLayout.Spec> packedSpecs(BatchShape shape, int rowLength) {
        long t = shape.length(), n = shape.segments();
        int images = shape.images();
        var specs = new ArrayList<BatchLayout.Spec>(15);
        var v = shape.videos();
        for (String name : names(shape)) {
            specs.add(switch (name) {
                case INPUT_IDS, LABELS, MM_TOKEN_TYPE_IDS -> spec(name, images, Tensor.DType.INT64, 1, t);
                case POSITION_IDS -> switch (shape.positions()) { // docs/packing.md "Audio packs"
                    case MROPE -> spec(name, images, Tensor.DType.INT64, 4, 1, t);
                    case TEXT -> spec(name, images, Tensor.DType.INT64, 1, t);
                    case MROPE_FLOAT -> spec(name, images, Tensor.DType.FLOAT32, 4, 1, t);
                };
                case PIXEL_VALUES -> spec(name, images, Tensor.DType.FLOAT32, shape.pixelRows(), rowLength);
                case PIXEL_VALUES_U8 -> spec(name, images, Tensor.DType.UINT8, shape.pixelU8Bytes() / 3, 3);
                case IMAGE_GRID_THW -> spec(name, images, Tensor.DType.INT64, images, 3);
                case PIXEL_VALUES_VIDEOS -> spec(name, images, Tensor.DType.FLOAT32, v.rows(), rowLength);
                case PIXEL_VALUES_VIDEOS_U8 -> spec(name, images, Tensor.DType.UINT8, v.u8Bytes() / 3, 3);
                case VIDEO_FRAME_COUNTS -> spec(name, images, Tensor.DType.INT64, v.count());
                case VIDEO_GRID_THW -> spec(name, images, Tensor.DType.INT64, v.count(), 3);
                case SECOND_PER_GRID_TS -> spec(name, images, Tensor.DType.FLOAT32, v.count());
                case INPUT_FEATURES -> spec(name, images, Tensor.DType.FLOAT32, shape.audio().clips(), dev.stoker.core.AudioPreset.MEL_BINS,
                        shape.audio().frames());
                case FEATURE_ATTENTION_MASK -> spec(name, images, Tensor.DType.INT32, shape.audio().clips(), shape.audio().frames());
                case SAMPLE_INDEX -> spec(name, images, Tensor.DType.INT64, n);
                case CU_SEQLENS -> spec(name, images, Tensor.DType.INT32, n + 1);
                case MAX_SEQLEN -> spec(name, images, Tensor.DType.INT32, 1);
                case SEG_IDS -> spec(name, images, Tensor.DType.INT32, 1, t);
                case PIXEL_NORM -> spec(name, images, Tensor.DType.FLOAT32, 2, 3);
                case PIXEL_PATCH -> spec(name, images, Tensor.DType.INT64, 3);
                default -> throw new IllegalStateException("no spec for " + name);
            });
        }
        return specs;
    }

    /** Where each tensor of a batch of {@code shape} goes in the {@code STKB} layout. */
    public static BatchLayout.Plan plan(BatchShape shape, int rowLength) { return BatchLayout.plan(specs(shape, rowLength)); }

    /**
     * A heap batch as the tensors a trainer receives, in order, with its metadata for a world of {@code world} ranks; a
     * pack as the canonical pack's tensors (its header's sample count is its real samples, the dummy segment not one).
     */
    public static BatchProvider.Prepared tensors(Batch b, int world, VisionConfig vision) {
        var specs = specs(b.shape(), vision.rowLength());
        var tensors = new ArrayList<Tensor>(specs.size());
        for (var spec : specs) {
            long[] shape = spec.shape();
            var t = switch (spec.name()) {
                case INPUT_IDS -> Tensor.of(INPUT_IDS, b.inputIds(), shape);
                case LABELS -> Tensor.of(LABELS, b.labels(), shape);
                case ATTENTION_MASK -> Tensor.of(ATTENTION_MASK, b.attentionMask(), shape); // padded batches only
                case POSITION_IDS -> b.floatPositionIds() != null ? Tensor.of(POSITION_IDS, b.floatPositionIds(), shape)
                        : Tensor.of(POSITION_IDS, b.positionIds(), shape);
                case MM_TOKEN_TYPE_IDS -> Tensor.of(MM_TOKEN_TYPE_IDS, b.mmTokenTypeIds(), shape);
                case PIXEL_VALUES -> Tensor.of(PIXEL_VALUES, b.pixelValues(), shape);
                case PIXEL_VALUES_U8 -> Tensor.of(PIXEL_VALUES_U8, b.pixelsU8(), shape);
                case IMAGE_GRID_THW -> Tensor.of(IMAGE_GRID_THW, b.imageGridThw(), shape);
                case PIXEL_VALUES_VIDEOS -> Tensor.of(PIXEL_VALUES_VIDEOS, b.videos().pixelValuesVideos(), shape);
                case PIXEL_VALUES_VIDEOS_U8 -> Tensor.of(PIXEL_VALUES_VIDEOS_U8, b.videos().pixelsU8(), shape);
                case VIDEO_FRAME_COUNTS -> Tensor.of(VIDEO_FRAME_COUNTS, b.videos().frameCounts(), shape);
                case VIDEO_GRID_THW -> Tensor.of(VIDEO_GRID_THW, b.videos().videoGridThw(), shape);
                case SECOND_PER_GRID_TS -> Tensor.of(SECOND_PER_GRID_TS, b.videos().secondPerGridTs(), shape);
                case INPUT_FEATURES -> Tensor.of(INPUT_FEATURES, b.audio().inputFeatures(), shape);
                case FEATURE_ATTENTION_MASK -> Tensor.of(FEATURE_ATTENTION_MASK, b.audio().featureMask(), shape);
                case SAMPLE_INDEX -> Tensor.of(SAMPLE_INDEX, b.sampleIndex(), shape);
                case CU_SEQLENS -> Tensor.of(CU_SEQLENS, b.cuSeqlens(), shape);
                case MAX_SEQLEN -> Tensor.of(MAX_SEQLEN, new int[] {b.maxSeqlen()}, shape);
                case SEG_IDS -> Tensor.of(SEG_IDS, b.segIds(), shape);
                case PIXEL_NORM -> Tensor.of(PIXEL_NORM, CompactPixels.norm(vision), shape);
                case PIXEL_PATCH -> Tensor.of(PIXEL_PATCH, CompactPixels.patch(vision), shape);
                default -> throw new IllegalStateException("no tensor for " + spec.name());
            };
            tensors.add(spec.metadata() ? t.asMetadata() : t);
        }
        var meta = new BatchLayout.Meta(b.epoch(), b.step(), b.rank(), world, b.samples(), b.scheduled(), b.globalStep(), b.after());
        return new BatchProvider.Prepared(meta, List.copyOf(tensors));
    }

    /** The {@code sample_index} tensor's values: each sample's manifest line. */
    public static long[] sampleIndex(int[] datasetIndices) {
        long[] index = new long[datasetIndices.length];
        for (int i = 0; i < index.length; i++) index[i] = datasetIndices[i];
        return index;
    }

    private static BatchLayout.Spec spec(String name, int images, Tensor.DType dtype, long... shape) {
        return new BatchLayout.Spec(name, dtype, shape, isMetadata(name, images));
    }
}
