package dev.stoker.node;

import com.sun.net.httpserver.HttpServer;
import dev.stoker.pipeline.feed.FeedMetrics;
import dev.stoker.observe.BottleneckVerdict;
import dev.stoker.observe.PackStats;
import dev.stoker.store.ShmObjectStore;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import java.util.function.Function;
import java.util.function.ToDoubleFunction;

/**
 * {@code --metrics-port}: the service's counters, gauges and bottleneck verdict in the
 * Prometheus text format at {@code http://ADDR:PORT/metrics} (Micrometer's Prometheus registry
 * over the JDK's HTTP server). ADDR is loopback unless {@code --metrics-bind} names another: the
 * endpoint has no access control.
 *
 * <p>Every meter reads the feed when scraped; nothing is added to the pipeline's hot path. A
 * snapshot of the feed's counters is taken once per scrape and shared by the meters. Skipped samples
 * by cause ({@code stoker_samples_skipped_by_cause_total{kind, stage, reason}}) get a series when their
 * cause first appears; the feed bounds the causes ({@code FeedErrors.MAX_CAUSES}), and so the series.
 * The trainers' own figures, from the timings they send with each request, get a series per rank when
 * the rank first asks: {@code stoker_trainer_wait_ratio{rank}} (whole run), {@code
 * stoker_trainer_recent_wait_ratio{rank}}, {@code stoker_trainer_steps_reported_total{rank}}, {@code
 * stoker_trainer_wait_seconds_total{rank}} and {@code stoker_trainer_step_seconds_total{rank}}, and, once the trainer
 * measured its compute floor (headspace), {@code stoker_trainer_compute_floor_seconds{rank}} and {@code
 * stoker_trainer_data_headroom_seconds{rank}} (NaN before); the
 * bottleneck verdict uses their wait ratio once they have reported. A packed job ({@code --pack-tokens}) gets, from its
 * first packed step on, the figures of its last step: {@code stoker_pack_imbalance} (max / mean predicted rank cost),
 * {@code stoker_pack_padding_fraction} (1 − real tokens / (R·N)) and {@code stoker_pack_step_cost{rank}} (the predicted
 * cost of each rank's pack, every rank of the world: the plan is shared), and the counters
 * {@code stoker_pack_steps_total} and {@code stoker_pack_samples_total}; an unpacked job has none of these series.
 * A job with {@code --autotune on} gets, per knob ({@code threads}, {@code fetch-concurrency}, {@code prefetch-batches}),
 * {@code stoker_autotune_knob{knob}}, {@code stoker_autotune_decisions_total{knob, outcome}} and its last decision's figures
 * ({@code stoker_autotune_last_from}, {@code _to}, {@code _kept}, {@code _before_samples_per_second},
 * {@code _after_samples_per_second}, {@code _before_wait_ratio}, {@code _after_wait_ratio}, each {@code {knob}}).
 * An audio job (issue 32) gets, once its feed has encoded a clip, {@code stoker_audio_clips_total},
 * {@code stoker_audio_seconds_total} and {@code stoker_audio_feature_bytes_total} ({@link #audioMeters}).
 *
 * <p>Threading: scrapes run on one server thread.
 */
