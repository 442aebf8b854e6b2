package dev.stoker.image.torch;

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
 * <p>Weights are kept per (inSize, outSize) in a small per-instance cache and the intermediate is a reused
 * buffer, so a warm resize into the caller's buffer allocates nothing.
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
    private byte[] intermediate = new byte[0];
    private int[] rowAccumulator = new int[0];

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
        if (!vertical) {
            horizontal(src, srcWidth, srcHeight, dst, weights(srcWidth, dstWidth));
            return;
        }
        byte[] rows = src;
        if (horizontal) {
            int needed = dstWidth * srcHeight * 3;
            if (intermediate.length < needed) intermediate = new byte[needed];
            horizontal(src, srcWidth, srcHeight, intermediate, weights(srcWidth, dstWidth));
            rows = intermediate;
        }
        vertical(rows, dstWidth, dst, weights(srcHeight, dstHeight));
    }

    AaWeightsU8 weights(int inSize, int outSize) {
        for (AaWeightsU8 c : cache)
            if (c != null && c.inSize == inSize && c.outSize == outSize) return c;
        AaWeightsU8 c = new AaWeightsU8(inSize, outSize);
        cache[nextSlot] = c;
        nextSlot = (nextSlot + 1) % CACHE_SLOTS;
        return c;
    }

    private static void horizontal(byte[] src, int srcWidth, int height, byte[] dst, AaWeightsU8 k) {
        final int outWidth = k.outSize;
        final int kernelSize = k.kernelSize;
        final int prec = k.precision;
        final int rounding = 1 << (prec - 1);
        final int[] start = k.start;
        final int[] count = k.count;
        final int[] weights = k.weights;
        int d = 0;
        for (int y = 0; y < height; y++) {
            final int rowStart = y * srcWidth * 3;
            for (int x = 0; x < outWidth; x++) {
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
                dst[d] = clampShift(r, prec);
                dst[d + 1] = clampShift(g, prec);
                dst[d + 2] = clampShift(b, prec);
                d += 3;
            }
        }
    }

    private void vertical(byte[] src, int width, byte[] dst, AaWeightsU8 k) {
        final int rowLength = width * 3;
        if (rowAccumulator.length < rowLength) rowAccumulator = new int[rowLength];
        final int[] acc = rowAccumulator;
        final int kernelSize = k.kernelSize;
        final int prec = k.precision;
        final int rounding = 1 << (prec - 1);
        for (int y = 0; y < k.outSize; y++) {
            final int n = k.count[y];
            final int wBase = y * kernelSize;
            java.util.Arrays.fill(acc, 0, rowLength, rounding);
            for (int t = 0; t < n; t++) {
                final int w = k.weights[wBase + t];
                final int s = (k.start[y] + t) * rowLength;
                for (int i = 0; i < rowLength; i++) acc[i] += w * (src[s + i] & 0xFF);
            }
            final int d = y * rowLength;
            for (int i = 0; i < rowLength; i++) dst[d + i] = clampShift(acc[i], prec);
        }
    }

    private static byte clampShift(int acc, int prec) {
        return (byte) Math.min(Math.max(acc >> prec, 0), 255);
    }
}
