package dev.stoker.bench.headspace;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ladder.LadderBench;
import dev.stoker.bench.ladder.LadderRun;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.report.RunReport;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The headspace analysis ({@code stoker bench headspace}), after SPDL's {@code CacheDataLoader}: one feed in one mode and one
 * trainer process per rank (as a rung of the ladder, {@link LadderRun}), each trainer with the client's headspace option:
 * it keeps copies of its first N batches and replays them for M steps without asking the service, so those steps take
 * the trainer's compute alone, with no wait for data; their median is its compute floor, which it reports to the service.
 * The service's figures then say how much per step the data side can still win at most: the mean step (wait + compute,
 * over the steps on the service's batches after the first {@link dev.stoker.node.TrainerTimings#STEADY_SKIP_STEPS}) minus
 * the floor. Prints them per rank and overall with the verdict, writes the run's data and {@code report.html} into the work
 * dir, and, last, a JSON line.
 *
 * <p>With the simulated trainers ({@code --step-ms}) the floor is the sleep they take per step, plus the client's own
 * overhead: the measurement of a real trainer's floor is the same code path (the Python {@code Loader(headspace=…)} or
 * {@code TrainerClient.headspace}) inside the user's training loop. GPU utilisation is not measured here.
 */
public final class HeadspaceBench {
    /** The name of the run's files in the work dir ({@code headspace-pipeline.json}, {@code headspace-rank<r>.json}). */
    public static final String NAME = "headspace";

    private HeadspaceBench() {}

    /**
     * @param config       the feed (data, ranks, batch, processor, fetch, CPU, buffers, store)
     * @param mode         the feed mode ({@code serial}, {@code concurrent}, {@code prefetch}, {@code zero-copy})
     * @param stepMillis   the simulated trainer's compute per step
     * @param steps        steps per rank on the service's batches
     * @param cacheBatches batches each trainer keeps copies of
     * @param replaySteps  steps each trainer replays them for (on top of {@code steps})
     * @param trainer      {@code java} or {@code python}
     * @param workDir      where sockets, trainer logs and reports go (null: a temp folder)
     */
    public record Settings(NodeConfig config, String mode, long stepMillis, int steps, int cacheBatches, int replaySteps, String trainer,
                           Path workDir) {
        public Settings {
            if (cacheBatches < 1 || cacheBatches > 1024) throw new ConfigException("--cache-batches must be 1 to 1024, got " + cacheBatches);
            if (replaySteps < 1) throw new ConfigException("--replay-steps must be at least 1, got " + replaySteps);
            if (steps <= cacheBatches)
                throw new ConfigException("--steps (" + steps + ") must be more than --cache-batches (" + cacheBatches
                        + "): the replay starts after the batches kept and needs a step from the service after it to report the floor");
            if (stepMillis < 0) throw new ConfigException("--step-ms must be >= 0, got " + stepMillis);
        }
    }

