package dev.stoker.video.sample;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumMap;
import java.util.Map;
import java.util.Set;

/**
 * A model folder's video processor settings, read as {@code AutoVideoProcessor.from_pretrained(DIR)} reads them:
 * {@code video_preprocessor_config.json}, or where the folder has none (the Qwen2-VL and Qwen2.5-VL Hub folders),
 * {@code preprocessor_config.json}, whose {@code min_pixels}/{@code max_pixels} the Qwen2-VL video processor takes as
 * its per-frame budget. The result is the {@code hf} sampler's defaults ({@link #options()}), which command-level
 * options override ({@link VideoOptions#over}), plus the geometry and normalisation the pixel path needs.
 *
 * <p>What Stoker cannot reproduce is refused, naming the file and the field: another processor type; a patch, merge
 * or temporal patch size other than the family's (14/16, 2, 2); a skipped step ({@code do_resize},
 * {@code do_rescale}, {@code do_normalize}, {@code do_convert_rgb} false), another filter than bicubic (3) or
 * rescale factor than 1/255; a centre crop or padding; sampling switched off ({@code do_sample_frames} false: the
 * processor would keep every frame, and Stoker's {@code hf} sampler always samples); a fixed {@code num_frames};
 * transformers 5.18's {@code cap_pixels_per_frame} on (not in the vectors, correction 13); a {@code size} that is not
 * {shortest_edge, longest_edge}; a folder with no pixel budget at all (the class defaults are not reproduced); any
 * other field with a value, since its effect on the tensors is unknown. {@code fps} null (the Qwen2-VL class has no
 * default) leaves Stoker's default of 2.0 (correction 4).
 *
 * @param file              the file read
 * @param family            the family it was read for
 * @param options           fps, min/max frames, min/max pixels where the file gives them
 * @param patchSize         14 (Qwen2/2.5) or 16 (Qwen3)
 * @param temporalPatchSize 2
 * @param mergeSize         2
 * @param mean              per-channel mean, as written
 * @param std               per-channel std, as written (positive)
 */
