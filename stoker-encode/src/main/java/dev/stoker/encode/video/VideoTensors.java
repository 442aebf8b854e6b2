package dev.stoker.encode.video;

/**
 * The video inputs of one sample, as the Hugging Face Qwen-VL processors return them: {@code pixel_values_videos}
 * (rows of all its videos in placeholder order, {@link #rowLength} floats each), {@code video_grid_thw} (t, h, w per
 * video), {@code second_per_grid_ts} (Qwen2.5-VL: one per video; empty otherwise), and the sampled frame indices of
 * all its videos concatenated ({@code frame_indices.npy}, what the vectors compare).
 */
public record VideoTensors(float[] pixelValuesVideos, int rowLength, long[] videoGridThw, float[] secondPerGridTs,
                           long[] frameIndices) {
    /** A sample without video. */
    public static VideoTensors none(int rowLength) {
        return new VideoTensors(new float[0], rowLength, new long[0], new float[0], new long[0]);
    }

    public int videos() { return videoGridThw.length / 3; }

    /** Rows of pixel_values_videos: Σ t·h·w. */
    public int rows() {
        long rows = 0;
        for (int i = 0; i < videoGridThw.length; i += 3) rows += videoGridThw[i] * videoGridThw[i + 1] * videoGridThw[i + 2];
        return Math.toIntExact(rows);
    }
}
