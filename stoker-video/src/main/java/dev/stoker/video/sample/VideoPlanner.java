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

    private final ProcessorPreset family;
    private final VideoSampler sampler;
    private final TransformersCompat compat;
    private final VideoOptions options;
    private final int patch;
    private final int factor;

    /**
     * @param options the command-level options (already merged over a model folder's with {@link VideoOptions#over})
     * @throws IllegalArgumentException for an option the sampler has no use for ({@code --video-total-pixels} in
     *                                  {@code hf} mode)
     */
    public VideoPlanner(ProcessorPreset family, VideoSampler sampler, TransformersCompat compat, VideoOptions options) {
        this.family = Objects.requireNonNull(family, "family");
        this.sampler = Objects.requireNonNull(sampler, "sampler");
        this.compat = Objects.requireNonNull(compat, "compat");
        this.options = Objects.requireNonNull(options, "options");
        this.patch = family == ProcessorPreset.QWEN3_VL ? 16 : 14;
        this.factor = patch * 2;
        if (sampler == VideoSampler.HF && options.has(VideoKey.TOTAL_PIXELS))
            throw new IllegalArgumentException("--video-total-pixels is a qwen-vl-utils option; the hf sampler's budget is "
                    + "--video-max-pixels (Qwen2/2.5: per frame; Qwen3: over all frames)");
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
        return sampler == VideoSampler.HF ? planHf(video, meta, item) : planQvu(video, meta, item);
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
        double fpsKwarg = fps != null ? fps : 2.0; // what 4.57's Qwen2.5 processor reads
        return finish(video, meta, idx, hw, sampledFps, fpsKwarg);
    }

    private VideoPlan planQvu(String video, VideoMetadata meta, VideoItemOptions item) {
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
        return finish(video, meta, idx, hw, sampledFps, sampledFps);
    }

    private static double get(Map<VideoKey, Double> m, VideoKey k) {
        Double v = m.get(k);
        return v == null ? Double.NaN : v;
    }

    private VideoPlan finish(String video, VideoMetadata meta, long[] idx, int[] hw, double sampledFps, double fpsKwarg) {
        int n = idx.length;
        int gridT = (n + 1) / 2;
        float spg = Float.NaN;
        if (family == ProcessorPreset.QWEN2_5_VL)
            spg = (float) (2 / (compat == TransformersCompat.V5_18 ? sampledFps : fpsKwarg));
        double[] ts = new double[0];
        List<String> texts = List.of();
        if (family == ProcessorPreset.QWEN3_VL) {
            ts = new double[gridT];
            var t = new ArrayList<String>(gridT);
            for (int g = 0; g < gridT; g++) {
                long a = idx[2 * g], b = idx[Math.min(2 * g + 1, n - 1)];
                ts[g] = (a / meta.averageFps() + b / meta.averageFps()) / 2;
                t.add("<" + QwenVideoRules.formatSeconds(ts[g]) + " seconds>");
            }
            texts = t;
        }
        return new VideoPlan(video, family, sampler, idx, hw[0], hw[1], gridT, hw[0] / patch, hw[1] / patch, sampledFps, spg, ts, texts);
    }
}
