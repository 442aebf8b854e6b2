package dev.stoker.image.resample;

/**
 * The fixed-point weights of one resampling axis ({@code inSize → outSize}) for {@link PackedResampler}: output
 * {@code o} reads {@code count[o]} consecutive inputs from {@code start[o]} with the int weights
 * {@code weights[o·kernelSize ..]}, and is {@code clamp((2^(shift−1) + Σ w·x) >> shift, 0, 255)} in 32-bit int
 * arithmetic. Pillow's {@code Image.resize(BICUBIC)} (22-bit weights) and aten's antialiased uint8 kernel (int16
 * weights, a per-axis shift) are both this sum; they differ only in their weights. The arrays are never written after
 * construction.
 *
 * @param kernelSize stride of {@code weights} per output: the most taps any output reads
 * @param shift      the fixed point's fraction bits
 */
public record Taps(int inSize, int outSize, int kernelSize, int[] start, int[] count, int[] weights, int shift) {
    public Taps {
        if (inSize <= 0 || outSize <= 0) throw new IllegalArgumentException("sizes must be positive: " + inSize + " -> " + outSize);
        if (start.length != outSize || count.length != outSize || weights.length != outSize * kernelSize)
            throw new IllegalArgumentException("weights of " + inSize + " -> " + outSize + " have the wrong lengths");
        if (shift < 1 || shift > 30) throw new IllegalArgumentException("shift " + shift + " is outside 1..30");
    }
}
