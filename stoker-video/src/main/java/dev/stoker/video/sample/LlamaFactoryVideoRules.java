package dev.stoker.video.sample;

/**
 * LLaMA-Factory's Qwen-VL video rules as pure functions, ported from {@code src/llamafactory/data/mm_plugin.py} of
 * LLaMA-Factory 0.9.6.dev0 (github:hiyouga/LLaMA-Factory @ff6d4d12, 2026-08-18): {@code BasePlugin
 * ._get_video_sample_indices}, {@code Qwen2VLPlugin._get_qwen_video_size_after_regularization} (= its
 * {@code _preprocess_image} on a frame) and the timestamps its {@code Qwen3VLPlugin} hands to
 * {@code Qwen3VLProcessor._calculate_timestamps} (transformers 5.18.0). Its defaults ({@code ModelArguments}):
 * {@code video_fps} 2.0, {@code video_maxlen} 128, {@code video_max_pixels} 256·256, {@code video_min_pixels} 16·16.
 */
public final class LlamaFactoryVideoRules {
    public static final double DEFAULT_FPS = 2.0;
    public static final int DEFAULT_MAXLEN = 128;
    public static final double DEFAULT_MAX_PIXELS = 256 * 256;
    public static final double DEFAULT_MIN_PIXELS = 16 * 16;

    private LlamaFactoryVideoRules() {}

    /**
     * {@code _get_video_sample_indices}: with a header frame count N and duration d,
     * {@code n = min(N, maxlen, max(1, floor(d · fps)))} and {@code np.linspace(0, N − 1, n).astype(int32)}
     * (truncation, not rounding); a header without a frame count (WebM) gives {@code 0 … maxlen − 1} whatever the
     * video's length. A header with a count but no duration makes LLaMA-Factory fail ({@code None · time_base}).
     */
    public static long[] sampleIndices(String video, long headerFrames, double durationSeconds, double videoFps, int maxlen) {
        if (headerFrames == 0) return linspaceTrunc(0, maxlen - 1, maxlen);
        if (Double.isNaN(durationSeconds))
            throw new VideoPlanException(video, "the stream header has a frame count but no duration; LLaMA-Factory's "
                    + "_get_video_sample_indices fails on it (video_stream.duration is None)");
        double n = Math.max(1, Math.floor(durationSeconds * videoFps));
        n = Math.min(Math.min(headerFrames, maxlen), n);
        return linspaceTrunc(0, headerFrames - 1, (int) n);
    }

    /** {@code np.linspace(start, stop, num).astype(np.int32)}: {@code k · step + start}, the last = stop, truncated. */
    static long[] linspaceTrunc(double start, double stop, int num) {
        long[] out = new long[num];
        if (num == 0) return out;
        int div = num - 1;
        double delta = stop - start;
        double step = div > 0 ? delta / div : Double.NaN;
        for (int k = 0; k < num; k++) {
            double y = div == 0 ? k * delta : step == 0 ? k / (double) div * delta : k * step;
            out[k] = (long) (y + start);
        }
        if (num > 1) out[num - 1] = (long) stop;
        return out;
    }

    /**
     * {@code _get_qwen_video_size_after_regularization}: the frame size Pillow's pre-resize gives, {width, height}:
     * shrunk to {@code max_pixels} or grown to {@code min_pixels} ({@code int(edge · sqrt(budget / (w·h)))}), each
     * edge raised to 28, and an aspect over 200 cut to 180 (all families: the Qwen3 plugin inherits it). The last of
     * {@link #preResizeSteps}, or the frame's own size where there is none.
     */
    public static int[] regularizedSize(String video, int width, int height, double maxPixels, double minPixels) {
        int[][] steps = preResizeSteps(video, width, height, maxPixels, minPixels);
        return steps.length == 0 ? new int[] {width, height} : steps[steps.length - 1].clone();
    }

    /**
     * The Pillow {@code image.resize((w, h))} calls {@code Qwen2VLPlugin._preprocess_image} (and the
     * {@code BasePlugin._preprocess_image} it calls first) makes on one decoded frame, in order, each {width, height}:
     * each resizes the previous one's output, not the decoded frame (a frame shrunk to {@code max_pixels} whose short
     * side is then under 28 is resized twice). A call whose size is the image's own is kept (Pillow copies then).
     */
    public static int[][] preResizeSteps(String video, int width, int height, double maxPixels, double minPixels) {
        var steps = new java.util.ArrayList<int[]>(4);
        long w = width, h = height;
        if ((double) (w * h) > maxPixels) {
            double f = Math.sqrt(maxPixels / (double) (w * h));
            w = (long) (w * f);
            h = (long) (h * f);
            steps.add(new int[] {(int) w, (int) h});
        }
        if ((double) (w * h) < minPixels) {
            if (w * h == 0)
                throw new VideoPlanException(video, "LLaMA-Factory's pre-resize shrinks the " + width + "x" + height + " frame to " + w + "x" + h
                        + " pixels and then divides by zero (video_max_pixels " + VideoKey.format(maxPixels) + ")");
            double f = Math.sqrt(minPixels / (double) (w * h));
            w = (long) (w * f);
            h = (long) (h * f);
            steps.add(new int[] {(int) w, (int) h});
        }
        if (Math.min(w, h) < 28) {
            w = Math.max(w, 28);
            h = Math.max(h, 28);
            steps.add(new int[] {(int) w, (int) h});
        }
        if ((double) w / h > 200) {
            w = h * 180;
            steps.add(new int[] {(int) w, (int) h});
        }
        if ((double) h / w > 200) {
            h = w * 180;
            steps.add(new int[] {(int) w, (int) h});
        }
        for (int[] s : steps)
            if (s[0] > VideoKey.MAX_EDGE || s[1] > VideoKey.MAX_EDGE)
                throw new VideoPlanException(video, "LLaMA-Factory's pre-resize makes the " + width + "x" + height + " frame "
                        + s[0] + "x" + s[1] + ", over " + VideoKey.MAX_EDGE + " per edge");
        return steps.toArray(new int[0][]);
    }

    /**
     * The Qwen3 group timestamps LLaMA-Factory's token path gives: frame "indices" {@code idx / average_fps · video_fps}
     * with {@code fps = video_fps}, through {@code _calculate_timestamps}: an odd count padded with the last, each
     * {@code index / fps}, the mean of each pair.
     */
    public static double[] qwen3Timestamps(long[] idx, double averageFps, double videoFps) {
        int n = idx.length, groups = (n + 1) / 2;
        double[] t = new double[groups];
        for (int g = 0; g < groups; g++) {
            double a = idx[2 * g] / averageFps * videoFps / videoFps;
            double b = idx[Math.min(2 * g + 1, n - 1)] / averageFps * videoFps / videoFps;
            t[g] = (a + b) / 2;
        }
        return t;
    }
}
