package dev.stoker.core.model;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * What a Hugging Face Qwen-VL model folder says about how its inputs are made, read as
 * {@code AutoProcessor.from_pretrained(DIR)} reads it: the family from {@code config.json}'s
 * {@code model_type}; the image processor's geometry, mean, std and pixel bounds from
 * {@code preprocessor_config.json} ({@code min_pixels}/{@code max_pixels} where given, which win over
 * {@code size.shortest_edge}/{@code longest_edge}, as in {@code Qwen2VLImageProcessor.__init__});
 * the tokenizer ({@code tokenizer.json}); the chat template ({@code chat_template.jinja}, else
 * {@code chat_template.json}, else {@code tokenizer_config.json}'s {@code chat_template}: the order
 * transformers looks them up in).
 *
 * <p>What Stoker cannot reproduce is refused, naming the file and the field: a model type that is
 * not a Qwen-VL one; special-token ids other than those Stoker's encoder writes
 * ({@code image_token_id} 151655 and the others in {@link #TOKEN_IDS}), in {@code config.json} or in
 * the tokenizer; an image processor that skips a step or uses another resample filter or rescale
 * factor; geometry that {@code config.json}'s {@code vision_config} contradicts. A missing required
 * file or field is refused the same way.
 *
 * @param dir                  the folder
 * @param family               the model's family, from {@code model_type}
 * @param vision               patch, merge and temporal sizes, mean, std and pixel bounds of its processor
 * @param tokenizer            its {@code tokenizer.json}
 * @param tokenizerSha256      the SHA-256 of that file, hex (part of a job's fingerprint)
 * @param chatTemplate         its chat template's Jinja source, or null when the folder has none
 * @param chatTemplateSource   where the template came from ({@code chat_template.jinja}, …), or null
 * @param transformersVersion  {@code config.json}'s {@code transformers_version}, or null
 */
public record ModelFolder(Path dir, ProcessorPreset family, VisionConfig vision, Path tokenizer, String tokenizerSha256,
                          String chatTemplate, String chatTemplateSource, String transformersVersion) {
    public static final String CONFIG = "config.json";
    public static final String PREPROCESSOR_CONFIG = "preprocessor_config.json";
    public static final String TOKENIZER = "tokenizer.json";
    public static final String TOKENIZER_CONFIG = "tokenizer_config.json";
    public static final String CHAT_TEMPLATE_JINJA = "chat_template.jinja";
    public static final String CHAT_TEMPLATE_JSON = "chat_template.json";

    /** The model types Stoker encodes for, and the family each is. */
    public static final Map<String, ProcessorPreset> MODEL_TYPES = Map.of(
            "qwen2_vl", ProcessorPreset.QWEN2_VL,
            "qwen2_5_vl", ProcessorPreset.QWEN2_5_VL,
            "qwen3_vl", ProcessorPreset.QWEN3_VL,
            "qwen3_vl_moe", ProcessorPreset.QWEN3_VL);

    /** The special tokens Stoker's encoder writes and looks for, by their {@code config.json} field, with their ids. */
    public static final Map<String, Long> TOKEN_IDS = orderedMap(
            "image_token_id", 151655L, "video_token_id", 151656L, "vision_start_token_id", 151652L, "vision_end_token_id", 151653L);

    /** The tokens the tokenizer must map to the ids Stoker writes: the chat markers, vision markers and the label rule's. */
    public static final Map<String, Long> TOKENIZER_IDS = orderedMap(
            "<|endoftext|>", 151643L, "<|im_start|>", 151644L, "<|im_end|>", 151645L, "<|vision_start|>", 151652L,
            "<|vision_end|>", 151653L, "<|image_pad|>", 151655L, "<|video_pad|>", 151656L);

    /** Vocabulary entries the label rule needs (byte-level BPE spelling): "assistant" and the newline. */
    static final Map<String, Long> VOCAB_IDS = orderedMap("assistant", 77091L, "\u010a", 198L);

    /** The longest config file read whole (the tokenizer is streamed): a real one is a few kB. */
    static final long MAX_CONFIG_BYTES = 16L << 20;

    private static final ObjectMapper JSON = new ObjectMapper();

    public ModelFolder {
        java.util.Objects.requireNonNull(dir, "dir");
        java.util.Objects.requireNonNull(family, "family");
        java.util.Objects.requireNonNull(vision, "vision");
        java.util.Objects.requireNonNull(tokenizer, "tokenizer");
        java.util.Objects.requireNonNull(tokenizerSha256, "tokenizerSha256");
    }

    /** A model folder that cannot be used, with a message naming the file and field. */
    public static final class ModelFolderException extends IllegalArgumentException {
        public ModelFolderException(String message) { super(message); }
    }

    /**
     * Reads {@code dir}.
     *
     * @throws ModelFolderException naming the file and field that is missing, unreadable or not what Stoker reproduces
     */
    public static ModelFolder read(Path dir) {
        if (!Files.isDirectory(dir)) throw new ModelFolderException(dir + ": not a folder");
        JsonNode config = readJson(dir, CONFIG);
        String modelType = text(dir, config, CONFIG, "model_type");
        ProcessorPreset family = MODEL_TYPES.get(modelType);
        if (family == null)
            throw new ModelFolderException(where(dir, CONFIG, "model_type") + " is '" + modelType + "', not a Qwen-VL model (Stoker encodes for "
                    + String.join(", ", MODEL_TYPES.keySet().stream().sorted().toList()) + ")");
        for (var e : TOKEN_IDS.entrySet()) {
            JsonNode id = findField(config, e.getKey());
            if (id != null && !id.isNull() && (!id.canConvertToLong() || id.asLong() != e.getValue()))
                throw new ModelFolderException(where(dir, CONFIG, e.getKey()) + " is " + id + ", but Stoker's Qwen-VL encoder writes "
                        + e.getValue());
        }
        VisionConfig vision = vision(dir, readJson(dir, PREPROCESSOR_CONFIG), config.get("vision_config"));
        Path tokenizer = dir.resolve(TOKENIZER);
        String sha = checkTokenizer(dir, tokenizer);
        JsonNode tokenizerConfig = readJson(dir, TOKENIZER_CONFIG);
        String[] template = chatTemplate(dir, tokenizerConfig);
        JsonNode version = config.get("transformers_version");
        return new ModelFolder(dir, family, vision, tokenizer, sha, template[0], template[1],
                version == null || !version.isTextual() ? null : version.asText());
    }

    /** The image processor's settings, checked against what Stoker implements and against the model's vision tower. */
    private static VisionConfig vision(Path dir, JsonNode pre, JsonNode visionConfig) { return vision(dir, pre, visionConfig, "vision_config"); }

    /** {@link #vision(Path, JsonNode, JsonNode)} with the tower's settings at {@code at} in {@code config.json} (an Omni folder's thinker). */
    static VisionConfig vision(Path dir, JsonNode pre, JsonNode visionConfig, String at) {
        String f = PREPROCESSOR_CONFIG;
        JsonNode type = pre.get("image_processor_type");
        if (type != null && !type.isNull()
                && !(type.isTextual() && type.asText().matches("Qwen[0-9.]*VLImageProcessor(Fast)?")))
            throw new ModelFolderException(where(dir, f, "image_processor_type") + " is " + type
                    + ", not the Qwen-VL image processor (Qwen2VLImageProcessor or its Fast variant) that Stoker reproduces");
        for (String step : new String[] {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
            JsonNode v = pre.get(step);
            if (v != null && !v.isNull() && !(v.isBoolean() && v.asBoolean()))
                throw new ModelFolderException(where(dir, f, step) + " is " + v + "; Stoker always does this step, as the published processors do");
        }
        JsonNode resample = pre.get("resample");
        if (resample != null && !resample.isNull() && !(resample.canConvertToInt() && resample.asInt() == 3))
            throw new ModelFolderException(where(dir, f, "resample") + " is " + resample + "; Stoker resizes with bicubic (3) only");
        JsonNode rescale = pre.get("rescale_factor");
        if (rescale != null && !rescale.isNull() && !(rescale.isNumber() && rescale.asDouble() == 1.0 / 255))
            throw new ModelFolderException(where(dir, f, "rescale_factor") + " is " + rescale + "; Stoker rescales by 1/255 only");
        int patch = positiveInt(dir, pre, f, "patch_size");
        int merge = positiveInt(dir, pre, f, "merge_size");
        int temporal = positiveInt(dir, pre, f, "temporal_patch_size");
        double[] mean = triple(dir, pre, f, "image_mean");
        double[] std = triple(dir, pre, f, "image_std");
        for (double s : std)
            if (!(s > 0)) throw new ModelFolderException(where(dir, f, "image_std") + " has a value that is not positive: " + pre.get("image_std"));
        long min, max;
        JsonNode size = pre.get("size");
        Long sizeMin = null, sizeMax = null;
        if (size != null && !size.isNull()) {
            if (!size.isObject()) throw new ModelFolderException(where(dir, f, "size") + " is " + size + ", not {shortest_edge, longest_edge}");
            for (var e : size.properties())
                if (!e.getKey().equals("shortest_edge") && !e.getKey().equals("longest_edge"))
                    throw new ModelFolderException(where(dir, f, "size." + e.getKey()) + ": a Qwen-VL processor's size holds shortest_edge and "
                            + "longest_edge (pixel counts) only");
            if (size.has("shortest_edge")) sizeMin = positiveLong(dir, size, f, "size.shortest_edge", "shortest_edge");
            if (size.has("longest_edge")) sizeMax = positiveLong(dir, size, f, "size.longest_edge", "longest_edge");
        }
        // min_pixels/max_pixels override size, as Qwen2VLImageProcessor.__init__ does
        JsonNode minNode = pre.get("min_pixels"), maxNode = pre.get("max_pixels");
        if (minNode != null && !minNode.isNull()) min = positiveLong(dir, pre, f, "min_pixels", "min_pixels");
        else if (sizeMin != null) min = sizeMin;
        else throw new ModelFolderException(where(dir, f, "min_pixels") + " is missing (and so is size.shortest_edge)");
        if (maxNode != null && !maxNode.isNull()) max = positiveLong(dir, pre, f, "max_pixels", "max_pixels");
        else if (sizeMax != null) max = sizeMax;
        else throw new ModelFolderException(where(dir, f, "max_pixels") + " is missing (and so is size.longest_edge)");
        if (min > max) throw new ModelFolderException(where(dir, f, "min_pixels") + " " + min + " is over max_pixels " + max);
        if (visionConfig != null && visionConfig.isObject()) {
            agree(dir, visionConfig, at, "patch_size", patch);
            agree(dir, visionConfig, at, "spatial_patch_size", patch);
            agree(dir, visionConfig, at, "spatial_merge_size", merge);
            agree(dir, visionConfig, at, "temporal_patch_size", temporal);
        }
        return new VisionConfig(patch, merge, temporal, mean, std, min, max);
    }

    /** {@code config.json}'s {@code AT.FIELD} (the vision tower's settings), where given, must equal the processor's value. */
    private static void agree(Path dir, JsonNode visionConfig, String at, String field, int processorValue) {
        JsonNode v = visionConfig.get(field);
        if (v != null && !v.isNull() && !(v.canConvertToInt() && v.asInt() == processorValue))
            throw new ModelFolderException(where(dir, CONFIG, at + "." + field) + " is " + v + ", but " + PREPROCESSOR_CONFIG
                    + " makes patches for " + processorValue);
    }

    /**
     * Checks, in one streamed pass over {@code tokenizer.json} (a few MB), that its added tokens and vocabulary give
     * the ids Stoker writes ({@link #TOKENIZER_IDS}, {@link #VOCAB_IDS}); returns the file's SHA-256.
     */
    private static String checkTokenizer(Path dir, Path file) {
        if (!Files.isRegularFile(file)) throw new ModelFolderException(where(dir, TOKENIZER, null) + " is missing");
        var added = new LinkedHashMap<String, Long>();
        var vocab = new LinkedHashMap<String, Long>();
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        try (InputStream in = new java.security.DigestInputStream(Files.newInputStream(file), sha);
             JsonParser p = JSON.getFactory().createParser(in)) {
            if (p.nextToken() != JsonToken.START_OBJECT) throw new IOException("not a JSON object");
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                p.nextToken();
                if (name.equals("added_tokens") && p.currentToken() == JsonToken.START_ARRAY) {
                    while (p.nextToken() == JsonToken.START_OBJECT) {
                        JsonNode t = JSON.readTree(p);
                        if (t.has("content") && t.has("id") && TOKENIZER_IDS.containsKey(t.get("content").asText()))
                            added.put(t.get("content").asText(), t.get("id").asLong());
                    }
                } else if (name.equals("model") && p.currentToken() == JsonToken.START_OBJECT) {
                    while (p.nextToken() == JsonToken.FIELD_NAME) {
                        String field = p.currentName();
                        p.nextToken();
                        if (field.equals("vocab") && p.currentToken() == JsonToken.START_OBJECT) {
                            while (p.nextToken() == JsonToken.FIELD_NAME) {
                                String token = p.currentName();
                                p.nextToken();
                                if (VOCAB_IDS.containsKey(token)) vocab.put(token, p.getLongValue());
                            }
                        } else {
                            p.skipChildren();
                        }
                    }
                } else {
                    p.skipChildren();
                }
            }
            in.transferTo(java.io.OutputStream.nullOutputStream()); // the digest covers the whole file
        } catch (IOException e) {
            throw new ModelFolderException(where(dir, TOKENIZER, null) + " cannot be read as a tokenizer: "
                    + String.valueOf(e.getMessage()).lines().findFirst().orElse(""));
        }
        for (var e : TOKENIZER_IDS.entrySet()) {
            Long id = added.get(e.getKey());
            if (id == null || id.longValue() != e.getValue())
                throw new ModelFolderException(where(dir, TOKENIZER, "added_tokens") + ": " + e.getKey() + " is "
                        + (id == null ? "missing" : "id " + id) + ", but Stoker's Qwen-VL encoder writes " + e.getValue());
        }
        for (var e : VOCAB_IDS.entrySet()) {
            Long id = vocab.get(e.getKey());
            if (id == null || id.longValue() != e.getValue())
                throw new ModelFolderException(where(dir, TOKENIZER, "model.vocab") + ": '" + e.getKey() + "' is "
                        + (id == null ? "missing" : "id " + id) + ", but the Qwen-VL label rule looks for " + e.getValue());
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    /** The chat template and where it was found, in transformers' order; {null, null} when the folder has none. */
    static String[] chatTemplate(Path dir, JsonNode tokenizerConfig) {
        Path jinja = dir.resolve(CHAT_TEMPLATE_JINJA);
        if (Files.isRegularFile(jinja)) return new String[] {readText(dir, CHAT_TEMPLATE_JINJA), CHAT_TEMPLATE_JINJA};
        if (Files.isRegularFile(dir.resolve(CHAT_TEMPLATE_JSON))) {
            JsonNode t = readJson(dir, CHAT_TEMPLATE_JSON).get("chat_template");
            return new String[] {template(dir, CHAT_TEMPLATE_JSON, t), CHAT_TEMPLATE_JSON};
        }
        JsonNode t = tokenizerConfig.get("chat_template");
        if (t == null || t.isNull()) return new String[] {null, null};
        return new String[] {template(dir, TOKENIZER_CONFIG, t), TOKENIZER_CONFIG};
    }

    /** A {@code chat_template} value: a string, or a list of {name, template} whose "default" entry is the one. */
    private static String template(Path dir, String file, JsonNode t) {
        if (t != null && t.isTextual()) return t.asText();
        if (t != null && t.isArray())
            for (JsonNode e : t)
                if (e.isObject() && "default".equals(e.path("name").asText(null)) && e.path("template").isTextual())
                    return e.get("template").asText();
        throw new ModelFolderException(where(dir, file, "chat_template") + " is neither a template string nor a list holding a 'default' one");
    }

    // ---- reading and checking fields

    static JsonNode readJson(Path dir, String file) {
        String text = readText(dir, file);
        try {
            JsonNode tree = JSON.readTree(text);
            if (tree == null || !tree.isObject()) throw new ModelFolderException(where(dir, file, null) + " is not a JSON object");
            return tree;
        } catch (IOException e) {
            throw new ModelFolderException(where(dir, file, null) + " is not JSON: " + String.valueOf(e.getMessage()).lines().findFirst().orElse(""));
        }
    }

    private static String readText(Path dir, String file) {
        Path p = dir.resolve(file);
        try {
            if (Files.size(p) > MAX_CONFIG_BYTES)
                throw new ModelFolderException(where(dir, file, null) + " is over " + (MAX_CONFIG_BYTES >> 20) + " MiB; a config file is a few kB");
            return Files.readString(p, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            throw new ModelFolderException(where(dir, file, null) + " is missing");
        } catch (IOException e) {
            throw new ModelFolderException(where(dir, file, null) + " cannot be read: " + e.getMessage());
        }
    }

    private static String text(Path dir, JsonNode node, String file, String field) {
        JsonNode v = node.get(field);
        if (v == null || !v.isTextual())
            throw new ModelFolderException(where(dir, file, field) + " is " + (v == null ? "missing" : v + ", not a string"));
        return v.asText();
    }

    private static int positiveInt(Path dir, JsonNode node, String file, String field) {
        JsonNode v = node.get(field);
        if (v == null || v.isNull()) throw new ModelFolderException(where(dir, file, field) + " is missing");
        if (!v.canConvertToInt() || !v.isIntegralNumber() || v.asInt() < 1 || v.asInt() > 1024)
            throw new ModelFolderException(where(dir, file, field) + " is " + v + ", not a whole number from 1 to 1024");
        return v.asInt();
    }

    private static long positiveLong(Path dir, JsonNode node, String file, String field, String key) {
        JsonNode v = node.get(key);
        if (v == null || !v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < 1)
            throw new ModelFolderException(where(dir, file, field) + " is " + v + ", not a positive whole number of pixels");
        return v.asLong();
    }

    private static double[] triple(Path dir, JsonNode node, String file, String field) {
        JsonNode v = node.get(field);
        if (v == null || v.isNull()) throw new ModelFolderException(where(dir, file, field) + " is missing");
        if (!v.isArray() || v.size() != 3) throw new ModelFolderException(where(dir, file, field) + " is " + v + ", not three numbers");
        double[] out = new double[3];
        for (int i = 0; i < 3; i++) {
            if (!v.get(i).isNumber()) throw new ModelFolderException(where(dir, file, field) + " is " + v + ", not three numbers");
            out[i] = v.get(i).asDouble();
        }
        return out;
    }

    /** {@code field} at the top level or in {@code text_config} (where newer configs keep the language model's ids). */
    private static JsonNode findField(JsonNode config, String field) {
        JsonNode v = config.get(field);
        if (v != null) return v;
        JsonNode text = config.get("text_config");
        return text != null && text.isObject() ? text.get(field) : null;
    }

    static String where(Path dir, String file, String field) {
        return dir.resolve(file) + (field == null ? "" : ": " + field);
    }

    private static Map<String, Long> orderedMap(Object... kv) {
        var m = new LinkedHashMap<String, Long>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], (Long) kv[i + 1]);
        return java.util.Collections.unmodifiableMap(m);
    }

    /** A short description for logs: the folder, its family, bounds and template's source. */
    public String describe() {
        return String.format(Locale.ROOT, "%s (%s, %d…%d pixels, patch %d, template %s%s)", dir, family.cliName(), vision.minPixels(),
                vision.maxPixels(), vision.patchSize(), chatTemplateSource == null ? "none: the built-in one" : chatTemplateSource,
                transformersVersion == null ? "" : ", transformers " + transformersVersion);
    }
}
