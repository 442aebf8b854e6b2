package dev.stoker.image.decode;

/**
 * How to decode: the EXIF policy, the largest source image accepted (checked against the header before any pixel
 * memory is allocated) and the JPEG DCT scale denominator.
 *
 * <p>{@code scaleDenominator} d in {1, 2, 4, 8} asks libjpeg-turbo for an image of ceil(w/d) x ceil(h/d), what
 * Pillow's {@code im.draft("RGB", (w // d, h // d))} gives. It applies to JPEG only, and only on the TurboJPEG path:
 * the ImageIO path has no DCT scaling and returns the full size.
 */
public record DecodeOptions(ExifPolicy exif, long maxSourcePixels, int scaleDenominator) {
    /** Pillow's {@code DecompressionBombError} limit (2 x {@code Image.MAX_IMAGE_PIXELS}). */
    public static final long DEFAULT_MAX_SOURCE_PIXELS = 2L * 89_478_485L;

    private static final DecodeOptions DEFAULTS = new DecodeOptions(ExifPolicy.IGNORE, DEFAULT_MAX_SOURCE_PIXELS, 1);

    public DecodeOptions {
        if (exif == null) throw new IllegalArgumentException("exif policy is null");
        if (maxSourcePixels <= 0) throw new IllegalArgumentException("maxSourcePixels must be > 0, got " + maxSourcePixels);
        if (scaleDenominator != 1 && scaleDenominator != 2 && scaleDenominator != 4 && scaleDenominator != 8)
            throw new IllegalArgumentException("scaleDenominator must be 1, 2, 4 or 8, got " + scaleDenominator);
    }

    /** EXIF ignored (as {@code Image.open(f).convert("RGB")}), Pillow's pixel limit, full size. */
    public static DecodeOptions defaults() { return DEFAULTS; }

    public DecodeOptions withExif(ExifPolicy policy) { return new DecodeOptions(policy, maxSourcePixels, scaleDenominator); }

    public DecodeOptions withMaxSourcePixels(long pixels) { return new DecodeOptions(exif, pixels, scaleDenominator); }

    public DecodeOptions withScale(int denominator) { return new DecodeOptions(exif, maxSourcePixels, denominator); }
}