public record VideoProcessorConfig(Path file, ProcessorPreset family, VideoOptions options, int patchSize, int temporalPatchSize,
                                   int mergeSize, double[] mean, double[] std) {
    public static final String VIDEO_PREPROCESSOR_CONFIG = "video_preprocessor_config.json";
    public static final String PREPROCESSOR_CONFIG = "preprocessor_config.json";
    /** The longest config file read (a real one is under 1 kB). */
    static final long MAX_CONFIG_BYTES = 1L << 20;

    /** Fields that name or route the processor and do not change its tensors. */
    static final Set<String> NEUTRAL = Set.of("processor_class", "_processor_class", "auto_map", "video_processor_type",
            "image_processor_type", "feature_extractor_type", "return_metadata", "return_tensors", "data_format",
            "input_data_format", "device", "default_to_square", "video_metadata", "crop_size", "pad_size",
            "max_video_tokens", // read only with cap_pixels_per_frame, which is refused when on
            // the Whisper feature extractor's settings in an Omni folder's shared preprocessor_config.json (issue 32: read and
            // checked by AudioModelFolder; they do not touch video)
            "feature_size", "sampling_rate", "hop_length", "n_fft", "n_samples", "nb_max_frames", "chunk_length", "dither",
            "padding_value", "padding_side", "return_attention_mask");

    private static final ObjectMapper JSON = new ObjectMapper();

    public VideoProcessorConfig {
        mean = mean.clone();
        std = std.clone();
    }

    @Override
    public double[] mean() { return mean.clone(); }

    @Override
    public double[] std() { return std.clone(); }

    /** A video processor config Stoker cannot use, with a message naming the file and the field. */
    public static final class VideoProcessorConfigException extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        public VideoProcessorConfigException(String message) { super(message); }
    }

    /**
     * Reads {@code dir}'s video processor config for {@code family}.
     *
     * @throws VideoProcessorConfigException naming the file and field that is missing, unreadable or not reproducible
     */
    public static VideoProcessorConfig read(Path dir, ProcessorPreset family) {
        Path file = dir.resolve(VIDEO_PREPROCESSOR_CONFIG);
        if (!Files.isRegularFile(file)) file = dir.resolve(PREPROCESSOR_CONFIG);
        if (!Files.isRegularFile(file))
            throw new VideoProcessorConfigException(dir + ": neither " + VIDEO_PREPROCESSOR_CONFIG + " nor " + PREPROCESSOR_CONFIG + " is there");
        JsonNode json;
        try {
            if (Files.size(file) > MAX_CONFIG_BYTES)
                throw new VideoProcessorConfigException(file + " is over " + (MAX_CONFIG_BYTES >> 10) + " KiB; a processor config is under 1 kB");
            json = JSON.readTree(Files.readString(file));
        } catch (IOException e) {
            throw new VideoProcessorConfigException(file + " cannot be read as JSON: "
                    + String.valueOf(e.getMessage()).lines().findFirst().orElse(""));
        }
        return parse(json, file, family);
    }

    /** Parses an already read config; {@code file} names it in errors and tells which of the two files it is. */
    public static VideoProcessorConfig parse(JsonNode json, Path file, ProcessorPreset family) {
        if (json == null || !json.isObject()) throw new VideoProcessorConfigException(file + " is not a JSON object");
        boolean video = file.getFileName().toString().equals(VIDEO_PREPROCESSOR_CONFIG);
        boolean half = family == ProcessorPreset.QWEN3_VL || family == ProcessorPreset.QWEN3_OMNI; // patch 16, mean/std 0.5
        int patch = half ? 16 : 14;
        var seen = new java.util.HashSet<String>();
        java.util.function.Function<String, JsonNode> get = name -> {
            seen.add(name);
            JsonNode v = json.get(name);
            return v == null || v.isNull() ? null : v;
        };
        JsonNode type = get.apply(video ? "video_processor_type" : "image_processor_type");
        String typePattern = video ? "Qwen[0-9.]*VLVideoProcessor(Fast)?" : "Qwen[0-9.]*VLImageProcessor(Fast|Pil)?";
        if (type != null && !(type.isTextual() && type.asText().matches(typePattern)))
            throw err(file, video ? "video_processor_type" : "image_processor_type", "is " + type + ", not a Qwen-VL "
                    + (video ? "video" : "image") + " processor that Stoker reproduces");
        requireInt(file, get.apply("patch_size"), "patch_size", patch);
        requireInt(file, get.apply("temporal_patch_size"), "temporal_patch_size", 2);
        requireInt(file, get.apply("merge_size"), "merge_size", 2);
        for (String step : new String[] {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
            JsonNode v = get.apply(step);
            if (v != null && !(v.isBoolean() && v.asBoolean()))
                throw err(file, step, "is " + v + "; Stoker always does this step, as the published processors do");
        }
        for (String off : new String[] {"do_center_crop", "do_pad", "cap_pixels_per_frame"}) {
            JsonNode v = get.apply(off);
            if (v != null && !(v.isBoolean() && !v.asBoolean()))
                throw err(file, off, "is " + v + "; Stoker does not reproduce it (the published processors leave it off)");
        }
        JsonNode sample = get.apply("do_sample_frames");
        if (sample != null && !(sample.isBoolean() && sample.asBoolean()))
            throw err(file, "do_sample_frames", "is " + sample + ": this processor would keep every frame; Stoker's hf sampler always "
                    + "samples (set --video-fps, or use the qwen-vl-utils sampler)");
        JsonNode numFrames = get.apply("num_frames");
        if (numFrames != null)
            throw err(file, "num_frames", "is " + numFrames + "; Stoker takes a fixed frame count per item (nframes), not from the config");
        JsonNode resample = get.apply("resample");
        if (resample != null && !(resample.canConvertToInt() && resample.isIntegralNumber() && resample.asInt() == 3))
            throw err(file, "resample", "is " + resample + "; Stoker resizes with bicubic (3) only");
        JsonNode rescale = get.apply("rescale_factor");
        if (rescale != null && !(rescale.isNumber() && rescale.asDouble() == 1.0 / 255))
            throw err(file, "rescale_factor", "is " + rescale + "; Stoker rescales by 1/255 only");
        double[] mean = triple(file, get.apply("image_mean"), "image_mean", half
                ? new double[] {0.5, 0.5, 0.5} : dev.stoker.core.VisionConfig.CLIP_MEAN);
        double[] std = triple(file, get.apply("image_std"), "image_std", half
                ? new double[] {0.5, 0.5, 0.5} : dev.stoker.core.VisionConfig.CLIP_STD);
        for (double s : std) if (!(s > 0)) throw err(file, "image_std", "has a value that is not positive: " + json.get("image_std"));

        Map<VideoKey, Double> opts = new EnumMap<>(VideoKey.class);
        JsonNode size = get.apply("size");
        Double sizeMin = null, sizeMax = null;
        if (size != null) {
            if (!size.isObject()) throw err(file, "size", "is " + size + ", not {shortest_edge, longest_edge}");
            for (var e : size.properties())
                if (!e.getKey().equals("shortest_edge") && !e.getKey().equals("longest_edge"))
                    throw err(file, "size." + e.getKey(), "a Qwen-VL video processor's size holds shortest_edge and longest_edge (pixel counts) only");
            if (size.hasNonNull("shortest_edge")) sizeMin = number(file, size.get("shortest_edge"), "size.shortest_edge", VideoKey.MIN_PIXELS);
            if (size.hasNonNull("longest_edge")) sizeMax = number(file, size.get("longest_edge"), "size.longest_edge", VideoKey.MAX_PIXELS);
        }
        JsonNode minP = get.apply("min_pixels"), maxP = get.apply("max_pixels");
        Double min = minP != null ? Double.valueOf(number(file, minP, "min_pixels", VideoKey.MIN_PIXELS)) : sizeMin;
        Double max = maxP != null ? Double.valueOf(number(file, maxP, "max_pixels", VideoKey.MAX_PIXELS)) : sizeMax;
        if (min == null || max == null)
            throw err(file, min == null ? "min_pixels" : "max_pixels", "is missing (and so is size." + (min == null ? "shortest_edge" : "longest_edge")
                    + "); Stoker does not reproduce the processor class's defaults: give --video-min-pixels/--video-max-pixels");
        if (min > max) throw err(file, "min_pixels", VideoKey.format(min) + " is over max_pixels " + VideoKey.format(max));
        opts.put(VideoKey.MIN_PIXELS, min);
        opts.put(VideoKey.MAX_PIXELS, max);
        JsonNode fps = get.apply("fps");
        if (fps != null) opts.put(VideoKey.FPS, number(file, fps, "fps", VideoKey.FPS));
        JsonNode minF = get.apply("min_frames"), maxF = get.apply("max_frames");
        if (minF != null) opts.put(VideoKey.MIN_FRAMES, number(file, minF, "min_frames", VideoKey.MIN_FRAMES));
        if (maxF != null) opts.put(VideoKey.MAX_FRAMES, number(file, maxF, "max_frames", VideoKey.MAX_FRAMES));

        for (var e : json.properties()) {
            String name = e.getKey();
            if (seen.contains(name) || NEUTRAL.contains(name) || e.getValue().isNull()) continue;
            throw err(file, name, "is " + e.getValue() + "; Stoker does not know what it does to the video tensors, so it does not guess");
        }
        // the Omni processors pass their own size at every call (VideoPlanner.hfDefaults)
        if (family == ProcessorPreset.QWEN3_OMNI || family == ProcessorPreset.QWEN2_5_OMNI) {
            opts.remove(VideoKey.MIN_PIXELS);
            opts.remove(VideoKey.MAX_PIXELS);
        }
        return new VideoProcessorConfig(file, family, new VideoOptions(opts), patch, 2, 2, mean, std);
    }

    private static void requireInt(Path file, JsonNode v, String field, int expected) {
        if (v != null && !(v.isIntegralNumber() && v.canConvertToInt() && v.asInt() == expected))
            throw err(file, field, "is " + v + ", but the family's processor uses " + expected);
    }

    private static double number(Path file, JsonNode v, String field, VideoKey key) {
        if (!v.isNumber()) throw err(file, field, "is " + v + ", not a number");
        try {
            return key.check(file + ": " + field, v.asDouble());
        } catch (IllegalArgumentException e) {
            throw new VideoProcessorConfigException(e.getMessage());
        }
    }

    private static double[] triple(Path file, JsonNode v, String field, double[] dflt) {
        if (v == null) return dflt.clone();
        if (!v.isArray() || v.size() != 3) throw err(file, field, "is " + v + ", not three numbers");
        double[] out = new double[3];
        for (int i = 0; i < 3; i++) {
            if (!v.get(i).isNumber()) throw err(file, field, "is " + v + ", not three numbers");
            out[i] = v.get(i).asDouble();
        }
        return out;
    }

    private static VideoProcessorConfigException err(Path file, String field, String what) {
        return new VideoProcessorConfigException(file + ": " + field + " " + what);
    }
}
