package dev.stoker.video.sample;

import java.math.BigDecimal;
import java.math.RoundingMode;

/**
 * The Qwen-VL video sampling and resizing rules as pure functions on numbers: no frames, no FFmpeg. Each is a port
 * of the function of the same name in {@code ref_qwenvl_video.py} (the shared reference, checked bit for bit against
 * transformers 5.18.0 and 4.57.6 and qwen-vl-utils 0.0.14; see the vectors' README), with Python's arithmetic
 * reproduced: {@code /} is a double division, {@code round} is half-to-even ({@link Math#rint}), {@code int()}
 * truncates, {@code np.float32} is a {@code float} cast. Every error is a {@link VideoPlanException} naming the video
 * and the cause the reference raises with.
 */
public final class QwenVideoRules {
    /** qwen-vl-utils 0.0.14 constants. */
    public static final double QVU_FPS = 2.0;
    public static final int QVU_MIN_FRAMES = 4;
    public static final int QVU_MAX_FRAMES = 768;
    public static final int QVU_FRAME_FACTOR = 2;
    /** qwen-vl-utils' {@code MODEL_SEQ_LEN} environment default. */
    public static final int QVU_MODEL_SEQ_LEN = 128000;

    private QwenVideoRules() {}

    /**
     * {@code sample_hf_qwen2}: {@code Qwen2VLVideoProcessor.sample_frames} (5.18 == 4.57). The indices
     * {@code torch.arange(0, total, total / n).int()} yields: {@code ceil(total / fl64(total/n))} entries with values
     * {@code int(float32(k · step))}. For about 1% of (total, n) that is n + 1 entries, the last = total, and
     * transformers fails with IndexError; that video is refused (correction 3).
     *
     * @param fps        frames per second to sample, or null (then {@code numFrames}, or every frame when both are null)
     * @param numFrames  the frame count asked for, or null
     */
    public static long[] sampleHfQwen2(String video, int total, double videoFps, Double fps, Long numFrames,
                                       double minFrames, double maxFrames, int tps) {
        if (fps != null && numFrames != null) throw new VideoPlanException(video, "`num_frames` and `fps` are mutually exclusive");
        double n;
        if (numFrames != null) {
            n = Math.rint(numFrames / (double) tps) * tps;
        } else if (fps != null) {
            double maxF = Math.floor(Math.min(maxFrames, total) / tps) * tps;
            n = total / videoFps * fps;
            n = Math.min(Math.min(Math.max(n, minFrames), maxF), total);
            n = Math.floor(n / tps) * tps;
        } else {
            long[] all = new long[total];
            for (int i = 0; i < total; i++) all[i] = i;
            return all;
        }
        if (n > total)
            throw new VideoPlanException(video, "Video can't be sampled. The inferred num_frames=" + (long) n
                    + " exceeds total_num_frames=" + total);
        if (n <= 0)
            throw new VideoPlanException(video, "Video can't be sampled: num_frames=" + (long) n + " (total_num_frames=" + total + ")");
        double step = total / n;
        int size = (int) Math.ceil(total / step);
        long[] idx = new long[size];
        for (int k = 0; k < size; k++) idx[k] = (long) (float) (k * step);
        if (idx[size - 1] >= total)
            throw new VideoPlanException(video, "HF Qwen2-VL sampler: torch.arange(0, " + total + ", " + total + "/" + (long) n + ") has "
                    + size + " entries, the last (" + idx[size - 1] + ") is out of range; transformers raises IndexError");
        return idx;
    }

