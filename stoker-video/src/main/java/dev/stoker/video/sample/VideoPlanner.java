package dev.stoker.video.sample;

import dev.stoker.core.ProcessorPreset;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * Makes a video's {@link VideoPlan} from its metadata alone (Build item 4: shapes before decoding): one planner per
 * command, holding the family, the sampler, the transformers version and the command-level options, validated once;
 * {@link #plan} per video item. Pure: no decoding, no FFmpeg, no shared state, so it may be called from any thread.
 *
 * <p>The rules are those of {@code ref_qwenvl_video.py}'s {@code process_video} (the shared reference, bit-exact to
 * transformers 5.18.0 / 4.57.6 and qwen-vl-utils 0.0.14), with the vectors' README's contract for options:
 * <ul>
 *   <li>{@code hf}: the options are the video processor's config (defaults: the Hub model folders', Qwen2/2.5 3,136 …
 *   12,845,056 pixels per frame, Qwen3 4,096 … 25,165,824 over all frames, fps 2, frames 4 … 768). Per-item keys
 *   allowed: {@code fps}, {@code nframes} (→ {@code num_frames}, which drops the fps), {@code min_pixels},
 *   {@code max_pixels}, {@code min_frames}, {@code max_frames}; the others are refused naming the key, and so is
 *   {@code --video-total-pixels}, which no HF video processor reads. Qwen2/2.5 without fps would keep every frame
 *   (correction 4): Stoker's default is 2.0.</li>
 *   <li>{@code qwen-vl-utils}: the command-level options are the defaults of the element keys; every per-item key
 *   overrides them; a command-level fps is dropped for an item with {@code nframes}.</li>
 *   <li>{@code llamafactory}: {@code --video-fps} is its {@code video_fps}, {@code --video-max-frames} its
 *   {@code video_maxlen}, {@code --video-min-pixels}/{@code --video-max-pixels} its {@code video_min_pixels}/
 *   {@code video_max_pixels} (the Pillow pre-resize; defaults 2.0, 128, 256, 65,536); the processor after it keeps
 *   its own budget (the Hub's, or a model folder's). Its layout carries no per-item keys: any is refused. Ported
 *   from LLaMA-Factory 0.9.6.dev0 ({@link LlamaFactoryVideoRules}); the metadata must carry the header's frame count
 *   and duration ({@link VideoMetadata#of}).</li>
 * </ul>
 * Two refusals go beyond the references, which accept the input and silently ignore part of it: an item with both
 * {@code fps} and {@code nframes} in {@code hf} mode (the reference drops the fps; the HF processor itself raises
 * "mutually exclusive"), and {@code resized_height} without {@code resized_width} or the reverse (qwen-vl-utils ignores
 * a lone one).
 */
public final class VideoPlanner {
    /** The per-item keys the {@code hf} sampler takes: those the HF video processors have a parameter for. */
    public static final Set<VideoKey> HF_ITEM_KEYS = Set.copyOf(EnumSet.of(VideoKey.FPS, VideoKey.NFRAMES, VideoKey.MIN_FRAMES,
            VideoKey.MAX_FRAMES, VideoKey.MIN_PIXELS, VideoKey.MAX_PIXELS));

    /**
     * Qwen3-Omni's per-frame pixel bounds: {@code Qwen3OmniMoeProcessorKwargs._defaults["videos_kwargs"]["size"]}
     * (transformers 5.18.0 {@code processing_qwen3_omni_moe.py}: shortest_edge 128·32·32, longest_edge 768·32·32), which
     * {@code ProcessorMixin._merge_kwargs} hands to the video processor at every call unless the caller passes a size, so
     * they win over the folder's {@code min_pixels}/{@code max_pixels} (3,136 … 12,845,056).
     */
    public static final double QWEN3_OMNI_MIN_PIXELS = 128 * 32 * 32, QWEN3_OMNI_MAX_PIXELS = 768 * 32 * 32;
    /**
     * Qwen2.5-Omni's: {@code Qwen2_5OmniProcessorKwargs._defaults["videos_kwargs"]["size"]} (transformers 5.18.0 and
     * 4.57.6 {@code processing_qwen2_5_omni.py}: shortest_edge 128·28·28, longest_edge 768·28·28), handed to the video
     * processor at every call as Qwen3-Omni's are.
     */
    public static final double QWEN2_5_OMNI_MIN_PIXELS = 128 * 28 * 28, QWEN2_5_OMNI_MAX_PIXELS = 768 * 28 * 28;

    private final ProcessorPreset family;
    private final VideoSampler sampler;
    private final TransformersCompat compat;
    private final VideoOptions options;
    private final VideoOptions processor;
    private final int patch;
    private final int factor;

    /**
     * @param options the command-level options (already merged over a model folder's with {@link VideoOptions#over})
     * @throws IllegalArgumentException for an option the sampler has no use for ({@code --video-total-pixels} in
     *                                  {@code hf} mode)
     */
    public VideoPlanner(ProcessorPreset family, VideoSampler sampler, TransformersCompat compat, VideoOptions options) {
        this(family, sampler, compat, options, VideoOptions.DEFAULTS);
    }

    /**
     * @param processor the video processor's own settings, for the {@code llamafactory} sampler, which runs the
     *                  processor after its own pre-resize: a model folder's ({@link VideoProcessorConfig#options()}), or
     *                  {@link VideoOptions#DEFAULTS} for the Hub folders' ({@link #hfDefaults}); only its pixel bounds are read
     */
    public VideoPlanner(ProcessorPreset family, VideoSampler sampler, TransformersCompat compat, VideoOptions options, VideoOptions processor) {
        this.processor = Objects.requireNonNull(processor, "processor");
        this.family = Objects.requireNonNull(family, "family");
        this.sampler = Objects.requireNonNull(sampler, "sampler");
        this.compat = Objects.requireNonNull(compat, "compat");
        this.options = Objects.requireNonNull(options, "options");
        this.patch = family == ProcessorPreset.QWEN3_VL || family == ProcessorPreset.QWEN3_OMNI ? 16 : 14;
        this.factor = patch * 2;
        if (family.audio() != null && family != ProcessorPreset.QWEN3_OMNI && family != ProcessorPreset.QWEN2_5_OMNI)
            throw new IllegalArgumentException(family + ": its videos are planned under " + family.videoFamily());
        if (sampler == VideoSampler.HF && options.has(VideoKey.TOTAL_PIXELS))
            throw new IllegalArgumentException("--video-total-pixels is a qwen-vl-utils option; the hf sampler's budget is "
                    + "--video-max-pixels (Qwen2/2.5: per frame; Qwen3: over all frames)");
        if (sampler == VideoSampler.LLAMAFACTORY) {
            for (VideoKey k : new VideoKey[] {VideoKey.MIN_FRAMES, VideoKey.TOTAL_PIXELS})
                if (options.has(k))
                    throw new IllegalArgumentException(k.flag() + " has no LLaMA-Factory counterpart (it takes video_fps, video_maxlen = "
                            + "--video-max-frames, video_min_pixels, video_max_pixels)");
            if (lfMaxPixels() < lfMinPixels())
                throw new IllegalArgumentException("--video-max-pixels " + VideoKey.format(lfMaxPixels()) + " is under --video-min-pixels "
                        + VideoKey.format(lfMinPixels()) + " (LLaMA-Factory: `video_max_pixels` cannot be smaller than `video_min_pixels`)");
        }
    }

    /** The {@code hf} sampler's defaults for {@code family}: the Hub model folders' video processor settings. */
    public static Map<VideoKey, Double> hfDefaults(ProcessorPreset family) {
        var m = new EnumMap<VideoKey, Double>(VideoKey.class);
        m.put(VideoKey.FPS, 2.0);
        m.put(VideoKey.MIN_FRAMES, 4.0);
        m.put(VideoKey.MAX_FRAMES, 768.0);
        boolean qwen3 = family == ProcessorPreset.QWEN3_VL;
        m.put(VideoKey.MIN_PIXELS, qwen3 ? 4096.0 : 3136.0);
        m.put(VideoKey.MAX_PIXELS, qwen3 ? 25165824.0 : 12845056.0);
        if (family == ProcessorPreset.QWEN3_OMNI) { // the size its processor passes at every call, over the folder's
            m.put(VideoKey.MIN_PIXELS, QWEN3_OMNI_MIN_PIXELS);
            m.put(VideoKey.MAX_PIXELS, QWEN3_OMNI_MAX_PIXELS);
        }
        if (family == ProcessorPreset.QWEN2_5_OMNI) {
            m.put(VideoKey.MIN_PIXELS, QWEN2_5_OMNI_MIN_PIXELS);
            m.put(VideoKey.MAX_PIXELS, QWEN2_5_OMNI_MAX_PIXELS);
        }
        return m;
    }

    public ProcessorPreset family() { return family; }

    public VideoSampler sampler() { return sampler; }

    public TransformersCompat compat() { return compat; }

    public VideoOptions options() { return options; }

    /**
     * The plan of one video item.
     *
     * @param video names the video (and its sample) in errors
     * @throws VideoPlanException naming the video and the cause, where the reference raises (or, for the Qwen2/2.5
     *                            arange rule, would index past the end) and for a per-item key the sampler refuses
     */
    public VideoPlan plan(String video, VideoMetadata meta, VideoItemOptions item) {
        Objects.requireNonNull(meta, "meta");
        Objects.requireNonNull(item, "item");
        return switch (sampler) {
            case HF -> planHf(video, meta, item);
            case QWEN_VL_UTILS -> planQvu(video, meta, item);
            case LLAMAFACTORY -> planLlamaFactory(video, meta, item);
        };
    }

    /**
     * The llamafactory sampler's Pillow pre-resize of a {@code width}×{@code height} frame under this planner's
     * {@code --video-max-pixels}/{@code --video-min-pixels}: the sizes of its {@code Image.resize} calls, in order
     * ({@link LlamaFactoryVideoRules#preResizeSteps}); the last is the plan's frame size.
     *
     * @throws IllegalStateException for another sampler
     */
    public int[][] llamaFactoryPreResizeSteps(String video, int width, int height) {
        if (sampler != VideoSampler.LLAMAFACTORY) throw new IllegalStateException("the " + sampler.cliName() + " sampler has no pre-resize");
        return LlamaFactoryVideoRules.preResizeSteps(video, width, height, lfMaxPixels(), lfMinPixels());
    }

    private double lfMaxPixels() { return options.get(VideoKey.MAX_PIXELS).orElse(LlamaFactoryVideoRules.DEFAULT_MAX_PIXELS); }

    private double lfMinPixels() { return options.get(VideoKey.MIN_PIXELS).orElse(LlamaFactoryVideoRules.DEFAULT_MIN_PIXELS); }

    /**
     * LLaMA-Factory's token path ({@code Qwen2VLPlugin._get_qwen_video_grid_metadata}), which its tensor path agrees
     * with as long as the frames it picks from the header's frame count that exist make the same even-padded count
     * (one missing frame of an even count is hidden by the padding: the plan keeps the frames that exist); where they
     * do not (a header that over-counts, or a missing count, 0 … maxlen − 1, with a duration and fewer than
     * {@code video_maxlen} frames) its token count and its tensors disagree, and the video is refused. Without a header duration (WebM) the token path
     * falls back to the decoded frames: those of 0 … maxlen − 1 that exist.
     */
    private VideoPlan planLlamaFactory(String video, VideoMetadata meta, VideoItemOptions item) {
        if (!item.isEmpty())
            throw new VideoPlanException(video, "per-item keys " + item.values().keySet() + ": LLaMA-Factory's layout has no per-video options");
        double vfps = options.get(VideoKey.FPS).orElse(LlamaFactoryVideoRules.DEFAULT_FPS);
        int maxlen = (int) options.get(VideoKey.MAX_FRAMES).orElse(LlamaFactoryVideoRules.DEFAULT_MAXLEN);
        long[] idx = LlamaFactoryVideoRules.sampleIndices(video, meta.headerFrames(), meta.streamDurationSeconds(), vfps, maxlen);
        // its decode loop keeps the picked frames that exist; the token path counts all it picked (without a duration
        // it falls back to the decoded ones)
        long[] kept = java.util.Arrays.stream(idx).filter(i -> i < meta.frames()).toArray();
        if (Double.isNaN(meta.streamDurationSeconds())) idx = kept;
        if ((kept.length + 1) / 2 != (idx.length + 1) / 2)
            throw new VideoPlanException(video, "LLaMA-Factory picks frame " + idx[idx.length - 1] + " by the header's frame count ("
                    + meta.headerFrames() + (meta.headerFrames() == 0 ? ": none, so 0 … video_maxlen − 1" : "") + ") but the video decodes to "
                    + meta.frames() + " frames: its token count would not match its tensors");
        int[] wh = LlamaFactoryVideoRules.regularizedSize(video, meta.width(), meta.height(), lfMaxPixels(), lfMinPixels());
        int t = idx.length + idx.length % 2;
        Map<VideoKey, Double> proc = hfDefaults(family);
        proc.putAll(processor.values());
        int[] hw = family == ProcessorPreset.QWEN3_VL
                ? QwenVideoRules.smartResizeHfQwen3Video(video, t, wh[1], wh[0], factor, proc.get(VideoKey.MIN_PIXELS), proc.get(VideoKey.MAX_PIXELS), compat)
                : QwenVideoRules.smartResizeHfQwen2Video(video, wh[1], wh[0], factor, proc.get(VideoKey.MIN_PIXELS), proc.get(VideoKey.MAX_PIXELS));
        double d = meta.streamDurationSeconds();
        if (d == 0) throw new VideoPlanException(video, "the stream header's duration is 0; LLaMA-Factory divides by it (fps_per_video)");
        double fpsPerVideo = Double.isNaN(d) ? vfps : idx.length / d;
        double[] ts = family == ProcessorPreset.QWEN3_VL ? LlamaFactoryVideoRules.qwen3Timestamps(idx, meta.averageFps(), vfps) : null;
        return finish(video, meta, wh[1], wh[0], kept, hw, fpsPerVideo, fpsPerVideo, ts);
    }

    private Map<VideoKey, Double> hfConfig(VideoItemOptions item) {
        Map<VideoKey, Double> cfg = hfDefaults(family);
        cfg.putAll(options.values());
        for (var e : item.values().entrySet()) if (cfg.containsKey(e.getKey())) cfg.put(e.getKey(), e.getValue());
        return cfg;
    }

    private VideoPlan planHf(String video, VideoMetadata meta, VideoItemOptions item) {
        List<String> bad = new ArrayList<>();
        for (VideoKey k : item.values().keySet()) if (!HF_ITEM_KEYS.contains(k)) bad.add(k.jsonName());
        if (!bad.isEmpty())
            throw new VideoPlanException(video, "per-item keys " + bad + " are qwen-vl-utils options; the hf sampler (the HF video "
                    + "processor) takes only fps, nframes, min_pixels, max_pixels, min_frames, max_frames");
        if (item.has(VideoKey.FPS) && item.has(VideoKey.NFRAMES))
            throw new VideoPlanException(video, "the item sets both fps and nframes; the HF video processor takes one "
                    + "(`num_frames` and `fps` are mutually exclusive)");
        Map<VideoKey, Double> cfg = hfConfig(item);
        Long numFrames = item.has(VideoKey.NFRAMES) ? (long) item.get(VideoKey.NFRAMES).getAsDouble() : null;
        Double fps = numFrames != null ? null : cfg.get(VideoKey.FPS);
        int total = meta.frames();
        double minFrames = cfg.get(VideoKey.MIN_FRAMES), maxFrames = cfg.get(VideoKey.MAX_FRAMES);
        boolean qwen3 = family == ProcessorPreset.QWEN3_VL;
        long[] idx = qwen3
                ? QwenVideoRules.sampleHfQwen3(video, total, meta.averageFps(), fps, numFrames, minFrames, maxFrames)
                : QwenVideoRules.sampleHfQwen2(video, total, meta.averageFps(), fps, numFrames, minFrames, maxFrames, 2);
        int[] hw = qwen3
                ? QwenVideoRules.smartResizeHfQwen3Video(video, idx.length, meta.height(), meta.width(), factor,
                        cfg.get(VideoKey.MIN_PIXELS), cfg.get(VideoKey.MAX_PIXELS), compat)
                : QwenVideoRules.smartResizeHfQwen2Video(video, meta.height(), meta.width(), factor, cfg.get(VideoKey.MIN_PIXELS),
                        cfg.get(VideoKey.MAX_PIXELS));
        double sampledFps = idx.length / (double) total * meta.averageFps();
        // what 4.57's Qwen2.5 processor reads; Qwen3-Omni's reads the fps passed to it, 1.0 when none is (nframes)
        double fpsKwarg = fps != null ? fps : family == ProcessorPreset.QWEN3_OMNI ? 1.0 : 2.0;
        return finish(video, meta, meta.height(), meta.width(), idx, hw, sampledFps, fpsKwarg, null);
    }

    private VideoPlan planQvu(String video, VideoMetadata meta, VideoItemOptions item) {
        for (VideoKey k : FRAME_LIST_ONLY_KEYS)
            if (item.has(k))
                throw new VideoPlanException(video, "per-item key " + k.jsonName() + " is for a video given as a list of frame "
                        + "images; qwen-vl-utils ignores it for a video file");
        Map<VideoKey, Double> ele = new EnumMap<>(VideoKey.class);
        ele.putAll(options.values());
        ele.putAll(item.values());
        if (ele.containsKey(VideoKey.NFRAMES) && !item.has(VideoKey.FPS)) ele.remove(VideoKey.FPS);
        if (ele.containsKey(VideoKey.RESIZED_HEIGHT) != ele.containsKey(VideoKey.RESIZED_WIDTH))
            throw new VideoPlanException(video, "resized_height and resized_width go together (qwen-vl-utils silently ignores one alone)");
        var range = QwenVideoRules.qvuFrameRange(video, meta.frames(), meta.averageFps(), get(ele, VideoKey.VIDEO_START),
                get(ele, VideoKey.VIDEO_END));
        int n = QwenVideoRules.qvuNframes(video, range.length(), meta.averageFps(), get(ele, VideoKey.FPS), get(ele, VideoKey.NFRAMES),
                get(ele, VideoKey.MIN_FRAMES), get(ele, VideoKey.MAX_FRAMES));
        long[] idx = QwenVideoRules.qvuIndices(range.start(), range.end(), n);
        double sampledFps = n / Math.max(range.length(), 1e-6) * meta.averageFps();
        double f2 = (double) factor * factor;
        double minPx = ele.containsKey(VideoKey.MIN_PIXELS) ? ele.get(VideoKey.MIN_PIXELS) : 128 * f2;
        double totalPx = ele.containsKey(VideoKey.TOTAL_PIXELS) ? ele.get(VideoKey.TOTAL_PIXELS)
                : (double) ((long) QwenVideoRules.QVU_MODEL_SEQ_LEN * factor * factor) * 0.9;
        double maxPx = Math.max(Math.min(768 * f2, totalPx / n * QwenVideoRules.QVU_FRAME_FACTOR), (double) (long) (minPx * 1.05));
        if (ele.containsKey(VideoKey.MAX_PIXELS)) maxPx = Math.min(ele.get(VideoKey.MAX_PIXELS), maxPx);
        int[] hw = ele.containsKey(VideoKey.RESIZED_HEIGHT)
                ? QwenVideoRules.smartResizeQvu(video, ele.get(VideoKey.RESIZED_HEIGHT), ele.get(VideoKey.RESIZED_WIDTH), factor,
                        Double.NaN, Double.NaN)
                : QwenVideoRules.smartResizeQvu(video, meta.height(), meta.width(), factor, minPx, maxPx);
        return finish(video, meta, meta.height(), meta.width(), idx, hw, sampledFps, sampledFps, null);
    }

    /** Keys only a frame list takes: qwen-vl-utils reads them in its list branch alone. */
    static final Set<VideoKey> FRAME_LIST_ONLY_KEYS = Set.copyOf(EnumSet.of(VideoKey.SAMPLE_FPS, VideoKey.RAW_FPS));

    /** Keys a frame list takes: those its list branch and each frame's {@code fetch_image} read. */
    public static final Set<VideoKey> FRAME_LIST_KEYS = Set.copyOf(EnumSet.of(VideoKey.MIN_PIXELS, VideoKey.MAX_PIXELS,
            VideoKey.TOTAL_PIXELS, VideoKey.RESIZED_HEIGHT, VideoKey.RESIZED_WIDTH, VideoKey.SAMPLE_FPS, VideoKey.RAW_FPS));

    /**
     * A video given as a list of frame images, planned: the size each frame is Pillow-resized to first and the video's
     * plan (its frame indices are the padded list's positions, 0 … n − 1; {@link VideoPlan#frameHeight()} is the Pillow
     * size, which the float32 torchvision resize receives).
     *
     * @param pillowHeight the height every frame has after {@code fetch_image}
     * @param pillowWidth  the width
     */
    public record FrameListPlan(int pillowHeight, int pillowWidth, VideoPlan plan) {}

    /**
     * Plans a video given as a list of frame images, by qwen-vl-utils' {@code fetch_video} list branch (QwenLM/Qwen3-VL
     * {@code qwen-vl-utils/src/qwen_vl_utils/vision_process.py} at 004d5e0a0d4514ce8945356ae8c969f4dc0080dc; the branch is
     * the same in 0.0.14): each frame through {@code fetch_image} with the item's keys (its own {@code smart_resize} with
     * the IMAGE bounds 4·f² … 16384·f² unless the item sets {@code min_pixels}/{@code max_pixels}, or
     * {@code resized_height}/{@code resized_width}); the list padded to an even count with its last frame; the video's
     * {@code smart_resize} as for a file ({@code min_pixels}, {@code total_pixels}, {@code max_pixels}); metadata
     * {@code fps = raw_fps} (default {@code sample_fps}, default 2.0), indices 0 … n − 1, {@code total_num_frames = n /
     * sample_fps · raw_fps}; the processor after it with {@code do_sample_frames=False} (5.18's Qwen2.5
     * {@code second_per_grid_ts} = 2 / that metadata's sampled fps; 4.57's = 2 / {@code sample_fps}, the {@code fps}
     * qwen-vl-utils hands over). Command-level options are the keys' defaults, as for files. Only the
     * {@code qwen-vl-utils} sampler defines this; the others refuse (see the caller).
     *
     * @param heights each frame's stored height (EXIF ignored: {@code Image.open} does not rotate)
     * @param widths  each frame's stored width
     * @throws VideoPlanException for a key the list branch does not read, frames whose {@code fetch_image} sizes differ
     *                            ({@code torch.stack} fails there), or what {@code smart_resize} raises
     */
    public FrameListPlan planFrameList(String video, int[] heights, int[] widths, VideoItemOptions item) {
        if (sampler != VideoSampler.QWEN_VL_UTILS)
            throw new VideoPlanException(video, "a video given as a list of frame images is qwen-vl-utils' rule (--video-sampler "
                    + "qwen-vl-utils); " + (sampler == VideoSampler.HF
                    ? "the HF video processor samples by fps from the video's metadata, which a list of images lacks (transformers "
                    + "5.18: Qwen2/2.5 raise ValueError, Qwen3 assumes 24 fps)"
                    : "Stoker has no port of LLaMA-Factory's handling of frame lists"));
        if (heights.length == 0 || heights.length != widths.length)
            throw new IllegalArgumentException("video " + video + ": " + heights.length + " heights, " + widths.length + " widths");
        List<String> bad = new ArrayList<>();
        for (VideoKey k : item.values().keySet()) if (!FRAME_LIST_KEYS.contains(k)) bad.add(k.jsonName());
        if (!bad.isEmpty())
            throw new VideoPlanException(video, "per-item keys " + bad + " mean nothing for a list of frame images (qwen-vl-utils "
                    + "ignores them there); a frame list takes " + FRAME_LIST_KEYS.stream().map(VideoKey::jsonName).sorted().toList());
        Map<VideoKey, Double> ele = new EnumMap<>(VideoKey.class);
        for (var e : options.values().entrySet()) if (FRAME_LIST_KEYS.contains(e.getKey())) ele.put(e.getKey(), e.getValue());
        ele.putAll(item.values());
        if (ele.containsKey(VideoKey.RESIZED_HEIGHT) != ele.containsKey(VideoKey.RESIZED_WIDTH))
            throw new VideoPlanException(video, "resized_height and resized_width go together (qwen-vl-utils silently ignores one alone)");
        boolean fixed = ele.containsKey(VideoKey.RESIZED_HEIGHT);
        int[] pil = null;
        for (int i = 0; i < heights.length; i++) {
            int[] hw = fixed
                    ? QwenVideoRules.smartResizeQvu(video, ele.get(VideoKey.RESIZED_HEIGHT), ele.get(VideoKey.RESIZED_WIDTH), factor,
                            Double.NaN, Double.NaN)
                    : QwenVideoRules.smartResizeQvu(video + " frame " + i, heights[i], widths[i], factor, get(ele, VideoKey.MIN_PIXELS),
                            get(ele, VideoKey.MAX_PIXELS));
            if (pil == null) pil = hw;
            else if (pil[0] != hw[0] || pil[1] != hw[1])
                throw new VideoPlanException(video, "frame " + i + " (" + widths[i] + "x" + heights[i] + ") resizes to " + hw[1] + "x"
                        + hw[0] + ", frame 0 (" + widths[0] + "x" + heights[0] + ") to " + pil[1] + "x" + pil[0]
                        + ": qwen-vl-utils cannot stack frames of different sizes");
        }
        int n = heights.length + (heights.length & 1);
        double sampleFps = ele.containsKey(VideoKey.SAMPLE_FPS) ? ele.get(VideoKey.SAMPLE_FPS) : 2.0;
        double rawFps = ele.containsKey(VideoKey.RAW_FPS) ? ele.get(VideoKey.RAW_FPS) : sampleFps;
        double totalNumFrames = (n / sampleFps) * rawFps;
        double sampledFps = n / totalNumFrames * rawFps; // transformers' VideoMetadata.sampled_fps
        double f2 = (double) factor * factor;
        double minPx = ele.containsKey(VideoKey.MIN_PIXELS) ? ele.get(VideoKey.MIN_PIXELS) : 128 * f2;
        double totalPx = ele.containsKey(VideoKey.TOTAL_PIXELS) ? ele.get(VideoKey.TOTAL_PIXELS)
                : (double) ((long) QwenVideoRules.QVU_MODEL_SEQ_LEN * factor * factor) * 0.9;
        double maxPx = Math.max(Math.min(768 * f2, totalPx / n * QwenVideoRules.QVU_FRAME_FACTOR), (double) (long) (minPx * 1.05));
        if (ele.containsKey(VideoKey.MAX_PIXELS)) maxPx = Math.min(ele.get(VideoKey.MAX_PIXELS), maxPx);
        int[] hw = fixed
                ? QwenVideoRules.smartResizeQvu(video, ele.get(VideoKey.RESIZED_HEIGHT), ele.get(VideoKey.RESIZED_WIDTH), factor,
                        Double.NaN, Double.NaN)
                : QwenVideoRules.smartResizeQvu(video, pil[0], pil[1], factor, minPx, maxPx);
        long[] idx = new long[n];
        for (int i = 0; i < n; i++) idx[i] = i;
        var meta = new VideoMetadata(n, rawFps, pil[1], pil[0]);
        return new FrameListPlan(pil[0], pil[1], finish(video, meta, pil[0], pil[1], idx, hw, sampledFps, sampleFps, null));
    }

    private static double get(Map<VideoKey, Double> m, VideoKey k) {
        Double v = m.get(k);
        return v == null ? Double.NaN : v;
    }

    /** @param groupTimes Qwen3's group times where the sampler computes them its own way, else null (index / average fps) */
    private VideoPlan finish(String video, VideoMetadata meta, int frameHeight, int frameWidth, long[] idx, int[] hw, double sampledFps,
                             double fpsKwarg, double[] groupTimes) {
        int n = idx.length;
        int gridT = (n + 1) / 2;
        float spg = Float.NaN;
        // Qwen2.5-Omni under the other samplers: as Qwen2.5-VL's, as before (not checked against qwen-omni-utils' callers)
        if (family == ProcessorPreset.QWEN2_5_VL || family == ProcessorPreset.QWEN2_5_OMNI && sampler != VideoSampler.HF)
            spg = (float) (2 / (compat == TransformersCompat.V5_18 ? sampledFps : fpsKwarg));
        // Qwen3OmniMoeProcessor, and Qwen2_5OmniProcessor called by the hf sampler: video_second_per_grid =
        // temporal_patch_size / fps, fps the call's (any release)
        if (family == ProcessorPreset.QWEN3_OMNI || family == ProcessorPreset.QWEN2_5_OMNI && sampler == VideoSampler.HF)
            spg = (float) (2 / fpsKwarg);
        double[] ts = new double[0];
        List<String> texts = List.of();
        if (family == ProcessorPreset.QWEN3_VL) {
            ts = new double[gridT];
            var t = new ArrayList<String>(gridT);
            for (int g = 0; g < gridT; g++) {
                long a = idx[2 * g], b = idx[Math.min(2 * g + 1, n - 1)];
                ts[g] = groupTimes != null ? groupTimes[g] : (a / meta.averageFps() + b / meta.averageFps()) / 2;
                t.add("<" + QwenVideoRules.formatSeconds(ts[g]) + " seconds>");
            }
            texts = t;
        }
        return new VideoPlan(video, family, sampler, frameHeight, frameWidth, idx, hw[0], hw[1], gridT, hw[0] / patch, hw[1] / patch, sampledFps, spg, ts, texts);
    }
}
