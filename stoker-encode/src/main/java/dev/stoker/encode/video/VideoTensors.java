package dev.stoker.encode.video;

/**
 * The video inputs of one sample, as the Hugging Face Qwen-VL processors return them: {@code pixel_values_videos}
 * (rows of all its videos in placeholder order, {@link #rowLength} floats each), {@code video_grid_thw} (t, h, w per
 * video), {@code second_per_grid_ts} (Qwen2.5-VL: one per video; empty otherwise), and the sampled frame indices of
 * all its videos concatenated ({@code frame_indices.npy}, what the vectors compare).
 *
 * <p>In the compact wire format ({@code --pixel-format uint8}) the videos are carried as {@code pixelsU8} instead, each
 * video's kept frames resized (T·H·W·3 bytes, HWC, frame after frame: what the video processor normalizes and
 * patchifies), the videos in order, with {@code frameCounts} (T per video) so that the trainer can repeat a last frame
 * where T is not a multiple of the temporal patch size; {@code pixelValuesVideos} is then empty. Both are null in
 * FLOAT32.
 */
public record VideoTensors(float[] pixelValuesVideos, int rowLength, long[] videoGridThw, float[] secondPerGridTs,
                           long[] frameIndices, byte[] pixelsU8, long[] frameCounts) {
    public VideoTensors {
        if ((pixelsU8 == null) != (frameCounts == null))
            throw new IllegalArgumentException("compact video tensors need both the resized frames and their frame counts");
        if (frameCounts != null && (frameCounts.length != videoGridThw.length / 3 || pixelValuesVideos.length != 0))
            throw new IllegalArgumentException(frameCounts.length + " frame counts for " + videoGridThw.length / 3
                    + " videos, " + pixelValuesVideos.length + " floats beside the compact frames");
    }

    /** FLOAT32 video tensors. */
    public VideoTensors(float[] pixelValuesVideos, int rowLength, long[] videoGridThw, float[] secondPerGridTs, long[] frameIndices) {
        this(pixelValuesVideos, rowLength, videoGridThw, secondPerGridTs, frameIndices, null, null);
    }

    /** A sample without video. */
    public static VideoTensors none(int rowLength) {
        return new VideoTensors(new float[0], rowLength, new long[0], new float[0], new long[0]);
    }

    /** Whether the videos are carried as resized u8 frames (the compact wire format). */
    public boolean compact() { return pixelsU8 != null; }

    public int videos() { return videoGridThw.length / 3; }

    /** Rows of pixel_values_videos (in either format, what the trainer's conversion yields): Σ t·h·w. */
    public int rows() {
        long rows = 0;
        for (int i = 0; i < videoGridThw.length; i += 3) rows += videoGridThw[i] * videoGridThw[i + 1] * videoGridThw[i + 2];
        return Math.toIntExact(rows);
    }
}
