package dev.stoker.encode.cache;

import dev.stoker.cache.CacheKey;
import dev.stoker.cache.SampleCache;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.image.decode.ImageFormat;

/**
 * The cache of preprocessed samples as an encoder uses it: a {@link SampleCache} and the keys of what an encoding
 * stores there. An image's entry is its resized u8 RGB pixels (HWC, the smart_resize target, never float32: an eighth
 * of its {@code pixel_values}), keyed by the SHA-256 of the image's bytes and every setting that decides those pixels:
 * the source and target size, the resize backend, the EXIF policy, the DCT scale and the decoder (libjpeg-turbo or
 * libwebp where they load, else ImageIO) of its format, and {@link #PIXEL_RULES}. Normalization and patchification
 * are not in the entry (they run on read, into the batch), so the mean, std, patch layout and wire format are not in
 * the key; neither is the path.
 */
public final class PreprocessedCache {
    /** Raised when the decoding or resizing code changes what pixels it produces: old entries then no longer match. */
    public static final int PIXEL_RULES = 1;

    private final SampleCache store;

    public PreprocessedCache(SampleCache store) {
        this.store = java.util.Objects.requireNonNull(store, "store");
    }

    public SampleCache store() { return store; }

    /**
     * The key of an image's resized pixels.
     *
     * @param contentSha256 the SHA-256 of the image's bytes
     * @param format        its format (which decoder reads it)
     * @param scale         the DCT scale it is decoded at (1: none)
     */
    public static CacheKey imageKey(EncodeOptions options, byte[] contentSha256, ImageFormat format, int srcHeight, int srcWidth,
                                    int resizedHeight, int resizedWidth, int scale) {
        String decoder = switch (format) {
            case JPEG -> ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo" : "imageio";
            case WEBP -> ImageDecoders.libWebpAvailable() ? "libwebp" : "imageio";
            default -> "imageio";
        };
        String settings = "rules=" + PIXEL_RULES + " backend=" + options.imageBackend() + " exif=" + options.exif() + " format=" + format
                + " decoder=" + decoder + " scale=" + scale + " src=" + srcHeight + "x" + srcWidth + " target=" + resizedHeight + "x"
                + resizedWidth;
        return CacheKey.of("image-resized-u8", settings, contentSha256);
    }
}
