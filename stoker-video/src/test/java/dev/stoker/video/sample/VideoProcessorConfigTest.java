package dev.stoker.video.sample;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Reading a model folder's video processor config as the Hub folders hold it, and refusing what Stoker cannot reproduce. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VideoProcessorConfigTest {
    /** Qwen3-VL's Hub video_preprocessor_config.json (Qwen/Qwen3-VL-*-Instruct). */
    static final String QWEN3 = """
            {"size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16, "temporal_patch_size": 2,
             "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "processor_class": "Qwen3VLProcessor", "video_processor_type": "Qwen3VLVideoProcessor"}""";
    /** Qwen2.5-VL's Hub preprocessor_config.json (no video config in the folder). */
    static final String QWEN25_IMAGE = """
            {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
             "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
             "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}""";

    @TempDir Path dir;

    private VideoProcessorConfig write(String file, String json, ProcessorPreset family) throws Exception {
        Files.writeString(dir.resolve(file), json);
        return VideoProcessorConfig.read(dir, family);
    }

    @Test
    void hubQwen3Folder() throws Exception {
        var c = write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, QWEN3, ProcessorPreset.QWEN3_VL);
        assertEquals(Map.of(VideoKey.MIN_PIXELS, 4096.0, VideoKey.MAX_PIXELS, 25165824.0), c.options().values());
        assertEquals(16, c.patchSize());
        assertArrayEquals(new double[] {0.5, 0.5, 0.5}, c.std());
        // the command line wins over the folder
        var merged = new VideoOptions(Map.of(VideoKey.MAX_PIXELS, 61440.0)).over(c.options());
        assertEquals(61440.0, merged.get(VideoKey.MAX_PIXELS).getAsDouble());
        assertEquals(4096.0, merged.get(VideoKey.MIN_PIXELS).getAsDouble());
    }

    @Test
    void hubQwen25FolderFallsBackToThePreprocessorConfig() throws Exception {
        var c = write(VideoProcessorConfig.PREPROCESSOR_CONFIG, QWEN25_IMAGE, ProcessorPreset.QWEN2_5_VL);
        assertTrue(c.file().endsWith(VideoProcessorConfig.PREPROCESSOR_CONFIG));
        assertEquals(Map.of(VideoKey.MIN_PIXELS, 3136.0, VideoKey.MAX_PIXELS, 12845056.0), c.options().values());
        assertArrayEquals(VisionConfig.CLIP_MEAN, c.mean());
        // a video config, where present, is read instead
        var v = write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, """
                {"size": {"shortest_edge": 3136, "longest_edge": 50176}, "fps": 1.0, "min_frames": 2, "max_frames": 64,
                 "do_sample_frames": true, "video_processor_type": "Qwen2VLVideoProcessor", "fps_comment": null}""",
                ProcessorPreset.QWEN2_5_VL);
        assertEquals(Map.of(VideoKey.MIN_PIXELS, 3136.0, VideoKey.MAX_PIXELS, 50176.0, VideoKey.FPS, 1.0, VideoKey.MIN_FRAMES, 2.0,
                VideoKey.MAX_FRAMES, 64.0), v.options().values());
    }

    @Test
    void refusesWhatStokerCannotReproduceNamingTheField() throws Exception {
        String[][] bad = {
                {"\"patch_size\": 14", "patch_size"},
                {"\"do_sample_frames\": false", "do_sample_frames"},
                {"\"resample\": 2", "resample"},
                {"\"do_normalize\": false", "do_normalize"},
                {"\"rescale_factor\": 0.5", "rescale_factor"},
                {"\"cap_pixels_per_frame\": true", "cap_pixels_per_frame"},
                {"\"num_frames\": 16", "num_frames"},
                {"\"fps\": -1", "fps"},
                {"\"max_frames\": 1.5", "max_frames"},
                {"\"video_processor_type\": \"LlavaOnevisionVideoProcessor\"", "video_processor_type"},
                {"\"temporal_slicing\": 3", "temporal_slicing"},
                {"\"image_std\": [0.5, 0, 0.5]", "image_std"},
                {"\"min_pixels\": 30000000", "min_pixels"},
        };
        for (String[] b : bad) {
            String json = QWEN3.replaceFirst("\\{", "{" + b[0] + ", ").replace("\"patch_size\": 16, ", b[1].equals("patch_size") ? "" : "\"patch_size\": 16, ")
                    .replace("\"video_processor_type\": \"Qwen3VLVideoProcessor\"", b[1].equals("video_processor_type") ? "\"x\": null"
                            : "\"video_processor_type\": \"Qwen3VLVideoProcessor\"")
                    .replace("\"image_std\": [0.5, 0.5, 0.5]", b[1].equals("image_std") ? "\"y\": null" : "\"image_std\": [0.5, 0.5, 0.5]");
            var e = assertThrows(VideoProcessorConfig.VideoProcessorConfigException.class,
                    () -> write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, json, ProcessorPreset.QWEN3_VL), b[0]);
            assertTrue(e.getMessage().contains(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG + ": " + b[1]), b[0] + " → " + e.getMessage());
        }
        var e = assertThrows(VideoProcessorConfig.VideoProcessorConfigException.class,
                () -> write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, "{\"size\": {\"height\": 224, \"width\": 224}}", ProcessorPreset.QWEN3_VL));
        assertTrue(e.getMessage().contains("size.height"), e.getMessage());
        e = assertThrows(VideoProcessorConfig.VideoProcessorConfigException.class,
                () -> write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, "{\"fps\": 2}", ProcessorPreset.QWEN3_VL));
        assertTrue(e.getMessage().contains("min_pixels is missing"), e.getMessage());
        e = assertThrows(VideoProcessorConfig.VideoProcessorConfigException.class,
                () -> write(VideoProcessorConfig.VIDEO_PREPROCESSOR_CONFIG, "[1]", ProcessorPreset.QWEN3_VL));
        assertTrue(e.getMessage().contains("not a JSON object"), e.getMessage());
    }

    @Test
    void refusesAFolderWithoutEither() {
        var e = assertThrows(VideoProcessorConfig.VideoProcessorConfigException.class, () -> VideoProcessorConfig.read(dir, ProcessorPreset.QWEN2_VL));
        assertTrue(e.getMessage().contains("neither video_preprocessor_config.json nor preprocessor_config.json"), e.getMessage());
    }
}
