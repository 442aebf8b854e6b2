package dev.stoker.video.sample;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.video.ffmpeg.Rational;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The {@code llamafactory} sampler against LLaMA-Factory 0.9.6.dev0's own functions ({@code mm_plugin.py}
 * @ff6d4d12) and transformers 5.18.0's smart_resize and {@code _calculate_timestamps}, run from their source on
 * the 400 combinations of {@code llamafactory-fixtures.json} (made by
 * {@code tools/video-sampler-fixtures/make_llamafactory_fixtures.py}; needs nothing outside the repository):
 * indices, pre-resized frame size, grid, fps per video, {@code second_per_grid_t}, Qwen3 timestamps exactly, and
 * every failure (no duration, header and decode disagreeing, frames under 32 px under 4.57) refused.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LlamaFactoryPlanTest {
    @Test
    void everyFixtureMatchesLlamaFactory() throws Exception {
        JsonNode cases = VideoPlanFixtureTest.load("llamafactory-fixtures.json").path("cases");
        assertTrue(cases.size() >= 300, "cases: " + cases.size());
        List<String> diffs = new ArrayList<>();
        int plans = 0, refusals = 0;
        for (JsonNode c : cases) {
            String id = "case " + c.path("id").asInt() + " " + c;
            if (id.length() > 300) id = id.substring(0, 300);
            var opts = new EnumMap<VideoKey, Double>(VideoKey.class);
            for (var e : c.path("options").properties()) opts.put(VideoKey.ofJsonName(e.getKey()), e.getValue().asDouble());
            var proc = new VideoOptions(Map.of(VideoKey.MIN_PIXELS, c.path("processor").path("min_pixels").asDouble(),
                    VideoKey.MAX_PIXELS, c.path("processor").path("max_pixels").asDouble()));
            var planner = new VideoPlanner(ProcessorPreset.fromName(c.path("family").asText()), VideoSampler.LLAMAFACTORY,
                    TransformersCompat.fromName(c.path("compat").asText()), new VideoOptions(opts), proc);
            var meta = new VideoMetadata(c.path("decoded").asInt(), c.path("average_fps").asDouble(), c.path("width").asInt(),
                    c.path("height").asInt(), c.path("header_frames").asLong(),
                    c.path("duration_seconds").isNull() ? Double.NaN : c.path("duration_seconds").asDouble());
            JsonNode exp = c.path("expected");
            VideoPlan p;
            try {
                p = planner.plan("lf.mp4", meta, VideoItemOptions.NONE);
            } catch (VideoPlanException e) {
                if (!exp.has("error")) diffs.add(id + ": refused: " + e.getMessage());
                else if (!e.getMessage().startsWith("video lf.mp4: ") || !e.getMessage().contains(cause(exp.path("error").asText())))
                    diffs.add(id + ": message '" + e.getMessage() + "' for " + exp.path("error").asText());
                else refusals++;
                continue;
            }
            if (exp.has("error")) {
                diffs.add(id + ": planned " + p + ", LLaMA-Factory: " + exp.path("error").asText());
                continue;
            }
            diffs.addAll(VideoPlanFixtureTest.compare(id, p, exp));
            String frame = p.frameHeight() + "x" + p.frameWidth();
            String expFrame = exp.path("frame").get(0).asInt() + "x" + exp.path("frame").get(1).asInt();
            if (!frame.equals(expFrame)) diffs.add(id + ": pre-resized frame " + frame + " != " + expFrame);
            plans++;
        }
        assertEquals(List.of(), diffs.stream().limit(10).toList(), diffs.size() + " differences");
        assertTrue(plans > 250 && refusals > 40, plans + " plans, " + refusals + " refusals");
    }

    /** What Stoker's message must say for each kind of LLaMA-Factory failure. */
    private static String cause(String error) {
        if (error.startsWith("TypeError")) return "but no duration";
        if (error.startsWith("token path")) return "its token count would not match its tensors";
        if (error.startsWith("ZeroDivisionError")) return "divide";
        if (error.startsWith("ValueError: ")) return error.substring("ValueError: ".length(), Math.min(error.length(), 40));
        return error;
    }

    @Test
    void handChecked() {
        // 10 s at 25 fps, 250 frames: n = min(250, 128, floor(10 · 2)) = 20; linspace(0, 249, 20) truncated: step 13.105…
        long[] idx = LlamaFactoryVideoRules.sampleIndices("a.mp4", 250, 10.0, 2.0, 128);
        assertEquals(20, idx.length);
        assertEquals(13, idx[1]); // 13.1 truncated
        assertEquals(249, idx[19]);
        // 640x360 = 230,400 > 65,536: f = sqrt(65,536 / 230,400) = 0.5333; int(341.33) = 341, int(192) = 192
        assertArrayEquals(new int[] {341, 192}, LlamaFactoryVideoRules.regularizedSize("a.mp4", 640, 360, 65536, 256));
        // edges under 28 raised; aspect over 200 cut to 180
        assertArrayEquals(new int[] {28, 28}, LlamaFactoryVideoRules.regularizedSize("a.mp4", 20, 20, 65536, 256));
        assertArrayEquals(new int[] {28 * 180, 28}, LlamaFactoryVideoRules.regularizedSize("a.mp4", 8000, 10, 1e9, 256));
        // WebM: no header count → 0 … maxlen − 1 whatever the length
        assertEquals(128, LlamaFactoryVideoRules.sampleIndices("w.webm", 0, Double.NaN, 2.0, 128).length);
        var e = assertThrows(VideoPlanException.class, () -> LlamaFactoryVideoRules.sampleIndices("v.mp4", 60, Double.NaN, 2.0, 128));
        assertTrue(e.getMessage().contains("no duration"), e.getMessage());
        // float(duration · time_base)
        assertEquals(10.01, VideoMetadata.durationSeconds(240240, new Rational(1, 24000)));
        assertEquals(12.0, VideoMetadata.durationSeconds(359, new Rational(12, 359)));
        assertTrue(Double.isNaN(VideoMetadata.durationSeconds(Long.MIN_VALUE, new Rational(1, 1000))));
    }

    @Test
    void refusesWhatItsLayoutCannotCarry() {
        var p = new VideoPlanner(ProcessorPreset.QWEN2_5_VL, VideoSampler.LLAMAFACTORY, TransformersCompat.V5_18, VideoOptions.DEFAULTS);
        var meta = new VideoMetadata(250, 25.0, 640, 360, 250, 10.0);
        var e = assertThrows(VideoPlanException.class, () -> p.plan("a.mp4", meta, VideoItemOptions.of(Map.of("fps", 1), "item")));
        assertTrue(e.getMessage().contains("no per-video options"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new VideoPlanner(ProcessorPreset.QWEN2_5_VL, VideoSampler.LLAMAFACTORY,
                TransformersCompat.V5_18, new VideoOptions(Map.of(VideoKey.MIN_FRAMES, 4.0))));
        assertThrows(IllegalArgumentException.class, () -> new VideoPlanner(ProcessorPreset.QWEN2_5_VL, VideoSampler.LLAMAFACTORY,
                TransformersCompat.V5_18, new VideoOptions(Map.of(VideoKey.MAX_PIXELS, 100.0))));
        // second_per_grid_t = 2 / (20 frames / 10 s)
        assertEquals(1.0f, p.plan("a.mp4", meta, VideoItemOptions.NONE).secondPerGridT());
    }

    /**
     * The Pillow resize calls of {@code _preprocess_image}, each on the previous one's output: none under the bounds;
     * one over video_max_pixels; two when the shrunk frame's short side is under 28 (4000x20: 80,000 pixels → 3620x18
     * → 3620x28); grown to video_min_pixels (10x10 → 16x16 → 28x28); the last is always the regularized size.
     */
    @Test
    void preResizeStepsChainAsPillowIsCalled() {
        double max = LlamaFactoryVideoRules.DEFAULT_MAX_PIXELS, min = LlamaFactoryVideoRules.DEFAULT_MIN_PIXELS;
        assertEquals(0, LlamaFactoryVideoRules.preResizeSteps("a", 176, 144, max, min).length);
        assertArrayEquals(new int[][] {{295, 221}}, LlamaFactoryVideoRules.preResizeSteps("a", 320, 240, max, min));
        assertArrayEquals(new int[][] {{3620, 18}, {3620, 28}}, LlamaFactoryVideoRules.preResizeSteps("a", 4000, 20, max, min));
        assertArrayEquals(new int[][] {{16, 16}, {28, 28}}, LlamaFactoryVideoRules.preResizeSteps("a", 10, 10, max, min));
        for (int[] wh : new int[][] {{176, 144}, {320, 240}, {4000, 20}, {10, 10}, {9000, 40}}) {
            int[][] steps = LlamaFactoryVideoRules.preResizeSteps("a", wh[0], wh[1], max, min);
            int[] last = steps.length == 0 ? wh : steps[steps.length - 1];
            assertArrayEquals(last, LlamaFactoryVideoRules.regularizedSize("a", wh[0], wh[1], max, min));
        }
    }
}
