package dev.stoker.cli;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.text.TruncationPolicy;
import picocli.CommandLine.Option;

/** The options shared by every command that preprocesses samples; one place, one set of defaults. */
final class ProcessorOptions {
    @Option(names = "--processor", defaultValue = "qwen2.5-vl",
            description = "Model family: qwen2-vl, qwen2.5-vl, qwen3-vl (default: ${DEFAULT-VALUE}).")
    String processor;

    @Option(names = "--min-pixels", defaultValue = "" + ProcessorPreset.DEFAULT_MIN_PIXELS,
            description = "Lower bound of the resized image area in pixels (default: ${DEFAULT-VALUE} = 56²).")
    long minPixels;

    @Option(names = "--max-pixels", defaultValue = "" + ProcessorPreset.DEFAULT_MAX_PIXELS,
            description = "Upper bound of the resized image area in pixels (default: ${DEFAULT-VALUE} = 28²·1280).")
    long maxPixels;

    @Option(names = "--exif", defaultValue = "apply",
            description = "EXIF orientation: apply (as transformers' load_image, which the official Qwen SFT code uses) "
                    + "or ignore (as a bare PIL.Image.open) (default: ${DEFAULT-VALUE}).")
    String exif;

    @Option(names = "--decode-scale", defaultValue = "off",
            description = "off: bit-exact with Pillow. auto: JPEG DCT-scaled decode when the target is at most half the "
                    + "source (like Pillow's draft()); faster, NOT bit-exact (default: ${DEFAULT-VALUE}).")
    String decodeScale;

    @Option(names = "--max-source-pixels", defaultValue = "" + EncodeOptions.DEFAULT_MAX_SOURCE_PIXELS,
            description = "Refuse images whose header claims more pixels, before decoding (default: ${DEFAULT-VALUE}, Pillow's bomb limit).")
    long maxSourcePixels;

    @Option(names = "--max-seq-len", defaultValue = "" + EncodeOptions.DEFAULT_MAX_SEQUENCE_LENGTH,
            description = "Token limit per sample, 0 for none (default: ${DEFAULT-VALUE}).")
    int maxSequenceLength;

    @Option(names = "--truncation", defaultValue = "reject",
            description = "Over-long samples: reject (an error naming the sample) or truncate (text only; an image's "
                    + "token run is never cut, images past the cut are dropped) (default: ${DEFAULT-VALUE}).")
    String truncation;

    EncodeOptions toEncodeOptions() {
        ProcessorPreset preset;
        try {
            preset = ProcessorPreset.fromName(processor);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException(e.getMessage());
        }
        try {
            return EncodeOptions.defaults(preset)
                    .withPixels(minPixels, maxPixels)
                    .withExif(parse(ExifPolicy.class, "--exif", exif))
                    .withDecodeScale(parse(EncodeOptions.DecodeScale.class, "--decode-scale", decodeScale))
                    .withMaxSourcePixels(maxSourcePixels)
                    .withSequenceLimit(maxSequenceLength, parse(TruncationPolicy.class, "--truncation", truncation));
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException(e.getMessage());
        }
    }

    private static <E extends Enum<E>> E parse(Class<E> type, String option, String value) {
        for (E e : type.getEnumConstants()) if (e.name().equalsIgnoreCase(value)) return e;
        throw new Main.InvalidInputException(option + ": unknown value '" + value + "'");
    }
}
