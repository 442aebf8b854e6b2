package dev.stoker.video.sample;

import dev.stoker.core.ProcessorPreset;
import java.util.Arrays;
import java.util.List;

/**
 * Everything about one video's model inputs that is known before decoding: which frames are kept, the size they are
 * resized to, the grid and token count, and the numbers the text and positions need (Qwen2.5-VL's
 * {@code second_per_grid_t}, Qwen3-VL's per-group timestamps). Made by {@link VideoPlanner#plan}.
 *
 * @param video           the video's name, as given to the planner
 * @param family          the model family
 * @param sampler         the sampling rules
 * @param frameHeight     the height of the frames the processor's resize receives: the stored height, or for
 *                        {@code llamafactory} the height after its Pillow pre-resize
 * @param frameWidth      the width, likewise
 * @param frameIndices    the frames to decode, by their number in decode order (int64 in {@code frame_indices.npy});
 *                        qwen-vl-utils' are absolute (a trimmed range starts past 0); llamafactory's are those of its
 *                        picks that the video has (its timestamps and fps still count all it picked)
 * @param resizedHeight   the height every kept frame is resized to
 * @param resizedWidth    the width
 * @param gridT           temporal patches: kept frames / 2, an odd count padded with the last frame
 * @param gridH           patch rows: resizedHeight / patch size
 * @param gridW           patch columns: resizedWidth / patch size
 * @param sampledFps      kept frames per second of the range sampled ({@code len / total · fps})
 * @param secondPerGridT  Qwen2.5-VL's {@code second_per_grid_ts} entry (float32, as the processor returns it); NaN for
 *                        the other families
 * @param timestamps      Qwen3-VL: the time of each temporal group (mean of its two frames' {@code index / fps}); empty
 *                        for the other families
 * @param timestampTexts  Qwen3-VL: each group's {@code <t seconds>} text, {@code .1f} rounded half-even; empty otherwise
 */
public record VideoPlan(String video, ProcessorPreset family, VideoSampler sampler, int frameHeight, int frameWidth, long[] frameIndices, int resizedHeight,
                        int resizedWidth, int gridT, int gridH, int gridW, double sampledFps, float secondPerGridT,
                        double[] timestamps, List<String> timestampTexts) {
    public VideoPlan {
        frameIndices = frameIndices.clone();
        timestamps = timestamps.clone();
        timestampTexts = List.copyOf(timestampTexts);
    }

    @Override
    public long[] frameIndices() { return frameIndices.clone(); }

    @Override
    public double[] timestamps() { return timestamps.clone(); }

    /** Frames decoded and kept (before the odd-count padding). */
    public int frameCount() { return frameIndices.length; }

    /** Rows of {@code pixel_values_videos}: t·h·w patches. */
    public long patches() { return (long) gridT * gridH * gridW; }

    /** {@code <|video_pad|>} tokens: t·h·w / merge² (merge 2). */
    public long tokens() { return patches() / 4; }

    /** The grid as {@code video_grid_thw} holds it. */
    public long[] gridThw() { return new long[] {gridT, gridH, gridW}; }

    @Override
    public boolean equals(Object o) {
        return o instanceof VideoPlan p && video.equals(p.video) && family == p.family && sampler == p.sampler
                && frameHeight == p.frameHeight && frameWidth == p.frameWidth && Arrays.equals(frameIndices, p.frameIndices) && resizedHeight == p.resizedHeight && resizedWidth == p.resizedWidth
                && gridT == p.gridT && gridH == p.gridH && gridW == p.gridW && Double.compare(sampledFps, p.sampledFps) == 0
                && Float.compare(secondPerGridT, p.secondPerGridT) == 0 && Arrays.equals(timestamps, p.timestamps)
                && timestampTexts.equals(p.timestampTexts);
    }

    @Override
    public int hashCode() { return video.hashCode() * 31 + Arrays.hashCode(frameIndices); }

    @Override
    public String toString() {
        return "VideoPlan[" + video + " " + family + " " + sampler + ", " + frameIndices.length + " frames, " + resizedHeight + "x"
                + resizedWidth + ", grid " + gridT + "x" + gridH + "x" + gridW + ", " + tokens() + " tokens]";
    }
}
