package dev.stoker.image.torch;

import java.util.Arrays;

/**
 * Resizes interleaved 8-bit RGB (HWC) bit-identically to torchvision's antialiased bicubic resize of a uint8 tensor
 * on CPU: {@code torchvision.transforms.v2.functional.resize(uint8, BICUBIC, antialias=True)} with torchvision ≥ 0.28,
 * which runs aten's native uint8 kernel (torch 2.13.0, {@code UpSampleKernel.cpp}). This is the resize of the
 * Hugging Face video processors and of the torchvision ("fast") Qwen2-VL image processor. Ported from
 * {@code resize_u8_torch} of {@code shared/reference/ref_qwenvl_video.py}; correction 1 of
 * {@code vectors/qwen-vl-video/README.md}.
 *
 * <p>Not Pillow ({@code qwenvl.BicubicResizer}): weights are computed in double and scaled to int16 with a
 * per-axis precision ({@link AaWeightsU8}), so results differ from Pillow's 22-bit weights by 1–2 levels.
 * Arithmetic: a horizontal pass (skipped when the width does not change) into a uint8 intermediate, then a vertical
 * pass (skipped when the height does not change); each output is
 * {@code clamp((2^(prec−1) + Σ w·x) >> prec, 0, 255)} with an int32 accumulator. The result does not depend on
 * the CPU capability.
 *
 * <p>Speed: the uint8 intermediate is never materialized. Vertical windows only move down, so horizontally resampled
 * rows are produced when an output row first needs them, into a ring of {@code kernelSize} int rows (the u8 values the
 * intermediate would hold), and each output row is {@code Σ_t w_t · ring[row_t]} swept over whole rows, a loop shape
 * C2 vectorizes (every array indexed by the loop variable alone). The horizontal pass is scalar. Weights are kept per
 * (inSize, outSize) in a small per-instance cache and the ring is reused, so a warm resize into the caller's buffer
 * allocates nothing.
 *
 * <p>Checked against the real torch 2.13.0+cpu / torchvision 0.28.0 at DEFAULT, AVX2 and AVX512
 * (tools/torch-resize-fixtures/README.md). Not reproduced: torch's failures at degenerate sizes (a 1×1 output raises
 * an internal assertion at AVX2/AVX512; at DEFAULT an output width of 1 with a height change repeats row 0), which
 * smart_resize never asks for (outputs are at least 28 px a side).
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class TorchBicubicU8Resizer {
    private static final int CACHE_SLOTS = 8;

    private final AaWeightsU8[] cache = new AaWeightsU8[CACHE_SLOTS];
    private int nextSlot;
    private int[][] ring = new int[0][];
    private int[] accumulator = new int[0];

    /**
     * Resizes HWC RGB {@code src} ({@code srcWidth × srcHeight}) into the first {@code dstWidth·dstHeight·3} bytes of
     * {@code dst}.
     *
     * @throws IllegalArgumentException when a size is not positive or a buffer is too small
     */
    public void resize(byte[] src, int srcWidth, int srcHeight, byte[] dst, int dstWidth, int dstHeight) {
        Geometry.check(src.length, srcWidth, srcHeight, dst.length, dstWidth, dstHeight);
        boolean horizontal = dstWidth != srcWidth;
        boolean vertical = dstHeight != srcHeight;
        if (!horizontal && !vertical) {
            System.arraycopy(src, 0, dst, 0, srcWidth * srcHeight * 3);
            return;
        }
        final int rowLength = dstWidth * 3;
        AaWeightsU8 hk = horizontal ? weights(srcWidth, dstWidth) : null;
        if (!vertical) {
            int[] row = ring(1, rowLength)[0];
            for (int y = 0; y < srcHeight; y++) {
                horizontalRow(src, y * srcWidth * 3, row, hk);
                for (int i = 0, d = y * rowLength; i < rowLength; i++) dst[d + i] = (byte) row[i];
            }
            return;
        }
        AaWeightsU8 vk = weights(srcHeight, dstHeight);
        final int ringSize = vk.kernelSize;
        final int[][] rows = ring(ringSize, rowLength);
        if (accumulator.length < rowLength) accumulator = new int[rowLength];
        final int[] acc = accumulator;
        final int prec = vk.precision;
        final int rounding = 1 << (prec - 1);
        int produced = 0;
        for (int y = 0; y < dstHeight; y++) {
            final int first = vk.start[y];
            final int n = vk.count[y];
            if (produced < first) produced = first;
            for (; produced < first + n; produced++) {
                int[] row = rows[produced % ringSize];
                if (hk != null) horizontalRow(src, produced * srcWidth * 3, row, hk);
                else for (int i = 0, s = produced * rowLength; i < rowLength; i++) row[i] = src[s + i] & 0xFF;
            }
            Arrays.fill(acc, 0, rowLength, rounding);
            final int wBase = y * vk.kernelSize;
            for (int t = 0; t < n; t++) addTap(acc, rows[(first + t) % ringSize], vk.weights[wBase + t], rowLength);
            for (int i = 0, d = y * rowLength; i < rowLength; i++) dst[d + i] = clampShift(acc[i], prec);
        }
    }

    AaWeightsU8 weights(int inSize, int outSize) {
        for (AaWeightsU8 c : cache)
            if (c != null && c.inSize == inSize && c.outSize == outSize) return c;
        AaWeightsU8 c = new AaWeightsU8(inSize, outSize);
        cache[nextSlot] = c;
        nextSlot = (nextSlot + 1) % CACHE_SLOTS;
        return c;
    }

    private int[][] ring(int count, int length) {
        if (ring.length < count) ring = Arrays.copyOf(ring, count);
        for (int i = 0; i < count; i++)
            if (ring[i] == null || ring[i].length < length) ring[i] = new int[length];
        return ring;
    }

    private static void addTap(int[] acc, int[] row, int w, int n) {
        for (int i = 0; i < n; i++) acc[i] += w * row[i];
    }

    /** One source row (from byte {@code rowStart}) resampled horizontally into {@code out}: u8 values as ints. */
    private static void horizontalRow(byte[] src, int rowStart, int[] out, AaWeightsU8 k) {
        final int kernelSize = k.kernelSize;
        final int prec = k.precision;
        final int rounding = 1 << (prec - 1);
        final int[] start = k.start;
        final int[] count = k.count;
        final int[] weights = k.weights;
        for (int x = 0, d = 0; x < k.outSize; x++, d += 3) {
            int s = rowStart + start[x] * 3;
            final int n = count[x];
            final int wBase = x * kernelSize;
            int r = rounding, g = rounding, b = rounding;
            for (int t = 0; t < n; t++, s += 3) {
                int w = weights[wBase + t];
                r += w * (src[s] & 0xFF);
                g += w * (src[s + 1] & 0xFF);
                b += w * (src[s + 2] & 0xFF);
            }
            out[d] = clampShift(r, prec) & 0xFF;
            out[d + 1] = clampShift(g, prec) & 0xFF;
            out[d + 2] = clampShift(b, prec) & 0xFF;
        }
    }

    private static byte clampShift(int acc, int prec) {
        return (byte) Math.min(Math.max(acc >> prec, 0), 255);
    }
}
