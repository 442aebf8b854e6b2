package dev.stoker.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * Hugging Face model folders as the tests need them, without weights: {@code config.json},
 * {@code preprocessor_config.json}, {@code tokenizer.json} (the bundled Qwen2 tokenizer) and
 * {@code tokenizer_config.json} with the published settings of each Qwen-VL family (the Hub's
 * {@code Qwen/Qwen2-VL-7B-Instruct}, {@code Qwen/Qwen2.5-VL-7B-Instruct} and {@code Qwen/Qwen3-VL-8B-Instruct}
 * files, trimmed to what the processor reads: the slow processor's {@code min_pixels}/{@code max_pixels}
 * for the first two, the fast processor's {@code size} for Qwen3-VL), and a chat template where one is
 * given. Tests then change a field to see what Stoker makes of it.
 */
public final class ModelFolders {
    /** The bundled tokenizer, a resource of stoker-text (on the class path of every test that encodes). */
    static final String BUNDLED_TOKENIZER = "/dev/stoker/text/qwen2/tokenizer.json.gz";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final List<Double> CLIP_MEAN = List.of(0.48145466, 0.4578275, 0.40821073);
    private static final List<Double> CLIP_STD = List.of(0.26862954, 0.26130258, 0.27577711);
    private static final List<Double> HALF = List.of(0.5, 0.5, 0.5);

    private ModelFolders() {}

    /** The families, by Stoker's processor name: qwen2-vl, qwen2.5-vl, qwen3-vl. */
    public static final List<String> FAMILIES = List.of("qwen2-vl", "qwen2.5-vl", "qwen3-vl");

    /** Writes the folder of {@code family} (a {@link #FAMILIES} name) into {@code dir}, without a chat template. */
    public static Path write(Path dir, String family) { return write(dir, family, null); }

    /** Writes the folder of {@code family} into {@code dir}, with {@code chatTemplate} as its {@code chat_template.json} (null: none). */
    public static Path write(Path dir, String family, String chatTemplate) {
        try {
            Files.createDirectories(dir);
            writeJson(dir.resolve("config.json"), config(family));
            writeJson(dir.resolve("preprocessor_config.json"), preprocessor(family));
            writeJson(dir.resolve("tokenizer_config.json"), JSON.createObjectNode().put("model_max_length", 32768)
                    .put("pad_token", "<|endoftext|>").put("eos_token", "<|im_end|>").put("tokenizer_class", "Qwen2Tokenizer"));
            try (InputStream in = new GZIPInputStream(resource(BUNDLED_TOKENIZER))) {
                Files.copy(in, dir.resolve("tokenizer.json"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            }
            if (chatTemplate != null) writeJson(dir.resolve("chat_template.json"), JSON.createObjectNode().put("chat_template", chatTemplate));
            return dir;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The published {@code config.json} of {@code family}, trimmed to the fields a processor and Stoker read. */
    public static ObjectNode config(String family) {
        var c = JSON.createObjectNode();
        switch (family) {
            case "qwen2-vl", "qwen2.5-vl" -> {
                boolean two = family.equals("qwen2-vl");
                c.putArray("architectures").add(two ? "Qwen2VLForConditionalGeneration" : "Qwen2_5_VLForConditionalGeneration");
                c.put("model_type", two ? "qwen2_vl" : "qwen2_5_vl").put("vision_start_token_id", 151652).put("vision_end_token_id", 151653)
                        .put("vision_token_id", 151654).put("image_token_id", 151655).put("video_token_id", 151656)
                        .put("transformers_version", two ? "4.41.2" : "4.49.0");
                var v = c.putObject("vision_config").put("depth", 32).put("patch_size", 14).put("spatial_merge_size", 2).put("temporal_patch_size", 2);
                if (two) v.put("embed_dim", 1280).put("spatial_patch_size", 14);
                else v.put("hidden_size", 1280).put("window_size", 112);
            }
            case "qwen3-vl" -> {
                c.putArray("architectures").add("Qwen3VLForConditionalGeneration");
                c.put("model_type", "qwen3_vl").put("image_token_id", 151655).put("video_token_id", 151656)
                        .put("vision_start_token_id", 151652).put("vision_end_token_id", 151653).put("transformers_version", "4.57.0.dev0");
                c.putObject("vision_config").put("depth", 27).put("hidden_size", 1152).put("patch_size", 16).put("spatial_merge_size", 2)
                        .put("temporal_patch_size", 2);
            }
            default -> throw new IllegalArgumentException("unknown family " + family);
        }
        return c;
    }

    /** The published {@code preprocessor_config.json} of {@code family}. */
    public static ObjectNode preprocessor(String family) {
        var p = JSON.createObjectNode();
        boolean three = family.equals("qwen3-vl");
        if (!three) {
            p.put("min_pixels", 3136).put("max_pixels", 12845056);
        } else {
            p.putObject("size").put("longest_edge", 16777216).put("shortest_edge", 65536);
        }
        p.put("patch_size", three ? 16 : 14).put("temporal_patch_size", 2).put("merge_size", 2);
        p.set("image_mean", JSON.valueToTree(three ? HALF : CLIP_MEAN));
        p.set("image_std", JSON.valueToTree(three ? HALF : CLIP_STD));
        if (three) {
            p.put("do_resize", true).put("do_rescale", true).put("do_normalize", true).put("do_convert_rgb", true).putNull("do_center_crop")
                    .put("resample", 3).put("rescale_factor", 0.00392156862745098).put("data_format", "channels_first")
                    .put("processor_class", "Qwen3VLProcessor").put("image_processor_type", "Qwen2VLImageProcessorFast");
        } else {
            p.put("image_processor_type", "Qwen2VLImageProcessor")
                    .put("processor_class", family.equals("qwen2-vl") ? "Qwen2VLProcessor" : "Qwen2_5_VLProcessor");
        }
        return p;
    }

    /** The audio families (issue 32), by Stoker's processor name. */
    public static final List<String> AUDIO_FAMILIES = List.of("qwen2-audio", "qwen2.5-omni", "qwen3-omni");

    /**
     * Writes the folder of the audio family {@code family} (an {@link #AUDIO_FAMILIES} name) into {@code dir}: the published
     * {@code config.json} trimmed to the token ids and rates ({@code Qwen/Qwen2-Audio-7B-Instruct}, {@code Qwen/Qwen2.5-Omni-7B}'s
     * thinker, {@code Qwen/Qwen3-Omni-30B-A3B-Instruct}'s thinker), {@code preprocessor_config.json} with the Whisper settings
     * (and the Omni models' image processor), and the bundled tokenizer with the family's special tokens as added tokens at
     * their ids, as the family's own tokenizer has them; {@code chatTemplate} as {@code chat_template.jinja} (null: none).
     */
    public static Path writeAudio(Path dir, String family, String chatTemplate) {
        try {
            Files.createDirectories(dir);
            var c = JSON.createObjectNode();
            var p = JSON.createObjectNode().put("feature_extractor_type", "WhisperFeatureExtractor").put("feature_size", 128)
                    .put("hop_length", 160).put("n_fft", 400).put("sampling_rate", 16000).put("padding_value", 0.0).put("return_attention_mask", true);
            Map<Integer, String> added;
            switch (family) {
                case "qwen2-audio" -> {
                    c.put("model_type", "qwen2_audio").put("audio_token_index", 151646);
                    p.put("chunk_length", 30).put("n_samples", 480000).put("nb_max_frames", 3000).put("processor_class", "Qwen2AudioProcessor");
                    added = Map.of(151646, "<|AUDIO|>", 151647, "<|audio_bos|>", 151648, "<|audio_eos|>");
                }
                case "qwen2.5-omni" -> {
                    c.put("model_type", "qwen2_5_omni").putObject("thinker_config").put("audio_token_index", 151646)
                            .put("audio_start_token_id", 151647).put("audio_end_token_id", 151648).put("image_token_index", 151655)
                            .put("video_token_index", 151656).put("vision_start_token_id", 151652).put("vision_end_token_id", 151653)
                            .put("position_id_per_seconds", 25).put("seconds_per_chunk", 2)
                            .putObject("vision_config").put("patch_size", 14).put("spatial_merge_size", 2).put("temporal_patch_size", 2);
                    p.put("chunk_length", 300).put("n_samples", 4800000).put("nb_max_frames", 30000).put("processor_class", "Qwen2_5OmniProcessor")
                            .put("image_processor_type", "Qwen2VLImageProcessor").put("min_pixels", 3136).put("max_pixels", 12845056)
                            .put("patch_size", 14).put("merge_size", 2).put("temporal_patch_size", 2).put("resample", 3)
                            .put("rescale_factor", 0.00392156862745098);
                    p.set("image_mean", JSON.valueToTree(CLIP_MEAN));
                    p.set("image_std", JSON.valueToTree(CLIP_STD));
                    added = Map.of(151646, "<|AUDIO|>", 151647, "<|audio_bos|>", 151648, "<|audio_eos|>", 151652, "<|vision_bos|>",
                            151653, "<|vision_eos|>", 151655, "<|IMAGE|>", 151656, "<|VIDEO|>");
                }
                case "qwen3-omni" -> {
                    c.put("model_type", "qwen3_omni_moe").putObject("thinker_config").put("audio_token_id", 151675)
                            .put("audio_start_token_id", 151669).put("audio_end_token_id", 151670).put("image_token_id", 151655)
                            .put("video_token_id", 151656).put("vision_start_token_id", 151652).put("position_id_per_seconds", 13)
                            .putObject("vision_config").put("patch_size", 16).put("spatial_merge_size", 2).put("temporal_patch_size", 2);
                    // the published preprocessor_config.json's image processor (Qwen/Qwen3-Omni-30B-A3B-Instruct): patch 16, mean/std 0.5
                    p.put("chunk_length", 300).put("n_samples", 4800000).put("nb_max_frames", 30000).put("processor_class", "Qwen3OmniMoeProcessor")
                            .put("image_processor_type", "Qwen2VLImageProcessor").put("min_pixels", 3136).put("max_pixels", 12845056)
                            .put("patch_size", 16).put("merge_size", 2).put("temporal_patch_size", 2);
                    p.set("image_mean", JSON.valueToTree(new double[] {0.5, 0.5, 0.5}));
                    p.set("image_std", JSON.valueToTree(new double[] {0.5, 0.5, 0.5}));
                    added = Map.of(151669, "<|audio_start|>", 151670, "<|audio_end|>", 151675, "<|audio_pad|>");
                }
                default -> throw new IllegalArgumentException("unknown audio family " + family);
            }
            writeJson(dir.resolve("config.json"), c);
            writeJson(dir.resolve("preprocessor_config.json"), p);
            writeJson(dir.resolve("tokenizer_config.json"), JSON.createObjectNode().put("model_max_length", 32768)
                    .put("pad_token", "<|endoftext|>").put("eos_token", "<|im_end|>").put("tokenizer_class", "Qwen2Tokenizer"));
            ObjectNode tokenizer;
            try (InputStream in = new GZIPInputStream(resource(BUNDLED_TOKENIZER))) {
                tokenizer = (ObjectNode) JSON.readTree(in);
            }
            var list = (com.fasterxml.jackson.databind.node.ArrayNode) tokenizer.get("added_tokens");
            var left = new java.util.TreeMap<>(added);
            for (var t : list) {
                String name = left.remove(t.get("id").asInt());
                if (name != null) ((ObjectNode) t).put("content", name);
            }
            for (var e : left.entrySet()) // ids past the bundled ones (Qwen3-Omni's)
                list.addObject().put("id", e.getKey()).put("content", e.getValue()).put("single_word", false).put("lstrip", false)
                        .put("rstrip", false).put("normalized", false).put("special", true);
            JSON.writeValue(dir.resolve("tokenizer.json").toFile(), tokenizer);
            if (chatTemplate != null) Files.writeString(dir.resolve("chat_template.jinja"), chatTemplate);
            return dir;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Rewrites one JSON file of the folder: {@code edit} changes its tree. */
    public static void edit(Path dir, String file, java.util.function.Consumer<ObjectNode> edit) {
        try {
            var tree = (ObjectNode) JSON.readTree(dir.resolve(file).toFile());
            edit.accept(tree);
            writeJson(dir.resolve(file), tree);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * The published chat template of {@code family}'s Instruct model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), or of the Qwen3-VL
     * Thinking model for {@code "qwen3-vl-thinking"}: copies kept with their sources in {@code templates/SOURCE.md}.
     */
    public static String publishedTemplate(String family) {
        try (InputStream in = resource("/dev/stoker/testkit/templates/" + family + (family.endsWith("thinking") ? "" : "-instruct") + ".jinja")) {
            return new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * The options that say what {@code family}'s folder says: processor, pixel bounds, and the image backend its
     * {@code transformers_version} implies (Qwen3-VL's 4.57.0.dev0: torchvision; the tokenizer is the bundled one).
     */
    public static Map<String, String> equivalentOptions(String family) {
        boolean three = family.equals("qwen3-vl");
        return Map.of("--processor", family, "--min-pixels", three ? "65536" : "3136", "--max-pixels", three ? "16777216" : "12845056",
                "--image-backend", three ? "torchvision" : "pil");
    }

    private static InputStream resource(String name) throws IOException {
        InputStream in = ModelFolders.class.getResourceAsStream(name);
        if (in == null) throw new IOException(name + " is not on the class path (stoker-text's bundled tokenizer)");
        return in;
    }

    private static void writeJson(Path file, Object tree) throws IOException {
        JSON.writerWithDefaultPrettyPrinter().writeValue(file.toFile(), tree);
    }
}
