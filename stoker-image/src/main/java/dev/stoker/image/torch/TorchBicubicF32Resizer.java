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
 * <p>Speed: as in {@link TorchBicubicU8Resizer}, the float32 intermediate is streamed through a ring of
 * {@code kernelSize} rows produced when first needed, and each output row is swept over whole rows per tap (a shape
 * C2 vectorizes; Java float arithmetic is never reassociated, so each lane is the scalar result). Weights are kept
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
    private float[][] ring = new float[0][];
    private float[] accumulator = new float[0];

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
            float[] row = ring(1, rowLength)[0];
            for (int y = 0; y < srcHeight; y++) {
                horizontalRow(src, y * srcWidth * 3, row, hk);
                emit(row, rowLength, y * rowLength, dstU8, dstFloat);
            }
            return;
        }
        AaWeightsF32 vk = weights(srcHeight, dstHeight);
        final int ringSize = vk.kernelSize;
        final float[][] rows = ring(ringSize, rowLength);
        if (accumulator.length < rowLength) accumulator = new float[rowLength];
        final float[] acc = accumulator;
        int produced = 0;
        for (int y = 0; y < dstHeight; y++) {
            final int first = vk.start[y];
            final int n = vk.count[y];
            if (produced < first) produced = first;
            for (; produced < first + n; produced++) {
                float[] row = rows[produced % ringSize];
                if (hk != null) horizontalRow(src, produced * srcWidth * 3, row, hk);
                else for (int i = 0, s = produced * rowLength; i < rowLength; i++) row[i] = src[s + i] & 0xFF;
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

    /** One source row (from byte {@code rowStart}) resampled horizontally into {@code out}, float32 values. */
    private void horizontalRow(byte[] src, int rowStart, float[] out, AaWeightsF32 k) {
        final int kernelSize = k.kernelSize;
        final int[] start = k.start;
        final int[] count = k.count;
        final int[] plainTaps = k.fourLaneTaps;
        final float[] weights = k.weights;
        final boolean fma = fused;
        for (int x = 0, d = 0; x < k.outSize; x++, d += 3) {
            int s = rowStart + start[x] * 3;
            final int n = count[x];
            final int wBase = x * kernelSize;
            float w = weights[wBase];
            float r = (src[s] & 0xFF) * w, g = (src[s + 1] & 0xFF) * w, b = (src[s + 2] & 0xFF) * w;
            final int plainEnd = fma ? Math.min(plainTaps[x], n - 1) : n - 1;
            int t = 1;
            for (s += 3; t <= plainEnd; t++, s += 3) {
                w = weights[wBase + t];
                r = r + (src[s] & 0xFF) * w;
                g = g + (src[s + 1] & 0xFF) * w;
                b = b + (src[s + 2] & 0xFF) * w;
            }
            for (; t < n; t++, s += 3) {
                w = weights[wBase + t];
                r = Math.fma((float) (src[s] & 0xFF), w, r);
                g = Math.fma((float) (src[s + 1] & 0xFF), w, g);
                b = Math.fma((float) (src[s + 2] & 0xFF), w, b);
            }
            out[d] = r;
            out[d + 1] = g;
            out[d + 2] = b;
        }
    }
}