public final class PrometheusEndpoint implements AutoCloseable {
    private final PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    private final HttpServer http;
    private final RankLedger service;
    private volatile FeedMetrics.Snapshot snapshot;
    private volatile BottleneckVerdict verdict;
    /** The trainers' reported figures by rank, taken once per scrape. */
    private volatile java.util.Map<Integer, TrainerTimings.RankFigures> trainers = java.util.Map.of();
    /** Ranks whose trainer meters are registered; only the scrape thread (and the constructor) adds. */
    private final java.util.Set<Integer> trainerRanks = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** Whether the pack meters are registered (from the first packed step on); only the scrape thread (and the constructor) sets it. */
    private volatile boolean packMeters;
    /** Whether the audio meters are registered (the feed has encoded a clip). */
    private volatile boolean audioMeters;
    /** The causes that have a series, as kind, stage and reason; only the scrape thread (and the constructor) adds. */
    private final java.util.Set<java.util.List<String>> causes = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /** Serves {@code service}'s meters on {@code address}:{@code port} (0: any free port) until closed. */
    public PrometheusEndpoint(RankLedger service, InetAddress address, int port) throws IOException {
        this.service = service;
        refresh();
        counter("stoker.samples.fetched", "samples whose bytes all arrived", FeedMetrics.Snapshot::fetchedSamples);
        counter("stoker.bytes.fetched", "image bytes fetched", FeedMetrics.Snapshot::fetchedBytes);
        counter("stoker.samples.encoded", "samples decoded, transformed and tokenized", FeedMetrics.Snapshot::encodedSamples);
        counter("stoker.samples.delivered", "samples in batches handed to trainers", FeedMetrics.Snapshot::deliveredSamples);
        counter("stoker.samples.skipped", "samples left out of delivered batches: errors and filtered", FeedMetrics.Snapshot::skippedSamples);
        counter("stoker.samples.errors", "broken samples skipped (what --max-error-rate counts)", FeedMetrics.Snapshot::errorSamples);
        counter("stoker.samples.filtered", "samples skipped by a limit (--max-seq-len, --max-images), not counted as errors",
                FeedMetrics.Snapshot::filteredSamples);
        for (var stage : dev.stoker.core.SampleException.Stage.values()) {
            String name = stage.name().toLowerCase(java.util.Locale.ROOT);
            FunctionCounter.builder("stoker.samples.skipped.by.stage", this, m -> m.snapshot.skippedByStage().getOrDefault(name, 0L))
                    .description("skipped samples by the stage that refused them (the errors file has each one)").tag("stage", name)
                    .register(registry);
        }
        counter("stoker.batches.delivered", "batches handed to trainers", FeedMetrics.Snapshot::deliveredBatches);
        counter("stoker.bytes.copied.after.transform", "bytes copied after the transform to build batches", FeedMetrics.Snapshot::copiedBytes);
        counter("stoker.cpu.busy.seconds", "CPU-pool thread time spent on samples", s -> s.cpuBusyNanos() / 1e9);
        for (int i = 0; i < service.localRanks().count(); i++) { // this node's ranks, each tagged with its global rank
            int at = i;
            String r = Integer.toString(service.localRanks().first() + i);
            Gauge.builder("stoker.buffer.batches", this, m -> m.snapshot.ranks().get(at).bufferedBatches())
                    .description("batches ready in the rank's prefetch buffer").tag("rank", r).register(registry);
            Gauge.builder("stoker.buffer.bytes", this, m -> m.snapshot.ranks().get(at).bufferedBytes())
                    .description("bytes ready in the rank's prefetch buffer").tag("rank", r).register(registry);
        }
        ShmObjectStore store = service.store();
        if (store != null) {
            Gauge.builder("stoker.store.bytes.in.use", store, s -> s.metrics().inUseBytes()).description("shared memory in use").register(registry);
            Gauge.builder("stoker.store.bytes.mapped", store, s -> s.metrics().mappedBytes()).description("shared memory mapped").register(registry);
            Gauge.builder("stoker.store.leases", store, s -> s.metrics().leases()).description("leases open").register(registry);
            Gauge.builder("stoker.store.budget.bytes", store, s -> s.budgetBytes()).description("the store's hard limit").register(registry);
        }
        var cache = service.feeder().config().cache();
        if (cache != null) { // the cache of preprocessed samples (the same one for every feed of the service)
            var c = cache.store();
            FunctionCounter.builder("stoker.cache.hits", c, x -> x.stats().hits()).description("samples' images read from the cache").register(registry);
            FunctionCounter.builder("stoker.cache.misses", c, x -> x.stats().misses()).description("images not in the cache (decoded)").register(registry);
            FunctionCounter.builder("stoker.cache.corrupt", c, x -> x.stats().corrupt())
                    .description("torn or damaged entries found, removed and recomputed, never served").register(registry);
            FunctionCounter.builder("stoker.cache.written", c, x -> x.stats().written()).description("entries written").register(registry);
            FunctionCounter.builder("stoker.cache.evicted", c, x -> x.stats().evicted()).description("entries removed for the budget").register(registry);
            FunctionCounter.builder("stoker.cache.rejected", c, x -> x.stats().rejected())
                    .description("entries not admitted: the budget is held by entries this run uses").register(registry);
            FunctionCounter.builder("stoker.cache.bytes.read", c, x -> x.stats().storedBytesRead()).description("entry bytes read, as stored")
                    .register(registry);
            Gauge.builder("stoker.cache.bytes", c, x -> x.stats().storedBytes()).description("entry bytes on disk, as stored").register(registry);
            Gauge.builder("stoker.cache.budget.bytes", c, x -> x.budgetBytes()).description("the cache's byte budget").register(registry);
        }
        for (var kind : BottleneckVerdict.Kind.values())
            Gauge.builder("stoker.bottleneck", this, m -> m.verdict.kind() == kind ? 1 : 0)
                    .description("1 for the current bottleneck kind, else 0").tag("kind", kind.name().toLowerCase(java.util.Locale.ROOT))
                    .register(registry);
        if (service.feeder().autotune().isPresent()) registerAutotune();
        http = HttpServer.create(new InetSocketAddress(address, port), 0);
        http.createContext("/metrics", exchange -> {
            try (exchange) {
                refresh();
                byte[] body = registry.scrape().getBytes(StandardCharsets.UTF_8);
                exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
                exchange.sendResponseHeaders(200, body.length);
                exchange.getResponseBody().write(body);
            }
        });
        http.setExecutor(Executors.newSingleThreadExecutor(r -> {
            var t = new Thread(r, "stoker-metrics");
            t.setDaemon(true);
            return t;
        }));
        http.start();
    }

