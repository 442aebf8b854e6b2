package dev.stoker.image.qwenvl;

import dev.stoker.core.VisionConfig;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The reference decoder of the compact wire format: turns a batch's {@code pixel_values_u8} (each image's
 * resized u8 RGB pixels, HWC, concatenated in image order) and its {@code image_grid_thw} into exactly the
 * float32 {@code pixel_values} the float32 format carries, through {@link PatchWriter}'s own table and
 * patch order. For Java trainers and tests; the Python client has the same function in torch
 * ({@code stoker.pixels.to_pixel_values}).
 *
 * <p>Image k of grid {@code (t, gh, gw)} takes {@code (gh·p)·(gw·p)·3} bytes (t = 1 for an image);
 * its rows follow the rows of the images before it. Videos ({@link #toPixelValuesVideos}) likewise from
 * {@code pixel_values_videos_u8}, each with its frame count, through {@link VideoPatchWriter}.
 */
public final class CompactPixels {
    private CompactPixels() {}

    /**
     * The vision settings a batch's {@code pixel_norm} (float32 (2, 3): mean, std as the service used
     * them) and {@code pixel_patch} (int64 (3,): patch size, temporal patch size, merge size) describe;
     * the pixel bounds are irrelevant to the conversion and set to the widest.
     */
    public static VisionConfig config(float[] norm, long[] patch) {
        if (norm.length != 6 || patch.length != 3)
            throw new IllegalArgumentException("pixel_norm needs 6 floats and pixel_patch 3 integers, got " + norm.length + " and " + patch.length);
        double[] mean = {norm[0], norm[1], norm[2]};
        double[] std = {norm[3], norm[4], norm[5]};
        return new VisionConfig(Math.toIntExact(patch[0]), Math.toIntExact(patch[2]), Math.toIntExact(patch[1]), mean, std, 1, Long.MAX_VALUE);
    }

    /** The {@code pixel_norm} tensor of {@code cfg}: mean then std, each as the float32 the normalization table uses. */
    public static float[] norm(VisionConfig cfg) {
        double[] m = cfg.mean(), s = cfg.std();
        return new float[] {(float) m[0], (float) m[1], (float) m[2], (float) s[0], (float) s[1], (float) s[2]};
    }

    /** The {@code pixel_patch} tensor of {@code cfg}: patch size, temporal patch size, merge size. */
    public static long[] patch(VisionConfig cfg) {
        return new long[] {cfg.patchSize(), cfg.temporalPatchSize(), cfg.mergeSize()};
    }

    /** Bytes of {@code pixel_values_u8} for these grids: Σ (gh·p)·(gw·p)·3. */
    public static long byteSize(long[] gridThw, VisionConfig cfg) {
        checkGrid(gridThw);
        long p = cfg.patchSize(), bytes = 0;
        for (int i = 0; i < gridThw.length; i += 3) bytes += gridThw[i] * gridThw[i + 1] * p * gridThw[i + 2] * p * 3;
        return bytes;
    }

    /** The float32 {@code pixel_values}, (Σ t·gh·gw) × rowLength, of the u8 pixels {@code u8} with grids {@code gridThw}. */
    public static float[] toPixelValues(MemorySegment u8, long[] gridThw, VisionConfig cfg) {
        checkGrid(gridThw);
        long expected = byteSize(gridThw, cfg);
        if (u8.byteSize() != expected)
            throw new IllegalArgumentException("pixel_values_u8 has " + u8.byteSize() + " bytes, the grids need " + expected);
        var writer = new PatchWriter(cfg);
        long rows = 0;
        for (int i = 0; i < gridThw.length; i += 3) rows += gridThw[i] * gridThw[i + 1] * gridThw[i + 2];
        float[] out = new float[Math.toIntExact(rows * writer.rowLength())];
        int p = cfg.patchSize(), offset = 0;
        long at = 0;
        byte[] rgb = new byte[0];
        for (int i = 0; i < gridThw.length; i += 3) {
            if (gridThw[i] != 1) throw new IllegalArgumentException("image " + i / 3 + " has t = " + gridThw[i] + "; images have t = 1");
            int h = Math.toIntExact(gridThw[i + 1] * p), w = Math.toIntExact(gridThw[i + 2] * p);
            int n = w * h * 3;
            if (rgb.length < n) rgb = new byte[n];
            MemorySegment.copy(u8, ValueLayout.JAVA_BYTE, at, rgb, 0, n);
            writer.write(rgb, w, h, out, offset);
            at += n;
            offset += writer.rows(w, h) * writer.rowLength();
        }
        return out;
    }

    /**
     * Bytes of {@code pixel_values_videos_u8} for these video grids and frame counts: Σ T·(gh·p)·(gw·p)·3; each T must
     * make its grid's t, ceil(T / temporal patch size).
     */
    public static long videoByteSize(long[] gridThw, long[] frameCounts, VisionConfig cfg) {
        checkGrid(gridThw);
        if (frameCounts.length != gridThw.length / 3)
            throw new IllegalArgumentException(frameCounts.length + " video_frame_counts for " + gridThw.length / 3 + " videos");
        long p = cfg.patchSize(), tps = cfg.temporalPatchSize(), bytes = 0;
        for (int k = 0; k < frameCounts.length; k++) {
            long t = gridThw[3 * k], frames = frameCounts[k];
            if (frames < 1 || (frames + tps - 1) / tps != t)
                throw new IllegalArgumentException("video " + k + " has " + frames + " frames, its grid t = " + t + " needs "
                        + ((t - 1) * tps + 1) + " to " + t * tps);
            bytes = Math.addExact(bytes, Math.multiplyExact(frames * gridThw[3 * k + 1] * p * gridThw[3 * k + 2] * p, 3));
        }
        return bytes;
    }

    /**
     * The float32 {@code pixel_values_videos}, (Σ t·gh·gw) × rowLength, of the compact format's video frames {@code u8}
     * ({@code pixel_values_videos_u8}: each video's {@code frameCounts[k]} resized frames, HWC, in video order) with grids
     * {@code gridThw}: through {@link VideoPatchWriter}, the very writer of the float32 format (the video processors'
     * fused normalize, the last frame repeated up to a multiple of the temporal patch size), so bit for bit its rows.
     */
    public static float[] toPixelValuesVideos(MemorySegment u8, long[] gridThw, long[] frameCounts, VisionConfig cfg) {
        long expected = videoByteSize(gridThw, frameCounts, cfg);
        if (u8.byteSize() != expected)
            throw new IllegalArgumentException("pixel_values_videos_u8 has " + u8.byteSize() + " bytes, the grids and frame counts need " + expected);
        var writer = new VideoPatchWriter(cfg);
        long rows = 0;
        for (int i = 0; i < gridThw.length; i += 3) rows += gridThw[i] * gridThw[i + 1] * gridThw[i + 2];
        float[] out = new float[Math.toIntExact(rows * writer.rowLength())];
        int p = cfg.patchSize(), offset = 0;
        long at = 0;
        for (int k = 0; k < frameCounts.length; k++) {
            int frames = Math.toIntExact(frameCounts[k]);
            int h = Math.toIntExact(gridThw[3 * k + 1] * p), w = Math.toIntExact(gridThw[3 * k + 2] * p);
            int n = Math.multiplyExact(frames, w * h * 3);
            byte[] clip = new byte[n];
            MemorySegment.copy(u8, ValueLayout.JAVA_BYTE, at, clip, 0, n);
            writer.write(clip, frames, w, h, out, offset);
            at += n;
            offset += writer.rows(frames, w, h) * writer.rowLength();
        }
        return out;
    }

    private static void checkGrid(long[] gridThw) {
        if (gridThw.length % 3 != 0) throw new IllegalArgumentException("image_grid_thw of " + gridThw.length + " values is not (n, 3)");
    }
}
