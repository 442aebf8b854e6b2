package dev.stoker.video.sample;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The plan against the shared reference ({@code ref_qwenvl_video.py}'s {@code process_video}) on the ~900 generated
 * (frames, fps, size, options, item keys, family, sampler, transformers version) combinations of
 * {@code plan-fixtures.json} (made by {@code tools/video-sampler-fixtures/make_fixtures.py}; needs nothing outside
 * the repository): frame indices, resized size, grid, sampled fps, {@code second_per_grid_t} and timestamps compared
 * exactly, and every reference error (the arange crash lengths, bad trims, budgets, tiny frames under 4.57) refused
 * with the reference's cause in the message.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VideoPlanFixtureTest {
    static JsonNode load(String name) throws Exception {
        try (InputStream in = VideoPlanFixtureTest.class.getResourceAsStream(name)) {
            if (in == null) throw new IllegalStateException("missing test resource " + name);
            return new ObjectMapper().readTree(in);
        }
    }

    static VideoOptions options(JsonNode opts) {
        var m = new EnumMap<VideoKey, Double>(VideoKey.class);
        if (opts != null) for (var e : opts.properties()) m.put(VideoKey.ofJsonName(e.getKey()), e.getValue().asDouble());
        return new VideoOptions(m);
    }

    /** The differences between a plan and the reference's expected object ({"indices", "resized", ...} or {"error"}). */
    static List<String> compare(String id, VideoPlan p, JsonNode exp) {
        List<String> d = new ArrayList<>();
        long[] idx = new long[exp.path("indices").size()];
        for (int i = 0; i < idx.length; i++) idx[i] = exp.path("indices").get(i).asLong();
        if (!Arrays.equals(idx, p.frameIndices())) d.add(id + ": indices " + Arrays.toString(p.frameIndices()) + " != " + Arrays.toString(idx));
        String resized = p.resizedHeight() + "x" + p.resizedWidth(), expResized = exp.path("resized").get(0).asInt() + "x" + exp.path("resized").get(1).asInt();
        if (!resized.equals(expResized)) d.add(id + ": resized " + resized + " != " + expResized);
        String grid = Arrays.toString(p.gridThw()), expGrid = exp.path("grid").toString().replace(",", ", ");
        if (!grid.equals(expGrid)) d.add(id + ": grid " + grid + " != " + expGrid);
        if (p.tokens() * 4 != p.patches()) d.add(id + ": tokens " + p.tokens() + " not patches/4");
        if (Double.compare(p.sampledFps(), exp.path("sampled_fps").asDouble()) != 0)
            d.add(id + ": sampled fps " + p.sampledFps() + " != " + exp.path("sampled_fps").asDouble());
        if (exp.has("second_per_grid_t")) {
            if (Float.compare(p.secondPerGridT(), (float) exp.path("second_per_grid_t").asDouble()) != 0)
                d.add(id + ": second_per_grid_t " + p.secondPerGridT() + " != " + exp.path("second_per_grid_t").asDouble());
        } else if (!Float.isNaN(p.secondPerGridT())) {
            d.add(id + ": second_per_grid_t " + p.secondPerGridT() + " for " + p.family());
        }
        double[] ts = new double[exp.path("timestamps").size()];
        List<String> texts = new ArrayList<>();
        for (int i = 0; i < ts.length; i++) {
            ts[i] = exp.path("timestamps").get(i).asDouble();
            texts.add(exp.path("timestamp_text").get(i).asText());
        }
        if (!Arrays.equals(ts, p.timestamps())) d.add(id + ": timestamps " + Arrays.toString(p.timestamps()) + " != " + Arrays.toString(ts));
        if (!texts.equals(p.timestampTexts())) d.add(id + ": timestamp texts " + p.timestampTexts() + " != " + texts);
        return d;
    }

    /** The first three words of the reference's error: the cause the refusal must name. */
    static String cause(String referenceError) {
        String[] w = referenceError.split(" ");
        return String.join(" ", Arrays.copyOf(w, Math.min(3, w.length)));
    }

    @Test
    void everyFixtureMatchesTheReference() throws Exception {
        JsonNode cases = load("plan-fixtures.json").path("cases");
        assertTrue(cases.size() >= 800, "fixture cases: " + cases.size());
        List<String> diffs = new ArrayList<>();
        int plans = 0, refusals = 0;
        for (JsonNode c : cases) {
            String id = "case " + c.path("id").asInt() + " (" + c.path("family").asText() + " " + c.path("sampler").asText() + " "
                    + c.path("compat").asText() + ", " + c.path("total").asInt() + " frames @ " + c.path("fps").asDouble() + ", "
                    + c.path("height").asInt() + "x" + c.path("width").asInt() + ", options " + c.path("options") + ", item "
                    + c.path("item") + ")";
            String video = "clip" + c.path("id").asInt() + ".mp4";
            JsonNode exp = c.path("expected");
            VideoPlan p;
            try {
                var planner = new VideoPlanner(ProcessorPreset.fromName(c.path("family").asText()),
                        VideoSampler.fromName(c.path("sampler").asText()), TransformersCompat.fromName(c.path("compat").asText()),
                        options(c.path("options")));
                var meta = new VideoMetadata(c.path("total").asInt(), c.path("fps").asDouble(), c.path("width").asInt(),
                        c.path("height").asInt());
                p = planner.plan(video, meta, VideoItemOptions.fromJson(c.path("item"), id));
            } catch (VideoPlanException e) {
                if (!exp.has("error")) diffs.add(id + ": refused (" + e.getMessage() + "), the reference plans it");
                else if (!e.getMessage().startsWith("video " + video + ": ") || !e.getMessage().contains(cause(exp.path("error").asText())))
                    diffs.add(id + ": message '" + e.getMessage() + "' lacks the cause '" + exp.path("error").asText() + "'");
                else refusals++;
                continue;
            }
            if (exp.has("error")) {
                diffs.add(id + ": planned " + p + ", the reference fails: " + exp.path("error").asText());
                continue;
            }
            diffs.addAll(compare(id, p, exp));
            plans++;
        }
        assertEquals(List.of(), diffs.stream().limit(12).map(d -> d.length() > 400 ? d.substring(0, 400) + "…" : d).toList(),
                diffs.size() + " differences");
        assertTrue(plans > 500 && refusals > 100, plans + " plans, " + refusals + " refusals");
    }
}
