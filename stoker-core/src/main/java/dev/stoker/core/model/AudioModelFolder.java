package dev.stoker.core.model;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.core.AudioPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.core.model.ModelFolder.ModelFolderException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A Hugging Face model folder of an audio family ({@code --model DIR} for Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni; issue 32):
 * which {@link AudioPreset} it is ({@code config.json} {@code model_type}), checked to hold what the preset reproduces,
 * its image processor where the family takes images (Qwen2.5-Omni: {@code preprocessor_config.json}'s Qwen-VL fields, read
 * and checked as {@link ModelFolder} reads a Qwen-VL folder's, against {@code thinker_config.vision_config}), and its chat
 * template. Apart from {@link ModelFolder}, whose record is a Qwen-VL family.
 *
 * <p>Checked, each mismatch an error naming the file and field: the special-token ids in {@code config.json} (top level,
 * or the {@code thinker_config} of the Omni models; both spellings {@code *_token_id} and {@code *_token_index}) and
 * {@code position_id_per_seconds}/{@code seconds_per_chunk}; the Whisper settings of {@code preprocessor_config.json}
 * ({@code feature_size} 128, {@code sampling_rate} 16000, {@code hop_length} 160, {@code n_fft} 400 and, where the
 * processor pads to it, {@code n_samples}); that {@code tokenizer.json}'s added tokens put the family's token strings at
 * the preset's ids.
 *
 * <p>Qwen3-Omni's image processor is read as Qwen2.5-Omni's (its published one: patch 16, mean and std 0.5, 3,136 …
 * 12,845,056 pixels).
 *
 * @param vision           the image processor's geometry, mean, std and pixel bounds (Qwen2.5-Omni, Qwen3-Omni); null for
 *                         a family without images (Qwen2-Audio)
 * @param chatTemplate     the folder's template source, or null when it has none
 * @param chatTemplateFile the file it came from ({@code chat_template.jinja}, {@code chat_template.json} or {@code tokenizer_config.json})
 */
public record AudioModelFolder(Path dir, AudioPreset family, VisionConfig vision, Path tokenizer, String chatTemplate, String chatTemplateFile) {

    /**
     * The audio family {@code dir}'s {@code config.json} names ({@code model_type}), or null when it names none or cannot
     * be read as JSON (then {@link ModelFolder#read} says what is wrong): which of the two readers a folder is for.
     */
    public static AudioPreset familyOf(Path dir) {
        try {
            JsonNode type = ModelFolder.readJson(dir, ModelFolder.CONFIG).get("model_type");
            return AudioPreset.ofModelType(type == null || !type.isTextual() ? null : type.asText());
        } catch (ModelFolderException e) {
            return null;
        }
    }

    /** Reads and checks {@code dir}. */
    public static AudioModelFolder read(Path dir) {
        if (!Files.isDirectory(dir)) throw new ModelFolderException(dir + ": not a folder");
        JsonNode config = ModelFolder.readJson(dir, ModelFolder.CONFIG);
        JsonNode type = config.get("model_type");
        AudioPreset family = AudioPreset.ofModelType(type == null || !type.isTextual() ? null : type.asText());
        if (family == null)
            throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.CONFIG, "model_type") + " is " + type
                    + ", not an audio model (qwen2_audio, qwen2_5_omni, qwen3_omni_moe)");
        JsonNode thinker = config.path("thinker_config");
        JsonNode ids = thinker.isObject() ? thinker : config;
        String at = thinker.isObject() ? "thinker_config." : "";
        var want = new LinkedHashMap<String, Long>();
        want.put("audio_token", family.audioTokenId());
        want.put("audio_start_token", family.audioStartId());
        want.put("audio_end_token", family.audioEndId());
        if (family.hasVision()) {
            want.put("image_token", family.imageTokenId());
            want.put("video_token", family.videoTokenId());
            want.put("vision_start_token", family.visionStartId());
            want.put("vision_end_token", family.visionEndId());
        }
        for (var e : want.entrySet())
            for (String suffix : new String[] {"_id", "_index"}) {
                String field = e.getKey() + suffix;
                JsonNode v = ids.get(field);
                if (v != null && !v.isNull() && (!v.canConvertToLong() || v.asLong() != e.getValue()))
                    throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.CONFIG, at + field) + " is " + v + ", but " + family
                            + " has " + e.getValue());
            }
        if (family.hasVision()) {
            agree(dir, ids, ModelFolder.CONFIG, at + "position_id_per_seconds", "position_id_per_seconds", family.positionIdPerSecond());
            if (family == AudioPreset.QWEN2_5_OMNI)
                agree(dir, ids, ModelFolder.CONFIG, at + "seconds_per_chunk", "seconds_per_chunk", family.secondsPerChunk());
        }
        JsonNode pre = ModelFolder.readJson(dir, ModelFolder.PREPROCESSOR_CONFIG);
        agree(dir, pre, ModelFolder.PREPROCESSOR_CONFIG, "feature_size", "feature_size", AudioPreset.MEL_BINS);
        agree(dir, pre, ModelFolder.PREPROCESSOR_CONFIG, "sampling_rate", "sampling_rate", AudioPreset.SAMPLING_RATE);
        agree(dir, pre, ModelFolder.PREPROCESSOR_CONFIG, "hop_length", "hop_length", AudioPreset.HOP_LENGTH);
        agree(dir, pre, ModelFolder.PREPROCESSOR_CONFIG, "n_fft", "n_fft", AudioPreset.N_FFT);
        if (family.hfPadSeconds() > 0)
            agree(dir, pre, ModelFolder.PREPROCESSOR_CONFIG, "n_samples", "n_samples", (double) family.hfPadSeconds() * AudioPreset.SAMPLING_RATE);
        // the Omni processors hold a Qwen2VLImageProcessor with its settings in the same file (Qwen3-Omni: patch 16)
        VisionConfig vision = family.hasVision() ? ModelFolder.vision(dir, pre, ids.get("vision_config"), at + "vision_config") : null;
        Path tokenizer = dir.resolve(ModelFolder.TOKENIZER);
        checkAddedTokens(dir, tokenizer, family);
        JsonNode tokenizerConfig = Files.isRegularFile(dir.resolve(ModelFolder.TOKENIZER_CONFIG))
                ? ModelFolder.readJson(dir, ModelFolder.TOKENIZER_CONFIG) : com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
        String[] template = ModelFolder.chatTemplate(dir, tokenizerConfig);
        return new AudioModelFolder(dir, family, vision, tokenizer, template[0], template[1]);
    }

    private static void agree(Path dir, JsonNode node, String file, String where, String field, double value) {
        JsonNode v = node.get(field);
        if (v != null && !v.isNull() && !(v.isNumber() && v.asDouble() == value))
            throw new ModelFolderException(ModelFolder.where(dir, file, where) + " is " + v + ", but Stoker's " + field + " is " + value);
    }

    /** The family's token strings must be added tokens at the preset's ids (streamed: tokenizer.json is a few MB). */
    private static void checkAddedTokens(Path dir, Path file, AudioPreset family) {
        if (!Files.isRegularFile(file)) throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.TOKENIZER, null) + " is missing");
        var want = new HashMap<String, Long>(Map.of(family.audioToken(), family.audioTokenId(), family.audioStart(), family.audioStartId(),
                family.audioEnd(), family.audioEndId()));
        if (family.hasVision())
            want.putAll(Map.of(family.imageToken(), family.imageTokenId(), family.videoToken(), family.videoTokenId(),
                    family.visionStart(), family.visionStartId(), family.visionEnd(), family.visionEndId()));
        var found = new HashMap<String, Long>();
        try (JsonParser p = new com.fasterxml.jackson.databind.MappingJsonFactory().createParser(file.toFile())) {
            if (p.nextToken() != JsonToken.START_OBJECT) throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.TOKENIZER, null) + " is not a JSON object");
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                p.nextToken();
                if (!name.equals("added_tokens")) { p.skipChildren(); continue; }
                while (p.nextToken() == JsonToken.START_OBJECT) {
                    JsonNode t = p.readValueAsTree();
                    if (t == null) break;
                    if (t.path("content").isTextual() && t.path("id").canConvertToLong()) found.put(t.get("content").asText(), t.get("id").asLong());
                }
            }
        } catch (IOException e) {
            throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.TOKENIZER, null) + " cannot be read: " + e.getMessage());
        }
        for (var e : want.entrySet()) {
            Long got = found.get(e.getKey());
            if (!e.getValue().equals(got))
                throw new ModelFolderException(ModelFolder.where(dir, ModelFolder.TOKENIZER, "added_tokens") + ": " + e.getKey() + " is "
                        + (got == null ? "not an added token" : "id " + got) + ", but " + family + " has " + e.getValue());
        }
    }
}
