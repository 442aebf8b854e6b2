package dev.stoker.image.torch;

/**
 * Resizes interleaved 8-bit RGB (HWC) bit-identically to torchvision's <em>v1</em> antialiased bicubic resize of a
 * uint8 tensor on CPU, {@code torchvision.transforms.functional.resize(uint8, BICUBIC, antialias=True)}: the image is
 * cast to float32, run through aten's float kernel ({@code torch.nn.functional.interpolate(bicubic, antialias=True)},
 * torch 2.13.0 x86-64 wheels), clamped to [0, 255] and rounded half-to-even. This is the resize of qwen-vl-utils'
 * video reader. Ported from {@code resize_tv1_u8} and {@code resize_f32_torch} of
 * {@code shared/reference/ref_qwenvl_video.py}; corrections 1 and 2 of {@code vectors/qwen-vl-video/README.md}.
 *
 * <p>The float kernel's results depend on how aten was compiled for the CPU it dispatches to ({@link CpuCapability}):
 * the AVX2/AVX512 builds fuse {@code a·b+c} (reproduced with {@link Math#fma(float, float, float)}, which rounds
 * once exactly as the hardware FMA does), the DEFAULT build does not. Per output value, with taps
 * {@code x_j·w_j}, {@code j < count}:
 * <pre>
 *   acc = x_0·w_0                                   rounded product
 *   j = 1 … 4·⌊(count−1)/4⌋ : acc = acc + x_j·w_j   rounded product, rounded add (GCC's 4-lane in-order reduction)
 *   later j                 : acc = fma(x_j, w_j, acc)   (DEFAULT: rounded product, rounded add)
 * </pre>
 * A horizontal pass (skipped when the width does not change) into a float32 intermediate, then a vertical pass
 * (skipped when the height does not change). When neither size changes the pixels are copied, as torchvision does.
 *
 * <p>Speed: as in {@link TorchBicubicU8Resizer}, the float32 intermediate is streamed through a ring of rows
 * produced {@value #STRIP_ROWS} at a time when first needed, the horizontal pass works on strips transposed into
 * columns, and both passes sweep one tap at a time over whole arrays (a shape C2 vectorizes; Java never reassociates
 * float arithmetic, so each lane computes exactly the scalar value). Weights are kept
 * per (inSize, outSize) in a small per-instance cache, scratch is reused: a warm resize into the caller's buffer
 * allocates nothing.
 *
 * <p>Checked against the real torch 2.13.0+cpu / torchvision 0.28.0 at DEFAULT, AVX2 and AVX512
 * (tools/torch-resize-fixtures/README.md). Not reproduced: torch's defect for an output width of 1 with a height
 * change, where it repeats output row 0 (unreachable from smart_resize, whose outputs are at least 28 px a side).
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class TorchBicubicF32Resizer {
    private static final int CACHE_SLOTS = 8;

    private final CpuCapability capability;
    private final boolean fused;
    private final AaWeightsF32[] cache = new AaWeightsF32[CACHE_SLOTS];
    private int nextSlot;
    /** Source rows per horizontal strip (a multiple of the widest float vector). */
    static final int STRIP_ROWS = 64;
    private static final int STRIP_VALUES = 3 * STRIP_ROWS;

    private float[][] ring = new float[0][];
    private float[] accumulator = new float[0];
    /** {@code columns[x]}: source column x of the current strip as floats, channel-major: {@code [c·STRIP_ROWS + r]}. */
    private float[][] columns = new float[0][];
    private final float[] stripAccumulator = new float[STRIP_VALUES];
    private final float[][] stripRows = new float[STRIP_ROWS][];

    /** A resizer reproducing the x86-64 wheels at {@link CpuCapability#AVX2}, what the conformance vectors used. */
    public TorchBicubicF32Resizer() {
        this(CpuCapability.AVX2);
    }

    public TorchBicubicF32Resizer(CpuCapability capability) {
        this.capability = capability;
        this.fused = capability.fusesMultiplyAdd();
    }

    public CpuCapability capability() { return capability; }

    /**
     * torchvision v1 {@code resize} of a uint8 image: float kernel, clamp to [0, 255], round half-to-even, into the
     * first {@code dstWidth·dstHeight·3} bytes of {@code dst}.
     */
    public void resize(byte[] src, int srcWidth, int srcHeight, byte[] dst, int dstWidth, int dstHeight) {
        Geometry.check(src.length, srcWidth, srcHeight, dst.length, dstWidth, dstHeight);
        if (srcWidth == dstWidth && srcHeight == dstHeight) {
            System.arraycopy(src, 0, dst, 0, srcWidth * srcHeight * 3);
            return;
        }
        run(src, srcWidth, srcHeight, dstWidth, dstHeight, dst, null);
    }

    /**
     * The float kernel alone ({@code resize_f32_torch}): the uint8 image resized to float32 HWC values, unclamped,
     * into the first {@code dstWidth·dstHeight·3} floats of {@code dst}.
     */
    public void resizeToFloat(byte[] src, int srcWidth, int srcHeight, float[] dst, int dstWidth, int dstHeight) {
        Geometry.check(src.length, srcWidth, srcHeight, dst.length, dstWidth, dstHeight);
        if (srcWidth == dstWidth && srcHeight == dstHeight) {
            for (int i = 0, n = srcWidth * srcHeight * 3; i < n; i++) dst[i] = src[i] & 0xFF;
            return;
        }
        run(src, srcWidth, srcHeight, dstWidth, dstHeight, null, dst);
    }

    /** Resizes into {@code dstU8} (clamped, rounded half-even) or, when that is null, into {@code dstFloat}. */
    private void run(byte[] src, int srcWidth, int srcHeight, int dstWidth, int dstHeight, byte[] dstU8, float[] dstFloat) {
        final int rowLength = dstWidth * 3;
        AaWeightsF32 hk = dstWidth != srcWidth ? weights(srcWidth, dstWidth) : null;
        if (dstHeight == srcHeight) {
            float[][] rows = ring(STRIP_ROWS, rowLength);
            for (int y0 = 0; y0 < srcHeight; y0 += STRIP_ROWS) {
                int n = Math.min(STRIP_ROWS, srcHeight - y0);
                horizontalStrip(src, srcWidth, y0, n, hk, rows, 0, STRIP_ROWS);
                for (int r = 0; r < n; r++) emit(rows[r], rowLength, (y0 + r) * rowLength, dstU8, dstFloat);
            }
            return;
        }
        AaWeightsF32 vk = weights(srcHeight, dstHeight);
        final int ringSize = hk != null ? vk.kernelSize + STRIP_ROWS : vk.kernelSize;
        final float[][] rows = ring(ringSize, rowLength);
        if (accumulator.length < rowLength) accumulator = new float[rowLength];
        final float[] acc = accumulator;
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
                    float[] row = rows[produced % ringSize];
                    for (int i = 0, s = produced * rowLength; i < rowLength; i++) row[i] = src[s + i] & 0xFF;
                }
            }
            final int wBase = y * vk.kernelSize;
            firstTap(acc, rows[first % ringSize], vk.weights[wBase], rowLength);
            final int plainEnd = fused ? Math.min(vk.fourLaneTaps[y], n - 1) : n - 1;
            int t = 1;
            for (; t <= plainEnd; t++) addTap(acc, rows[(first + t) % ringSize], vk.weights[wBase + t], rowLength);
            for (; t < n; t++) fmaTap(acc, rows[(first + t) % ringSize], vk.weights[wBase + t], rowLength);
            emit(acc, rowLength, y * rowLength, dstU8, dstFloat);
        }
    }

    private static void emit(float[] row, int n, int at, byte[] dstU8, float[] dstFloat) {
        if (dstU8 == null) {
            System.arraycopy(row, 0, dstFloat, at, n);
            return;
        }
        for (int i = 0; i < n; i++) dstU8[at + i] = (byte) (int) Math.rint(Math.min(Math.max(row[i], 0.0f), 255.0f));
    }

    AaWeightsF32 weights(int inSize, int outSize) {
        for (AaWeightsF32 c : cache)
            if (c != null && c.inSize == inSize && c.outSize == outSize) return c;
        AaWeightsF32 c = new AaWeightsF32(inSize, outSize, fused);
        cache[nextSlot] = c;
        nextSlot = (nextSlot + 1) % CACHE_SLOTS;
        return c;
    }

    private float[][] ring(int count, int length) {
        if (ring.length < count) ring = java.util.Arrays.copyOf(ring, count);
        for (int i = 0; i < count; i++)
            if (ring[i] == null || ring[i].length < length) ring[i] = new float[length];
        return ring;
    }

    private static void firstTap(float[] acc, float[] row, float w, int n) {
        for (int i = 0; i < n; i++) acc[i] = row[i] * w;
    }

    private static void addTap(float[] acc, float[] row, float w, int n) {
        for (int i = 0; i < n; i++) acc[i] = acc[i] + row[i] * w;
    }

    private static void fmaTap(float[] acc, float[] row, float w, int n) {
        for (int i = 0; i < n; i++) acc[i] = Math.fma(row[i], w, acc[i]);
    }

    /**
     * Source rows {@code y0 .. y0+n} ({@code n ≤ STRIP_ROWS}) resampled horizontally into the rows
     * {@code ring[(ringFirst + r) % ringSize]}: the strip transposed into one float array per source column, then per
     * output pixel one sweep per tap over all the strip's rows and channels, in the tap order and with the fusion of
     * the class comment (each lane computes exactly the scalar value).
     */
    private void horizontalStrip(byte[] src, int srcWidth, int y0, int n, AaWeightsF32 k, float[][] ring, int ringFirst, int ringSize) {
        if (columns.length < srcWidth) {
            float[][] grown = java.util.Arrays.copyOf(columns, srcWidth);
            for (int x = columns.length; x < srcWidth; x++) grown[x] = new float[STRIP_VALUES];
            columns = grown;
        }
        final float[][] cols = columns;
        for (int r = 0; r < n; r++) {
            int s = (y0 + r) * srcWidth * 3;
            for (int x = 0; x < srcWidth; x++, s += 3) {
                final float[] col = cols[x];
                col[r] = src[s] & 0xFF;
                col[STRIP_ROWS + r] = src[s + 1] & 0xFF;
                col[2 * STRIP_ROWS + r] = src[s + 2] & 0xFF;
            }
        }
        final float[][] out = stripRows;
        for (int r = 0; r < n; r++) out[r] = ring[(ringFirst + r) % ringSize];
        final int kernelSize = k.kernelSize;
        final float[] acc = stripAccumulator;
        for (int x = 0; x < k.outSize; x++) {
            final int x0 = k.start[x];
            final int taps = k.count[x];
            final int wBase = x * kernelSize;
            firstTap(acc, cols[x0], k.weights[wBase], STRIP_VALUES);
            final int plainEnd = fused ? Math.min(k.fourLaneTaps[x], taps - 1) : taps - 1;
            int t = 1;
            for (; t <= plainEnd; t++) addTap(acc, cols[x0 + t], k.weights[wBase + t], STRIP_VALUES);
            for (; t < taps; t++) fmaTap(acc, cols[x0 + t], k.weights[wBase + t], STRIP_VALUES);
            final int d = x * 3;
            for (int r = 0; r < n; r++) {
                final float[] row = out[r];
                row[d] = acc[r];
                row[d + 1] = acc[STRIP_ROWS + r];
                row[d + 2] = acc[2 * STRIP_ROWS + r];
            }
        }
    }
}
