package dev.stoker.core.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audio model folders as published (config.json trimmed to the checked fields: Qwen/Qwen2.5-Omni-7B's thinker ids,
 * Qwen/Qwen3-Omni-30B-A3B-Instruct's, Qwen/Qwen2-Audio-7B-Instruct's {@code audio_token_index}; preprocessor_config.json's
 * Whisper settings; a tokenizer.json holding only the added tokens) are read as their preset; each changed field is an
 * error naming the file and field.
 */
@Timeout(60)
class AudioModelFolderTest {
    @TempDir Path tmp;

    private static final String OMNI25_TOKENIZER = """
        {"version": "1.0", "added_tokens": [{"id": 151646, "content": "<|AUDIO|>"}, {"id": 151647, "content": "<|audio_bos|>"},
          {"id": 151648, "content": "<|audio_eos|>"}, {"id": 151652, "content": "<|vision_bos|>"}, {"id": 151653, "content": "<|vision_eos|>"},
          {"id": 151655, "content": "<|IMAGE|>"}, {"id": 151656, "content": "<|VIDEO|>"}], "model": {"type": "BPE", "vocab": {"a": 0}}}""";

    private Path folder(String name, String config, String pre, String tokenizer, String template) throws IOException {
        Path d = Files.createDirectories(tmp.resolve(name));
        Files.writeString(d.resolve("config.json"), config);
        Files.writeString(d.resolve("preprocessor_config.json"), pre);
        Files.writeString(d.resolve("tokenizer.json"), tokenizer);
        if (template != null) Files.writeString(d.resolve("chat_template.jinja"), template);
        return d;
    }

    private Path omni25(String config) throws IOException {
        return folder("omni25", config, """
            {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160, "n_fft": 400,
             "n_samples": 4800000, "nb_max_frames": 30000, "sampling_rate": 16000, "dither": 0.0,
             "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2,
             "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
             "image_processor_type": "Qwen2VLImageProcessor", "resample": 3}""",
                OMNI25_TOKENIZER, "{{ messages }}");
    }

    private static final String OMNI25_CONFIG = """
        {"model_type": "qwen2_5_omni", "thinker_config": {"audio_token_index": 151646, "audio_start_token_id": 151647,
         "audio_end_token_id": 151648, "image_token_index": 151655, "video_token_index": 151656, "vision_start_token_id": 151652,
         "vision_end_token_id": 151653, "position_id_per_seconds": 25, "seconds_per_chunk": 2,
         "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}}""";

    @Test
    void publishedFoldersReadAsTheirPreset() throws IOException {
        var f = AudioModelFolder.read(omni25(OMNI25_CONFIG));
        assertEquals(AudioPreset.QWEN2_5_OMNI, f.family());
        assertEquals("{{ messages }}", f.chatTemplate());
        assertEquals("chat_template.jinja", f.chatTemplateFile());
        assertEquals(new dev.stoker.core.VisionConfig(14, 2, 2, dev.stoker.core.VisionConfig.CLIP_MEAN, dev.stoker.core.VisionConfig.CLIP_STD,
                3136, 12845056), f.vision());
        var q3 = folder("q3", """
            {"model_type": "qwen3_omni_moe", "thinker_config": {"audio_token_id": 151675, "audio_start_token_id": 151669,
             "audio_end_token_id": 151670, "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
             "position_id_per_seconds": 13}, "talker_config": {"audio_token_id": 151675}}""", """
            {"feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 4800000, "sampling_rate": 16000,
             "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
             "min_pixels": 3136, "max_pixels": 12845056, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}""", """
            {"added_tokens": [{"id": 151669, "content": "<|audio_start|>"}, {"id": 151670, "content": "<|audio_end|>"},
             {"id": 151675, "content": "<|audio_pad|>"}, {"id": 151652, "content": "<|vision_start|>"}, {"id": 151653, "content": "<|vision_end|>"},
             {"id": 151655, "content": "<|image_pad|>"}, {"id": 151656, "content": "<|video_pad|>"}]}""", null);
        var f3 = AudioModelFolder.read(q3);
        assertEquals(AudioPreset.QWEN3_OMNI, f3.family());
        // its published image processor (Qwen/Qwen3-Omni-30B-A3B-Instruct preprocessor_config.json), the preset's own
        assertEquals(new dev.stoker.core.VisionConfig(16, 2, 2, dev.stoker.core.VisionConfig.HALF, dev.stoker.core.VisionConfig.HALF,
                3136, 12845056), f3.vision());
        assertEquals(dev.stoker.core.ProcessorPreset.QWEN3_OMNI.vision(), f3.vision());
        assertEquals(null, f3.chatTemplate());
        var a = folder("a", """
            {"model_type": "qwen2_audio", "audio_token_index": 151646}""", """
            {"feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 480000, "sampling_rate": 16000, "chunk_length": 30}""", """
            {"added_tokens": [{"id": 151646, "content": "<|AUDIO|>"}, {"id": 151647, "content": "<|audio_bos|>"}, {"id": 151648, "content": "<|audio_eos|>"}]}""",
                null);
        assertEquals(AudioPreset.QWEN2_AUDIO, AudioModelFolder.read(a).family());
    }

