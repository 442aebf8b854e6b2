package dev.stoker.image.resample;

/**
 * The fixed-point weights of one resampling axis ({@code inSize → outSize}) for {@link PackedResampler}: output
 * {@code o} reads {@code count()[o]} consecutive inputs from {@code start()[o]} with the int weights
 * {@code weights()[o·kernelSize() ..]}, and is {@code clamp((2^(shift−1) + Σ w·x) >> shift, 0, 255)} in 32-bit int
 * arithmetic. Pillow's {@code Image.resize(BICUBIC)} (22-bit weights) and aten's antialiased uint8 kernel (int16
 * weights, a per-axis shift) are both this sum; they differ only in their weights. The arrays are read, never written.
 */
public interface Taps {
    int inSize();

    int outSize();

    /** Stride of {@link #weights()} per output: the most taps any output reads. */
    int kernelSize();

    int[] start();

    int[] count();

    int[] weights();

    /** The fixed point's fraction bits. */
    int shift();
}
