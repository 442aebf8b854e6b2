package dev.stoker.image.torch;

/**
 * The float32 weights of one axis of aten's antialiased bicubic float kernel
 * ({@code _compute_indices_min_size_weights_aa<float>}, torch 2.13.0), ported from {@code _aa_bounds_weights_f32}
 * and {@code _cubic_f32} of {@code shared/reference/ref_qwenvl_video.py}, with C++'s promotions spelled out:
 * {@code scale = (float)in/out}, {@code center = (float)(scale·(i+0.5))} in double, the argument
 * {@code (float)(((double)((float)(j+xmin) − center) + 0.5)·invscale)}, sums and the normalizing division in float,
 * and the filter polynomial fused or not per {@link CpuCapability}.
 *
 * <p>{@code fourLaneTaps[o]} = 4·⌊(count−1)/4⌋: taps 1 … that bound of output {@code o} were vectorized by GCC as an
 * in-order 4-lane reduction (rounded product, rounded add) even in the FMA builds; later taps are fused.
 *
 * <p>Threading: immutable after construction.
 */
final class AaWeightsF32 {
    final int inSize;
    final int outSize;
    final int kernelSize;
    final boolean fused;
    final int[] start;
    final int[] count;
    final int[] fourLaneTaps;
    final float[] weights;

    AaWeightsF32(int inSize, int outSize, boolean fused) {
        if (inSize <= 0 || outSize <= 0) throw new IllegalArgumentException("sizes must be positive: " + inSize + " -> " + outSize);
        this.inSize = inSize;
        this.outSize = outSize;
        this.fused = fused;
        float scale = (float) inSize / (float) outSize;
        float support = scale >= 1.0f ? (float) (2.0 * scale) : 2.0f;
        this.kernelSize = (int) Math.ceil(support) * 2 + 1;
        float invscale = scale >= 1.0f ? (float) (1.0 / scale) : 1.0f;
        this.start = new int[outSize];
        this.count = new int[outSize];
        this.fourLaneTaps = new int[outSize];
        this.weights = new float[outSize * kernelSize];
        for (int i = 0; i < outSize; i++) {
            float center = (float) (scale * (i + 0.5));
            int lo = Math.max((int) ((double) (center - support) + 0.5), 0);
            int n = Math.min((int) ((double) (center + support) + 0.5), inSize) - lo;
            n = Math.min(Math.max(n, 0), kernelSize);
            int base = i * kernelSize;
            float total = 0.0f;
            for (int j = 0; j < n; j++) {
                float arg = (float) (((double) ((float) (j + lo) - center) + 0.5) * invscale);
                float v = filter(arg, fused);
                weights[base + j] = v;
                total += v;
            }
            if (total != 0.0f)
                for (int j = 0; j < n; j++) weights[base + j] /= total;
            start[i] = lo;
            count[i] = n;
            fourLaneTaps[i] = Math.floorDiv(n - 1, 4) * 4;
        }
    }

    /** {@code aa_filter<float>} (Keys, a = −0.5), as compiled with ({@code fused}) or without FMA contraction. */
    static float filter(float x, boolean fused) {
        x = Math.abs(x);
        if (x < 1.0f) {
            if (fused) return Math.fma(Math.fma(1.5f, x, -2.5f) * x, x, 1.0f);
            return (1.5f * x - 2.5f) * x * x + 1.0f;
        }
        if (x < 2.0f) {
            if (fused) return Math.fma(Math.fma(Math.fma(-0.5f, x, 2.5f), x, -4.0f), x, 2.0f);
            return ((-0.5f * x + 2.5f) * x - 4.0f) * x + 2.0f;
        }
        return 0.0f;
    }
}
