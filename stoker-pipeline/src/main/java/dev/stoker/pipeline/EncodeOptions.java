package dev.stoker.pipeline;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.decode.DecodeOptions;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.text.TruncationPolicy;

/**
 * Everything that decides how a sample becomes model inputs, validated once.
 *
 * @param preset           model family (template, patch geometry, normalization)
 * @param vision           the vision config of the preset with the run's min/max pixels
 * @param exif             EXIF orientation handling; APPLY by default, as transformers' load_image does
 * @param decodeScale      OFF (bit-exact) or AUTO (JPEG DCT scaling when the target is at most half the source)
 * @param maxSourcePixels  images whose header claims more pixels are refused before any pixel memory is allocated
 * @param maxSequenceLength  token limit per sample (0 = none)
 * @param truncation       what to do with a sample over the limit
 */
public record EncodeOptions(ProcessorPreset preset, VisionConfig vision, ExifPolicy exif, DecodeScale decodeScale,
                            long maxSourcePixels, int maxSequenceLength, TruncationPolicy truncation) {

    /** JPEG decode scaling: OFF is bit-exact with Pillow; AUTO trades exactness for speed like Pillow's draft(). */
    public enum DecodeScale { OFF, AUTO }

    public static final long DEFAULT_MAX_SOURCE_PIXELS = DecodeOptions.DEFAULT_MAX_SOURCE_PIXELS;
    public static final int DEFAULT_MAX_SEQUENCE_LENGTH = 8192;      // what the official SFT scripts use

    public EncodeOptions {
        if (maxSourcePixels <= 0) throw new IllegalArgumentException("max source pixels must be positive");
        if (maxSequenceLength < 0) throw new IllegalArgumentException("max sequence length must be >= 0");
    }

    public static EncodeOptions defaults(ProcessorPreset preset) {
        return new EncodeOptions(preset, preset.vision(), ExifPolicy.APPLY, DecodeScale.OFF,
                DEFAULT_MAX_SOURCE_PIXELS, DEFAULT_MAX_SEQUENCE_LENGTH, TruncationPolicy.REJECT);
    }

    public EncodeOptions withPixels(long minPixels, long maxPixels) {
        return new EncodeOptions(preset, vision.withPixels(minPixels, maxPixels), exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation);
    }

    public EncodeOptions withExif(ExifPolicy e) {
        return new EncodeOptions(preset, vision, e, decodeScale, maxSourcePixels, maxSequenceLength, truncation);
    }

    public EncodeOptions withDecodeScale(DecodeScale d) {
        return new EncodeOptions(preset, vision, exif, d, maxSourcePixels, maxSequenceLength, truncation);
    }

    public EncodeOptions withMaxSourcePixels(long n) {
        return new EncodeOptions(preset, vision, exif, decodeScale, n, maxSequenceLength, truncation);
    }

    public EncodeOptions withSequenceLimit(int maxLength, TruncationPolicy policy) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxLength, policy);
    }
}
