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
 * @param pixelFormat      what a batch carries of its images: FLOAT32 {@code pixel_values} (default), or UINT8, the
 *                         resized RGB pixels ({@code pixel_values_u8}) that the trainer normalizes and patchifies
 * @param maxImages        images a sample may have (0 = no limit but the sequence limit's); a sample with more is refused
 * @param textOnly         what a batch without any image carries: nothing more (ALLOW), or one small masked image
 *                         (DUMMY_IMAGE, the default), so that every rank runs the vision tower
 * @param chatTemplate     the Jinja source of the chat template to render chats with ({@code --chat-template model}: the
 *                         model's own, rendered as transformers renders it), or null for the built-in template of the
 *                         preset's family (the default, and what a model's template is checked against)
 * @param model            what a model folder (--model) adds to the encoding that the fields above do not say: the
 *                         SHA-256 of its tokenizer (and of its chat template where the model's own renders); null
 *                         without a model folder
 */
public record EncodeOptions(ProcessorPreset preset, VisionConfig vision, ExifPolicy exif, DecodeScale decodeScale,
                            long maxSourcePixels, int maxSequenceLength, TruncationPolicy truncation, PixelFormat pixelFormat,
                            int maxImages, TextOnlyPolicy textOnly, String chatTemplate, String model) {

    /** JPEG decode scaling: OFF is bit-exact with Pillow; AUTO trades exactness for speed like Pillow's draft(). */
    public enum DecodeScale { OFF, AUTO }

    /**
     * The image tensor of a batch. FLOAT32: {@code pixel_values}, normalized and patchified, (rows, 3·t·p²) float32.
     * UINT8 (the compact wire format): {@code pixel_values_u8}, each image's resized RGB pixels, (Σ H·W, 3) uint8,
     * with {@code pixel_norm} and {@code pixel_patch} for the trainer's conversion — 1/8 of the bytes for t = 2.
     */
    public enum PixelFormat {
        FLOAT32, UINT8;

        /** Bytes of one image's pixel tensor at {@code pixels} resized pixels. */
        public long bytesPerImage(long pixels, VisionConfig vision) {
            return this == UINT8 ? pixels * 3 : pixels * 3L * vision.temporalPatchSize() * Float.BYTES;
        }
    }

    /**
     * What a rank's batch in which no sample has an image carries (a multimodal job's text-only samples).
     *
     * <p>ALLOW: the samples as they are, with {@code pixel_values} (0, row length) and {@code image_grid_thw} (0, 3).
     * Hugging Face's Qwen-VL vision tower fails on such empty tensors, and under FSDP or ZeRO-3 a rank that skips the
     * vision tower while the others run it waits forever on their collectives: the job hangs.
     *
     * <p>DUMMY_IMAGE (the default): LLaMA-Factory's practice ({@code MultiModalDataCollatorForSeq2Seq}, "fake_images",
     * which it applies to every multimodal model): a white 64×64 image, processed with the job's own settings (its
     * smart_resize bounds, patch and merge sizes, mean and std), whose tokens {@code <|vision_start|>}, its image pads and
     * {@code <|vision_end|>} are appended after the first sample's last token with label −100 and attention 0, and whose
     * pixels are the batch's only {@code pixel_values}. Every rank runs the vision tower; the loss is unchanged (no label,
     * nothing attends to the dummy) and so are every other token's ids, labels, attention and positions. The dummy's
     * positions are 1, as Hugging Face's {@code get_rope_index} leaves attention-0 tokens (it fills the tensor with ones
     * and writes only where {@code attention_mask == 1}) and as Stoker pads. It is not a sample: {@code samples},
     * {@code sample_index}, the ledger and the errors do not count it. A batch of no sample (every one skipped) is left
     * empty. See {@link dev.stoker.pipeline.batch.DummyImage}.
     */
    public enum TextOnlyPolicy { ALLOW, DUMMY_IMAGE }

    /** Text-only batches get a dummy image: a batch {@code model(**batch)} takes, on every rank. */
    public static final TextOnlyPolicy DEFAULT_TEXT_ONLY = TextOnlyPolicy.DUMMY_IMAGE;

    public static final long DEFAULT_MAX_SOURCE_PIXELS = DecodeOptions.DEFAULT_MAX_SOURCE_PIXELS;
    public static final int DEFAULT_MAX_SEQUENCE_LENGTH = 8192;      // what the official SFT scripts use

    public EncodeOptions {
        if (maxSourcePixels <= 0) throw new IllegalArgumentException("max source pixels must be positive");
        if (maxSequenceLength < 0) throw new IllegalArgumentException("max sequence length must be >= 0");
        java.util.Objects.requireNonNull(pixelFormat, "pixelFormat");
        if (maxImages < 0) throw new IllegalArgumentException("max images must be >= 0");
        java.util.Objects.requireNonNull(textOnly, "textOnly");
    }

    public static EncodeOptions defaults(ProcessorPreset preset) {
        return new EncodeOptions(preset, preset.vision(), ExifPolicy.APPLY, DecodeScale.OFF,
                DEFAULT_MAX_SOURCE_PIXELS, DEFAULT_MAX_SEQUENCE_LENGTH, TruncationPolicy.REJECT, PixelFormat.FLOAT32, 0, DEFAULT_TEXT_ONLY, null, null);
    }

    public EncodeOptions withPixels(long minPixels, long maxPixels) {
        return new EncodeOptions(preset, vision.withPixels(minPixels, maxPixels), exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }

    public EncodeOptions withExif(ExifPolicy e) {
        return new EncodeOptions(preset, vision, e, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }

    public EncodeOptions withDecodeScale(DecodeScale d) {
        return new EncodeOptions(preset, vision, exif, d, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }

    public EncodeOptions withMaxSourcePixels(long n) {
        return new EncodeOptions(preset, vision, exif, decodeScale, n, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }

    public EncodeOptions withPixelFormat(PixelFormat f) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, f, maxImages, textOnly, chatTemplate, model);
    }

    /** Bytes of the pixel tensor of one image at the pixel cap ({@code max_pixels}) in this format. */
    public long maxPixelBytesPerImage() { return pixelFormat.bytesPerImage(vision.maxPixels(), vision); }

    /** With the vision config of a model folder (its geometry, mean, std and pixel bounds). */
    public EncodeOptions withVision(VisionConfig v) {
        return new EncodeOptions(preset, v, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }

    /** With what a model folder adds to the encoding (see {@link #model()}); null for none. */
    public EncodeOptions withModel(String m) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, m);
    }

    /** With the chat template rendered from {@code jinjaSource} (null: the built-in one); see {@link #chatTemplate()}. */
    public EncodeOptions withChatTemplate(String jinjaSource) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, jinjaSource, model);
    }

    /**
     * The options as the record prints them, without the chat template's source (a template is kilobytes; which one
     * renders is part of {@link #model()}).
     */
    @Override
    public String toString() {
        return "EncodeOptions[preset=" + preset + ", vision=" + vision + ", exif=" + exif + ", decodeScale=" + decodeScale
                + ", maxSourcePixels=" + maxSourcePixels + ", maxSequenceLength=" + maxSequenceLength + ", truncation=" + truncation
                + ", pixelFormat=" + pixelFormat + ", maxImages=" + maxImages + ", textOnly=" + textOnly + ", model=" + model + "]";
    }

    public EncodeOptions withMaxImages(int n) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, n, textOnly, chatTemplate, model);
    }

    /**
     * The most resized pixels one sample can carry: {@code maxImages} images at the cap, or as many
     * as the sequence limit has tokens for (each token is merge² patches), whichever is less; -1
     * when neither limit is set (a batch's size is then unbounded).
     */
    public long maxPixelsPerSample() {
        long patch = vision.patchSize(), merge = vision.mergeSize();
        long byTokens = maxSequenceLength > 0 ? maxSequenceLength * merge * merge * patch * patch : Long.MAX_VALUE;
        long byImages = maxImages > 0 ? maxImages * vision.maxPixels() : Long.MAX_VALUE;
        long most = Math.min(byTokens, byImages);
        return most == Long.MAX_VALUE ? -1 : most;
    }

    public EncodeOptions withTextOnly(TextOnlyPolicy t) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, t,
                chatTemplate, model);
    }

    public EncodeOptions withSequenceLimit(int maxLength, TruncationPolicy policy) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxLength, policy, pixelFormat, maxImages, textOnly, chatTemplate, model);
    }
}