    /**
     * The autotuner's meters ({@code --autotune on}), per knob: its value now ({@code stoker_autotune_knob}), its decisions
     * by outcome ({@code stoker_autotune_decisions_total{knob, outcome}}), and the last decision's figures: the value before
     * and after, samples/s and the trainers' wait share in the windows before and after, and whether it was kept
     * ({@code stoker_autotune_last_*}). The why of each decision is in the log and the report.
     */
    private void registerAutotune() {
        for (var knob : dev.stoker.tune.Knob.values()) {
            String k = knob.option();
            Gauge.builder("stoker.autotune.knob", this, m -> m.tuning().map(t -> (double) t.knob(knob)).orElse(Double.NaN))
                    .description("the knob's value now, as the autotuner set it").tag("knob", k).register(registry);
            for (boolean kept : new boolean[] {true, false})
                FunctionCounter.builder("stoker.autotune.decisions", this, m -> m.tuning().map(t -> (double) t.decisions().stream()
                                .filter(d -> d.knob() == knob && d.kept() == kept).count()).orElse(0.0))
                        .description("autotune decisions on the knob, by outcome").tag("knob", k).tag("outcome", kept ? "kept" : "rolled_back")
                        .register(registry);
            lastDecision("stoker.autotune.last.from", "the knob's value before its last decision", knob, d -> d.from());
            lastDecision("stoker.autotune.last.to", "the value its last decision tried", knob, d -> d.to());
            lastDecision("stoker.autotune.last.kept", "1 when the knob's last decision was kept, 0 when rolled back", knob, d -> d.kept() ? 1 : 0);
            lastDecision("stoker.autotune.last.before.samples.per.second", "samples/s in the window before the knob's last decision", knob,
                    d -> d.beforeSamplesPerS());
            lastDecision("stoker.autotune.last.after.samples.per.second", "samples/s in the window after the knob's last decision", knob,
                    d -> d.afterSamplesPerS());
            lastDecision("stoker.autotune.last.before.wait.ratio", "trainers' wait share in the window before the knob's last decision",
                    knob, d -> d.beforeWaitShare());
            lastDecision("stoker.autotune.last.after.wait.ratio", "trainers' wait share in the window after the knob's last decision",
                    knob, d -> d.afterWaitShare());
        }
    }

    private void lastDecision(String name, String doc, dev.stoker.tune.Knob knob,
                              java.util.function.ToDoubleFunction<dev.stoker.tune.Decision> figure) {
        Gauge.builder(name, this, m -> m.tuning().flatMap(t -> t.decisions().reversed().stream().filter(d -> d.knob() == knob).findFirst())
                        .map(figure::applyAsDouble).orElse(Double.NaN))
                .description(doc).tag("knob", knob.option()).register(registry);
    }

    /** The current feed's autotuning (a feed reopened at another step has its own). */
    private java.util.Optional<dev.stoker.pipeline.feed.FeedTuning> tuning() { return service.feeder().autotune(); }