    /**
     * {@code sample_hf_qwen3}: {@code Qwen3VLVideoProcessor.sample_frames}: {@code n = int(total / fps_v · fps)}
     * clamped to [min_frames, min(max_frames, total)] (no rounding to even), or {@code numFrames} as given
     * (correction 7); then {@code np.linspace(0, total - 1, n).round()}.
     */
    public static long[] sampleHfQwen3(String video, int total, double videoFps, Double fps, Long numFrames,
                                       double minFrames, double maxFrames) {
        if (fps != null && numFrames != null) throw new VideoPlanException(video, "`num_frames` and `fps` are mutually exclusive");
        double n;
        if (numFrames != null) {
            n = numFrames;
        } else if (fps != null) {
            n = (long) (total / videoFps * fps);
            n = Math.min(Math.min(Math.max(n, minFrames), maxFrames), total);
        } else {
            n = Math.min(Math.max(total, minFrames), maxFrames);
        }
        return linspaceRound(0, total - 1, (int) n);
    }

    /** {@code np.linspace(start, stop, num).round()} as numpy 2 computes it: {@code k · step + start}, the last = stop. */
    static long[] linspaceRound(double start, double stop, int num) {
        long[] out = new long[num];
        if (num == 0) return out;
        int div = num - 1;
        double delta = stop - start;
        double step = div > 0 ? delta / div : Double.NaN;
        for (int k = 0; k < num; k++) {
            double y;
            if (div == 0) y = k * delta;
            else if (step == 0) y = k / (double) div * delta;
            else y = k * step;
            out[k] = (long) Math.rint(y + start);
        }
        if (num > 1) out[num - 1] = (long) Math.rint(stop);
        return out;
    }

    /**
     * {@code smart_resize_hf_qwen2_video}: the Qwen2-VL video processor's {@code smart_resize} (5.18 and 4.57): a
     * per-frame budget, no "smaller than factor" error, {@code max(factor, floor(..))} when shrinking (correction 5).
     *
     * @return {height, width}
     */
    public static int[] smartResizeHfQwen2Video(String video, int h, int w, int factor, double minPixels, double maxPixels) {
        aspect(video, h, w);
        double hb = Math.rint(h / (double) factor) * factor, wb = Math.rint(w / (double) factor) * factor;
        if (hb * wb > maxPixels) {
            double beta = Math.sqrt((double) ((long) h * w) / maxPixels);
            hb = Math.max(factor, Math.floor(h / beta / factor) * factor);
            wb = Math.max(factor, Math.floor(w / beta / factor) * factor);
        } else if (hb * wb < minPixels) {
            double beta = Math.sqrt(minPixels / (double) ((long) h * w));
            hb = Math.ceil(h * beta / factor) * factor;
            wb = Math.ceil(w * beta / factor) * factor;
        }
        return size(video, hb, wb);
    }

    /**
     * {@code smart_resize_hf_qwen3_video}: Qwen3-VL's video {@code smart_resize(t, h, w)}: the budget is over t·h·w;
     * {@code t_bar = round(t/2)·2} (half-even) only in the comparisons, {@code beta} with t; t &lt; 2 raises; a frame
     * smaller than the factor is scaled up in 5.18 and raises in 4.57 (correction 6).
     */
    public static int[] smartResizeHfQwen3Video(String video, int t, int h, int w, int factor, double minPixels, double maxPixels,
                                                TransformersCompat compat) {
        final int temporalFactor = 2;
        if (t < temporalFactor) throw new VideoPlanException(video, "t:" + t + " must be larger than temporal_factor:" + temporalFactor);
        if (h < factor || w < factor) {
            if (compat == TransformersCompat.V5_18) {
                double s = Math.max(factor / (double) h, factor / (double) w);
                h = (int) (h * s);
                w = (int) (w * s);
            } else {
                throw new VideoPlanException(video, "height:" + h + " or width:" + w + " must be larger than factor:" + factor
                        + " (transformers 4.57 raises; 5.18 scales such frames up)");
            }
        }
        aspect(video, h, w);
        double hb = Math.rint(h / (double) factor) * factor, wb = Math.rint(w / (double) factor) * factor;
        double tb = Math.rint(t / (double) temporalFactor) * temporalFactor;
        double thw = (double) t * h * w; // < 2^53: t ≤ 2^20, h, w ≤ 2^15 (and a scaled-up edge ≤ 2^21)
        if (tb * hb * wb > maxPixels) {
            double beta = Math.sqrt(thw / maxPixels);
            hb = Math.max(factor, Math.floor(h / beta / factor) * factor);
            wb = Math.max(factor, Math.floor(w / beta / factor) * factor);
        } else if (tb * hb * wb < minPixels) {
            double beta = Math.sqrt(minPixels / thw);
            hb = Math.ceil(h * beta / factor) * factor;
            wb = Math.ceil(w * beta / factor) * factor;
        }
        return size(video, hb, wb);
    }

