package dev.stoker.image.qwenvl;

import dev.stoker.image.RgbImage;
import dev.stoker.image.resample.PackedResampler;
import dev.stoker.image.resample.Taps;
import dev.stoker.image.resample.TapsCache;
import dev.stoker.image.resample.VectorSupport;

/**
 * Resizes 8-bit RGB images bit-identically to Pillow's {@code Image.resize(size, BICUBIC)} (antialiased
 * Keys cubic, a = −0.5, 22-bit fixed point; spec §5): Pillow's weights ({@link ResampleCoefficients}) through
 * {@link PackedResampler}, whose design notes say how the sums are made fast and why they stay exact.
 * Weights are computed once per (inSize, outSize) and kept in a small per-instance cache; all scratch is reused,
 * so a warm resize into a caller's buffer allocates nothing.
 *
 * <p>Threading: not thread-safe; use one instance per thread.
 */
public final class BicubicResizer {
    /** Rows per horizontal strip of the resampler (tests size images around it). */
    static final int STRIP_ROWS = PackedResampler.STRIP_ROWS;

    private final PackedResampler resampler;
    private final TapsCache cache = new TapsCache(ResampleCoefficients::of);

    /** A resizer that sums taps with the Vector API where this JVM has it ({@link VectorSupport}). */
    public BicubicResizer() {
        this(VectorSupport.available());
    }

    /** {@code vector}: sum taps with the Vector API (the JVM must have it), else with scalar sweeps. */
    BicubicResizer(boolean vector) {
        this.resampler = new PackedResampler(vector);
    }

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
        resampler.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight,
                dstWidth != srcWidth ? coefficients(srcWidth, dstWidth) : null,
                dstHeight != srcHeight ? coefficients(srcHeight, dstHeight) : null);
    }

    Taps coefficients(int inSize, int outSize) {
        return cache.get(inSize, outSize);
    }
}
