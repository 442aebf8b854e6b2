package dev.stoker.encode;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.decode.DecodeOptions;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.image.qwenvl.ImageBackend;
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
 * @param pixelFormat      what a batch carries of its images and videos: FLOAT32 {@code pixel_values} (default), or
 *                         UINT8, the resized RGB pixels ({@code pixel_values_u8}, {@code pixel_values_videos_u8}) that
 *                         the trainer normalizes and patchifies
 * @param maxImages        images a sample may have (0 = no limit but the sequence limit's); a sample with more is refused
 * @param textOnly         what a batch without any image carries: nothing more (ALLOW), or one small masked image
 *                         (DUMMY_IMAGE, the default), so that every rank runs the vision tower
 * @param chatTemplate     the Jinja source of the chat template to render chats with ({@code --chat-template model}: the
 *                         model's own, rendered as transformers renders it), or null for the built-in template of the
 *                         preset's family (the default, and what a model's template is checked against)
 * @param model            what a model folder (--model) adds to the encoding that the fields above do not say: the
 *                         SHA-256 of its tokenizer (the chat template is {@link #chatTemplate()}); null
 *                         without a model folder
 * @param inputContract    which keyword arguments a batch hands to {@code forward} and how they are padded: those of the
 *                         transformers release the trainer runs ({@code --transformers}, {@link TransformersVersion})
 * @param decodeMemoryBytes the most memory decoding one image may take on one CPU thread ({@code --decode-memory},
 *                         {@link DecodeOptions#maxDecodeBytes()}): an image whose header says it needs more is that
 *                         sample's error, before any pixel memory is allocated; 0: the default for the threads that
 *                         decode ({@link DecodeOptions#defaultMaxDecodeBytes}, half the heap shared among them). It
 *                         changes no sample's tensors, only which images are refused.
 * @param imageBackend     which Hugging Face image processor the images' {@code pixel_values} reproduce
 *                         ({@code --image-backend}): PIL (the default, {@code Qwen2VLImageProcessorPil} / the slow 4.x
 *                         class) or TORCHVISION (5.x's default {@code Qwen2VLImageProcessor}, 4.57's forced
 *                         {@code Qwen2VLImageProcessorFast}); same grids and tokens, pixel values 1–2 levels apart. The
 *                         compact UINT8 pixel format is normalized by the trainer the PIL way and is refused with
 *                         TORCHVISION.
 * @param video            how the videos of samples become model inputs (issue 29: sampler, options, the trainer's
 *                         release, decode deadline), or null: no video (video records refused as unserved media;
 *                         {@link #defaults} has none, a node's configuration turns it on)
 * @param videoRefusal     why this job takes no video, said where a video record is refused (the trainer's transformers
 *                         release has no video rules Stoker knows, for one); null with {@code video} set, and null for
 *                         the plain "video is not supported" (as every job without video said before). Not part of the
 *                         encoding: it changes no tensor, only an error's words.
 * @param audio            the audio family and its features' padding (issue 32: {@code --processor qwen2-audio |
 *                         qwen2.5-omni | qwen3-omni}, {@code --audio-pad}), or null for a Qwen-VL processor, which takes no
 *                         audio (audio records refused). With it, {@link #preset()} is the family's vision half
 *                         ({@link ProcessorPreset#visionFamily()}), whose image and video rules its images and videos follow.
 */
public record EncodeOptions(ProcessorPreset preset, VisionConfig vision, ExifPolicy exif, DecodeScale decodeScale,
                            long maxSourcePixels, int maxSequenceLength, TruncationPolicy truncation, PixelFormat pixelFormat,
                            int maxImages, TextOnlyPolicy textOnly, String chatTemplate, String model, InputContract inputContract,
                            long decodeMemoryBytes, ImageBackend imageBackend, dev.stoker.encode.video.VideoEncoding video,
                            String videoRefusal, dev.stoker.encode.audio.AudioEncoding audio) {

    /** JPEG decode scaling: OFF is bit-exact with Pillow; AUTO trades exactness for speed like Pillow's draft(). */
    public enum DecodeScale { OFF, AUTO }

    /**
     * The image tensor of a batch. FLOAT32: {@code pixel_values}, normalized and patchified, (rows, 3·t·p²) float32.
     * UINT8 (the compact wire format): {@code pixel_values_u8}, each image's resized RGB pixels, (Σ H·W, 3) uint8,
     * with {@code pixel_norm} and {@code pixel_patch} for the trainer's conversion — 1/8 of the bytes for t = 2; and, in a
     * batch with videos, {@code pixel_values_videos_u8}, each video's kept frames resized, (Σ T·H·W, 3) uint8, with
     * {@code video_frame_counts} — 1/4 of {@code pixel_values_videos}' bytes (a row's two frames are both sent).
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
     * <p>ALLOW: the samples as they are. The batch's {@code pixel_values} (0, row length) and {@code image_grid_thw} (0, 3)
     * stay in its layout but are flagged as its metadata, so that clients leave them out of the dict handed to
     * {@code forward}: Hugging Face's Qwen-VL vision tower fails on such empty tensors (docs/model-inputs.md §4). Under
     * FSDP or ZeRO-3 a rank that skips the vision tower while the others run it waits forever on their collectives: the
     * job hangs.
     *
     * <p>DUMMY_IMAGE (the default): LLaMA-Factory's practice ({@code MultiModalDataCollatorForSeq2Seq}, "fake_images",
     * which it applies to every multimodal model): a white 64×64 image, processed with the job's own settings (its
     * smart_resize bounds, patch and merge sizes, mean and std), whose tokens {@code <|vision_start|>}, its image pads and
     * {@code <|vision_end|>} are appended after the first sample's last token with label −100 and attention 0, and whose
     * pixels are the batch's only {@code pixel_values}. Every rank runs the vision tower; the loss is unchanged (no label,
     * nothing attends to the dummy) and so are every other token's ids, labels, attention and positions. The dummy's
     * positions are the padding's ({@link InputContract#positionPad()}: 1, or 0 from transformers 5.3), as Hugging Face's
     * {@code get_rope_index} leaves attention-0 tokens (it writes only where the attention mask is set). It is not a sample: {@code samples},
     * {@code sample_index}, the ledger and the errors do not count it. A batch of no sample (every one skipped) is left
     * empty. See {@link dev.stoker.encode.batch.DummyImage}.
     */
    public enum TextOnlyPolicy { ALLOW, DUMMY_IMAGE }

    /** Text-only batches get a dummy image: a batch {@code model(**batch)} takes, on every rank. */
    public static final TextOnlyPolicy DEFAULT_TEXT_ONLY = TextOnlyPolicy.DUMMY_IMAGE;

    /**
     * The model inputs a batch carries and how they are padded, by the transformers release the trainer runs
     * (docs/model-inputs.md §3, §7). Every contract carries {@code input_ids}, {@code labels}, {@code attention_mask},
     * {@code position_ids} (3, B, L) and the images' {@code pixel_values} and {@code image_grid_thw}.
     *
     * <p>QWEN_VL_FINETUNE (the default; no release named, or one before 5.3): the official qwen-vl-finetune collator's
     * tensors, {@code position_ids} padded with 1 (what transformers 4.x's {@code get_rope_index} leaves at tokens of
     * attention 0: it fills the tensor with {@code torch.ones}).
     *
     * <p>TRANSFORMERS_5_3 (5.3 and later): also {@code mm_token_type_ids} int64 (B, L) right after {@code position_ids},
     * 1 where {@code input_ids} is the image pad 151655, 2 where it is the video pad 151656, 0 elsewhere (text, vision
     * start and end, padding; the dummy image's pads are 1), as {@code ProcessorMixin.create_mm_token_type_ids} marks
     * them and 5.3's {@code get_rope_index} reads them; {@code position_ids} padded with 0, as 5.x fills the tensor with
     * {@code torch.zeros} (the dummy image's tokens, of attention 0, are 0 too).
     */
    public enum InputContract {
        QWEN_VL_FINETUNE(1, false), TRANSFORMERS_5_3(0, true);

        private final long positionPad;
        private final boolean mmTokenTypeIds;

        InputContract(long positionPad, boolean mmTokenTypeIds) {
            this.positionPad = positionPad;
            this.mmTokenTypeIds = mmTokenTypeIds;
        }

        /** The {@code position_ids} value of a token of attention 0 (padding, the dummy image). */
        public long positionPad() { return positionPad; }

        /** Whether batches carry {@code mm_token_type_ids}. */
        public boolean mmTokenTypeIds() { return mmTokenTypeIds; }
    }

    /** The official qwen-vl-finetune tensors, which every transformers release Stoker has been used with takes. */
    public static final InputContract DEFAULT_INPUT_CONTRACT = InputContract.QWEN_VL_FINETUNE;

    public static final long DEFAULT_MAX_SOURCE_PIXELS = DecodeOptions.DEFAULT_MAX_SOURCE_PIXELS;
    public static final int DEFAULT_MAX_SEQUENCE_LENGTH = 8192;      // what the official SFT scripts use

    public EncodeOptions {
        if (maxSourcePixels <= 0) throw new IllegalArgumentException("max source pixels must be positive");
        if (preset.audio() != null) // the image and video machinery knows the Qwen-VL families only
            throw new IllegalArgumentException(preset + ": encode under its vision family " + preset.visionFamily() + " with withAudio(…)");
        if (maxSequenceLength < 0) throw new IllegalArgumentException("max sequence length must be >= 0");
        java.util.Objects.requireNonNull(pixelFormat, "pixelFormat");
        if (maxImages < 0) throw new IllegalArgumentException("max images must be >= 0");
        java.util.Objects.requireNonNull(textOnly, "textOnly");
        java.util.Objects.requireNonNull(inputContract, "inputContract");
        if (decodeMemoryBytes < 0) throw new IllegalArgumentException("decode memory must be >= 0 (0: the default), got " + decodeMemoryBytes);
        java.util.Objects.requireNonNull(imageBackend, "imageBackend");
        if (video != null && videoRefusal != null) throw new IllegalArgumentException("options with video refuse none: no reason to give");
        if (imageBackend == ImageBackend.TORCHVISION && pixelFormat == PixelFormat.UINT8)
            throw new IllegalArgumentException("--pixel-format uint8 with --image-backend torchvision: the trainer normalizes the compact "
                    + "format as the PIL processor does (stoker.pixels.to_pixel_values), not with torchvision's fused normalize; "
                    + "use --pixel-format float32 or --image-backend pil");
    }

    public static EncodeOptions defaults(ProcessorPreset preset) {
        return new EncodeOptions(preset, preset.vision(), ExifPolicy.APPLY, DecodeScale.OFF,
                DEFAULT_MAX_SOURCE_PIXELS, DEFAULT_MAX_SEQUENCE_LENGTH, TruncationPolicy.REJECT, PixelFormat.FLOAT32, 0, DEFAULT_TEXT_ONLY, null, null,
                DEFAULT_INPUT_CONTRACT, 0, ImageBackend.PIL, null, null, null);
    }

    public EncodeOptions withPixels(long minPixels, long maxPixels) {
        return new EncodeOptions(preset, vision.withPixels(minPixels, maxPixels), exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    public EncodeOptions withExif(ExifPolicy e) {
        return new EncodeOptions(preset, vision, e, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    public EncodeOptions withDecodeScale(DecodeScale d) {
        return new EncodeOptions(preset, vision, exif, d, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    public EncodeOptions withMaxSourcePixels(long n) {
        return new EncodeOptions(preset, vision, exif, decodeScale, n, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /** With the per-thread decode memory budget (0: the default for the threads that decode). */
    public EncodeOptions withDecodeMemory(long bytes) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, bytes, imageBackend, video, videoRefusal, audio);
    }

    /** The budget {@code threads} decoding threads each get: {@link #decodeMemoryBytes()}, or the default when it is 0. */
    public long decodeMemoryBytes(int threads) {
        return decodeMemoryBytes > 0 ? decodeMemoryBytes : DecodeOptions.defaultMaxDecodeBytes(threads);
    }

    public EncodeOptions withPixelFormat(PixelFormat f) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, f, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /** Bytes of the pixel tensor of one image at the pixel cap ({@code max_pixels}) in this format. */
    public long maxPixelBytesPerImage() { return pixelFormat.bytesPerImage(vision.maxPixels(), vision); }

    /** With the vision config of a model folder (its geometry, mean, std and pixel bounds). */
    public EncodeOptions withVision(VisionConfig v) {
        return new EncodeOptions(preset, v, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /** With what a model folder adds to the encoding (see {@link #model()}); null for none. */
    public EncodeOptions withModel(String m) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, textOnly, chatTemplate, m, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /** The SHA-256 of the chat template's source, hex; null for the built-in template. */
    public String chatTemplateSha256() { return chatTemplate == null ? null : sha256(chatTemplate); }

    /** The SHA-256 of {@code text}'s UTF-8 bytes, hex. */
    public static String sha256(String text) {
        try {
            return java.util.HexFormat.of().formatHex(java.security.MessageDigest.getInstance("SHA-256")
                    .digest(text.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** With the chat template rendered from {@code jinjaSource} (null: the built-in one); see {@link #chatTemplate()}. */
    public EncodeOptions withChatTemplate(String jinjaSource) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, jinjaSource, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /**
     * The options as the record prints them, without the chat template's source (a template is kilobytes; which one
     * renders is part of {@link #model()}).
     */
    @Override
    public String toString() {
        return "EncodeOptions[preset=" + preset + ", vision=" + vision + ", exif=" + exif + ", decodeScale=" + decodeScale
                + ", maxSourcePixels=" + maxSourcePixels + ", maxSequenceLength=" + maxSequenceLength + ", truncation=" + truncation
                + ", pixelFormat=" + pixelFormat + ", maxImages=" + maxImages + ", textOnly=" + textOnly + ", inputContract=" + inputContract
                + ", model=" + model + ", decodeMemoryBytes=" + decodeMemoryBytes + ", imageBackend=" + imageBackend + (video == null ? "" : ", video=" + video)
                + (videoRefusal == null ? "" : ", videoRefusal=" + videoRefusal) + (audio == null ? "" : ", audio=" + audio) + "]";
    }

    public EncodeOptions withMaxImages(int n) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, n, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /**
     * The most resized pixels one sample can carry: {@code maxImages} images at the cap (not with video, which that limit
     * does not bound), or as many as the sequence limit has tokens for (each token is merge² patches), whichever is less; -1
     * when neither limit is set (a batch's size is then unbounded).
     */
    public long maxPixelsPerSample() {
        long patch = vision.patchSize(), merge = vision.mergeSize();
        long byTokens = maxSequenceLength > 0 ? maxSequenceLength * merge * merge * patch * patch : Long.MAX_VALUE;
        // --max-images bounds images, not videos: with video only the sequence limit bounds a sample's pixels
        long byImages = maxImages > 0 && video == null ? maxImages * vision.maxPixels() : Long.MAX_VALUE;
        long most = Math.min(byTokens, byImages);
        return most == Long.MAX_VALUE ? -1 : most;
    }

    public EncodeOptions withTextOnly(TextOnlyPolicy t) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages, t,
                chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /** With the image processor whose {@code pixel_values} images get (see {@link #imageBackend()}). */
    public EncodeOptions withImageBackend(ImageBackend backend) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, backend, video, videoRefusal, audio);
    }

    /** With the tensors of {@code contract} (see {@link InputContract}). */
    public EncodeOptions withInputContract(InputContract contract) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, chatTemplate, model, contract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }

    /**
     * With the videos of samples encoded as {@code v} says (issue 29): the parser reads video records and a batch that
     * holds a video carries {@code pixel_values_videos}, {@code video_grid_thw} (and Qwen2.5's {@code second_per_grid_ts});
     * null: no video, video records refused as media Stoker does not serve.
     */
    public EncodeOptions withVideo(dev.stoker.encode.video.VideoEncoding v) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, v, null, audio);
    }

    /**
     * Without video, video records refused with {@code reason} said after "video is not supported" (null: nothing
     * more); see {@link #videoRefusal()}.
     */
    public EncodeOptions withVideoRefused(String reason) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, null, reason, audio);
    }

    /** With the audio clips of samples encoded as {@code a} says (null: none, audio records refused). */
    public EncodeOptions withAudio(dev.stoker.encode.audio.AudioEncoding a) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxSequenceLength, truncation, pixelFormat, maxImages,
                textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, a);
    }

    /**
     * The record parser these options read with: one that reads video records when {@link #video()} is set, else one
     * that refuses them, saying {@link #videoRefusal()}.
     */
    public dev.stoker.text.SampleParser sampleParser() {
        var audios = audio != null ? dev.stoker.text.SampleParser.Audios.ACCEPT : dev.stoker.text.SampleParser.Audios.REFUSE;
        return video != null ? new dev.stoker.text.SampleParser(dev.stoker.text.SampleParser.Videos.ACCEPT, null, audios)
                : new dev.stoker.text.SampleParser(dev.stoker.text.SampleParser.Videos.REFUSE, videoRefusal, audios);
    }

    public EncodeOptions withSequenceLimit(int maxLength, TruncationPolicy policy) {
        return new EncodeOptions(preset, vision, exif, decodeScale, maxSourcePixels, maxLength, policy, pixelFormat, maxImages, textOnly, chatTemplate, model, inputContract, decodeMemoryBytes, imageBackend, video, videoRefusal, audio);
    }
}