    /**
     * {@code smart_resize_qvu}: qwen-vl-utils' {@code smart_resize} (float budgets allowed,
     * {@code h_bar = max(factor, round(h/f)·f)}, no floor at the factor when shrinking).
     *
     * @param minPixels the budget's floor, or NaN for qwen-vl-utils' default 4·f²
     * @param maxPixels the budget's ceiling, or NaN for its default 16384·f²
     */
    public static int[] smartResizeQvu(String video, double h, double w, int factor, double minPixels, double maxPixels) {
        if (Double.isNaN(maxPixels)) maxPixels = 16384.0 * factor * factor;
        if (Double.isNaN(minPixels)) minPixels = 4.0 * factor * factor;
        if (!(maxPixels >= minPixels))
            throw new VideoPlanException(video, "The max_pixels of image must be greater than or equal to min_pixels ("
                    + VideoKey.format(maxPixels) + " < " + VideoKey.format(minPixels) + ")");
        aspect(video, h, w);
        double hb = Math.max(factor, Math.rint(h / factor) * factor);
        double wb = Math.max(factor, Math.rint(w / factor) * factor);
        if (hb * wb > maxPixels) {
            double beta = Math.sqrt((h * w) / maxPixels);
            hb = Math.floor(h / beta / factor) * factor;
            wb = Math.floor(w / beta / factor) * factor;
        } else if (hb * wb < minPixels) {
            double beta = Math.sqrt(minPixels / (h * w));
            hb = Math.ceil(h * beta / factor) * factor;
            wb = Math.ceil(w * beta / factor) * factor;
        }
        return size(video, hb, wb);
    }

    /** The first and last frame (inclusive) and the range's length: {@link #qvuFrameRange}'s result. */
    public record FrameRange(int start, int end, int length) {}

    /**
     * {@code qvu_frame_range}: qwen-vl-utils' {@code calculate_video_frame_range} (decord/torchcodec readers,
     * correction 11): {@code start = ceil(clamp(video_start) · fps)}, {@code end = min(floor(clamp(video_end) · fps),
     * total − 1)}, where clamp limits to [0, total / fps].
     *
     * @param videoStart seconds, or NaN when not given
     * @param videoEnd   seconds, or NaN when not given
     */
    public static FrameRange qvuFrameRange(String video, int total, double videoFps, double videoStart, double videoEnd) {
        if (!(videoFps > 0)) throw new VideoPlanException(video, "video_fps must be a positive number");
        if (total <= 0) throw new VideoPlanException(video, "total_frames must be a positive integer");
        if (Double.isNaN(videoStart) && Double.isNaN(videoEnd)) return new FrameRange(0, total - 1, total);
        double maxDuration = total / videoFps;
        long start = 0;
        if (!Double.isNaN(videoStart)) start = (long) Math.ceil(Math.max(0.0, Math.min(videoStart, maxDuration)) * videoFps);
        long end = total - 1;
        if (!Double.isNaN(videoEnd)) end = Math.min((long) Math.floor(Math.max(0.0, Math.min(videoEnd, maxDuration)) * videoFps), total - 1);
        if (start >= end)
            throw new VideoPlanException(video, "Invalid time range: start frame " + start + " >= end frame " + end
                    + " (video_start/video_end against " + total + " frames at " + videoFps + " fps)");
        return new FrameRange((int) start, (int) end, (int) (end - start + 1));
    }

