package dev.stoker.image.torch;

import dev.stoker.image.vector.VectorResample;
import dev.stoker.image.vector.VectorSupport;
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
 * <p>Speed (the shape of {@code qwenvl.BicubicResizer}'s design): the uint8 intermediate is never materialized.
 * Vertical windows only move down, so horizontally resampled rows are produced, {@value #STRIP_ROWS} at a time, when an
 * output row first needs them, into a ring of {@code kernelSize + STRIP_ROWS} int rows (the u8 values the intermediate
 * would hold), and each output row is {@code Σ_t w_t · ring[row_t]} swept over whole rows, a loop shape C2
 * vectorizes (every array indexed by the loop variable alone). The horizontal pass works on strips transposed into
 * columns, for the same reason. Integer sums are exact, so neither changes a result. Weights are kept per
 * (inSize, outSize) in a small per-instance cache and the ring is reused, so a warm resize into the caller's buffer
 * allocates nothing. Where the JVM has the Vector API ({@link VectorSupport}) the tap sums are
 * {@link VectorResample#planarTaps}, which keeps each window's sum in a register over all its taps; same integers.
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
    /** Source rows per horizontal strip (a multiple of the widest int vector). */
    static final int STRIP_ROWS = VectorSupport.STRIP_ROWS;
    private static final int STRIP_VALUES = 3 * STRIP_ROWS;

    private int[][] ring = new int[0][];
    private int[] accumulator = new int[0];
    /** {@code columns[x]}: source column x of the current strip, channel-major: {@code [c·STRIP_ROWS + r]}. */
    private int[][] columns = new int[0][];
    private final int[] stripAccumulator = new int[STRIP_VALUES];
    private final int[][] stripRows = new int[STRIP_ROWS][];
    private final boolean vector;
    private int[][] tapRows = new int[0][];

    /** A resizer that sums taps with the Vector API where this JVM has it. */
    public TorchBicubicU8Resizer() {
        this(VectorSupport.available());
    }

    /** {@code vector}: sum taps with {@link VectorResample} (the JVM must have the Vector API), else with scalar sweeps. */
    TorchBicubicU8Resizer(boolean vector) {
        if (vector && !VectorSupport.available()) throw new IllegalStateException("this JVM has no jdk.incubator.vector module");
        this.vector = vector;
    }

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
            int[][] rows = ring(STRIP_ROWS, rowLength);
            for (int y0 = 0; y0 < srcHeight; y0 += STRIP_ROWS) {
                int n = Math.min(STRIP_ROWS, srcHeight - y0);
                horizontalStrip(src, srcWidth, y0, n, hk, rows, 0, STRIP_ROWS);
                for (int r = 0; r < n; r++)
                    for (int i = 0, d = (y0 + r) * rowLength; i < rowLength; i++) dst[d + i] = (byte) rows[r][i];
            }
            return;
        }
        AaWeightsU8 vk = weights(srcHeight, dstHeight);
        final int ringSize = hk != null ? vk.kernelSize + STRIP_ROWS : vk.kernelSize;
        final int[][] rows = ring(ringSize, rowLength);
        if (accumulator.length < VectorSupport.padded(rowLength)) accumulator = new int[VectorSupport.padded(rowLength)];
        if (tapRows.length < vk.kernelSize) tapRows = new int[vk.kernelSize][];
        final int[] acc = accumulator;
        final int prec = vk.precision;
        final int rounding = 1 << (prec - 1);
        int produced = 0;
        for (int y = 0; y < dstHeight; y++) {
            final int first = vk.start[y];
            final int n = vk.count[y];
            if (produced < first) produced = first;
            if (hk != null) {
                while (produced < first + n) {
                    int strip = Math.min(STRIP_ROWS, srcHeight - produced);
                    horizontalStrip(src, srcWidth, produced, strip, hk, rows, produced, ringSize);
                    produced += strip;
                }
            } else {
                for (; produced < first + n; produced++) {
                    int[] row = rows[produced % ringSize];
                    for (int i = 0, s = produced * rowLength; i < rowLength; i++) row[i] = src[s + i] & 0xFF;
                }
            }
            final int wBase = y * vk.kernelSize;
            if (vector) {
                for (int t = 0; t < n; t++) tapRows[t] = rows[(first + t) % ringSize];
                VectorResample.planarTaps(tapRows, 0, n, vk.weights, wBase, prec, acc, rowLength);
                for (int i = 0, d = y * rowLength; i < rowLength; i++) dst[d + i] = (byte) acc[i];
                continue;
            }
            Arrays.fill(acc, 0, rowLength, rounding);
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

    private int[][] ring(int count, int rowLength) {
        int length = VectorSupport.padded(rowLength);
        if (ring.length < count) ring = Arrays.copyOf(ring, count);
        for (int i = 0; i < count; i++)
            if (ring[i] == null || ring[i].length < length) ring[i] = new int[length];
        return ring;
    }

    private static void addTap(int[] acc, int[] row, int w, int n) {
        for (int i = 0; i < n; i++) acc[i] += w * row[i];
    }

    /**
     * Source rows {@code y0 .. y0+n} ({@code n ≤ STRIP_ROWS}) resampled horizontally into the rows
     * {@code ring[(ringFirst + r) % ringSize]} (u8 values as ints). The strip is first transposed into one array per
     * source column, so that output pixel x of all the strip's rows is {@code Σ_t w_t · columns[start_x + t]}: a sweep
     * C2 vectorizes, where a row-wise pass would be a scalar gather. A window never leaves the row, so the sums are
     * those of the row-wise definition.
     */
    private void horizontalStrip(byte[] src, int srcWidth, int y0, int n, AaWeightsU8 k, int[][] ring, int ringFirst, int ringSize) {
        if (columns.length < srcWidth) {
            int[][] grown = Arrays.copyOf(columns, srcWidth);
            for (int x = columns.length; x < srcWidth; x++) grown[x] = new int[STRIP_VALUES];
            columns = grown;
        }
        final int[][] cols = columns;
        for (int r = 0; r < n; r++) {
            int s = (y0 + r) * srcWidth * 3;
            for (int x = 0; x < srcWidth; x++, s += 3) {
                final int[] col = cols[x];
                col[r] = src[s] & 0xFF;
                col[STRIP_ROWS + r] = src[s + 1] & 0xFF;
                col[2 * STRIP_ROWS + r] = src[s + 2] & 0xFF;
            }
        }
        final int[][] out = stripRows;
        for (int r = 0; r < n; r++) out[r] = ring[(ringFirst + r) % ringSize];
        final int kernelSize = k.kernelSize;
        final int prec = k.precision;
        final int rounding = 1 << (prec - 1);
        final int[] acc = stripAccumulator;
        for (int x = 0; x < k.outSize; x++) {
            final int x0 = k.start[x];
            final int taps = k.count[x];
            final int wBase = x * kernelSize;
            final int d = x * 3;
            if (vector) {
                VectorResample.planarTaps(cols, x0, taps, k.weights, wBase, prec, acc, STRIP_VALUES);
                for (int r = 0; r < n; r++) {
                    final int[] row = out[r];
                    row[d] = acc[r];
                    row[d + 1] = acc[STRIP_ROWS + r];
                    row[d + 2] = acc[2 * STRIP_ROWS + r];
                }
                continue;
            }
            Arrays.fill(acc, rounding);
            for (int t = 0; t < taps; t++) addTap(acc, cols[x0 + t], k.weights[wBase + t], STRIP_VALUES);
            for (int r = 0; r < n; r++) {
                final int[] row = out[r];
                row[d] = clampShift(acc[r], prec) & 0xFF;
                row[d + 1] = clampShift(acc[STRIP_ROWS + r], prec) & 0xFF;
                row[d + 2] = clampShift(acc[2 * STRIP_ROWS + r], prec) & 0xFF;
            }
        }
    }

    private static byte clampShift(int acc, int prec) {
        return (byte) Math.min(Math.max(acc >> prec, 0), 255);
    }
}