    public int port() { return http.getAddress().getPort(); }

    /** The scrape URL, with the bound address and port. */
    public String url() {
        InetAddress a = http.getAddress().getAddress();
        String host = a instanceof java.net.Inet6Address ? "[" + a.getHostAddress() + "]" : a.getHostAddress();
        return "http://" + host + ":" + port() + "/metrics";
    }

    /** The current verdict's text (for the status line and logs). */
    public String verdictText() { return verdict.text(); }

    private void refresh() {
        snapshot = service.feeder().metrics();
        verdict = service.verdict(); // with the trainers' reported wait ratio once there is one
        var byRank = new java.util.HashMap<Integer, TrainerTimings.RankFigures>();
        for (var r : service.timings().ranks()) byRank.put(r.rank(), r);
        trainers = byRank;
        for (int rank : byRank.keySet()) if (trainerRanks.add(rank)) registerTrainer(rank);
        var pack = snapshot.pack();
        if (pack != null && !packMeters) {
            packMeters = true;
            packMeters(registry, this, m -> m.snapshot.pack(), pack.ranks());
        }
        if (snapshot.audio() != null && !audioMeters) {
            audioMeters = true;
            audioMeters(registry, this, m -> m.snapshot.audio());
        }
        for (var c : snapshot.skippedByCause()) {
            var key = java.util.List.of(c.kind(), c.stage(), c.reason());
            if (!causes.add(key)) continue;
            FunctionCounter.builder("stoker.samples.skipped.by.cause", this, m -> count(m.snapshot, key))
                    .description("skipped samples by kind (error, filtered), stage and cause class").tag("kind", c.kind())
                    .tag("stage", c.stage()).tag("reason", c.reason()).register(registry);
        }
    }

    /**
     * A rank's meters from its trainer's reports (docs/protocol.md, NEXT), registered when the rank is
     * first seen: a node serving part of a world's ranks shows only those, by global rank.
     */
    private void registerTrainer(int rank) {
        String tag = Integer.toString(rank);
        Gauge.builder("stoker.trainer.wait.ratio", this, m -> figure(m, rank, TrainerTimings.RankFigures::waitRatio))
                .description("the trainer's share of step time spent waiting for batches, whole run (its reports)").tag("rank", tag)
                .register(registry);
        Gauge.builder("stoker.trainer.recent.wait.ratio", this, m -> figure(m, rank, f -> f.recentWaitRatio().orElse(Double.NaN)))
                .description("the same over the rank's last " + TrainerTimings.RECENT_STEPS + " steps").tag("rank", tag).register(registry);
        FunctionCounter.builder("stoker.trainer.steps.reported", this, m -> figure(m, rank, f -> f.steps()))
                .description("steps the trainer reported its wait and compute for").tag("rank", tag).register(registry);
        FunctionCounter.builder("stoker.trainer.wait.seconds", this, m -> figure(m, rank, f -> f.waitNanos() / 1e9))
                .description("time the trainer was blocked waiting for batches").tag("rank", tag).register(registry);
        FunctionCounter.builder("stoker.trainer.step.seconds", this, m -> figure(m, rank, f -> f.stepNanos() / 1e9))
                .description("time the trainer computed between batches").tag("rank", tag).register(registry);
        // headspace (the clients' replay option): NaN until the trainer reports its compute floor
        Gauge.builder("stoker.trainer.compute.floor.seconds", this,
                        m -> figure(m, rank, f -> f.headspace() == null ? Double.NaN : f.headspace().floorNanos() / 1e9))
                .description("the trainer's compute floor: median compute of the steps on batches it replayed, no data wait").tag("rank", tag)
                .register(registry);
        Gauge.builder("stoker.trainer.data.headroom.seconds", this,
                        m -> figure(m, rank, f -> f.headspace() == null ? Double.NaN : f.headspace().headroomNanos() / 1e9))
                .description("what the data side can win at most per step: mean step (wait + compute) minus the compute floor").tag("rank", tag)
                .register(registry);
    }

