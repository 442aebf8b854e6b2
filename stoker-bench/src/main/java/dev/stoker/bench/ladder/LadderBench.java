package dev.stoker.bench.ladder;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.report.RunReport;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The wait-time ladder ({@code stoker bench ladder}). For each mode, the pipeline feeds one trainer
 * process per rank ({@link LadderRun}); each trainer measures, per step, how long it waited for its
 * batch (transfer included) and how long it computed (a sleep, like a GPU step). Prints a table, the
 * bottleneck verdict per mode, writes {@code report.html} and the raw data (docs/run-data.md) into the
 * work dir, and, last, the JSON line {@code {"modes": {MODE: {…}}}}.
 */
public final class LadderBench {
    public static final List<String> MODES = List.of("serial", "concurrent", "prefetch", "zero-copy");

    private LadderBench() {}

    /**
     * @param config     the feed (data, ranks, batch, processor, fetch, CPU, buffers, store)
     * @param stepMillis simulated GPU step per batch
     * @param steps      steps per rank and mode
     * @param modes      modes to run, in order
     * @param trainer    {@code java} or {@code python}
     * @param workDir    where sockets, trainer logs and per-step reports go (null: a temp folder)
     */
    public record Settings(NodeConfig config, long stepMillis, int steps, List<String> modes, String trainer, Path workDir) {}

    /** Whether the cache starts cold (no entry) or warm, and with how many entries, as the ladder's header says. */
    private static String cacheState(NodeConfig config) {
        long entries = config.preprocessedCache().store().stats().entries();
        return entries == 0 ? "cold: empty" : "warm: " + entries + " entries";
    }

    /** The feed mode a ladder mode names. */
    public static FeedMode mode(String name) {
        for (var m : FeedMode.values()) if (ConfigKey.cliName(m).equals(name.trim().toLowerCase(Locale.ROOT))) return m;
        throw new ConfigException("unknown mode '" + name + "'; expected serial, concurrent, prefetch or zero-copy");
    }

    /** Runs the ladder, printing as it goes; returns {@code {MODE: {wait_ratio, …}}}, the last line's content. */
    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        // without --cache the ladder runs without the cache of preprocessed samples: every rung decodes, none reads what an
        // earlier one left (with --cache on, the first rung fills it and the later ones read it: say so)
        var config = s.config().isGiven(NodeConfig.CACHE) ? s.config() : s.config().toBuilder().set(NodeConfig.CACHE, false).build();
        if (config.data() == null) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…)");
        var options = config.encodeOptions();
        boolean compact = options.pixelFormat() == PixelFormat.UINT8;
        var trainers = TrainerProcesses.Kind.of(s.trainer());
        for (String m : s.modes()) mode(m);
        Path dir = s.workDir() != null ? s.workDir() : Files.createTempDirectory("stoker-ladder");
        out.printf("ladder: %s, ranks %d, batch %d, step %d ms, %d steps, fetch latency %d ms, max pixels %d, %d CPU threads, "
                        + "fetch concurrency %d, prefetch %d, autotune %s, %s trainers, pixels %s, %s%n",
                config.data(), config.ranks(), config.batch(), s.stepMillis(), s.steps(), config.get(NodeConfig.FETCH_LATENCY_MS),
                options.vision().maxPixels(), config.threads(), config.get(NodeConfig.FETCH_CONCURRENCY), config.get(NodeConfig.PREFETCH_BATCHES),
                config.get(NodeConfig.AUTOTUNE) ? "on" : "off", trainers.name(),
                ConfigKey.cliName(options.pixelFormat()) + (compact ? " (converted by the trainers)" : ""),
                !config.cacheOn() ? "cache off" : "cache on in " + config.cacheDir() + " (" + cacheState(config) + ")");
        out.printf("%-11s %10s %12s %10s %10s %12s %12s%n", "mode", "wait ratio", "steady ratio", "samples/s", "ttfb ms", "mean wait ms", "MB to trainers");
        var json = new LinkedHashMap<String, Object>();
        try (var feeds = NodeFeeds.open(config)) {
            long expected = feeds.expectedBatchBytes();
            for (String name : s.modes()) {
                Path errors = dir.resolve(name + "-errors.jsonl"); // docs/run-data.md; this run's bad samples only
                Files.createDirectories(dir);
                Files.deleteIfExists(errors);
                var mode = mode(name);
                // a compact batch is converted by the trainer, as a real one would before its step, inside the measured wait
                var r = LadderRun.run(name, mode, () -> feeds.start(mode, errors), config.ranks(), s.steps(), s.stepMillis(), expected, dir,
                        trainers, compact);
                out.printf("%-11s %10.3f %12.3f %10.1f %10.0f %12.1f %12.1f%n", name, r.waitRatio(), r.steadyWaitRatio(),
                        r.samplesPerSecond(), r.firstBatchMillis(), r.meanWaitMillis(), r.bytesReceived() / 1e6);
                out.flush();
                var m = new LinkedHashMap<String, Object>();
                m.put("wait_ratio", round(r.waitRatio()));
                m.put("samples_per_s", round(r.samplesPerSecond()));
                m.put("steady_samples_per_s", round(r.steadySamplesPerSecond())); // after each rank's first 10% of steps
                m.put("ttfb_ms", round(r.firstBatchMillis()));
                m.put("steady_wait_ratio", round(r.steadyWaitRatio()));
                m.put("mean_wait_ms", round(r.meanWaitMillis()));
                m.put("bytes_to_trainers", r.bytesReceived());
                // the autotuner's knobs at the end and its decisions (their before/after figures are in the pipeline file)
                var tuned = new ObjectMapper().readTree(dir.resolve(name + "-pipeline.json").toFile()).path("autotune");
                if (!tuned.isMissingNode())
                    m.put("autotune", Map.of("now", new ObjectMapper().convertValue(tuned.path("now"), Map.class),
                            "kept", tuned.path("kept").asInt(), "rolled_back", tuned.path("rolled_back").asInt()));
                json.put(name, m);
            }
        }
        for (String name : s.modes()) {
            var verdict = new ObjectMapper().readTree(dir.resolve(name + "-pipeline.json").toFile()).path("verdict").path("text");
            if (!verdict.isMissingNode()) out.printf("verdict %-11s %s%n", name, verdict.asText());
            var tuned = new ObjectMapper().readTree(dir.resolve(name + "-pipeline.json").toFile()).path("autotune");
            for (var d : tuned.path("decisions"))
                out.printf("autotune %-10s #%d at %.1f s: %s %d → %d %s, %.1f → %.1f samples/s; %s%n", name, d.path("index").asInt(),
                        d.path("at_ms").asLong() / 1000.0, d.path("knob").asText(), d.path("from").asInt(), d.path("to").asInt(),
                        d.path("outcome").asText(), d.path("before_samples_per_s").asDouble(), d.path("after_samples_per_s").asDouble(),
                        d.path("why").asText());
        }
        out.println("report: " + RunReport.write(dir) + " (raw per-step and per-stage data beside it)");
        out.println(new ObjectMapper().writeValueAsString(Map.of("modes", json)));
        out.flush();
        return json;
    }

    private static double round(double v) { return Math.round(v * 10000) / 10000.0; }
}
