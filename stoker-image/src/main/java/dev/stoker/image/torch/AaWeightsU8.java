package dev.stoker.image.torch;

import dev.stoker.image.resample.Taps;

/**
 * The int16 fixed-point weights of one axis ({@code inSize → outSize}) of aten's antialiased bicubic uint8 kernel:
 * {@code _compute_index_ranges_int16_weights} over {@code _compute_indices_min_size_weights_aa<double>}
 * (UpSampleKernel.cpp, torch 2.13.0), ported from {@code int16_weights} / {@code _aa_bounds_weights_f64} of
 * {@code shared/reference/ref_qwenvl_video.py}.
 *
 * <p>Output {@code o} reads {@code count[o]} inputs from {@code start[o]} with weights
 * {@code weights[o·kernelSize ..]}, each {@code round_half_away(w·2^precision)}; {@code precision} is the largest
 * p &lt; 22 with {@code (int)(0.5 + wmax·2^(p+1)) < 2^15}, so every weight fits an int16.
 *
 * <p>Threading: stateless.
 */
final class AaWeightsU8 {
    private static final double A = -0.5;

    private AaWeightsU8() {}

    /** aten's weights of {@code inSize → outSize}, the shift being their precision. */
    static Taps of(int inSize, int outSize) {
        if (inSize <= 0 || outSize <= 0) throw new IllegalArgumentException("sizes must be positive: " + inSize + " -> " + outSize);
        double scale = (double) inSize / outSize;
        double support = scale >= 1.0 ? 2.0 * scale : 2.0;
        int kernelSize = (int) Math.ceil(support) * 2 + 1;
        double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
        int[] start = new int[outSize];
        int[] count = new int[outSize];
        double[] w = new double[outSize * kernelSize];
        double wtMax = 0.0;
        for (int i = 0; i < outSize; i++) {
            double center = scale * (i + 0.5);
            int lo = Math.max((int) (center - support + 0.5), 0);
            int n = Math.min((int) (center + support + 0.5), inSize) - lo;
            n = Math.min(Math.max(n, 0), kernelSize);
            int base = i * kernelSize;
            double total = 0.0;
            for (int j = 0; j < n; j++) {
                double v = filter((j + lo - center + 0.5) * invscale);
                w[base + j] = v;
                total += v;
            }
            if (total != 0.0)
                for (int j = 0; j < n; j++) {
                    w[base + j] /= total;
                    wtMax = Math.max(wtMax, w[base + j]);
                }
            start[i] = lo;
            count[i] = n;
        }
        int prec = 0;
        while (prec < 22 && (int) (0.5 + wtMax * (1 << (prec + 1))) < (1 << 15)) prec++;
        int[] weights = new int[w.length];
        for (int k = 0; k < w.length; k++) {
            double v = w[k] * (1 << prec);
            weights[k] = v < 0 ? (int) (-0.5 + v) : (int) (0.5 + v);
        }
        return new Taps(inSize, outSize, kernelSize, start, count, weights, prec);
    }

    /** {@code HelperInterpCubic::aa_filter<double>}: Keys cubic, a = −0.5, in aten's polynomial forms. */
    static double filter(double x) {
        x = Math.abs(x);
        if (x < 1.0) return ((A + 2) * x - (A + 3)) * x * x + 1;
        if (x < 2.0) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
        return 0.0;
    }
}
