package dev.stoker.video.sample;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.video.ffmpeg.Rational;
import dev.stoker.video.ffmpeg.StreamInfo;
import dev.stoker.video.index.FrameIndex;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Hand-checked plans, the refusals beyond the reference, the options' bounds and the metadata from a frame index. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VideoPlannerTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static VideoPlanner planner(ProcessorPreset f, VideoSampler s, TransformersCompat c, Map<VideoKey, Double> opts) {
        return new VideoPlanner(f, s, c, new VideoOptions(opts));
    }

    private static VideoItemOptions item(String json) throws Exception {
        return VideoItemOptions.fromJson(JSON.readTree(json), "sample.json item 0");
    }

    @Test
    void qwen2HfAtTwoFpsFromTwentyFive() {
        // n = floor(50 / 25 · 2 / 2) · 2 = 4; arange(0, 50, 12.5) = 0, 12.5, 25, 37.5 → int: 0, 12, 25, 37.
        // 360x640 → round to 364x644 = 234,416 > 20,000: beta = sqrt(230,400 / 20,000) = 3.394; floor(360/3.394/28)·28 = 84,
        // floor(640/3.394/28)·28 = 168 → grid 2 x 6 x 12, 36 tokens.
        var p = planner(ProcessorPreset.QWEN2_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of(VideoKey.MAX_PIXELS, 20000.0))
                .plan("a.mp4", new VideoMetadata(50, 25.0, 640, 360), VideoItemOptions.NONE);
        assertArrayEquals(new long[] {0, 12, 25, 37}, p.frameIndices());
        assertEquals(84, p.resizedHeight());
        assertEquals(168, p.resizedWidth());
        assertArrayEquals(new long[] {2, 6, 12}, p.gridThw());
        assertEquals(36, p.tokens());
        assertEquals(2.0, p.sampledFps());
        assertTrue(Float.isNaN(p.secondPerGridT()));
        assertEquals(List.of(), p.timestampTexts());
    }

    @Test
    void qwen25SecondPerGridDiffersBetweenVersions() {
        // 61 frames at 30000/1001: 4 kept, sampled fps = 4 / 61 · 29.97 = 1.96525; 5.18: 2 / 1.96525 = 1.01768; 4.57: 2 / fps 2 = 1.0
        var meta = new VideoMetadata(61, 30000.0 / 1001, 480, 272);
        var v518 = planner(ProcessorPreset.QWEN2_5_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of()).plan("b.mp4", meta, VideoItemOptions.NONE);
        var v457 = planner(ProcessorPreset.QWEN2_5_VL, VideoSampler.HF, TransformersCompat.V4_57, Map.of()).plan("b.mp4", meta, VideoItemOptions.NONE);
        assertArrayEquals(new long[] {0, 15, 30, 45}, v518.frameIndices());
        assertEquals((float) (2 / (4 / 61.0 * (30000.0 / 1001))), v518.secondPerGridT());
        assertEquals(1.0f, v457.secondPerGridT());
        assertArrayEquals(v518.frameIndices(), v457.frameIndices());
    }

    @Test
    void qwen3TimestampsRoundHalfEvenOnTheBinaryValue() {
        // 10 frames at 2 fps, all kept: groups (0, 1) … at 0.25, 1.25, …: Python's .1f gives 0.2, 1.2 (Java's %.1f: 0.3, 1.3)
        var p = planner(ProcessorPreset.QWEN3_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of(VideoKey.MAX_PIXELS, 61440.0))
                .plan("c.mov", new VideoMetadata(10, 2.0, 160, 96), VideoItemOptions.NONE);
        assertEquals(10, p.frameCount());
        assertArrayEquals(new double[] {0.25, 1.25, 2.25, 3.25, 4.25}, p.timestamps());
        assertEquals(List.of("<0.2 seconds>", "<1.2 seconds>", "<2.2 seconds>", "<3.2 seconds>", "<4.2 seconds>"), p.timestampTexts());
        assertEquals("0.3", QwenVideoRules.formatSeconds(0.35)); // 0.34999999999999997779…
        assertEquals("0.5", QwenVideoRules.formatSeconds(0.45)); // 0.45000000000000001110…
        assertEquals("2.5", QwenVideoRules.formatSeconds(2.5));
        assertEquals("1234.0", QwenVideoRules.formatSeconds(1234.0));
    }

    @Test
    void qwen3OddFrameCountPadsTheLastGroupWithItsFrame() {
        // 3 frames at 24 fps: n = int(3 / 24 · 2) = 0 → clamped to min(max(0, 4), 768, 3) = 3; linspace(0, 2, 3) = 0, 1, 2;
        // groups (0, 1), (2, 2) → 1/48 s and 2/24 s
        var p = planner(ProcessorPreset.QWEN3_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of())
                .plan("d.mp4", new VideoMetadata(3, 24.0, 320, 240), VideoItemOptions.NONE);
        assertArrayEquals(new long[] {0, 1, 2}, p.frameIndices());
        assertEquals(2, p.gridT());
        assertArrayEquals(new double[] {(0 / 24.0 + 1 / 24.0) / 2, 2 / 24.0}, p.timestamps());
    }

    @Test
    void arangeOverrunIsRefusedNamingTheVideo() {
        var e = assertThrows(VideoPlanException.class, () -> planner(ProcessorPreset.QWEN2_VL, VideoSampler.HF, TransformersCompat.V5_18,
                Map.of()).plan("clips/long.mp4", new VideoMetadata(382, 25.0, 640, 360), VideoItemOptions.NONE));
        assertEquals("clips/long.mp4", e.video());
        assertTrue(e.getMessage().startsWith("video clips/long.mp4: HF Qwen2-VL sampler: torch.arange(0, 382, 382/30) has 31 entries"),
                e.getMessage());
        // Qwen3's linspace rule has no such overrun
        var ok = planner(ProcessorPreset.QWEN3_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of())
                .plan("clips/long.mp4", new VideoMetadata(382, 25.0, 640, 360), VideoItemOptions.NONE);
        assertEquals(381, ok.frameIndices()[ok.frameCount() - 1]);
    }

    @Test
    void qwen2WithoutFpsOrFrameCountKeepsEveryFrame() {
        assertArrayEquals(new long[] {0, 1, 2, 3, 4}, QwenVideoRules.sampleHfQwen2("e.mp4", 5, 25.0, null, null, 4, 768, 2));
    }

    @Test
    void hfRefusesQwenVlUtilsKeysAndBothFpsAndNframes() throws Exception {
        var p = planner(ProcessorPreset.QWEN3_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of());
        var meta = new VideoMetadata(50, 25.0, 640, 360);
        var e = assertThrows(VideoPlanException.class, () -> p.plan("f.mp4", meta, item("{\"type\":\"video\",\"video\":\"f.mp4\",\"video_start\":1}")));
        assertTrue(e.getMessage().contains("[video_start]"), e.getMessage());
        e = assertThrows(VideoPlanException.class, () -> p.plan("f.mp4", meta, item("{\"total_pixels\":1000000}")));
        assertTrue(e.getMessage().contains("[total_pixels]"), e.getMessage());
        e = assertThrows(VideoPlanException.class, () -> p.plan("f.mp4", meta, item("{\"fps\":1,\"nframes\":8}")));
        assertTrue(e.getMessage().contains("both fps and nframes"), e.getMessage());
        var ex = assertThrows(IllegalArgumentException.class, () -> planner(ProcessorPreset.QWEN3_VL, VideoSampler.HF,
                TransformersCompat.V5_18, Map.of(VideoKey.TOTAL_PIXELS, 1e8)));
        assertTrue(ex.getMessage().contains("--video-total-pixels"), ex.getMessage());
        // an item's nframes replaces the command's fps: 8 frames of 50
        assertEquals(8, p.plan("f.mp4", meta, item("{\"nframes\":8}")).frameCount());
    }

    @Test
    void qwenVlUtilsDropsTheCommandFpsForAnItemWithNframes() throws Exception {
        var p = planner(ProcessorPreset.QWEN2_VL, VideoSampler.QWEN_VL_UTILS, TransformersCompat.V5_18, Map.of(VideoKey.FPS, 2.0));
        var meta = new VideoMetadata(50, 25.0, 640, 360);
        assertArrayEquals(new long[] {0, 10, 20, 29, 39, 49}, p.plan("g.mp4", meta, item("{\"nframes\":6}")).frameIndices());
        var e = assertThrows(VideoPlanException.class, () -> p.plan("g.mp4", meta, item("{\"nframes\":6,\"fps\":1}")));
        assertTrue(e.getMessage().contains("Only accept either"), e.getMessage());
        e = assertThrows(VideoPlanException.class, () -> p.plan("g.mp4", meta, item("{\"resized_height\":280}")));
        assertTrue(e.getMessage().contains("resized_height and resized_width go together"), e.getMessage());
        // trim 0.5 … 1.7 s at 25 fps = frames 13 … 42 (absolute); 4 frames; sampled fps 4 / 30 · 25
        var t = p.plan("g.mp4", meta, item("{\"video_start\":0.5,\"video_end\":1.7}"));
        assertArrayEquals(new long[] {13, 23, 32, 42}, t.frameIndices());
        assertEquals(4 / 30.0 * 25, t.sampledFps());
        e = assertThrows(VideoPlanException.class, () -> p.plan("g.mp4", meta, item("{\"video_start\":3}")));
        assertTrue(e.getMessage().contains("Invalid time range"), e.getMessage());
    }

    @Test
    void itemOptionsAreNumbersWithinBounds() throws Exception {
        for (String bad : new String[] {"{\"min_pixels\":-1}", "{\"fps\":0}", "{\"fps\":\"2\"}", "{\"nframes\":2.5}", "{\"fsp\":2}",
                "{\"max_pixels\":1e300}", "{\"video_end\":-0.5}", "{\"resized_width\":100000}", "{\"nframes\":null}", "[]"}) {
            var e = assertThrows(IllegalArgumentException.class, () -> item(bad), bad);
            assertTrue(e.getMessage().startsWith("sample.json item 0: "), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> VideoItemOptions.of(Map.of("fps", Double.NaN), "x"));
        var ok = item("{\"type\":\"video\",\"video\":\"a.mp4\",\"fps\":1.5,\"max_pixels\":50176}");
        assertEquals(Map.of(VideoKey.FPS, 1.5, VideoKey.MAX_PIXELS, 50176.0), ok.values());
        assertThrows(UnsupportedOperationException.class, () -> ok.values().put(VideoKey.FPS, 2.0));
        assertThrows(IllegalArgumentException.class, () -> new VideoOptions(Map.of(VideoKey.VIDEO_START, 1.0)));
        assertThrows(IllegalArgumentException.class, () -> new VideoOptions(Map.of(VideoKey.MAX_FRAMES, 0.0)));
    }

    @Test
    void optionsOverAModelFoldersDefaults() {
        var model = new VideoOptions(Map.of(VideoKey.FPS, 1.0, VideoKey.MAX_PIXELS, 1e6));
        var cli = new VideoOptions(Map.of(VideoKey.FPS, 4.0));
        assertEquals(Map.of(VideoKey.FPS, 4.0, VideoKey.MAX_PIXELS, 1e6), cli.over(model).values());
    }

    @Test
    void metadataFromAFrameIndex() {
        var s = new StreamInfo(0, "mov,mp4,m4a,3gp,3g2,mj2", "h264", new Rational(1, 30000), new Rational(30000, 1001),
                new Rational(30000, 1001), 480, 272, 0, "yuv420p", 2, 1, 2, 2, Double.NaN, 0, 4, 4);
        var index = new FrameIndex(s, new long[] {0, 1001, 2002, 3003}, new long[] {0, 1001, 2002, 3003}, new long[] {1001, 1001, 1001, 1001},
                new byte[] {FrameIndex.KEY, 0, 0, FrameIndex.DISCARD});
        // decoded frames leave the discarded packet out; the header's count (4) and duration (4 ticks of 1/30000 s) kept apart
        assertEquals(new VideoMetadata(3, 30000.0 / 1001, 480, 272, 4, 4 / 30000.0), VideoMetadata.of(index, "v.mp4"));
        var noRate = new StreamInfo(0, "matroska,webm", "vp9", new Rational(1, 1000), new Rational(0, 0), new Rational(0, 0), 480, 272, 0,
                "yuv420p", 2, 1, 2, 2, Double.NaN, 0, 0, 0);
        var e = assertThrows(VideoPlanException.class, () -> VideoMetadata.of(new FrameIndex(noRate, new long[] {0}, new long[] {0},
                new long[] {1}, new byte[] {FrameIndex.KEY}), "w.webm"));
        assertTrue(e.getMessage().startsWith("video w.webm: the stream has no usable average frame rate"), e.getMessage());
        // a header claiming absurdly many frames does not stop the samplers that do not read it
        var liar = new StreamInfo(0, "avi", "h264", new Rational(1, 25), new Rational(25, 1), new Rational(25, 1), 320, 240, 0,
                "yuv420p", 2, 1, 2, 2, Double.NaN, 0, Long.MAX_VALUE, 100);
        var lying = VideoMetadata.of(new FrameIndex(liar, new long[] {0, 1}, new long[] {0, 1}, new long[] {1, 1},
                new byte[] {FrameIndex.KEY, 0}), "liar.avi");
        assertEquals(VideoMetadata.MAX_HEADER_FRAMES, lying.headerFrames());
        assertEquals(2, planner(ProcessorPreset.QWEN2_VL, VideoSampler.QWEN_VL_UTILS, TransformersCompat.V5_18, Map.of())
                .plan("liar.avi", lying, VideoItemOptions.NONE).frameCount());
        e = assertThrows(VideoPlanException.class, () -> planner(ProcessorPreset.QWEN2_VL, VideoSampler.LLAMAFACTORY,
                TransformersCompat.V5_18, Map.of()).plan("liar.avi", lying, VideoItemOptions.NONE));
        assertTrue(e.getMessage().contains("its token count would not match its tensors"), e.getMessage());
        var empty = new FrameIndex(s, new long[0], new long[0], new long[0], new byte[0]);
        e = assertThrows(VideoPlanException.class, () -> VideoMetadata.of(empty, "x.mp4"));
        assertTrue(e.getMessage().contains("frame count 0"), e.getMessage());
    }

    @Test
    void namesParse() {
        assertEquals(TransformersCompat.V5_18, TransformersCompat.fromName("5.18.0"));
        assertEquals(TransformersCompat.V4_57, TransformersCompat.fromName("4.57"));
        assertThrows(IllegalArgumentException.class, () -> TransformersCompat.fromName("4.40"));
        assertEquals(VideoSampler.QWEN_VL_UTILS, VideoSampler.fromName("qwen-vl-utils"));
        assertThrows(IllegalArgumentException.class, () -> VideoSampler.fromName("decord"));
    }

    /**
     * Qwen3-Omni's videos (issue 32): Qwen2VLVideoProcessor's sampling at patch 16 (factor 32), per-frame bounds its
     * processor passes at every call (131,072 … 786,432, not the folder's 3,136 …), video_second_per_grid = 2 / the fps
     * passed (1.0 when none is). Hand-checked; the same numbers as Qwen3OmniMoeProcessor's (RESULTS.md check 7).
     */
    @Test
    void qwen3OmniPlansAsQwen2VideoProcessorAtPatch16WithItsCallTimeSize() throws Exception {
        var meta = new VideoMetadata(20, 10.0, 160, 120);
        var p = planner(ProcessorPreset.QWEN3_OMNI, VideoSampler.HF, TransformersCompat.V5_18, Map.of()).plan("v.mkv", meta, VideoItemOptions.NONE);
        // n = floor(20 / 10 · 2 / 2) · 2 = 4: 0, 5, 10, 15. 120x160 → 128x160 = 20,480 < 131,072: beta = sqrt(131,072 / 19,200)
        // = 2.613; ceil(120·2.613/32)·32 = 320, ceil(160·2.613/32)·32 = 448 → grid 2 x 20 x 28
        assertArrayEquals(new long[] {0, 5, 10, 15}, p.frameIndices());
        assertArrayEquals(new long[] {2, 20, 28}, p.gridThw());
        assertEquals(1.0f, p.secondPerGridT(), "2 / fps 2.0");
        assertEquals(List.of(), p.timestampTexts(), "no Qwen3-VL timestamps");
        var nframes = planner(ProcessorPreset.QWEN3_OMNI, VideoSampler.HF, TransformersCompat.V5_18, Map.of())
                .plan("v.mkv", meta, item("{\"nframes\": 4}"));
        assertEquals(2.0f, nframes.secondPerGridT(), "no fps passed: the processor's silent 1.0");
        var bounded = planner(ProcessorPreset.QWEN3_OMNI, VideoSampler.HF, TransformersCompat.V5_18, Map.of(VideoKey.MIN_PIXELS, 3136.0))
                .plan("v.mkv", meta, VideoItemOptions.NONE);
        assertArrayEquals(new long[] {2, 8, 10}, bounded.gridThw(), "--video-min-pixels is the call's size");
        var vl = planner(ProcessorPreset.QWEN2_5_VL, VideoSampler.HF, TransformersCompat.V5_18, Map.of()).plan("v.mkv", meta, VideoItemOptions.NONE);
        assertArrayEquals(new long[] {2, 8, 12}, vl.gridThw(), "Qwen2.5-VL: patch 14, 3,136 … (112x168)");
        // Qwen2.5-Omni: the same trap at patch 14 (Qwen2_5OmniProcessorKwargs' size 100,352 … 602,112 at every call):
        // 120x160 → 112x168 = 18,816 < 100,352: beta = sqrt(100,352 / 19,200) = 2.286; ceil(120·2.286/28)·28 = 280,
        // ceil(160·2.286/28)·28 = 392 → grid 2 x 20 x 28 (what the real processor gives, RESULTS.md check 7), spg 2 / fps 2.0
        var omni25 = planner(ProcessorPreset.QWEN2_5_OMNI, VideoSampler.HF, TransformersCompat.V5_18, Map.of()).plan("v.mkv", meta,
                VideoItemOptions.NONE);
        assertArrayEquals(new long[] {2, 20, 28}, omni25.gridThw());
        assertEquals(1.0f, omni25.secondPerGridT());
        var x = assertThrows(IllegalArgumentException.class,
                () -> planner(ProcessorPreset.QWEN2_AUDIO, VideoSampler.HF, TransformersCompat.V5_18, Map.of()));
        assertTrue(x.getMessage().contains("planned under"), x.getMessage());
        // the published folder's preprocessor_config.json: patch 16, mean/std 0.5; its pixel bounds are not the videos'
        var cfg = VideoProcessorConfig.parse(JSON.readTree("""
            {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
             "min_pixels": 3136, "max_pixels": 12845056, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "feature_size": 128, "sampling_rate": 16000}"""), java.nio.file.Path.of("preprocessor_config.json"), ProcessorPreset.QWEN3_OMNI);
        assertEquals(16, cfg.patchSize());
        assertArrayEquals(new double[] {0.5, 0.5, 0.5}, cfg.mean());
        assertTrue(cfg.options().values().isEmpty(), "no folder bounds: " + cfg.options());
    }
}
