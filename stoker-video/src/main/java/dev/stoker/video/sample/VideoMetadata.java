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
 * @param frames      the number of frames a full decode yields (the frame index's count)
 * @param averageFps  the average frame rate, positive and finite
 * @param width       stored frame width in pixels
 * @param height      stored frame height in pixels
 */
public record VideoMetadata(int frames, double averageFps, int width, int height) {
    /** Highest average frame rate accepted (a 0 or absurd rate in a header is refused, not planned with). */
    public static final double MAX_FPS = 10_000;

    public VideoMetadata {
        if (frames < 1 || frames > FrameIndex.MAX_ENTRIES)
            throw new IllegalArgumentException("frame count " + frames + " outside 1 … " + FrameIndex.MAX_ENTRIES);
        if (!(averageFps > 0) || averageFps > MAX_FPS)
            throw new IllegalArgumentException("average frame rate " + averageFps + " outside (0, " + (int) MAX_FPS + "]");
        if (width < 1 || height < 1 || width > VideoKey.MAX_EDGE || height > VideoKey.MAX_EDGE)
            throw new IllegalArgumentException("frame size " + width + "x" + height + " outside 1 … " + VideoKey.MAX_EDGE + " per edge");
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
        try {
            return new VideoMetadata(index.frameCount(), (double) r.num() / r.den(), index.stream().width(), index.stream().height());
        } catch (IllegalArgumentException e) {
            throw new VideoPlanException(video, e.getMessage());
        }
    }
}
