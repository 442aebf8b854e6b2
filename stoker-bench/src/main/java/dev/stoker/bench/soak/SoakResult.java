package dev.stoker.bench.soak;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.NodeConfig;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What a soak measured: the series of its samples, what the trainers counted, the service's final
 * counters (its {@code --metrics-file}); printed as a table, written as {@code soak.json}.
 */
final class SoakResult {
    private final NodeConfig config;
    private final SoakBench.Settings settings;
    private final double warmUp, elapsed;
    private final List<ServiceSample> samples;
    private final long budget;
    private final int serveExit;
    private final List<String> leftovers;
    private final Path serveConfig;
    private final List<Long> trainerSteps = new ArrayList<>();
    private final List<Integer> trainerExits = new ArrayList<>();
    private final Map<String, Series> series = new LinkedHashMap<>();
    private long trainerSamples, delivered, skipped, batches;
    private JsonNode store, server;

    SoakResult(SoakBench.Settings settings, double warmUp, double elapsed, List<ServiceSample> samples, long budget, int serveExit,
               List<String> leftovers, Path serveConfig) {
        this.config = settings.config();
        this.settings = settings;
        this.warmUp = warmUp;
        this.elapsed = elapsed;
        this.samples = samples;
        this.budget = budget;
        this.serveExit = serveExit;
        this.leftovers = leftovers;
        this.serveConfig = serveConfig;
        delivered = samples.getLast().delivered();
        skipped = samples.getLast().skipped();
        batches = samples.getLast().batches();
        series.put("rss_bytes", Series.of(samples, warmUp, ServiceSample::rss));
        series.put("rss_anon_bytes", Series.of(samples, warmUp, ServiceSample::rssAnon));
        series.put("rss_shmem_bytes", Series.of(samples, warmUp, ServiceSample::rssShmem));
        series.put("shm_bytes", Series.of(samples, warmUp, ServiceSample::shm));
        series.put("store_in_use_bytes", Series.of(samples, warmUp, ServiceSample::storeInUse));
    }

    List<Integer> trainerExits() { return trainerExits; }

    /** The trainers' exit statuses, and their steps and samples from their reports. */
    void readTrainers(Path dir, List<Process> trainers) throws IOException {
        for (int r = 0; r < trainers.size(); r++) {
            trainerExits.add(trainers.get(r).exitValue());
            Path report = dir.resolve("trainer-rank" + r + ".json");
            if (Files.isRegularFile(report)) {
                JsonNode steps = new ObjectMapper().readTree(report.toFile()).path("steps");
                trainerSteps.add((long) steps.size());
                for (JsonNode step : steps) trainerSamples += step.get(3).asLong();
            } else {
                trainerSteps.add(-1L);
            }
        }
    }

    /** serve's final counts from its metrics file, written on shutdown (the last sample's stay where it is missing). */
    void readMetrics(Path metricsFile) throws IOException {
        if (!Files.isRegularFile(metricsFile)) return;
        JsonNode metrics = new ObjectMapper().readTree(metricsFile.toFile());
        JsonNode pipeline = metrics.path("pipeline");
        delivered = pipeline.path("deliveredSamples").asLong(delivered);
        skipped = pipeline.path("skippedSamples").asLong(skipped);
        batches = pipeline.path("deliveredBatches").asLong(batches);
        store = metrics.get("store");
        server = metrics.get("server");
    }

    void print(PrintWriter out, Path shmDir) {
        out.printf("soak: %d samples over %.0f s; trainers took %s steps (exit %s); serve exited %d%n", samples.size(), elapsed,
                trainerSteps, trainerExits, serveExit);
        out.printf("%-20s %14s %14s %14s %14s %16s %6s%n", "series", "start", "median", "max", "end", "slope/10 min", "flat");
        series.forEach((name, s) -> out.printf("%-20s %14d %14d %14d %14d %16s %6s%n", name, s.start(), s.median(), s.max(), s.end(),
                Double.isNaN(s.slopePer10Min()) ? "-" : String.format("%+.0f", s.slopePer10Min()), s.flat() ? "yes" : "NO"));
        out.printf("samples delivered %d, skipped %d, in %d batches (trainers counted %d)%n", delivered, skipped, batches, trainerSamples);
        if (store != null)
            out.printf("store: %d segments created, %d reused, %d deleted, %d allocation waits%n", store.path("segmentsCreated").asLong(),
                    store.path("segmentsReused").asLong(), store.path("segmentsDeleted").asLong(), store.path("allocationWaits").asLong());
        out.println("leftovers in " + shmDir + ": " + (leftovers.isEmpty() ? "none" : leftovers));
    }

    /** The last line's JSON. */
    Map<String, Object> summary() {
        var summary = new LinkedHashMap<String, Object>();
        summary.put("seconds", Math.round(elapsed * 10) / 10.0);
        summary.put("samples", samples.size());
        series.forEach((name, s) -> summary.put(name, s.toJson()));
        summary.put("delivered_samples", delivered);
        summary.put("skipped_samples", skipped);
        summary.put("delivered_batches", batches);
        summary.put("trainer_samples", trainerSamples);
        summary.put("trainer_steps", trainerSteps);
        summary.put("trainer_exits", trainerExits);
        summary.put("serve_exit", serveExit);
        summary.put("budget_bytes", budget);
        summary.put("leftovers", leftovers);
        summary.put("store", store); // segments created, reused and deleted over the run: churn that RSS alone would not show
        summary.put("server", server);
        return summary;
    }

    /** {@code soak.json}: the configuration, the summary, every row. */
    void write(Path file, List<String> serveOptions) throws IOException {
        var json = new LinkedHashMap<String, Object>();
        var c = new LinkedHashMap<String, Object>();
        c.put("data", config.data());
        c.put("seconds", settings.seconds());
        c.put("ranks", config.ranks());
        c.put("batch", config.batch());
        c.put("step_ms", settings.stepMillis());
        c.put("sample_every_s", settings.sampleEverySeconds());
        c.put("warm_up_s", warmUp);
        c.put("shm_dir", config.get(NodeConfig.SHM_DIR).toString());
        c.put("serve_options", serveOptions);
        c.put("serve_config", serveConfig.toString());
        c.put("cores", Runtime.getRuntime().availableProcessors());
        json.put("config", c);
        json.put("summary", summary());
        json.put("columns", ServiceSample.COLUMNS);
        json.put("rows", samples.stream().map(s -> {
            var row = new ArrayList<Object>();
            row.add(s.tSeconds());
            for (long v : s.values()) row.add(v);
            return row;
        }).toList());
        new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(file.toFile(), json);
    }
}
