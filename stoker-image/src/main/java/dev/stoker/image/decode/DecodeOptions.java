package dev.stoker.image.decode;

/**
 * How to decode: the EXIF policy, the largest source image accepted (checked against the header before any pixel
 * memory is allocated), the JPEG DCT scale denominator and the decode memory budget.
 *
 * <p>{@code scaleDenominator} d in {1, 2, 4, 8} asks libjpeg-turbo for an image of ceil(w/d) x ceil(h/d), what
 * Pillow's {@code im.draft("RGB", (w // d, h // d))} gives. It applies to JPEG only, and only on the TurboJPEG path:
 * the ImageIO path has no DCT scaling and returns the full size.
 *
 * <p>{@code maxDecodeBytes}: the most memory (heap and native together) decoding one image may take on one thread, as
 * {@link ImageDecoder#decodeBytes} estimates it from the header (audit #10: the pixel limit alone lets a 0.5 MB PNG of
 * 13000x13000 cost 1 GB per thread, with every CPU thread at once). An image over it is refused before any pixel memory
 * is allocated. The default, {@link #defaultMaxDecodeBytes(int)}, shares half of the heap among the decoding threads.
 */
public record DecodeOptions(ExifPolicy exif, long maxSourcePixels, int scaleDenominator, long maxDecodeBytes) {
    /** Pillow's {@code DecompressionBombError} limit (2 x {@code Image.MAX_IMAGE_PIXELS}). */
    public static final long DEFAULT_MAX_SOURCE_PIXELS = 2L * 89_478_485L;

    private static final DecodeOptions DEFAULTS = new DecodeOptions(ExifPolicy.IGNORE, DEFAULT_MAX_SOURCE_PIXELS, 1);

    public DecodeOptions {
        if (exif == null) throw new IllegalArgumentException("exif policy is null");
        if (maxSourcePixels <= 0) throw new IllegalArgumentException("maxSourcePixels must be > 0, got " + maxSourcePixels);
        if (scaleDenominator != 1 && scaleDenominator != 2 && scaleDenominator != 4 && scaleDenominator != 8)
            throw new IllegalArgumentException("scaleDenominator must be 1, 2, 4 or 8, got " + scaleDenominator);
        if (maxDecodeBytes <= 0) throw new IllegalArgumentException("maxDecodeBytes must be > 0, got " + maxDecodeBytes);
    }

    /** With the default decode budget for as many decoding threads as this machine has cores. */
    public DecodeOptions(ExifPolicy exif, long maxSourcePixels, int scaleDenominator) {
        this(exif, maxSourcePixels, scaleDenominator, defaultMaxDecodeBytes(Runtime.getRuntime().availableProcessors()));
    }

    /**
     * The default per-thread decode budget when {@code threads} threads decode at once: half of the JVM's maximum heap
     * divided among them (the other half is left to everything else: batches, buffers, the tokenizer). With the
     * tests' 2 GB heap and 2 threads that is 512 MiB, a 9,000 x 9,000 baseline JPEG.
     */
    public static long defaultMaxDecodeBytes(int threads) {
        if (threads <= 0) throw new IllegalArgumentException("threads must be > 0, got " + threads);
        return Math.max(1, Runtime.getRuntime().maxMemory() / 2 / threads);
    }

    /** EXIF ignored (as {@code Image.open(f).convert("RGB")}), Pillow's pixel limit, full size, the default budget. */
    public static DecodeOptions defaults() { return DEFAULTS; }

    public DecodeOptions withExif(ExifPolicy policy) { return new DecodeOptions(policy, maxSourcePixels, scaleDenominator, maxDecodeBytes); }

    public DecodeOptions withMaxSourcePixels(long pixels) { return new DecodeOptions(exif, pixels, scaleDenominator, maxDecodeBytes); }

    public DecodeOptions withScale(int denominator) { return new DecodeOptions(exif, maxSourcePixels, denominator, maxDecodeBytes); }

    public DecodeOptions withMaxDecodeBytes(long bytes) { return new DecodeOptions(exif, maxSourcePixels, scaleDenominator, bytes); }
}
