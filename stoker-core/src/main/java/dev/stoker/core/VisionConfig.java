package dev.stoker.core;

import java.util.Arrays;

/**
 * The image half of a Qwen-VL processor configuration (spec §2): patch geometry, normalization
 * constants and the pixel-count bounds that smart_resize enforces.
 *
 * @param patchSize          p: 14 (Qwen2/2.5-VL) or 16 (Qwen3-VL)
 * @param mergeSize          m: 2
 * @param temporalPatchSize  frames per temporal patch: 2 (a still image is duplicated)
 * @param mean               per-channel mean, as the double literals of the Hub config
 * @param std                per-channel std, as the double literals of the Hub config
 * @param minPixels          lower bound of resized area (pixels, not an edge length)
 * @param maxPixels          upper bound of resized area (pixels, not an edge length)
 */
public record VisionConfig(int patchSize, int mergeSize, int temporalPatchSize,
                           double[] mean, double[] std, long minPixels, long maxPixels) {

    public static final double[] CLIP_MEAN = {0.48145466, 0.4578275, 0.40821073};
    public static final double[] CLIP_STD = {0.26862954, 0.26130258, 0.27577711};
    public static final double[] HALF = {0.5, 0.5, 0.5};

    public VisionConfig {
        if (patchSize <= 0 || mergeSize <= 0 || temporalPatchSize <= 0)
            throw new IllegalArgumentException("patch, merge and temporal patch sizes must be positive");
        if (mean.length != 3 || std.length != 3) throw new IllegalArgumentException("mean and std need 3 channels");
        if (minPixels <= 0 || maxPixels < minPixels)
            throw new IllegalArgumentException("need 0 < min_pixels <= max_pixels, got " + minPixels + ", " + maxPixels);
        mean = mean.clone();
        std = std.clone();
    }

    /** smart_resize alignment: p·m (28 or 32). */
    public int factor() { return patchSize * mergeSize; }

    /** Length of one pixel_values row: 3·t·p·p (1176 or 1536). */
    public int rowLength() { return 3 * temporalPatchSize * patchSize * patchSize; }

    public VisionConfig withPixels(long min, long max) {
        return new VisionConfig(patchSize, mergeSize, temporalPatchSize, mean, std, min, max);
    }

    @Override public double[] mean() { return mean.clone(); }
    @Override public double[] std() { return std.clone(); }

    /** Equal when every field is, the arrays by their values (a record compares arrays by identity). */
    @Override
    public boolean equals(Object o) {
        return o instanceof VisionConfig v && v.patchSize == patchSize && v.mergeSize == mergeSize && v.temporalPatchSize == temporalPatchSize
                && Arrays.equals(v.mean, mean) && Arrays.equals(v.std, std) && v.minPixels == minPixels && v.maxPixels == maxPixels;
    }

    @Override
    public int hashCode() {
        return 31 * (31 * java.util.Objects.hash(patchSize, mergeSize, temporalPatchSize, minPixels, maxPixels) + Arrays.hashCode(mean))
                + Arrays.hashCode(std);
    }

    @Override
    public String toString() {
        return "VisionConfig[p=" + patchSize + ", m=" + mergeSize + ", t=" + temporalPatchSize
                + ", mean=" + Arrays.toString(mean) + ", std=" + Arrays.toString(std)
                + ", min_pixels=" + minPixels + ", max_pixels=" + maxPixels + "]";
    }
}
