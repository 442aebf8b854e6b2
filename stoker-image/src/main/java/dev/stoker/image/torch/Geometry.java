package dev.stoker.image.torch;

/** Argument checks shared by the resizers. */
final class Geometry {
    private Geometry() {}

    static void check(long srcLength, int srcWidth, int srcHeight, long dstLength, int dstWidth, int dstHeight) {
        if (srcWidth <= 0 || srcHeight <= 0 || dstWidth <= 0 || dstHeight <= 0)
            throw new IllegalArgumentException("sizes must be positive: " + srcWidth + "x" + srcHeight + " -> " + dstWidth + "x" + dstHeight);
        if (srcLength < (long) srcWidth * srcHeight * 3)
            throw new IllegalArgumentException("source buffer of " + srcLength + " values is too small for " + srcWidth + "x" + srcHeight + " RGB");
        if (dstLength < (long) dstWidth * dstHeight * 3)
            throw new IllegalArgumentException("destination buffer of " + dstLength + " values is too small for " + dstWidth + "x" + dstHeight + " RGB");
        if ((long) Math.max(srcWidth, dstWidth) * Math.max(srcHeight, dstHeight) * 3 > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException(srcWidth + "x" + srcHeight + " -> " + dstWidth + "x" + dstHeight + " is larger than a Java array holds");
    }
}