    @Test
    void aChangedFieldIsNamed() throws IOException {
        var e = assertThrows(ModelFolder.ModelFolderException.class,
                () -> AudioModelFolder.read(omni25(OMNI25_CONFIG.replace("\"position_id_per_seconds\": 25", "\"position_id_per_seconds\": 13"))));
        assertTrue(e.getMessage().endsWith("config.json: thinker_config.position_id_per_seconds is 13, but Stoker's position_id_per_seconds is 25.0"), e.getMessage());
        e = assertThrows(ModelFolder.ModelFolderException.class,
                () -> AudioModelFolder.read(omni25(OMNI25_CONFIG.replace("\"audio_token_index\": 151646", "\"audio_token_index\": 151675"))));
        assertTrue(e.getMessage().endsWith("config.json: thinker_config.audio_token_index is 151675, but qwen2.5-omni has 151646"), e.getMessage());
        e = assertThrows(ModelFolder.ModelFolderException.class, () -> AudioModelFolder.read(omni25(OMNI25_CONFIG.replace("qwen2_5_omni", "qwen2_5_vl"))));
        assertTrue(e.getMessage().endsWith("config.json: model_type is \"qwen2_5_vl\", not an audio model (qwen2_audio, qwen2_5_omni, qwen3_omni_moe)"), e.getMessage());
        e = assertThrows(ModelFolder.ModelFolderException.class,
                () -> AudioModelFolder.read(omni25(OMNI25_CONFIG.replace("\"spatial_merge_size\": 2", "\"spatial_merge_size\": 4"))));
        assertTrue(e.getMessage().endsWith("config.json: thinker_config.vision_config.spatial_merge_size is 4, but preprocessor_config.json makes "
                + "patches for 2"), e.getMessage());
        assertEquals(AudioPreset.QWEN2_5_OMNI, AudioModelFolder.familyOf(omni25(OMNI25_CONFIG)));
        assertEquals(null, AudioModelFolder.familyOf(omni25(OMNI25_CONFIG.replace("qwen2_5_omni", "qwen2_5_vl"))));
        Path d = omni25(OMNI25_CONFIG);
        Files.writeString(d.resolve("tokenizer.json"), OMNI25_TOKENIZER.replace("<|AUDIO|>", "<|object_ref_start|>"));
        e = assertThrows(ModelFolder.ModelFolderException.class, () -> AudioModelFolder.read(d));
        assertTrue(e.getMessage().endsWith("tokenizer.json: added_tokens: <|AUDIO|> is not an added token, but qwen2.5-omni has 151646"), e.getMessage());
        Files.writeString(d.resolve("tokenizer.json"), OMNI25_TOKENIZER);
        Files.writeString(d.resolve("preprocessor_config.json"), "{\"feature_size\": 80}");
        e = assertThrows(ModelFolder.ModelFolderException.class, () -> AudioModelFolder.read(d));
        assertTrue(e.getMessage().endsWith("preprocessor_config.json: feature_size is 80, but Stoker's feature_size is 128.0"), e.getMessage());
    }
}
