package dev.stoker.image.torch;

import dev.stoker.image.resample.PackedResampler;
import dev.stoker.image.resample.Taps;
import dev.stoker.image.resample.TapsCache;
import dev.stoker.image.resample.VectorSupport;

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
 * <p>Speed: the sums are {@link PackedResampler}'s (the design of {@code qwenvl.BicubicResizer}, whose arithmetic this
 * is with other weights: packed pixels, the horizontal pass on transposed strips, the intermediate streamed through a
 * ring of rows, the Vector API where the JVM has it). Integer sums are exact, so none of it changes a result. Weights
 * are kept per (inSize, outSize) in a small per-instance cache and the scratch is reused, so a warm resize into the
 * caller's buffer allocates nothing.
 *
 * <p>Checked against the real torch 2.13.0+cpu / torchvision 0.28.0 at DEFAULT, AVX2 and AVX512
 * (tools/torch-resize-fixtures/README.md). Not reproduced: torch's failures at degenerate sizes (a 1×1 output raises
 * an internal assertion at AVX2/AVX512; at DEFAULT an output width of 1 with a height change repeats row 0), which
 * smart_resize never asks for (outputs are at least 28 px a side).
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class TorchBicubicU8Resizer {
    /** Source rows per horizontal strip of the resampler (tests size images around it). */
    static final int STRIP_ROWS = PackedResampler.STRIP_ROWS;

    private final PackedResampler resampler;
    private final TapsCache cache = new TapsCache(AaWeightsU8::of);

    /** A resizer that sums taps with the Vector API where this JVM has it. */
    public TorchBicubicU8Resizer() {
        this(VectorSupport.available());
    }

    /** {@code vector}: sum taps with the Vector API (the JVM must have it), else with scalar sweeps. */
    TorchBicubicU8Resizer(boolean vector) {
        this.resampler = new PackedResampler(vector);
    }

    /**
     * Resizes HWC RGB {@code src} ({@code srcWidth × srcHeight}) into the first {@code dstWidth·dstHeight·3} bytes of
     * {@code dst}.
     *
     * @throws IllegalArgumentException when a size is not positive or a buffer is too small
     */
    public void resize(byte[] src, int srcWidth, int srcHeight, byte[] dst, int dstWidth, int dstHeight) {
        Geometry.check(src.length, srcWidth, srcHeight, dst.length, dstWidth, dstHeight);
        resampler.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight,
                dstWidth != srcWidth ? weights(srcWidth, dstWidth) : null,
                dstHeight != srcHeight ? weights(srcHeight, dstHeight) : null);
    }

    Taps weights(int inSize, int outSize) {
        return cache.get(inSize, outSize);
    }
}
