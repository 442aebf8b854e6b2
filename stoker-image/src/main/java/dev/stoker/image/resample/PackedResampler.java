package dev.stoker.image.resample;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * Resamples 8-bit RGB images with separable fixed-point filters ({@link Taps}), the arithmetic of Pillow's
 * {@code Resample.c} and of aten's antialiased uint8 kernel: a horizontal pass whose results are rounded and clamped
 * to u8, then a vertical pass over those u8 rows; an axis whose size does not change is skipped (its {@code Taps}
 * null), and if neither changes the pixels are copied. Each output value is
 * {@code clamp((2^(shift−1) + Σ weight·sample) >> shift, 0, 255)} in 32-bit int arithmetic. Int addition wraps and is
 * therefore associative, so the sum may be formed in any order and grouping and stays bit-identical; the design below
 * relies on that.
 *
 * <p>Design, for speed on one core. C2 vectorizes a loop like {@code acc[i] += w * a[i]} where every
 * array is indexed by the loop variable alone; it does not when an index carries an offset
 * ({@code a[base + i]}: two int arrays may be one array, and JDK 25 cannot rule out the overlap), nor a
 * gather ({@code a[start[x] + t]}), nor a clamp written with branches. Both passes are therefore sweeps of
 * that shape over whole int arrays, with the clamp as {@code min(max(..))}:
 * <ul>
 *   <li><b>Packed pixels.</b> Rows between the passes hold one int per pixel, {@code R | G << 8 | B << 16}
 *       (u8 values, as the intermediate). Source rows are read as one little-endian 4-byte load per
 *       pixel (the fourth byte belongs to the next pixel and is masked away) and output rows written as
 *       overlapping 4-byte stores: one memory access per pixel instead of three. A sweep unpacks the three
 *       channels in-register into three accumulator arrays.</li>
 *   <li><b>Vertical pass row-wise.</b> An output row is {@code Σ_t w_t · ring[row_t]} over whole rows, two
 *       taps per sweep: directly the vectorizable shape.</li>
 *   <li><b>Horizontal pass on transposed strips.</b> Along a row every output pixel has its own window
 *       start, so a row-wise horizontal pass is a gather, scalar (it was half of the CPU time end to end).
 *       Instead {@value #STRIP_ROWS} source rows at a time are transposed into one int array per source
 *       column, {@code columns[x][r]} = packed pixel (x, y0 + r). Output pixel x of all strip rows is then
 *       {@code Σ_t w_t · columns[start_x + t]}: a sweep over the strip's rows with one weight per tap, the
 *       vertical pass's shape again. The packed results are transposed back into the ring rows
 *       {@value #TILE_PIXELS} output pixels at a time, so each row is written in runs rather than one int
 *       per row per pixel. Strips are tall because each sweep is short: C2 unrolls a vectorized loop
 *       several vectors deep and leaves short trip counts to its scalar tail, and every sweep has a fixed
 *       cost; 64 rows measured fastest of 16 to 256 (the columns take 256 bytes per source pixel column
 *       and are read in order, each by the few overlapping windows that share it).
 *       The transpositions cost about one load and one store per pixel; they buy vector multiply-adds for
 *       every tap, and the tap count need not be a compile-time constant.</li>
 *   <li><b>Streaming.</b> The intermediate is never materialized. Vertical windows only move down, so a
 *       strip is produced when an output row first needs one of its rows, into a ring of
 *       {@code kernelSize + STRIP_ROWS} rows, large enough that a new strip never overwrites a row the
 *       current window still reads.</li>
 *   <li><b>Vector API.</b> Where the JVM has it ({@link VectorSupport}: the launcher's and the tests' flags add
 *       {@code jdk.incubator.vector}), each window's tap sum is {@link VectorResample#packedTaps}: the same int
 *       arithmetic lane by lane, but the three channel sums stay in registers over all the window's taps instead of
 *       going through the accumulator arrays two taps per sweep (7.8 → 3.0 ms for a 1080p photo to 451,584 px on one
 *       AVX-512 core). Rows are sized to whole vectors for it. Without the module the scalar sweeps above run.</li>
 * </ul>
 * All scratch is reused, so a warm resample into a caller's buffer allocates nothing (on the vector path, once C2
 * has compiled it).
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class PackedResampler {
    /** Rows per horizontal strip: a multiple of the widest int vector (16 lanes); see the design notes. */
    public static final int STRIP_ROWS = VectorSupport.STRIP_ROWS;
    private static final int TILE_PIXELS = 16;
    private static final VarHandle INT_LE = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

    private final boolean vector;
    private final int lanes;
    private int[][] tapRows = new int[0][];
    private int[][] ring = new int[0][];
    private int[] accRedRow = new int[0];
    private int[] accGreenRow = new int[0];
    private int[] accBlueRow = new int[0];
    private int[] packedRow = new int[0];
    private int[][] columns = new int[0][];
    private final int[][] stripRows = new int[STRIP_ROWS][];
    private final int[] rowOffsets = new int[STRIP_ROWS];
    private final int[] accRed = new int[STRIP_ROWS];
    private final int[] accGreen = new int[STRIP_ROWS];
    private final int[] accBlue = new int[STRIP_ROWS];
    /** Packed results of {@value #TILE_PIXELS} output columns of a strip, written to the rows a tile at a time. */
    private final int[][] outputTile = new int[TILE_PIXELS][STRIP_ROWS];

    /** A resampler that sums taps with the Vector API where this JVM has it ({@link VectorSupport}). */
    public PackedResampler() {
        this(VectorSupport.available());
    }

    /** {@code vector}: sum taps with {@link VectorResample} (the JVM must have the Vector API), else with the scalar sweeps. */
    public PackedResampler(boolean vector) {
        if (vector && !VectorSupport.available()) throw new IllegalStateException("this JVM has no jdk.incubator.vector module");
        this.vector = vector;
        this.lanes = vector ? VectorSupport.lanes() : 1;
    }

    /**
     * Resamples HWC RGB {@code src} ({@code srcWidth × srcHeight}) into the first {@code dstWidth·dstHeight·3} bytes of
     * {@code dst}: {@code hk} the weights {@code srcWidth → dstWidth}, null when the width does not change; {@code vk}
     * likewise for the height.
     */
    public void resize(byte[] src, int srcWidth, int srcHeight, byte[] dst, int dstWidth, int dstHeight, Taps hk, Taps vk) {
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
        checkAxis("horizontal", hk, horizontal, srcWidth, dstWidth);
        checkAxis("vertical", vk, vertical, srcHeight, dstHeight);
        int rowBytes = dstWidth * 3;
        if (!vertical) {
            int[][] rows = ensureRing(STRIP_ROWS, dstWidth);
            for (int y0 = 0; y0 < srcHeight; y0 += STRIP_ROWS) {
                int n = Math.min(STRIP_ROWS, srcHeight - y0);
                horizontalStrip(src, srcWidth, y0, n, hk, rows, 0, STRIP_ROWS);
                for (int r = 0; r < n; r++) storePixels(rows[r], dst, (y0 + r) * rowBytes, dstWidth);
            }
            return;
        }
        final int kernelSize = vk.kernelSize();
        final int shift = vk.shift();
        final int rounding = 1 << (shift - 1);
        final int[] vStart = vk.start(), vCount = vk.count();
        int ringSize = hk != null ? kernelSize + STRIP_ROWS : kernelSize;
        int[][] rows = ensureRing(ringSize, dstWidth);
        if (vector) {
            if (tapRows.length < kernelSize) tapRows = new int[kernelSize][];
            if (packedRow.length < paddedWidth(dstWidth)) packedRow = new int[paddedWidth(dstWidth)];
        } else if (accRedRow.length < dstWidth) {
            accRedRow = new int[dstWidth];
            accGreenRow = new int[dstWidth];
            accBlueRow = new int[dstWidth];
            packedRow = new int[dstWidth];
        }
        final int[] ar = accRedRow, ag = accGreenRow, ab = accBlueRow;
        final int[] packed = packedRow;
        final int[] weights = vk.weights();
        int produced = 0;
        for (int yy = 0; yy < dstHeight; yy++) {
            int first = vStart[yy];
            int n = vCount[yy];
            if (produced < first) produced = first;
            if (hk != null) {
                while (produced < first + n) {
                    int strip = Math.min(STRIP_ROWS, srcHeight - produced);
                    horizontalStrip(src, srcWidth, produced, strip, hk, rows, produced, ringSize);
                    produced += strip;
                }
            } else {
                for (; produced < first + n; produced++) loadPixels(src, produced * rowBytes, rows[produced % ringSize], dstWidth);
            }
            int wBase = yy * kernelSize;
            if (vector) {
                for (int t = 0; t < n; t++) tapRows[t] = rows[(first + t) % ringSize];
                VectorResample.packedTaps(tapRows, 0, n, weights, wBase, shift, packed, dstWidth);
                storePixels(packed, dst, yy * rowBytes, dstWidth);
                continue;
            }
            int t;
            if (n >= 2) {
                sumTwoTaps(ar, ag, ab, rows[first % ringSize], weights[wBase], rows[(first + 1) % ringSize], weights[wBase + 1], rounding, dstWidth);
                t = 2;
            } else {
                sumOneTap(ar, ag, ab, rows[first % ringSize], weights[wBase], rounding, dstWidth);
                t = 1;
            }
            for (; t + 1 < n; t += 2)
                addTwoTaps(ar, ag, ab, rows[(first + t) % ringSize], weights[wBase + t], rows[(first + t + 1) % ringSize], weights[wBase + t + 1], dstWidth);
            if (t < n) addOneTap(ar, ag, ab, rows[(first + t) % ringSize], weights[wBase + t], dstWidth);
            clipAndPack(ar, ag, ab, packed, shift, dstWidth);
            storePixels(packed, dst, yy * rowBytes, dstWidth);
        }
    }

    private static void checkAxis(String axis, Taps k, boolean changes, int inSize, int outSize) {
        if (!changes) return;
        if (k == null) throw new IllegalArgumentException(axis + " size changes (" + inSize + " -> " + outSize + ") but no weights were given");
        if (k.inSize() != inSize || k.outSize() != outSize)
            throw new IllegalArgumentException(axis + " weights are for " + k.inSize() + " -> " + k.outSize() + ", not " + inSize + " -> " + outSize);
    }

    /** Row length rounded up to whole vectors, so a vector sweep never needs a scalar tail. */
    private int paddedWidth(int width) {
        return (width + lanes - 1) / lanes * lanes;
    }

    private int[][] ensureRing(int count, int width) {
        int length = paddedWidth(width);
        if (ring.length < count) ring = Arrays.copyOf(ring, count);
        for (int i = 0; i < count; i++)
            if (ring[i] == null || ring[i].length < length) ring[i] = new int[length];
        return ring;
    }

    /**
     * Horizontally resamples source rows {@code y0 .. y0+n} ({@code n ≤ STRIP_ROWS}) into the packed-pixel rows
     * {@code ring[(ringFirst + r) % ringSize]}.
     */
    private void horizontalStrip(byte[] src, int srcWidth, int y0, int n, Taps k, int[][] ring, int ringFirst, int ringSize) {
        if (columns.length < srcWidth) {
            int[][] grown = Arrays.copyOf(columns, srcWidth);
            for (int x = columns.length; x < srcWidth; x++) grown[x] = new int[STRIP_ROWS];
            columns = grown;
        }
        final int[][] cols = columns;
        final int[][] out = stripRows;
        final int[] offsets = rowOffsets;
        for (int r = 0; r < n; r++) {
            out[r] = ring[(ringFirst + r) % ringSize];
            offsets[r] = (y0 + r) * srcWidth * 3;
        }
        transpose(src, srcWidth, n, offsets, cols);
        final int[] start = k.start();
        final int[] count = k.count();
        final int[] weights = k.weights();
        final int kernelSize = k.kernelSize();
        final int outSize = k.outSize();
        final int shift = k.shift();
        final int rounding = 1 << (shift - 1);
        final int[] ar = accRed, ag = accGreen, ab = accBlue;
        final int[][] tile = outputTile;
        for (int tileStart = 0; tileStart < outSize; tileStart += TILE_PIXELS) {
            final int tileEnd = Math.min(tileStart + TILE_PIXELS, outSize);
            if (vector) {
                for (int xx = tileStart; xx < tileEnd; xx++)
                    VectorResample.packedTaps(cols, start[xx], count[xx], weights, xx * kernelSize, shift, tile[xx - tileStart], STRIP_ROWS);
                for (int r = 0; r < n; r++) {
                    final int[] row = out[r];
                    for (int xx = tileStart; xx < tileEnd; xx++) row[xx] = tile[xx - tileStart][r];
                }
                continue;
            }
            for (int xx = tileStart; xx < tileEnd; xx++) {
                final int x0 = start[xx];
                final int taps = count[xx];
                final int wBase = xx * kernelSize;
                int t;
                if (taps >= 2) {
                    sumTwoTaps(ar, ag, ab, cols[x0], weights[wBase], cols[x0 + 1], weights[wBase + 1], rounding, n);
                    t = 2;
                } else {
                    sumOneTap(ar, ag, ab, cols[x0], weights[wBase], rounding, n);
                    t = 1;
                }
                for (; t + 1 < taps; t += 2)
                    addTwoTaps(ar, ag, ab, cols[x0 + t], weights[wBase + t], cols[x0 + t + 1], weights[wBase + t + 1], n);
                if (t < taps) addOneTap(ar, ag, ab, cols[x0 + t], weights[wBase + t], n);
                clipAndPack(ar, ag, ab, tile[xx - tileStart], shift, n);
            }
            for (int r = 0; r < n; r++) {
                final int[] row = out[r];
                for (int xx = tileStart; xx < tileEnd; xx++) row[xx] = tile[xx - tileStart][r];
            }
        }
    }

    /** {@code cols[x][r]} = pixel x of the source row at byte {@code offsets[r]}, packed as {@link #loadPixels} does. */
    private static void transpose(byte[] src, int srcWidth, int n, int[] offsets, int[][] cols) {
        for (int x = 0, o = 0; x < srcWidth - 1; x++, o += 3) {
            final int[] col = cols[x];
            for (int r = 0; r < n; r++) col[r] = (int) INT_LE.get(src, offsets[r] + o);
        }
        final int[] last = cols[srcWidth - 1];
        final int o = (srcWidth - 1) * 3;
        for (int r = 0; r < n; r++) last[r] = lastPixel(src, offsets[r] + o);
    }

    /**
     * {@code out[x]} = pixel x of the row at byte {@code from} as {@code R | G << 8 | B << 16 | junk << 24}: every
     * pixel but the last is one 4-byte load whose fourth byte belongs to the next pixel (the taps mask it away).
     */
    private static void loadPixels(byte[] src, int from, int[] out, int width) {
        for (int x = 0, o = from; x < width - 1; x++, o += 3) out[x] = (int) INT_LE.get(src, o);
        out[width - 1] = lastPixel(src, from + (width - 1) * 3);
    }

    private static int lastPixel(byte[] src, int at) {
        return (src[at] & 0xFF) | (src[at + 1] & 0xFF) << 8 | (src[at + 2] & 0xFF) << 16;
    }

    /**
     * Writes {@code width} packed pixels as RGB bytes from {@code from}: each but the last as one 4-byte store whose
     * fourth byte the next store overwrites, so no byte past the row's end is touched.
     */
    private static void storePixels(int[] packed, byte[] dst, int from, int width) {
        for (int x = 0, o = from; x < width - 1; x++, o += 3) INT_LE.set(dst, o, packed[x]);
        int p = packed[width - 1], o = from + (width - 1) * 3;
        dst[o] = (byte) p;
        dst[o + 1] = (byte) (p >> 8);
        dst[o + 2] = (byte) (p >> 16);
    }

    // The tap sweeps, shared by both passes: per-channel accumulators over packed pixels (R | G << 8 | B << 16).

    private static void sumOneTap(int[] ar, int[] ag, int[] ab, int[] a, int wa, int rounding, int n) {
        for (int i = 0; i < n; i++) {
            int pa = a[i];
            ar[i] = rounding + wa * (pa & 0xFF);
            ag[i] = rounding + wa * (pa >> 8 & 0xFF);
            ab[i] = rounding + wa * (pa >> 16 & 0xFF);
        }
    }

    private static void sumTwoTaps(int[] ar, int[] ag, int[] ab, int[] a, int wa, int[] b, int wb, int rounding, int n) {
        for (int i = 0; i < n; i++) {
            int pa = a[i], pb = b[i];
            ar[i] = rounding + wa * (pa & 0xFF) + wb * (pb & 0xFF);
            ag[i] = rounding + wa * (pa >> 8 & 0xFF) + wb * (pb >> 8 & 0xFF);
            ab[i] = rounding + wa * (pa >> 16 & 0xFF) + wb * (pb >> 16 & 0xFF);
        }
    }

    private static void addOneTap(int[] ar, int[] ag, int[] ab, int[] a, int wa, int n) {
        for (int i = 0; i < n; i++) {
            int pa = a[i];
            ar[i] += wa * (pa & 0xFF);
            ag[i] += wa * (pa >> 8 & 0xFF);
            ab[i] += wa * (pa >> 16 & 0xFF);
        }
    }

    private static void addTwoTaps(int[] ar, int[] ag, int[] ab, int[] a, int wa, int[] b, int wb, int n) {
        for (int i = 0; i < n; i++) {
            int pa = a[i], pb = b[i];
            ar[i] += wa * (pa & 0xFF) + wb * (pb & 0xFF);
            ag[i] += wa * (pa >> 8 & 0xFF) + wb * (pb >> 8 & 0xFF);
            ab[i] += wa * (pa >> 16 & 0xFF) + wb * (pb >> 16 & 0xFF);
        }
    }

    /** {@code packed[i] = clip(ar[i]) | clip(ag[i]) << 8 | clip(ab[i]) << 16}; min/max rather than branches, so it vectorizes. */
    private static void clipAndPack(int[] ar, int[] ag, int[] ab, int[] packed, int shift, int n) {
        for (int i = 0; i < n; i++)
            packed[i] = clip(ar[i], shift) | clip(ag[i], shift) << 8 | clip(ab[i], shift) << 16;
    }

    private static int clip(int sum, int shift) {
        return Math.min(Math.max(sum >> shift, 0), 255);
    }
}
