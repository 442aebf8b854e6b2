package dev.stoker.image.qwenvl;

import dev.stoker.image.resample.Taps;

/**
 * The fixed-point bicubic weights of one resampling axis ({@code inSize → outSize}), computed exactly as
 * Pillow's {@code precompute_coeffs} + {@code normalize_coeffs_8bpc} do (spec §5).
 *
 * <p>Output sample {@code o} reads {@code count[o]} consecutive input samples starting at {@code start[o]}
 * with weights {@code weights[o*kernelSize .. o*kernelSize + count[o])}, each scaled by 2^22.
 *
 * <p>Threading: stateless.
 */
final class ResampleCoefficients {
    static final int PRECISION_BITS = 32 - 8 - 2;
    private static final double BICUBIC_A = -0.5;
    private static final double BICUBIC_SUPPORT = 2.0;

    private ResampleCoefficients() {}

    /** Pillow's weights of {@code inSize → outSize}. */
    static Taps of(int inSize, int outSize) {
        if (inSize <= 0 || outSize <= 0) throw new IllegalArgumentException("sizes must be positive: " + inSize + " -> " + outSize);
        double scale = (double) inSize / outSize;
        double filterScale = Math.max(scale, 1.0);
        double support = BICUBIC_SUPPORT * filterScale;
        int kernelSize = (int) Math.ceil(support) * 2 + 1;
        int[] start = new int[outSize];
        int[] count = new int[outSize];
        int[] weights = new int[outSize * kernelSize];
        double[] w = new double[kernelSize];
        double ss = 1.0 / filterScale;
        for (int xx = 0; xx < outSize; xx++) {
            double center = (xx + 0.5) * scale;
            int xmin = (int) (center - support + 0.5);
            if (xmin < 0) xmin = 0;
            int xmax = (int) (center + support + 0.5);
            if (xmax > inSize) xmax = inSize;
            int n = xmax - xmin;
            double ww = 0.0;
            for (int x = 0; x < n; x++) {
                w[x] = filter((x + xmin - center + 0.5) * ss);
                ww += w[x];
            }
            int base = xx * kernelSize;
            for (int x = 0; x < n; x++) {
                double k = ww != 0.0 ? w[x] / ww : w[x];
                weights[base + x] = k < 0 ? (int) (-0.5 + k * (1 << PRECISION_BITS)) : (int) (0.5 + k * (1 << PRECISION_BITS));
            }
            start[xx] = xmin;
            count[xx] = n;
        }
        return new Taps(inSize, outSize, kernelSize, start, count, weights, PRECISION_BITS);
    }

    /** Keys cubic convolution kernel with a = −0.5, in Pillow's operation order. */
    static double filter(double x) {
        if (x < 0.0) x = -x;
        if (x < 1.0) return ((BICUBIC_A + 2.0) * x - (BICUBIC_A + 3.0)) * x * x + 1;
        if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * BICUBIC_A;
        return 0.0;
    }
}