    /**
     * {@code qvu_nframes}: qwen-vl-utils' {@code smart_nframes}: {@code nframes} rounded half-even to even, or
     * {@code total / fps_v · fps} clamped to [ceil_even(min_frames), floor_even(max_frames)] and total, floored to
     * even; outside [2, total] raises.
     *
     * @param fps       NaN when not given (then 2.0)
     * @param nframes   NaN when not given
     * @param minFrames NaN for the default 4
     * @param maxFrames NaN for the default min(768, total)
     */
    public static int qvuNframes(String video, int total, double videoFps, double fps, double nframes, double minFrames, double maxFrames) {
        if (!Double.isNaN(fps) && !Double.isNaN(nframes)) throw new VideoPlanException(video, "Only accept either `fps` or `nframes`");
        double n;
        if (!Double.isNaN(nframes)) {
            n = Math.rint(nframes / QVU_FRAME_FACTOR) * QVU_FRAME_FACTOR;
        } else {
            double f = Double.isNaN(fps) ? QVU_FPS : fps;
            double minF = Math.ceil((Double.isNaN(minFrames) ? QVU_MIN_FRAMES : minFrames) / QVU_FRAME_FACTOR) * QVU_FRAME_FACTOR;
            double maxF = Math.floor((Double.isNaN(maxFrames) ? Math.min(QVU_MAX_FRAMES, total) : maxFrames) / QVU_FRAME_FACTOR)
                    * QVU_FRAME_FACTOR;
            n = total / videoFps * f;
            n = Math.min(Math.min(Math.max(n, minF), maxF), total);
            n = Math.floor(n / QVU_FRAME_FACTOR) * QVU_FRAME_FACTOR;
        }
        if (!(QVU_FRAME_FACTOR <= n && n <= total))
            throw new VideoPlanException(video, "nframes should in interval [" + QVU_FRAME_FACTOR + ", " + total + "], but got "
                    + VideoKey.format(n) + ".");
        return (int) n;
    }

    /**
     * {@code qvu_indices}: {@code torch.linspace(start, end, n).round().long()} = half-even rounding of
     * {@code start + (end − start)/(n − 1) · k} in double (correction 11).
     */
    public static long[] qvuIndices(int start, int end, int n) {
        if (n == 1) return new long[] {start};
        long[] out = new long[n];
        double step = (end - start) / (double) (n - 1);
        for (int k = 0; k < n; k++) out[k] = (long) Math.rint(start + step * k);
        return out;
    }

    /**
     * {@code format_seconds}: Python's {@code f"{t:.1f}"}, the exact binary value rounded half-to-even (correction 9:
     * 0.25 → "0.2", 0.35 → "0.3"; {@code String.format} would give "0.3" and "0.4").
     */
    public static String formatSeconds(double t) {
        return new BigDecimal(t).setScale(1, RoundingMode.HALF_EVEN).toPlainString();
    }

    private static void aspect(String video, double h, double w) {
        double r = Math.max(h, w) / Math.min(h, w);
        if (r > 200) throw new VideoPlanException(video, "absolute aspect ratio must be smaller than 200, got " + r);
    }

    private static int[] size(String video, double hb, double wb) {
        if (hb < 1 || wb < 1)
            throw new VideoPlanException(video, "resized to " + VideoKey.format(hb) + "x" + VideoKey.format(wb)
                    + " pixels; the resize refuses an empty output (torch: output sizes should be greater than 0)");
        if (hb > Integer.MAX_VALUE / 4 || wb > Integer.MAX_VALUE / 4)
            throw new VideoPlanException(video, "resized to " + VideoKey.format(hb) + "x" + VideoKey.format(wb) + " pixels: too large");
        return new int[] {(int) hb, (int) wb};
    }
}