    /**
     * Registers a packed job's meters on {@code registry}, reading {@code pack} of {@code state} (held weakly, as Micrometer
     * holds a meter's object: the caller keeps it) at each scrape: the last step's imbalance, padding fraction and
     * predicted cost of each of {@code ranks} ranks, and the counts of packed steps and of samples in them. A rank the
     * last step does not have reads NaN.
     */
    static <T> void packMeters(MeterRegistry registry, T state, Function<T, PackStats.Summary> pack, int ranks) {
        Gauge.builder("stoker.pack.imbalance", state, m -> last(pack.apply(m), s -> s.series().imbalance()))
                .description("the last packed step's max / mean predicted rank cost (1: even)").register(registry);
        Gauge.builder("stoker.pack.padding.fraction", state, m -> last(pack.apply(m), s -> s.series().paddingFraction()))
                .description("the last packed step's padding: 1 - real tokens / (ranks x --pack-tokens)").register(registry);
        for (int r = 0; r < ranks; r++) {
            int at = r;
            Gauge.builder("stoker.pack.step.cost", state, m -> {
                        var s = pack.apply(m);
                        return s == null || at >= s.lastCosts().length ? Double.NaN : s.lastCosts()[at];
                    }).description("the predicted cost (training FLOPs) of the rank's pack in the last packed step").tag("rank", Integer.toString(r))
                    .register(registry);
        }
        FunctionCounter.builder("stoker.pack.steps", state, m -> {
                    var s = pack.apply(m);
                    return s == null ? 0 : s.steps();
                }).description("packed steps planned and taken").register(registry);
        FunctionCounter.builder("stoker.pack.samples", state, m -> {
                    var s = pack.apply(m);
                    return s == null ? 0 : s.samples();
                }).description("samples in the packs of those steps").register(registry);
    }

    /**
     * Registers an audio job's meters (issue 32) on {@code registry}, reading {@code audio} of {@code state} at each scrape:
     * {@code stoker_audio_clips_total}, {@code stoker_audio_seconds_total} and {@code stoker_audio_feature_bytes_total}, what
     * the feed encoded for batches: the clips of the samples encoded, decoded or read from the cache (a sample encoded for a
     * batch not yet handed out counts, and one encoded again counts again, as {@code stoker_samples_encoded_total} does).
     * Registered once the feed has encoded a clip, so an image job has none of these series.
     */
    static <T> void audioMeters(MeterRegistry registry, T state, Function<T, dev.stoker.pipeline.feed.FeedMetrics.Audio> audio) {
        FunctionCounter.builder("stoker.audio.clips", state, m -> audio.apply(m) == null ? 0 : audio.apply(m).clips())
                .description("audio clips of the samples encoded for batches, decoded or from the cache").register(registry);
        FunctionCounter.builder("stoker.audio.seconds", state, m -> audio.apply(m) == null ? 0 : audio.apply(m).seconds())
                .description("seconds of audio those clips hold").register(registry);
        FunctionCounter.builder("stoker.audio.feature.bytes", state, m -> audio.apply(m) == null ? 0 : audio.apply(m).featureBytes())
                .description("bytes of input_features and feature_attention_mask made").register(registry);
    }

    private static double last(PackStats.Summary s, Function<PackStats.Summary, double[]> column) {
        if (s == null) return Double.NaN;
        double[] v = column.apply(s);
        return v.length == 0 ? Double.NaN : v[v.length - 1];
    }

    private static double figure(PrometheusEndpoint m, int rank, ToDoubleFunction<TrainerTimings.RankFigures> value) {
        var f = m.trainers.get(rank);
        return f == null ? 0 : value.applyAsDouble(f);
    }

    /** The count of the cause {@code key} (kind, stage, reason) in {@code s}. */
    private static double count(FeedMetrics.Snapshot s, java.util.List<String> key) {
        for (var c : s.skippedByCause())
            if (c.kind().equals(key.get(0)) && c.stage().equals(key.get(1)) && c.reason().equals(key.get(2))) return c.count();
        return 0;
    }

    private void counter(String name, String help, ToDoubleFunction<FeedMetrics.Snapshot> value) {
        FunctionCounter.builder(name, this, m -> value.applyAsDouble(m.snapshot)).description(help).register(registry);
    }

    @Override
    public void close() {
        http.stop(0);
        ((java.util.concurrent.ExecutorService) http.getExecutor()).shutdownNow();
        registry.close();
    }
}
