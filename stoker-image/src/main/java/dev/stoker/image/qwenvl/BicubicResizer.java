package dev.stoker.image.qwenvl;

import dev.stoker.image.RgbImage;
import java.util.Arrays;

/**
 * Resizes 8-bit RGB images bit-identically to Pillow's {@code Image.resize(size, BICUBIC)} (antialiased
 * Keys cubic, a = −0.5, 22-bit fixed point; spec §5).
 *
 * <p>Arithmetic, as in Pillow's {@code Resample.c}: a horizontal pass whose results are rounded and
 * clamped to u8, then a vertical pass over those u8 rows; an axis whose size does not change is skipped,
 * and if neither changes the pixels are copied. Each output value is
 * {@code clamp((2^21 + Σ weight·sample) >> 22, 0, 255)} in 32-bit int arithmetic. Int addition wraps and
 * is therefore associative, so the sum may be formed in any order and grouping and stays bit-identical;
 * the three speed-ups below rely on that.
 *
 * <p>Design, for speed on one core:
 * <ul>
 *   <li><b>Streaming.</b> The u8 intermediate is never materialized. Vertical windows only move down,
 *       so each horizontally resampled row is produced once, when the first output row needs it, into a
 *       ring of {@code kernelSize} int rows (values 0..255, as Pillow's u8 intermediate) that stays in L2.</li>
 *   <li><b>Vertical pass row-wise.</b> An output row is {@code Σ_t w_t · ring[row_t]} over whole rows, two
 *       taps per sweep, on separate int arrays indexed by the loop variable alone: the shape C2
 *       auto-vectorizes (it does not for byte sources or offset indices).</li>
 *   <li><b>Horizontal pass two channels per multiply.</b> A source row is unpacked once into
 *       {@code r + (b << 32)} longs and g ints; one 64-bit multiply-add then serves red and blue
 *       ({@code R + B·2^32} is exact in a long since |R|, |B| &lt; 2^31; R is the low word). Every output
 *       pixel runs exactly {@code kernelSize} taps: weights past a window's end are zero and the unpacked
 *       row is zero-padded. The tap count is then the kernel size, which the common sizes (5 to 13, scale
 *       up to 3) pass as a constant so that C2 unrolls the tap loop completely.</li>
 * </ul>
 * Weights are computed once per (inSize, outSize) and kept in a small per-instance cache; all scratch is
 * reused, so a warm resize into a caller's buffer allocates nothing.
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class BicubicResizer {
    private static final int ROUNDING = 1 << (ResampleCoefficients.PRECISION_BITS - 1);
    private static final long ROUNDING_RED_BLUE = ROUNDING + ((long) ROUNDING << 32);
    private static final int SHIFT = ResampleCoefficients.PRECISION_BITS;
    private static final int CACHE_SLOTS = 8;

    private final ResampleCoefficients[] cache = new ResampleCoefficients[CACHE_SLOTS];
    private int nextSlot;
    private int[][] ring = new int[0][];
    private int[] accumulatorRow = new int[0];
    private long[] packedRedBlue = new long[0];
    private int[] green = new int[0];

    /** Returns a new image of {@code outWidth × outHeight}. */
    public RgbImage resize(RgbImage src, int outWidth, int outHeight) {
        byte[] out = new byte[Math.multiplyExact(Math.multiplyExact(outWidth, outHeight), 3)];
        resize(src.data(), src.width(), src.height(), out, outWidth, outHeight);
        return new RgbImage(outWidth, outHeight, out);
    }

    /**
     * Resizes HWC RGB {@code src} ({@code srcWidth × srcHeight}) into the first
     * {@code dstWidth·dstHeight·3} bytes of {@code dst}.
     */
    public void resize(byte[] src, int srcWidth, int srcHeight, byte[] dst, int dstWidth, int dstHeight) {
        if (srcWidth <= 0 || srcHeight <= 0 || dstWidth <= 0 || dstHeight <= 0)
            throw new IllegalArgumentException("sizes must be positive: " + srcWidth + "x" + srcHeight + " -> " + dstWidth + "x" + dstHeight);
        if (src.length < (long) srcWidth * srcHeight * 3) throw new IllegalArgumentException("source buffer too small");
        if (dst.length < (long) dstWidth * dstHeight * 3) throw new IllegalArgumentException("destination buffer too small");
        boolean horizontal = dstWidth != srcWidth;
        boolean vertical = dstHeight != srcHeight;
        if (!horizontal && !vertical) {
            System.arraycopy(src, 0, dst, 0, srcWidth * srcHeight * 3);
            return;
        }
        ResampleCoefficients hk = horizontal ? coefficients(srcWidth, dstWidth) : null;
        int rowBytes = dstWidth * 3;
        if (!vertical) {
            int[] row = ensureRing(1, rowBytes)[0];
            for (int y = 0; y < srcHeight; y++) {
                horizontalRow(src, y * srcWidth * 3, srcWidth, hk, row);
                narrow(row, dst, y * rowBytes, rowBytes);
            }
            return;
        }
        ResampleCoefficients vk = coefficients(srcHeight, dstHeight);
        int[][] rows = ensureRing(vk.kernelSize, rowBytes);
        int ringSize = vk.kernelSize;
        if (accumulatorRow.length < rowBytes) accumulatorRow = new int[rowBytes];
        int[] acc = accumulatorRow;
        int[] weights = vk.weights;
        int produced = 0;
        for (int yy = 0; yy < dstHeight; yy++) {
            int first = vk.start[yy];
            int n = vk.count[yy];
            if (produced < first) produced = first;
            for (; produced < first + n; produced++) {
                int[] row = rows[produced % ringSize];
                if (hk != null) horizontalRow(src, produced * srcWidth * 3, srcWidth, hk, row);
                else widen(src, produced * rowBytes, row, rowBytes);
            }
            int wBase = yy * vk.kernelSize;
            int t;
            if (n >= 2) {
                sumTwo(acc, rows[first % ringSize], weights[wBase], rows[(first + 1) % ringSize], weights[wBase + 1], rowBytes);
                t = 2;
            } else {
                sumOne(acc, rows[first % ringSize], weights[wBase], rowBytes);
                t = 1;
            }
            for (; t + 1 < n; t += 2)
                addTwo(acc, rows[(first + t) % ringSize], weights[wBase + t], rows[(first + t + 1) % ringSize], weights[wBase + t + 1], rowBytes);
            if (t < n) addOne(acc, rows[(first + t) % ringSize], weights[wBase + t], rowBytes);
            clipTo(acc, dst, yy * rowBytes, rowBytes);
        }
    }

    ResampleCoefficients coefficients(int inSize, int outSize) {
        for (ResampleCoefficients c : cache)
            if (c != null && c.inSize == inSize && c.outSize == outSize) return c;
        ResampleCoefficients c = new ResampleCoefficients(inSize, outSize);
        cache[nextSlot] = c;
        nextSlot = (nextSlot + 1) % CACHE_SLOTS;
        return c;
    }

    private int[][] ensureRing(int count, int length) {
        if (ring.length < count) ring = Arrays.copyOf(ring, count);
        for (int i = 0; i < count; i++)
            if (ring[i] == null || ring[i].length < length) ring[i] = new int[length];
        return ring;
    }

    /** Horizontally resamples the source row at byte {@code rowBase} into {@code out} (u8 values as ints). */
    private void horizontalRow(byte[] src, int rowBase, int srcWidth, ResampleCoefficients k, int[] out) {
        final int kernelSize = k.kernelSize;
        final int padded = srcWidth + kernelSize;
        if (packedRedBlue.length < padded) {
            packedRedBlue = new long[padded];
            green = new int[padded];
        }
        final long[] rb = packedRedBlue;
        final int[] gs = green;
        for (int x = 0; x < srcWidth; x++) {
            int s = rowBase + 3 * x;
            rb[x] = (src[s] & 0xFF) | ((long) (src[s + 2] & 0xFF) << 32);
            gs[x] = src[s + 1] & 0xFF;
        }
        for (int x = srcWidth; x < padded; x++) {
            rb[x] = 0;
            gs[x] = 0;
        }
        switch (kernelSize) {
            case 5 -> resampleRow5(rb, gs, k.start, k.weights, k.outSize, out);
            case 7 -> resampleRow7(rb, gs, k.start, k.weights, k.outSize, out);
            case 9 -> resampleRow9(rb, gs, k.start, k.weights, k.outSize, out);
            case 11 -> resampleRow11(rb, gs, k.start, k.weights, k.outSize, out);
            case 13 -> resampleRow13(rb, gs, k.start, k.weights, k.outSize, out);
            default -> resampleRow(rb, gs, k.start, k.weights, k.outSize, kernelSize, out);
        }
    }

    // The tap loop, once per common kernel size (scale <= 1, 1.5, 2, 2.5, 3) with the size as a literal,
    // then for any size. Literal bounds let C2 unroll the taps completely (about 25% faster); a shared
    // helper taking the size as an argument loses that as soon as C2 declines to inline it, which it
    // does once the helper is compiled on its own ("already compiled into a medium method").
    private static void resampleRow5(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * 5;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < 5; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void resampleRow7(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * 7;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < 7; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void resampleRow9(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * 9;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < 9; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void resampleRow11(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * 11;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < 11; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void resampleRow13(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * 13;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < 13; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void resampleRow(long[] rb, int[] gs, int[] start, int[] weights, int outWidth, int kernelSize, int[] out) {
        for (int xx = 0, d = 0; xx < outWidth; xx++, d += 3) {
            final int x0 = start[xx];
            final int wBase = xx * kernelSize;
            long accRb = ROUNDING_RED_BLUE;
            int accG = ROUNDING;
            for (int t = 0; t < kernelSize; t++) {
                int w = weights[wBase + t];
                accRb += w * rb[x0 + t];
                accG += w * gs[x0 + t];
            }
            int r = (int) accRb;
            out[d] = clip(r);
            out[d + 1] = clip(accG);
            out[d + 2] = clip((int) ((accRb - r) >> 32));
        }
    }

    private static void widen(byte[] src, int from, int[] out, int length) {
        for (int i = 0; i < length; i++) out[i] = src[from + i] & 0xFF;
    }

    private static void narrow(int[] row, byte[] dst, int from, int length) {
        for (int i = 0; i < length; i++) dst[from + i] = (byte) row[i];
    }

    private static void sumOne(int[] acc, int[] a, int wa, int length) {
        for (int i = 0; i < length; i++) acc[i] = ROUNDING + wa * a[i];
    }

    private static void sumTwo(int[] acc, int[] a, int wa, int[] b, int wb, int length) {
        for (int i = 0; i < length; i++) acc[i] = ROUNDING + wa * a[i] + wb * b[i];
    }

    private static void addOne(int[] acc, int[] a, int wa, int length) {
        for (int i = 0; i < length; i++) acc[i] += wa * a[i];
    }

    private static void addTwo(int[] acc, int[] a, int wa, int[] b, int wb, int length) {
        for (int i = 0; i < length; i++) acc[i] += wa * a[i] + wb * b[i];
    }

    private static void clipTo(int[] acc, byte[] dst, int from, int length) {
        for (int i = 0; i < length; i++) dst[from + i] = (byte) clip(acc[i]);
    }

    private static int clip(int sum) {
        int v = sum >> SHIFT;
        return v < 0 ? 0 : Math.min(v, 255);
    }
}