    /** Runs the analysis, printing as it goes; returns the last line's content. */
    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        // as the ladder: without --cache the feed runs without the cache of preprocessed samples, so a run is repeatable
        var config = s.config().isGiven(NodeConfig.CACHE) ? s.config() : s.config().toBuilder().set(NodeConfig.CACHE, false).build();
        if (config.data() == null) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…)");
        var mode = LadderBench.mode(s.mode());
        boolean compact = config.encodeOptions().pixelFormat() == PixelFormat.UINT8;
        var trainers = TrainerProcesses.Kind.of(s.trainer());
        Path dir = s.workDir() != null ? s.workDir() : Files.createTempDirectory("stoker-headspace");
        Files.createDirectories(dir);
        out.printf("headspace: %s, ranks %d, batch %d, mode %s, step %d ms, %d steps + %d replayed on copies of the first %d batches, "
                        + "%d CPU threads, %s trainers, %s%n", config.data(), config.ranks(), config.batch(), ConfigKey.cliName(mode),
                s.stepMillis(), s.steps(), s.replaySteps(), s.cacheBatches(), config.threads(), trainers.name(),
                config.cacheOn() ? "cache on in " + config.cacheDir() : "cache off");
        out.flush();
        Path errors = dir.resolve(NAME + "-errors.jsonl");
        Files.deleteIfExists(errors);
        try (var feeds = NodeFeeds.open(config)) {
            LadderRun.run(NAME, mode, () -> feeds.start(mode, errors), config.ranks(), s.steps(), s.stepMillis(), feeds.expectedBatchBytes(),
                    dir, trainers, compact, s.cacheBatches(), s.replaySteps());
        }
        JsonNode pipeline = new ObjectMapper().readTree(dir.resolve(NAME + "-pipeline.json").toFile());
        var json = summary(pipeline, dir, config.ranks());
        for (var rank : (List<?>) json.get("ranks")) {
            @SuppressWarnings("unchecked") var r = (Map<String, Object>) rank;
            out.printf("rank %d: compute floor %.1f ms (median of %d replayed steps; the trainer's own figure %.1f ms), mean step %.1f ms, "
                            + "wait ratio %.3f: the data side can win at most %.1f ms per step%n", r.get("rank"), r.get("compute_floor_ms"),
                    r.get("replayed_steps"), r.get("trainer_compute_floor_ms"), r.get("mean_step_ms"), r.get("wait_ratio"),
                    r.get("data_headroom_ms"));
        }
        out.printf("all ranks: compute floor %.1f ms, mean step %.1f ms, wait ratio %.3f: the data side can win at most %.1f ms per step "
                        + "(%.0f%% of the step)%n", json.get("compute_floor_ms"), json.get("mean_step_ms"), json.get("wait_ratio"),
                json.get("data_headroom_ms"), 100 * (double) json.get("data_headroom_fraction"));
        out.println("verdict " + pipeline.path("verdict").path("text").asText("(none)"));
        out.println("report: " + RunReport.write(dir) + " (raw per-step and per-stage data beside it)");
        out.println(new ObjectMapper().writeValueAsString(json));
        out.flush();
        return json;
    }

    /**
     * The last line's content from the service's figures ({@code trainers.headspace} of the run's pipeline file) and each
     * trainer's own report (its floor, as a cross-check): floor, mean step, wait ratio and headroom, overall and per rank.
     */
    static Map<String, Object> summary(JsonNode pipeline, Path dir, int ranks) throws IOException {
        JsonNode all = pipeline.path("trainers").path("headspace");
        if (!all.isObject())
            throw new IOException("the service recorded no compute floor (trainers.headspace in " + dir.resolve(NAME + "-pipeline.json")
                    + "): did the trainers replay? see their logs in " + dir);
        var json = new LinkedHashMap<String, Object>();
        figures(json, all);
        json.put("steps", all.path("steps").asLong());
        var perRank = new ArrayList<Map<String, Object>>();
        for (JsonNode r : pipeline.path("trainers").path("ranks")) {
            JsonNode h = r.path("headspace");
            if (!h.isObject()) continue;
            var x = new LinkedHashMap<String, Object>();
            int rank = r.path("rank").asInt();
            x.put("rank", rank);
            figures(x, h);
            JsonNode own = new ObjectMapper().readTree(dir.resolve(NAME + "-rank" + rank + ".json").toFile()).path("compute_floor_ns");
            x.put("trainer_compute_floor_ms", own.isNumber() ? ms(own.asLong()) : null);
            perRank.add(x);
        }
        if (perRank.size() != ranks)
            throw new IOException(perRank.size() + " of " + ranks + " ranks reported a compute floor; see the trainer logs in " + dir);
        json.put("ranks", perRank);
        json.put("verdict", pipeline.path("verdict").path("kind").asText(null));
        return json;
    }

    private static void figures(Map<String, Object> m, JsonNode h) {
        m.put("compute_floor_ms", ms(h.path("compute_floor_ns").asLong()));
        m.put("replayed_steps", h.path("replayed_steps").asLong());
        m.put("mean_step_ms", ms(h.path("mean_step_ns").asLong()));
        m.put("mean_wait_ms", ms(h.path("mean_wait_ns").asLong()));
        m.put("wait_ratio", h.path("wait_ratio").asDouble());
        m.put("data_headroom_ms", ms(h.path("data_headroom_ns").asLong()));
        m.put("data_headroom_fraction", h.path("data_headroom_fraction").asDouble());
    }

    private static double ms(long nanos) { return Math.round(nanos / 1e3) / 1e3; }
}
