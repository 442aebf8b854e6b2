package dev.stoker.video.sample;

import dev.stoker.video.ffmpeg.Rational;
import dev.stoker.video.index.FrameIndex;

/**
 * What the samplers know of a video before any frame is decoded, taken as the references take it (the vectors'
 * README, "How they were made"): the number of decoded frames, the container's average frame rate as a double
 * ({@code fps = float(stream.average_rate)}, what transformers' {@code read_video_pyav}, decord and qwen-vl-utils
 * report), and the stored frame size (rotation metadata is ignored, as every reference ignores it).
 *
 * <p>Variable frame rate: every reference indexes frames by their number and converts with the average rate
 * ({@code index / fps} for timestamps, {@code total / fps · fps'} for the frame count), never by the frames' own
 * timestamps; the plan does the same, so a variable-rate video gets the frames the references pick.
 *
 * <p>Two more fields serve only the {@code llamafactory} sampler, which reads the container's header instead:
 * {@code video_stream.frames} and {@code float(video_stream.duration · video_stream.time_base)}.
 *
 * @param frames                 the number of frames a full decode yields (the frame index's count)
 * @param averageFps             the average frame rate, positive and finite
 * @param width                  stored frame width in pixels
 * @param height                 stored frame height in pixels
 * @param headerFrames           the header's frame count ({@code nb_frames}; 0 where the container has none, as WebM)
 * @param streamDurationSeconds  the stream's header duration in seconds, NaN where the header has none (PyAV: None)
 */
public record VideoMetadata(int frames, double averageFps, int width, int height, long headerFrames, double streamDurationSeconds) {
    /** Highest average frame rate accepted (a 0 or absurd rate in a header is refused, not planned with). */
    public static final double MAX_FPS = 10_000;
    /**
     * Largest header frame count kept as it is (a header may claim anything; only the {@code llamafactory} sampler
     * reads it, and refuses a count the decoded frames do not bear out).
     */
    public static final long MAX_HEADER_FRAMES = 1L << 53;

    public VideoMetadata {
        if (frames < 1 || frames > FrameIndex.MAX_ENTRIES)
            throw new IllegalArgumentException("frame count " + frames + " outside 1 … " + FrameIndex.MAX_ENTRIES);
        if (!(averageFps > 0) || averageFps > MAX_FPS)
            throw new IllegalArgumentException("average frame rate " + averageFps + " outside (0, " + (int) MAX_FPS + "]");
        if (width < 1 || height < 1 || width > VideoKey.MAX_EDGE || height > VideoKey.MAX_EDGE)
            throw new IllegalArgumentException("frame size " + width + "x" + height + " outside 1 … " + VideoKey.MAX_EDGE + " per edge");
        if (headerFrames < 0 || headerFrames > MAX_HEADER_FRAMES)
            throw new IllegalArgumentException("header frame count " + headerFrames + " outside 0 … 2^53");
        if (streamDurationSeconds < 0 || Double.isInfinite(streamDurationSeconds))
            throw new IllegalArgumentException("stream duration " + streamDurationSeconds + " s is not a finite non-negative number");
    }

    /** The decode-side metadata alone (the {@code hf} and {@code qwen-vl-utils} samplers need nothing else): no header fields. */
    public VideoMetadata(int frames, double averageFps, int width, int height) {
        this(frames, averageFps, width, height, 0, Double.NaN);
    }

    /**
     * The metadata of an indexed video: the index's frame count (decoded frames = frames not flagged discard), the
     * stream's {@code avg_frame_rate} as PyAV's {@code float(Fraction)} gives it (the correctly rounded quotient, which
     * Java's {@code (double) num / den} is too), and the stored size.
     *
     * @param video names the video in errors
     * @throws VideoPlanException naming the video where the index has no frames, no average rate, or an absurd size
     */
    public static VideoMetadata of(FrameIndex index, String video) {
        Rational r = index.stream().avgFrameRate();
        if (!r.known() || r.num() < 0 || r.den() < 0)
            throw new VideoPlanException(video, "the stream has no usable average frame rate (" + r
                    + "); the samplers need one, as float(stream.average_rate) does");
        var s = index.stream();
        long nb = Math.max(0, s.headerFrameCount());
        try {
            return new VideoMetadata(index.frameCount(), (double) r.num() / r.den(), s.width(), s.height(),
                    Math.min(nb, MAX_HEADER_FRAMES), durationSeconds(s.headerDuration(), s.timeBase()));
        } catch (IllegalArgumentException e) {
            throw new VideoPlanException(video, e.getMessage());
        }
    }

    /**
     * {@code float(stream.duration * stream.time_base)}: the exact product rounded once (a Fraction's float), NaN where
     * the header has no duration ({@code AV_NOPTS_VALUE}, PyAV's None) or no time base.
     */
    static double durationSeconds(long ticks, Rational timeBase) {
        if (ticks == Long.MIN_VALUE || ticks < 0 || !timeBase.known() || timeBase.den() < 0 || timeBase.num() < 0) return Double.NaN;
        long num;
        try {
            num = Math.multiplyExact(ticks, (long) timeBase.num());
        } catch (ArithmeticException e) {
            return Double.NaN;
        }
        if (num < (1L << 53)) return (double) num / timeBase.den(); // both exact: one correctly rounded division
        return new java.math.BigDecimal(num).divide(java.math.BigDecimal.valueOf(timeBase.den()), new java.math.MathContext(60)).doubleValue();
    }
}
