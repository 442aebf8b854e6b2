package dev.stoker.report;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.core.io.AtomicFiles;
import dev.stoker.report.RunData.Mode;
import dev.stoker.report.RunData.Rank;
import dev.stoker.report.RunData.Step;
import dev.stoker.report.RunData.Summary;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The run report: one self-contained HTML file ({@code report.html} in the run directory) with
 * inline CSS, inline SVG plots drawn here, and a few lines of inline script that only count the
 * drawn plots and record script errors. Nothing is fetched when it is viewed.
 *
 * <p>Plots, each an {@code <svg data-plot=NAME>}: {@code wait-ratio} (per mode, overall and steady),
 * {@code timeline} (per mode and rank, each step's wait and compute along time: the saw-tooth),
 * {@code latency} (per-stage latency percentiles from the pipeline, else a histogram of the
 * trainers' per-step waits), {@code queue-depth} (from the pipeline's timeline). A plot whose data the
 * run did not record says so instead. A packed job ({@code --pack-tokens}, the pipeline's {@code pack}) adds
 * {@value #PACK_PLOT}: per packed step, the predicted cost of each rank's pack, the imbalance (max / mean) and the
 * padding fraction; a run without packing has no such plot (there is nothing it could be missing).
 */
public final class RunReport {
    public static final String FILE_NAME = "report.html";
    /** The plots every report has, in page order. */
    public static final List<String> PLOTS = List.of("wait-ratio", "timeline", "latency", "queue-depth");
    /** The plot a packed job's report adds after {@link #PLOTS}. */
    public static final String PACK_PLOT = "packing";

    static final String WAIT_COLOR = "#e45756";
    static final String COMPUTE_COLOR = "#4c78a8";
    private static final String[] PALETTE = {"#c0392b", "#e67e22", "#2e86c1", "#27ae60", "#8e44ad", "#7f8c8d", "#16a085", "#d35400"};
    private static final List<String> STAGE_ORDER = List.of("first_byte", "fetch", "encode", "audio_decode", "audio_features", "pixel_write",
            "assemble", "deliver");
    private static final int WIDTH = 1100;
    private static final int LEFT = 130;

    private RunReport() {}

    /** Reads {@code runDir} and writes {@code runDir/report.html}; returns its path. */
    public static Path write(Path runDir) throws IOException {
        String html = render(RunData.load(runDir));
        return AtomicFiles.writeString(runDir.resolve(FILE_NAME), html);
    }

    /** The report's HTML for a loaded run. */
    public static String render(RunData run) {
        var h = new StringBuilder(256 * 1024);
        String title = "Stoker run report — " + (run.dir().getFileName() == null ? run.dir().toString() : run.dir().getFileName().toString());
        h.append("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>").append(Html.esc(title)).append("</title>\n");
        // First in the page, so that it sees errors of everything after it.
        h.append("<script>window.onerror=function(msg,src,line,col){var e=document.getElementById('errors');")
                .append("var t=String(msg)+' (line '+line+':'+col+')\\n';if(e){e.textContent+=t;e.hidden=false;}")
                .append("else{window.__early=(window.__early||'')+t;}document.documentElement.dataset.errors='1';};</script>\n");
        h.append("<style>").append(CSS).append("</style></head>\n<body>\n");
        h.append("<h1>").append(Html.esc(title)).append("</h1>\n");
        h.append("<p class=\"sub\">Run directory <code>").append(Html.esc(run.dir().toAbsolutePath().toString())).append("</code>; ")
                .append(Html.esc(describe(run))).append(".</p>\n");
        h.append("<pre id=\"errors\" hidden></pre>\n");

        verdicts(h, run);
        autotune(h, run);
        summaryTable(h, run);
        perRankTable(h, run);
        clusterTable(h, run);
        ablationTable(h, run);

        section(h, "Wait-time ratio per mode", "Share of the trainers' step time spent waiting for a batch, all steps and steady state"
                + " (leaving out the first " + RunData.STEADY_SKIP_STEPS + " steps of each rank). Lower is better.", waitRatioPlot(run));
        section(h, "Per-step timeline: wait and compute of each rank",
                "Each step along time: waiting for the batch (red), then computing (blue). One row per rank; all modes on the same time scale.",
                timelinePlot(run));
        boolean stages = run.modes().stream().anyMatch(m -> stages(m) != null);
        section(h, stages ? "Per-stage latency distributions" : "Distribution of the trainers' per-step waits",
                stages ? "p50 (dot), p90 and p99 (bar) and max (tick) per stage, log scale; hover for the figures."
                        : "The run recorded no per-stage latencies; shown instead: a histogram of every rank's per-step wait, log scale.",
                stages ? stageLatencyPlot(run) : waitHistogramPlot(run));
        section(h, "Queue depth over time", "From the pipeline's timeline: fetches in flight, CPU tasks queued and running, and batches"
                + " ready in each rank's buffer.", queueDepthPlot(run));
        if (run.modes().stream().anyMatch(m -> pack(m) != null))
            section(h, "Packing and balance per step", "Per packed step (the pipeline's last " + PACK_WINDOW_NOTE + "): the predicted cost of each"
                    + " rank's pack (training FLOPs of the cost model), the imbalance max / mean of those costs (1 is even; the ranks"
                    + " wait for the slowest at the all-reduce), and the padding fraction 1 − real tokens / (ranks × --pack-tokens).",
                    packingPlot(run));
        countersTable(h, run);
        audioTable(h, run);
        cacheTable(h, run);
        cacheAffinityTable(h, run);
        skippedTable(h, run);

        h.append("<p class=\"sub\">Written by stoker report from the run's JSON files (see docs/run-data.md).</p>\n");
        h.append("<script>window.addEventListener('load',function(){var e=document.getElementById('errors');")
                .append("if(window.__early){e.textContent+=window.__early;e.hidden=false;}")
                .append("var all=document.querySelectorAll('svg[data-plot]'),n=0;")
                .append("for(var i=0;i<all.length;i++){var r=all[i].getBoundingClientRect();if(all[i].childElementCount>0&&r.width>0&&r.height>0)n++;}")
                .append("document.body.dataset.plots=String(n);document.body.dataset.plotsTotal=String(all.length);")
                .append("document.body.dataset.errors=String(e.textContent.length>0);});</script>\n");
        h.append("</body></html>\n");
        return h.toString();
    }

    /** What the run is: ladder modes, a served job ({@value #JOB_MODE}: {@code serve --report-dir}), or both. */
    static String describe(RunData run) {
        var names = run.modes().stream().map(Mode::name).toList();
        var others = names.stream().filter(n -> !n.equals(JOB_MODE)).toList();
        String job = "a served job (stoker serve --report-dir; its trainers' own measurements, mode \"" + JOB_MODE + "\")";
        if (others.isEmpty()) return names.isEmpty() ? "no data recorded" : job;
        return "modes: " + String.join(", ", others) + (names.contains(JOB_MODE) ? "; and " + job : "");
    }

    /** The mode name of a served job's files (docs/run-data.md). */
    static final String JOB_MODE = "job";

    /** Per rank of each mode: its steps, wait ratio (all and steady), mean wait and mean step: where a job's waiting is. */
    private static void perRankTable(StringBuilder h, RunData run) {
        var modes = run.modes().stream().filter(m -> !m.ranks().isEmpty()).toList();
        if (modes.isEmpty()) return;
        h.append("<section><h2>Wait-time ratio per rank</h2>\n<table id=\"per-rank\"><thead><tr><th>mode</th><th>rank</th><th>steps</th>")
                .append("<th>wait ratio</th><th>steady</th><th>mean wait per step</th><th>mean step</th></tr></thead><tbody>\n");
        for (Mode m : modes) {
            for (Rank r : m.ranks()) {
                Summary s = RunData.summarize(new Mode(m.name(), List.of(r), null));
                h.append("<tr><td><span class=\"swatch\" style=\"background:").append(color(run, m.name())).append("\"></span>")
                        .append(Html.esc(m.name())).append("</td><td>").append(r.rank()).append("</td><td>").append(s.steps())
                        .append("</td><td>").append(Html.num(s.waitRatio(), 3)).append("</td><td>").append(Html.num(s.steadyWaitRatio(), 3))
                        .append("</td><td>").append(Html.num(s.meanWaitMillis(), 1)).append(" ms</td><td>").append(Html.num(s.meanStepMillis(), 1))
                        .append(" ms</td></tr>\n");
            }
        }
        h.append("</tbody></table></section>\n");
    }

    /**
     * A cluster job's wait per node and per rank (a coordinator's {@code trainers}: every node's trainers' totals, which it
     * gathered from the nodes), for each mode whose pipeline file holds them: where in the cluster the trainers wait.
     */
    private static void clusterTable(StringBuilder h, RunData run) {
        var modes = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("trainers").path("nodes").isArray()).toList();
        if (modes.isEmpty()) return;
        h.append("<section><h2>Wait-time ratio per node and rank (cluster)</h2>\n<p class=\"note\">What each node's trainers reported, as ")
                .append("the job's coordinator gathered it: remote ranks included. Steady leaves out each rank's first ")
                .append(RunData.STEADY_SKIP_STEPS).append(" steps.</p>\n<table id=\"cluster-wait\"><thead><tr><th>mode</th><th>node</th>")
                .append("<th>ranks</th><th>steps</th><th>wait ratio</th><th>steady</th></tr></thead><tbody>\n");
        for (Mode m : modes) {
            JsonNode t = m.pipeline().path("trainers");
            for (JsonNode n : t.path("nodes")) clusterRow(h, run, m, n.path("node").asText(""), commas(n.path("ranks")), n);
            for (JsonNode r : t.path("ranks"))
                clusterRow(h, run, m, "rank " + r.path("rank").asInt() + " (on " + commas(r.path("nodes")) + ")",
                        r.path("rank").asText(""), r);
            clusterRow(h, run, m, "all", t.path("world").asText("") + " in the world", t);
            long refused = t.path("refused_reports").asLong(0);
            if (refused > 0)
                h.append("<tr><td colspan=\"6\">").append(refused).append(" node reports refused: ")
                        .append(Html.esc(t.path("refusals").toString())).append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    /**
     * {@code bench cluster --ablate}'s table ({@link RunData#ablation}): samples/s and wait per scale and layout, each layout's
     * gain over both knobs off, and the talk's figures beside it, so that a user sees which knobs pay at which scale.
     */
    private static void ablationTable(StringBuilder h, RunData run) {
        JsonNode a = run.ablation();
        if (a == null || !a.path("ablation").isArray()) return;
        h.append("<section><h2>Scale ablation (bench cluster --ablate)</h2>\n<p class=\"note\">Zero-copy retrieval (direct: each ")
                .append("rank's node pulls from the batch's owner; relay: through the coordinator's node) × placement (spread over the ")
                .append("nodes; pack: every worker on the coordinator's node), at the setting given and at ").append(a.path("scale").asInt())
                .append("× its ranks, workers and batch. Gain: samples/s over pack + relay's at the same scale. The talk: ")
                .append(Html.esc(a.path("talk").path("small").asText(""))).append("; ").append(Html.esc(a.path("talk").path("large").asText("")))
                .append(".</p>\n<table id=\"ablation\"><thead><tr><th>scale</th><th>placement</th><th>retrieval</th><th>ranks</th>")
                .append("<th>batch</th><th>workers</th><th>samples/s</th><th>steady</th><th>wait ratio</th><th>steady</th>")
                .append("<th>busiest card</th><th>gain</th></tr></thead><tbody>\n");
        for (JsonNode r : a.path("ablation")) {
            JsonNode gain = a.path("gain").path(r.path("scale").asText()).path(r.path("placement").asText() + "+" + r.path("retrieval").asText());
            h.append("<tr><td>").append(Html.esc(r.path("scale").asText())).append("</td><td>").append(Html.esc(r.path("placement").asText()))
                    .append("</td><td>").append(Html.esc(r.path("retrieval").asText())).append("</td><td>").append(r.path("ranks").asInt())
                    .append("</td><td>").append(r.path("batch").asInt()).append("</td><td>").append(r.path("workers").asInt())
                    .append("</td><td>").append(number(r.path("samples_per_s"), 2)).append("</td><td>").append(number(r.path("steady_samples_per_s"), 2))
                    .append("</td><td>").append(ratio(r.path("wait_ratio"))).append("</td><td>").append(ratio(r.path("steady_wait_ratio")))
                    .append("</td><td>").append(r.path("busiest_tx_utilisation").isNumber()
                            ? Html.num(100 * r.path("busiest_tx_utilisation").asDouble(), 0) + "%" : "–")
                    .append("</td><td>").append(number(gain, 3)).append(r.path("ok").asBoolean(false) ? "" : " (run failed)")
                    .append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    private static String number(JsonNode v, int digits) { return v.isNumber() ? Html.num(v.asDouble(), digits) : "–"; }

    private static void clusterRow(StringBuilder h, RunData run, Mode m, String what, String ranks, JsonNode f) {
        h.append("<tr><td><span class=\"swatch\" style=\"background:").append(color(run, m.name())).append("\"></span>")
                .append(Html.esc(m.name())).append("</td><td>").append(Html.esc(what)).append("</td><td>").append(Html.esc(ranks))
                .append("</td><td>").append(f.path("steps_reported").asLong(0)).append("</td><td>").append(ratio(f.path("wait_ratio")))
                .append("</td><td>").append(ratio(f.path("steady_wait_ratio"))).append("</td></tr>\n");
    }

    private static String commas(JsonNode a) {
        var parts = new ArrayList<String>();
        for (JsonNode e : a) parts.add(e.asText());
        return String.join(", ", parts);
    }

    private static String ratio(JsonNode v) { return v.isNumber() ? Html.num(v.asDouble(), 3) : "–"; }

    private static void section(StringBuilder h, String heading, String note, String svg) {
        h.append("<section><h2>").append(Html.esc(heading)).append("</h2><p class=\"note\">").append(Html.esc(note)).append("</p>\n")
                .append("<div class=\"plot\">").append(svg).append("</div></section>\n");
    }

    static String color(RunData run, String mode) {
        int i = RunData.LADDER_ORDER.indexOf(mode);
        if (i < 0) i = RunData.LADDER_ORDER.size() + run.modes().stream().map(Mode::name).filter(n -> !RunData.LADDER_ORDER.contains(n)).toList().indexOf(mode);
        return PALETTE[Math.floorMod(i, PALETTE.length)];
    }

    // ---- verdicts and tables ----

    private static void verdicts(StringBuilder h, RunData run) {
        var withVerdict = run.modes().stream().filter(m -> verdict(m) != null).toList();
        h.append("<section id=\"verdict\"><h2>Verdict</h2>\n");
        if (withVerdict.isEmpty()) {
            h.append("<p class=\"note\">No bottleneck verdict recorded in this run.</p>");
        }
        for (Mode m : withVerdict) {
            JsonNode v = verdict(m);
            String kind = v.path("kind").asText("");
            h.append("<div class=\"verdict kind-").append(Html.esc(kind.toLowerCase(java.util.Locale.ROOT).replaceAll("[^a-z_]", "")))
                    .append("\"><div class=\"vhead\"><span class=\"mode\" style=\"background:").append(color(run, m.name())).append("\">")
                    .append(Html.esc(m.name())).append("</span> <b>").append(Html.esc(kindLabel(kind))).append("</b>");
            String stage = v.path("stage").asText("");
            if (!stage.isEmpty() && !stage.equals("none")) h.append(" — limiting stage: <b>").append(Html.esc(stage)).append("</b>");
            h.append("</div>");
            String evidence = v.path("evidence").isArray() ? joinArray(v.path("evidence")) : v.path("evidence").asText("");
            if (!evidence.isEmpty()) h.append("<div><span class=\"lbl\">Evidence</span> ").append(Html.esc(evidence)).append("</div>");
            String advice = v.path("advice").asText("");
            if (!advice.isEmpty()) h.append("<div><span class=\"lbl\">Advice</span> ").append(Html.esc(advice)).append("</div>");
            headspace(h, v);
            h.append("</div>\n");
        }
        h.append("</section>\n");
    }

    /**
     * The autotuner's decisions ({@code --autotune on}), per mode that recorded them (its pipeline file's {@code autotune}):
     * the knobs it started from and ended at, then each decision with its before and after windows and why. Absent when no
     * mode was tuned.
     */
    private static void autotune(StringBuilder h, RunData run) {
        var tuned = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("autotune").isObject()).toList();
        if (tuned.isEmpty()) return;
        h.append("<section id=\"autotune\"><h2>Autotune</h2>\n<p class=\"note\">One knob at a time: a window of samples/s before a ")
                .append("change, a window after; a raise is kept only when it beats the noise, a lowering unless it costs; else it is rolled ")
                .append("back.</p>\n");
        for (Mode m : tuned) {
            JsonNode a = m.pipeline().path("autotune");
            h.append("<div class=\"autotune\"><span class=\"mode\" style=\"background:").append(color(run, m.name())).append("\">")
                    .append(Html.esc(m.name())).append("</span> ");
            var knobs = new ArrayList<String>();
            a.path("now").fieldNames().forEachRemaining(k -> knobs.add(k + " " + a.path("start").path(k).asText() + " → "
                    + a.path("now").path(k).asText()));
            h.append(Html.esc(String.join(", ", knobs))).append("; ").append(a.path("kept").asInt()).append(" kept, ")
                    .append(a.path("rolled_back").asInt()).append(" rolled back</div>\n");
            if (a.path("decisions").isEmpty()) {
                h.append("<p class=\"note\">No decision: the tuner was warming up, or the trainers did not wait for data.</p>\n");
                continue;
            }
            h.append("<table class=\"autotune-decisions\"><thead><tr><th>#</th><th>at</th><th>knob</th><th>change</th><th>outcome</th>")
                    .append("<th>samples/s before → after</th><th>noise</th><th>wait before → after</th><th>why</th></tr></thead><tbody>\n");
            for (JsonNode d : a.path("decisions")) {
                h.append("<tr><td>").append(d.path("index").asInt()).append("</td><td>").append(Html.num(d.path("at_ms").asLong() / 1000.0, 1))
                        .append(" s</td><td>").append(Html.esc(d.path("knob").asText())).append("</td><td>").append(d.path("from").asInt())
                        .append(" → ").append(d.path("to").asInt()).append("</td><td>").append(Html.esc(d.path("outcome").asText()))
                        .append("</td><td>").append(Html.num(d.path("before_samples_per_s").asDouble(), 1)).append(" → ")
                        .append(Html.num(d.path("after_samples_per_s").asDouble(), 1)).append("</td><td>±")
                        .append(Html.num(d.path("noise_samples_per_s").asDouble(), 1)).append("</td><td>")
                        .append(Html.num(100 * d.path("before_wait_share").asDouble(), 0)).append("% → ")
                        .append(Html.num(100 * d.path("after_wait_share").asDouble(), 0)).append("%</td><td>")
                        .append(Html.esc(d.path("why").asText())).append("</td></tr>\n");
            }
            h.append("</tbody></table>\n");
        }
        h.append("</section>\n");
    }

    /**
     * The verdict's headspace line, when a trainer measured its compute floor (the clients' replay option): wait ratio,
     * compute floor, mean step and what the data side can win at most per step. No GPU utilisation: the service is not told it.
     */
    private static void headspace(StringBuilder h, JsonNode v) {
        if (!v.path("compute_floor_ms").isNumber()) return;
        h.append("<div class=\"headspace\"><span class=\"lbl\">Headspace</span> ");
        if (v.path("trainer_wait_ratio").isNumber()) h.append("wait ratio ").append(Html.num(v.path("trainer_wait_ratio").asDouble(), 3)).append(", ");
        h.append("compute floor ").append(Html.num(v.path("compute_floor_ms").asDouble(), 1)).append(" ms, mean step ")
                .append(Html.num(v.path("mean_step_ms").asDouble(), 1)).append(" ms: the data side can win at most <b>")
                .append(Html.num(v.path("data_headroom_ms").asDouble(), 1)).append(" ms per step</b> (")
                .append(Math.round(v.path("data_headroom_fraction").asDouble() * 100)).append("%)</div>");
    }

    private static String joinArray(JsonNode a) {
        var parts = new ArrayList<String>();
        for (JsonNode e : a) parts.add(e.asText());
        return String.join("; ", parts);
    }

    private static String kindLabel(String kind) {
        return switch (kind) {
            case "IO_BOUND" -> "I/O-bound";
            case "CPU_BOUND" -> "CPU-bound";
            case "TRANSPORT_BOUND" -> "Transport-bound";
            case "TRAINER_BOUND" -> "Trainer-bound";
            case "STRAGGLER_BOUND" -> "Straggler-bound";
            case "DATA_BOUND" -> "Data-bound";
            case "BALANCED" -> "Balanced";
            default -> kind;
        };
    }

    private static void summaryTable(StringBuilder h, RunData run) {
        h.append("<section><h2>Summary</h2>\n<table id=\"summary\"><thead><tr><th>mode</th><th>ranks</th><th>wait ratio</th>")
                .append("<th>steady (after step ").append(RunData.STEADY_SKIP_STEPS).append(")</th><th>samples/s</th><th>first batch</th>")
                .append("<th>mean wait per step</th><th>MB to trainers</th></tr></thead><tbody>\n");
        for (Mode m : run.modes()) {
            if (m.ranks().isEmpty()) {
                h.append("<tr><td>").append(Html.esc(m.name())).append("</td><td colspan=\"7\">no trainer reports</td></tr>\n");
                continue;
            }
            Summary s = RunData.summarize(m);
            h.append("<tr><td><span class=\"swatch\" style=\"background:").append(color(run, m.name())).append("\"></span>")
                    .append(Html.esc(m.name())).append("</td><td>").append(s.ranks()).append("</td><td>").append(Html.num(s.waitRatio(), 3))
                    .append("</td><td>").append(Html.num(s.steadyWaitRatio(), 3)).append("</td><td>").append(Html.num(s.samplesPerSecond(), 1))
                    .append("</td><td>").append(Html.num(s.firstBatchMillis(), 0)).append(" ms</td><td>").append(Html.num(s.meanWaitMillis(), 1))
                    .append(" ms</td><td>").append(Html.num(s.bytesReceived() / 1e6, 0)).append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    /**
     * The cache of preprocessed samples per mode that ran with it ({@code cache} in its metrics): hits, misses, hit rate,
     * entries and bytes written and read, the bytes on disk against the budget, damaged entries found; nothing for a run
     * without the cache.
     */
    private static void cacheTable(StringBuilder h, RunData run) {
        var rows = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("cache").isObject()).toList();
        if (rows.isEmpty()) return;
        h.append("<section id=\"cache\"><h2>Cache of preprocessed samples</h2>\n<p class=\"note\">Images whose resized pixels were read ")
                .append("from the cache (hits) instead of decoded and resized (misses); a cold cache fills in the first epoch, a warm ")
                .append("one serves the next epochs and restarts. Damaged entries are recomputed, never served.</p>\n")
                .append("<table id=\"cache-table\"><thead><tr><th>mode</th><th>hits</th><th>misses</th><th>hit rate</th><th>written</th>")
                .append("<th>MB read (stored)</th><th>MB written (stored / raw)</th><th>GB on disk / budget</th><th>damaged</th>")
                .append("<th>not admitted (full)</th></tr></thead><tbody>\n");
        for (Mode m : rows) {
            JsonNode c = m.pipeline().path("cache");
            h.append("<tr><td>").append(Html.esc(m.name())).append("</td><td>").append(c.path("hits").asLong()).append("</td><td>")
                    .append(c.path("misses").asLong()).append("</td><td>").append(Html.num(100 * c.path("hit_rate").asDouble(), 1)).append("%</td><td>")
                    .append(c.path("written").asLong()).append("</td><td>").append(Html.num(c.path("stored_bytes_read").asLong() / 1e6, 1))
                    .append("</td><td>").append(Html.num(c.path("stored_bytes_written").asLong() / 1e6, 1)).append(" / ")
                    .append(Html.num(c.path("raw_bytes_written").asLong() / 1e6, 1)).append("</td><td>")
                    .append(Html.num(c.path("stored_bytes").asLong() / 1e9, 2)).append(" / ").append(Html.num(c.path("budget_bytes").asLong() / 1e9, 1))
                    .append("</td><td>").append(c.path("corrupt").asLong()).append("</td><td>").append(c.path("rejected").asLong())
                    .append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    /**
     * A cluster job's cache affinity ({@code --cache-affinity}: each media entry kept at its home node): per node the media
     * reads hit and missed where the batch was made and at the entries' homes, the fallbacks (a home that failed or did not
     * answer: computed at the maker), the bytes fetched from homes, the entries offered to and taken by their homes and
     * those served to peers; then the job's total ({@code cache_affinity}, the nodes' figures added up). Nothing for a run
     * whose metrics have no node with the cache on.
     */
    private static void cacheAffinityTable(StringBuilder h, RunData run) {
        var rows = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("cache_affinity").isObject()).toList();
        if (rows.isEmpty()) return;
        h.append("<section id=\"cache-affinity\"><h2>Cache affinity on the cluster</h2>\n<p class=\"note\">Each image's and video's ")
                .append("resized pixels are kept at one home node, whichever node makes the batch or pack it falls in: read where the batch ")
                .append("is made when that node holds them, else asked of their home; a home that fails or does not answer in time is a ")
                .append("fallback (computed where the batch is made). With affinity off, each node counts its own hits and misses only.</p>\n")
                .append("<table id=\"cache-affinity-table\"><thead><tr><th>mode</th><th>node</th><th>hits / misses here</th>")
                .append("<th>hits / misses at the home</th><th>fallbacks</th><th>hit rate</th><th>MB fetched from homes</th>")
                .append("<th>offered / taken by homes</th><th>served to peers (MB)</th></tr></thead><tbody>\n");
        for (Mode m : rows) {
            for (JsonNode n : m.pipeline().path("nodes")) {
                JsonNode a = n.path("cacheAffinity");
                if (a.isObject()) affinityRow(h, m.name(), n.path("address").asText("?"), a, affinityHitRate(a));
            }
            JsonNode total = m.pipeline().path("cache_affinity");
            affinityRow(h, m.name(), "all nodes", total, total.path("hit_rate").asDouble());
        }
        h.append("</tbody></table></section>\n");
    }

    /** Hits (where the batch was made and at the homes) over media reads, as {@code cache_affinity.hit_rate} adds them up. */
    private static double affinityHitRate(JsonNode a) {
        long hits = a.path("localHits").asLong() + a.path("remoteHits").asLong();
        long reads = hits + a.path("localMisses").asLong() + a.path("remoteMisses").asLong() + a.path("fallbacks").asLong();
        return reads == 0 ? 0 : (double) hits / reads;
    }

    private static void affinityRow(StringBuilder h, String mode, String node, JsonNode a, double hitRate) {
        h.append("<tr><td>").append(Html.esc(mode)).append("</td><td>").append(Html.esc(node)).append("</td><td>")
                .append(a.path("localHits").asLong()).append(" / ").append(a.path("localMisses").asLong()).append("</td><td>")
                .append(a.path("remoteHits").asLong()).append(" / ").append(a.path("remoteMisses").asLong()).append("</td><td>")
                .append(a.path("fallbacks").asLong()).append("</td><td>").append(Html.num(100 * hitRate, 1)).append("%</td><td>")
                .append(Html.num(a.path("fetchedBytes").asLong() / 1e6, 1)).append("</td><td>").append(a.path("offered").asLong())
                .append(" / ").append(a.path("taken").asLong()).append("</td><td>").append(a.path("served").asLong()).append(" (")
                .append(Html.num(a.path("servedBytes").asLong() / 1e6, 1)).append(")</td></tr>\n");
    }

    private static void countersTable(StringBuilder h, RunData run) {
        var rows = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("pipeline").isObject()).toList();
        h.append("<section><h2>Pipeline counters</h2>\n");
        if (rows.isEmpty()) {
            h.append("<p class=\"note\">Pipeline counters: not recorded in this run.</p></section>\n");
            return;
        }
        h.append("<table id=\"counters\"><thead><tr><th>mode</th><th>fetch per sample</th><th>encode per sample</th><th>assemble per batch</th>")
                .append("<th>GB copied after transform</th><th>producer waits (buffer full)</th><th>consumer waits (buffer empty)</th></tr></thead><tbody>\n");
        for (Mode m : rows) {
            JsonNode p = m.pipeline().path("pipeline");
            long pw = 0, cw = 0;
            for (JsonNode r : p.path("ranks")) { pw += r.path("producerWaits").asLong(); cw += r.path("consumerWaits").asLong(); }
            h.append("<tr><td>").append(Html.esc(m.name())).append("</td><td>")
                    .append(perMs(p.path("fetchNanos"), p.path("fetchedSamples"))).append("</td><td>")
                    .append(perMs(p.path("encodeNanos"), p.path("encodedSamples"))).append("</td><td>")
                    .append(perMs(p.path("assembleNanos"), p.path("assembledBatches"))).append("</td><td>")
                    .append(p.has("copiedBytes") ? Html.num(p.path("copiedBytes").asLong() / 1e9, 2) : "–").append("</td><td>")
                    .append(pw).append("</td><td>").append(cw).append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    /**
     * An audio job's figures per mode (issue 32, the pipeline's {@code audio}): clips encoded, seconds of audio, bytes of
     * log-mel features made, and the audio stages' mean latencies per sample (decode, features). Nothing for a run
     * without audio.
     */
    private static void audioTable(StringBuilder h, RunData run) {
        var rows = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("pipeline").path("audio").isObject()).toList();
        if (rows.isEmpty()) return;
        h.append("<section id=\"audio\"><h2>Audio</h2>\n<p class=\"note\">Clips of the samples encoded for the batches (files and ")
                .append("videos' tracks, decoded or read from the cache; counted as samples are encoded, so a run that encoded ahead counts more), ")
                .append("the seconds of audio they hold, the bytes of <code>input_features</code> and <code>feature_attention_mask</code> ")
                .append("made for them (a batch widens each sample's rows to its longest), and per sample with clips the mean time ")
                .append("spent decoding them (demux, decode, resample) and computing their log-mel features.</p>\n")
                .append("<table id=\"audio-table\"><thead><tr><th>mode</th><th>clips</th><th>seconds of audio</th><th>MB of features</th>")
                .append("<th>audio decode per sample</th><th>log-mel per sample</th></tr></thead><tbody>\n");
        for (Mode m : rows) {
            JsonNode a = m.pipeline().path("pipeline").path("audio");
            JsonNode stages = stages(m);
            h.append("<tr><td>").append(Html.esc(m.name())).append("</td><td>").append(a.path("clips").asLong()).append("</td><td>")
                    .append(Html.num(a.path("seconds").asDouble(), 1)).append("</td><td>")
                    .append(Html.num(a.path("featureBytes").asLong() / 1e6, 2)).append("</td><td>")
                    .append(meanMs(stages, "audio_decode")).append("</td><td>").append(meanMs(stages, "audio_features")).append("</td></tr>\n");
        }
        h.append("</tbody></table></section>\n");
    }

    /** A stage's mean latency in ms ("–" when the run has no such stage). */
    private static String meanMs(JsonNode stages, String stage) {
        if (stages == null || !stages.path(stage).isObject()) return "–";
        return Html.num(stages.path(stage).path("mean_ms").asDouble(), 2) + " ms";
    }

    /**
     * Skipped samples per mode: errors and filtered, and each cause (stage and cause class) with its count and an example
     * sample, from the pipeline's {@code skippedByCause}; runs recorded before causes were counted show their stages.
     */
    private static void skippedTable(StringBuilder h, RunData run) {
        var rows = run.modes().stream().filter(m -> m.pipeline() != null && m.pipeline().path("pipeline").has("skippedSamples")).toList();
        h.append("<section id=\"skipped\"><h2>Skipped samples by cause</h2>\n");
        if (rows.isEmpty()) {
            h.append("<p class=\"note\">Skipped samples: not recorded in this run.</p></section>\n");
            return;
        }
        h.append("<p class=\"note\">Errors are broken samples (what --max-error-rate counts); filtered samples were dropped by a limit"
                + " (--max-seq-len, --max-images). Each is in the mode's errors file.</p>\n");
        h.append("<table id=\"skipped-causes\"><thead><tr><th>mode</th><th>kind</th><th>stage</th><th>cause</th><th>samples</th>")
                .append("<th>example</th></tr></thead><tbody>\n");
        for (Mode m : rows) {
            JsonNode p = m.pipeline().path("pipeline");
            String mode = Html.esc(m.name());
            if (p.path("skippedSamples").asLong() == 0) {
                h.append("<tr><td>").append(mode).append("</td><td colspan=\"5\">none skipped</td></tr>\n");
                continue;
            }
            if (p.path("skippedByCause").isArray() && !p.path("skippedByCause").isEmpty()) {
                h.append("<tr class=\"total\"><td>").append(mode).append("</td><td colspan=\"3\">").append(p.path("errorSamples").asLong())
                        .append(" errors, ").append(p.path("filteredSamples").asLong()).append(" filtered</td><td>")
                        .append(p.path("skippedSamples").asLong()).append("</td><td></td></tr>\n");
                for (JsonNode c : p.path("skippedByCause"))
                    h.append("<tr><td>").append(mode).append("</td><td>").append(Html.esc(c.path("kind").asText())).append("</td><td>")
                            .append(Html.esc(c.path("stage").asText())).append("</td><td>").append(Html.esc(c.path("reason").asText()))
                            .append("</td><td>").append(c.path("count").asLong()).append("</td><td>").append(Html.esc(c.path("example").asText()))
                            .append("</td></tr>\n");
                continue;
            }
            var stages = p.path("skippedByStage").fields();
            while (stages.hasNext()) {
                var e = stages.next();
                if (e.getValue().asLong() == 0) continue;
                h.append("<tr><td>").append(mode).append("</td><td>–</td><td>").append(Html.esc(e.getKey())).append("</td><td>–</td><td>")
                        .append(e.getValue().asLong()).append("</td><td></td></tr>\n");
            }
        }
        h.append("</tbody></table></section>\n");
    }

    private static String perMs(JsonNode nanos, JsonNode count) {
        if (!nanos.isNumber() || !count.isNumber() || count.asLong() == 0) return "–";
        return Html.ms(nanos.asDouble() / count.asDouble() / 1e6);
    }

    // ---- (a) wait-time ratio ----

    static String waitRatioPlot(RunData run) {
        var modes = run.modes().stream().filter(m -> !m.ranks().isEmpty()).toList();
        if (modes.isEmpty()) return Svg.notRecorded("wait-ratio", WIDTH, "Trainer step reports");
        var sums = modes.stream().map(RunData::summarize).toList();
        double max = 0;
        for (Summary s : sums) max = Math.max(max, Math.max(s.waitRatio(), s.steadyWaitRatio()));
        double top = Math.min(1.0, Math.max(0.1, Math.ceil(max * 1.15 * 10) / 10));
        int h = 300, top0 = 30, bottom = 250, plotW = Math.min(WIDTH - LEFT - 40, 170 * modes.size());
        var svg = new Svg("wait-ratio", LEFT + plotW + 220, h, "Wait-time ratio per mode");
        double step = niceStep(top / 5);
        top = Math.ceil(top / step - 1e-9) * step;
        for (int i = 0; i * step <= top + 1e-9; i++) {
            double v = i * step, y = bottom - (bottom - top0) * v / top;
            svg.line(LEFT, y, LEFT + plotW, y, "#e5e5e5", 1).text(LEFT - 8, y + 4, Html.num(v, 2), "end", "tick");
        }
        double group = (double) plotW / modes.size(), bw = Math.min(50, group / 3);
        for (int i = 0; i < modes.size(); i++) {
            Summary s = sums.get(i);
            String c = color(run, s.mode());
            double x0 = LEFT + group * i + group / 2 - bw - 3;
            double yo = bottom - (bottom - top0) * s.waitRatio() / top, ys = bottom - (bottom - top0) * s.steadyWaitRatio() / top;
            svg.rect(x0, yo, bw, bottom - yo, c, s.mode() + ": wait ratio " + Html.num(s.waitRatio(), 3))
                    .rect(x0 + bw + 6, ys, bw, bottom - ys, c + "88", s.mode() + ": steady wait ratio " + Html.num(s.steadyWaitRatio(), 3))
                    .text(x0 + bw / 2, yo - 5, Html.num(s.waitRatio(), 3), "middle", "val")
                    .text(x0 + bw * 1.5 + 6, ys - 5, Html.num(s.steadyWaitRatio(), 3), "middle", "val")
                    .text(LEFT + group * i + group / 2, bottom + 20, s.mode(), "middle", "lab");
        }
        svg.line(LEFT, bottom, LEFT + plotW, bottom, "#333", 1).line(LEFT, top0, LEFT, bottom, "#333", 1)
                .text(20, (top0 + bottom) / 2.0, "wait ratio", "start", "axis");
        double lx = LEFT + plotW + 30;
        svg.rect(lx, 60, 14, 14, "#777", null).text(lx + 20, 72, "overall (all steps)", "start", null)
                .rect(lx, 84, 14, 14, "#77777788", null).text(lx + 20, 96, "steady (after step " + RunData.STEADY_SKIP_STEPS + ")", "start", null);
        return svg.end();
    }

    // ---- (b) per-step timeline ----

    static String timelinePlot(RunData run) {
        var modes = run.modes().stream().filter(m -> !m.ranks().isEmpty()).toList();
        if (modes.isEmpty()) return Svg.notRecorded("timeline", WIDTH, "Trainer step reports");
        double maxSeconds = 0;
        for (Mode m : modes) {
            for (Rank r : m.ranks()) {
                long t = 0;
                for (Step s : r.steps()) t += s.waitNanos() + s.computeNanos();
                maxSeconds = Math.max(maxSeconds, t / 1e9);
            }
        }
        if (maxSeconds <= 0) maxSeconds = 1;
        double tick = niceStep(maxSeconds / 10);
        int row = 18, gap = 4, modeHead = 22, plotW = WIDTH - LEFT - 20;
        int height = 52;
        for (Mode m : modes) height += modeHead + m.ranks().size() * (row + gap) + 8;
        var svg = new Svg("timeline", WIDTH, height, "Per-step wait and compute of each rank along time");
        int y = 8;
        for (Mode m : modes) {
            svg.text(8, y + 15, m.name(), "start", "lab").rect(LEFT - 14, y + 5, 10, 10, color(run, m.name()), null);
            y += modeHead;
            for (Rank r : m.ranks()) {
                svg.text(LEFT - 8, y + row - 5, "rank " + r.rank(), "end", "tick");
                svg.rect(LEFT, y, plotW, row, "#f4f4f4", null);
                long t = 0;
                int i = 0;
                for (Step s : r.steps()) {
                    double x0 = LEFT + plotW * (t / 1e9) / maxSeconds;
                    double xw = plotW * (s.waitNanos() / 1e9) / maxSeconds;
                    double xc = plotW * (s.computeNanos() / 1e9) / maxSeconds;
                    svg.rect(x0, y, xw, row, WAIT_COLOR, "step " + i + ": waited " + Html.ms(s.waitNanos() / 1e6)
                            + (s.transferNanos() > 0 ? " (transfer " + Html.ms(s.transferNanos() / 1e6) + ")" : ""));
                    svg.rect(x0 + xw, y, xc, row, COMPUTE_COLOR, null);
                    t += s.waitNanos() + s.computeNanos();
                    i++;
                }
                y += row + gap;
            }
            y += 8;
        }
        for (double v = 0; v <= maxSeconds + 1e-9; v += tick) {
            double x = LEFT + plotW * v / maxSeconds;
            svg.line(x, y - 4, x, y, "#333", 1).text(x, y + 12, Html.num(v, tick < 1 ? 1 : 0) + " s", "middle", "tick");
        }
        svg.line(LEFT, y - 4, LEFT + plotW, y - 4, "#333", 1);
        svg.rect(LEFT + plotW - 210, y + 22, 12, 12, WAIT_COLOR, null).text(LEFT + plotW - 194, y + 32, "wait", "start", "tick")
                .rect(LEFT + plotW - 140, y + 22, 12, 12, COMPUTE_COLOR, null).text(LEFT + plotW - 124, y + 32, "compute", "start", "tick");
        return svg.end();
    }

    // ---- (c) latency distributions ----

    static JsonNode stages(Mode m) {
        if (m.pipeline() == null) return null;
        JsonNode s = m.pipeline().path("stages");
        if (!s.isObject() || s.isEmpty()) s = m.pipeline().path("pipeline").path("stages");
        return s.isObject() && !s.isEmpty() ? s : null;
    }

    static JsonNode verdict(Mode m) {
        if (m.pipeline() == null) return null;
        JsonNode v = m.pipeline().path("verdict");
        return v.isObject() && !v.isEmpty() ? v : null;
    }

    static String stageLatencyPlot(RunData run) {
        var modes = run.modes().stream().filter(m -> stages(m) != null).toList();
        double lo = Double.MAX_VALUE, hi = 0;
        for (Mode m : modes) {
            for (Iterator<Map.Entry<String, JsonNode>> it = stages(m).properties().iterator(); it.hasNext(); ) {
                JsonNode v = it.next().getValue();
                for (String k : List.of("p50_ms", "p90_ms", "p99_ms", "max_ms")) {
                    double d = v.path(k).asDouble(0);
                    if (d > 0) { lo = Math.min(lo, d); hi = Math.max(hi, d); }
                }
            }
        }
        if (hi <= 0) { lo = 0.01; hi = 1; }
        double dlo = Math.floor(Math.log10(lo)), dhi = Math.max(dlo + 1, Math.ceil(Math.log10(hi)));
        int row = 16, plotW = WIDTH - LEFT - 170;
        int height = 40;
        for (Mode m : modes) height += 24 + stages(m).size() * row + 8;
        var svg = new Svg("latency", WIDTH, height, "Per-stage latency distributions");
        int y = 8;
        for (Mode m : modes) {
            String c = color(run, m.name());
            svg.text(8, y + 15, m.name(), "start", "lab");
            y += 24;
            for (String stage : orderedStages(stages(m))) {
                JsonNode v = stages(m).path(stage);
                double yc = y + row / 2.0;
                svg.text(LEFT - 8, yc + 4, stage, "end", "tick").line(LEFT, yc, LEFT + plotW, yc, "#eee", 1);
                double p50 = v.path("p50_ms").asDouble(0), p90 = v.path("p90_ms").asDouble(0), p99 = v.path("p99_ms").asDouble(0),
                        max = v.path("max_ms").asDouble(0);
                String tip = m.name() + " " + stage + ": n=" + v.path("count").asLong() + ", mean " + Html.ms(v.path("mean_ms").asDouble())
                        + ", p50 " + Html.ms(p50) + ", p90 " + Html.ms(p90) + ", p99 " + Html.ms(p99) + ", max " + Html.ms(max);
                double x50 = logX(p50, dlo, dhi, plotW), x90 = logX(p90, dlo, dhi, plotW), x99 = logX(p99, dlo, dhi, plotW),
                        xm = logX(max, dlo, dhi, plotW);
                svg.rect(x50, yc - 2, Math.max(0, x99 - x50), 4, c + "66", tip).rect(x50, yc - 4, Math.max(0, x90 - x50), 8, c + "aa", tip)
                        .line(xm, yc - 5, xm, yc + 5, c, 1.5).circle(x50, yc, 4.5, c, tip)
                        .text(LEFT + plotW + 10, yc + 4, "p50 " + Html.ms(p50) + " · p99 " + Html.ms(p99), "start", "tick");
                y += row;
            }
            y += 8;
        }
        logAxis(svg, y, dlo, dhi, plotW);
        return svg.end();
    }

    private static List<String> orderedStages(JsonNode stages) {
        var names = new ArrayList<String>();
        for (String s : STAGE_ORDER) if (stages.has(s)) names.add(s);
        for (var e : stages.properties()) if (!names.contains(e.getKey())) names.add(e.getKey());
        return names;
    }

    private static double logX(double ms, double dlo, double dhi, int plotW) {
        double l = ms <= 0 ? dlo : Math.max(dlo, Math.min(dhi, Math.log10(ms)));
        return LEFT + plotW * (l - dlo) / (dhi - dlo);
    }

    private static void logAxis(Svg svg, int y, double dlo, double dhi, int plotW) {
        svg.line(LEFT, y, LEFT + plotW, y, "#333", 1);
        for (double d = dlo; d <= dhi + 1e-9; d++) {
            double x = LEFT + plotW * (d - dlo) / (dhi - dlo);
            svg.line(x, y, x, y + 4, "#333", 1).text(x, y + 16, Html.ms(Math.pow(10, d)), "middle", "tick");
        }
    }

    static String waitHistogramPlot(RunData run) {
        var modes = run.modes().stream().filter(m -> m.ranks().stream().anyMatch(r -> !r.steps().isEmpty())).toList();
        if (modes.isEmpty()) return Svg.notRecorded("latency", WIDTH, "Stage latencies and trainer waits");
        double hi = 0.1;
        for (Mode m : modes) for (Rank r : m.ranks()) for (Step s : r.steps()) hi = Math.max(hi, s.waitNanos() / 1e6);
        double dlo = -1, dhi = Math.max(0, Math.ceil(Math.log10(hi)));
        int perDecade = 4, bins = (int) ((dhi - dlo) * perDecade), rowH = 70, plotW = WIDTH - LEFT - 170;
        var svg = new Svg("latency", WIDTH, 40 + modes.size() * (rowH + 14), "Histogram of per-step waits per mode");
        int y = 8;
        for (Mode m : modes) {
            int[] counts = new int[bins];
            var waits = new ArrayList<Double>();
            for (Rank r : m.ranks()) {
                for (Step s : r.steps()) {
                    double ms = s.waitNanos() / 1e6;
                    waits.add(ms);
                    int b = ms <= 0 ? 0 : (int) Math.floor((Math.log10(ms) - dlo) * perDecade);
                    counts[Math.max(0, Math.min(bins - 1, b))]++;
                }
            }
            waits.sort(null);
            int peak = 1;
            for (int c : counts) peak = Math.max(peak, c);
            String c = color(run, m.name());
            svg.text(8, y + rowH / 2.0, m.name(), "start", "lab").line(LEFT, y + rowH, LEFT + plotW, y + rowH, "#999", 1);
            double bw = (double) plotW / bins;
            for (int b = 0; b < bins; b++) {
                if (counts[b] == 0) continue;
                double bh = (rowH - 6) * counts[b] / (double) peak;
                double from = Math.pow(10, dlo + (double) b / perDecade), to = Math.pow(10, dlo + (double) (b + 1) / perDecade);
                svg.rect(LEFT + b * bw + 1, y + rowH - bh, bw - 2, bh, c, counts[b] + " steps waited " + Html.ms(from) + "–" + Html.ms(to));
            }
            double p50 = waits.get(waits.size() / 2), p99 = waits.get(Math.min(waits.size() - 1, (int) Math.ceil(waits.size() * 0.99) - 1));
            double x50 = logX(p50, dlo, dhi, plotW);
            svg.dashed(x50, y, x50, y + rowH, "#333")
                    .text(LEFT + plotW + 10, y + rowH / 2.0, "p50 " + Html.ms(p50) + " · p99 " + Html.ms(p99), "start", "tick");
            y += rowH + 14;
        }
        logAxis(svg, y - 10, dlo, dhi, plotW);
        return svg.end();
    }

    // ---- (e) packing and balance ----

    /** What the series covers: the pipeline's window ({@code PackStats.WINDOW_DEFAULT}; this module reads JSON only). */
    private static final String PACK_WINDOW_NOTE = "steps it kept, at most 4096";

    /** The plots {@code run}'s report has, in page order: {@link #PLOTS}, and {@link #PACK_PLOT} when a mode was packed. */
    public static List<String> plots(RunData run) {
        if (run.modes().stream().noneMatch(m -> pack(m) != null)) return PLOTS;
        var all = new ArrayList<>(PLOTS);
        all.add(PACK_PLOT);
        return List.copyOf(all);
    }

    /** A mode's packing figures ({@code pipeline.pack}, docs/run-data.md) with at least one step in its series; else null. */
    static JsonNode pack(Mode m) {
        if (m.pipeline() == null) return null;
        JsonNode p = m.pipeline().path("pipeline").path("pack");
        return p.isObject() && p.path("series").path("step").isArray() && !p.path("series").path("step").isEmpty() ? p : null;
    }

    static String packingPlot(RunData run) {
        var modes = run.modes().stream().filter(m -> pack(m) != null).toList();
        int costH = 150, imbH = 70, padH = 60, plotW = WIDTH - LEFT - 170, block = 24 + costH + 8 + imbH + 8 + padH + 40;
        var svg = new Svg(PACK_PLOT, WIDTH, 10 + modes.size() * block, "Packing and balance per step");
        int y = 10;
        for (Mode m : modes) {
            JsonNode p = pack(m), ser = p.path("series");
            int n = ser.path("step").size();
            double[] step = new double[n], imb = new double[n], pad = new double[n];
            int ranks = 0;
            double maxCost = 0;
            for (int i = 0; i < n; i++) {
                step[i] = ser.path("step").path(i).asDouble();
                imb[i] = ser.path("imbalance").path(i).asDouble(1);
                pad[i] = ser.path("paddingFraction").path(i).asDouble(0);
                JsonNode c = ser.path("costs").path(i);
                ranks = Math.max(ranks, c.size());
                for (JsonNode v : c) maxCost = Math.max(maxCost, v.asDouble());
            }
            double s0 = step[0], s1 = Math.max(step[n - 1], s0 + 1);
            double[] xs = new double[n];
            for (int i = 0; i < n; i++) xs[i] = LEFT + plotW * (step[i] - s0) / (s1 - s0);
            svg.text(8, y + 15, m.name(), "start", "lab").text(LEFT, y + 15, String.format(java.util.Locale.ROOT,
                    "%d packed steps (run), %s ranks, --pack-tokens %s%s: mean imbalance %s, padding %s; the last %d steps: imbalance %s, padding %s",
                    p.path("steps").asLong(), ranks, p.path("packTokens").asText("?"),
                    p.path("balance").isTextual() ? ", --balance " + p.path("balance").asText() : "",
                    Html.num(p.path("meanImbalance").asDouble(), 3), pct(p.path("meanPaddingFraction").asDouble()), n,
                    Html.num(p.path("recentImbalance").asDouble(), 3), pct(p.path("recentPaddingFraction").asDouble())), "start", "tick");
            y += 24;
            // predicted cost per rank: a line per rank (up to 8, one colour each), else the spread (min, mean, max)
            double scale = maxCost >= 1e15 ? 1e15 : maxCost >= 1e12 ? 1e12 : maxCost >= 1e9 ? 1e9 : 1;
            String unit = scale == 1e15 ? "PFLOP" : scale == 1e12 ? "TFLOP" : scale == 1e9 ? "GFLOP" : "FLOP";
            double top = maxCost <= 0 ? 1 : maxCost / scale * 1.05;
            var lines = new LinkedHashMap<String, double[]>();
            if (ranks <= LINE_COLORS.length) {
                for (int r = 0; r < ranks; r++) {
                    double[] v = new double[n];
                    for (int i = 0; i < n; i++) v[i] = ser.path("costs").path(i).path(r).asDouble(Double.NaN) / scale;
                    lines.put("rank " + r, v);
                }
            } else {
                double[] lo = new double[n], mean = new double[n], hi = new double[n];
                for (int i = 0; i < n; i++) {
                    JsonNode c = ser.path("costs").path(i);
                    double a = Double.MAX_VALUE, b = 0, sum = 0;
                    for (JsonNode v : c) { a = Math.min(a, v.asDouble()); b = Math.max(b, v.asDouble()); sum += v.asDouble(); }
                    lo[i] = c.isEmpty() ? 0 : a / scale;
                    hi[i] = b / scale;
                    mean[i] = c.isEmpty() ? 0 : sum / c.size() / scale;
                }
                lines.put("max", hi);
                lines.put("mean", mean);
                lines.put("min", lo);
            }
            seriesPanel(svg, m.name(), xs, lines, 0, top, y, costH, plotW, unit, null);
            y += costH + 8;
            double imbTop = 1.1;
            for (double v : imb) imbTop = Math.max(imbTop, v * 1.02);
            seriesPanel(svg, m.name(), xs, java.util.Map.of("imbalance", imb), 1, imbTop, y, imbH, plotW, "max/mean", 1.05);
            y += imbH + 8;
            double padTop = 0.1;
            for (double v : pad) padTop = Math.max(padTop, v * 1.05);
            seriesPanel(svg, m.name(), xs, java.util.Map.of("padding", pad), 0, padTop, y, padH, plotW, "padding", null);
            y += padH + 8;
            double tick = niceStep((s1 - s0) / 10);
            for (double v = Math.ceil(s0 / tick) * tick; v <= s1 + 1e-9; v += tick) {
                double x = LEFT + plotW * (v - s0) / (s1 - s0);
                svg.line(x, y - 8, x, y - 4, "#333", 1).text(x, y + 8, "step " + Html.num(v, 0), "middle", "tick");
            }
            y += 32;
        }
        return svg.end();
    }

    private static String pct(double f) { return Html.num(100 * f, 1) + "%"; }

    /** One panel of lines over packed steps, y from {@code lo} to {@code hi}; {@code mark} (if not null) a dashed level. */
    private static void seriesPanel(Svg svg, String mode, double[] xs, Map<String, double[]> lines, double lo, double hi, int y, int rowH,
                                    int plotW, String label, Double mark) {
        if (!(hi > lo)) hi = lo + 1;
        svg.rect(LEFT, y, plotW, rowH, "#fafafa", null).text(LEFT - 6, y + 10, Html.num(hi, hi - lo < 1 ? 3 : 1), "end", "tick")
                .text(LEFT - 6, y + rowH, Html.num(lo, hi - lo < 1 ? 2 : 0), "end", "tick").text(LEFT - 50, y + rowH / 2.0 + 4, label, "end", "tick");
        if (mark != null && mark > lo && mark < hi) {
            double ym = y + rowH - rowH * (mark - lo) / (hi - lo);
            svg.dashed(LEFT, ym, LEFT + plotW, ym, "#999").text(LEFT + plotW - 4, ym - 3, Html.num(mark, 2), "end", "tick");
        }
        int li = 0;
        for (var e : lines.entrySet()) {
            double[] v = e.getValue();
            double[] ys = new double[v.length];
            double peak = Double.NEGATIVE_INFINITY, sum = 0;
            int count = 0;
            for (int i = 0; i < v.length; i++) {
                double d = Double.isFinite(v[i]) ? v[i] : lo;
                ys[i] = y + rowH - rowH * (Math.max(lo, Math.min(hi, d)) - lo) / (hi - lo);
                if (Double.isFinite(v[i])) { peak = Math.max(peak, v[i]); sum += v[i]; count++; }
            }
            String c = LINE_COLORS[li % LINE_COLORS.length];
            String tip = mode + " " + e.getKey() + ": mean " + Html.num(count == 0 ? Double.NaN : sum / count, 3) + ", max " + Html.num(peak, 3);
            if (v.length == 1) svg.circle(xs[0], ys[0], 3, c, tip);
            else svg.polyline(xs, ys, c, tip);
            if (lines.size() > 1 || li == 0)
                svg.rect(LEFT + plotW + 10, y + 4 + li * 12, 10, 3, c, null).text(LEFT + plotW + 24, y + 9 + li * 12, e.getKey(), "start", "tick");
            li++;
        }
    }

    // ---- (d) queue depth over time ----

    /** The timeline's columns by name, each a list of per-tick values (an array column becomes one series per rank). */
    static Map<String, double[]> timelineSeries(Mode m) {
        if (m.pipeline() == null) return null;
        JsonNode tl = m.pipeline().path("timeline");
        if (!tl.isObject()) tl = m.pipeline().path("pipeline").path("timeline");
        JsonNode cols = tl.path("columns"), rows = tl.path("rows");
        if (!cols.isArray() || !rows.isArray() || rows.isEmpty()) return null;
        var out = new LinkedHashMap<String, double[]>();
        for (int c = 0; c < cols.size(); c++) {
            String name = cols.get(c).asText();
            JsonNode first = rows.get(0).path(c);
            if (first.isArray()) {
                for (int r = 0; r < first.size(); r++) {
                    double[] v = new double[rows.size()];
                    for (int i = 0; i < rows.size(); i++) v[i] = rows.get(i).path(c).path(r).asDouble();
                    out.put(name + "[" + r + "]", v);
                }
            } else {
                double[] v = new double[rows.size()];
                for (int i = 0; i < rows.size(); i++) v[i] = rows.get(i).path(c).asDouble();
                out.put(name, v);
            }
        }
        return out.containsKey("t_ms") ? out : null;
    }

    static String queueDepthPlot(RunData run) {
        var modes = new ArrayList<Mode>();
        var series = new ArrayList<Map<String, double[]>>();
        for (Mode m : run.modes()) {
            var s = timelineSeries(m);
            if (s != null) { modes.add(m); series.add(s); }
        }
        if (modes.isEmpty()) return Svg.notRecorded("queue-depth", WIDTH, "Queue depth over time (pipeline timeline)");
        double maxT = 0;
        for (var s : series) for (double t : s.get("t_ms")) maxT = Math.max(maxT, t);
        if (maxT <= 0) maxT = 1;
        int rowH = 80, plotW = WIDTH - LEFT - 170;
        var svg = new Svg("queue-depth", WIDTH, 20 + modes.size() * (2 * rowH + 52), "Queue depth over time");
        int y = 10;
        for (int k = 0; k < modes.size(); k++) {
            var s = series.get(k);
            String mode = modes.get(k).name();
            var buffers = new LinkedHashMap<String, double[]>();
            var fetch = new LinkedHashMap<String, double[]>();
            for (var e : s.entrySet()) {
                String n = e.getKey();
                if (n.startsWith("buffered_batches[") || n.equals("cpu_queued") || n.equals("cpu_busy")) buffers.put(n, e.getValue());
                if (n.equals("fetch_in_flight")) fetch.put(n, e.getValue());
            }
            svg.text(8, y + 14, mode, "start", "lab").rect(LEFT - 14, y + 22, 10, 10, color(run, mode), null);
            JsonNode tl = modes.get(k).pipeline().path("timeline");
            double fetchLimit = tl.path("fetch_limit").asDouble(0);
            panel(svg, mode, s.get("t_ms"), maxT, buffers, 0, y, rowH, plotW, "queues");
            y += rowH + 6;
            panel(svg, mode, s.get("t_ms"), maxT, fetch, fetchLimit, y, rowH, plotW, "fetches");
            y += rowH + 8;
            double tick = niceStep(maxT / 1000 / 10);
            for (double v = 0; v <= maxT / 1000 + 1e-9; v += tick) {
                double x = LEFT + plotW * v * 1000 / maxT;
                svg.line(x, y - 8, x, y - 4, "#333", 1).text(x, y + 8, Html.num(v, tick < 1 ? 1 : 0) + " s", "middle", "tick");
            }
            y += 38;
        }
        return svg.end();
    }

    private static final String[] LINE_COLORS = {"#16a085", "#2e86c1", "#e67e22", "#8e44ad", "#c0392b", "#7f8c8d", "#d35400", "#27ae60"};

    /** One panel of lines sharing a y scale; {@code limit} (if > 0) is drawn as a dashed line. */
    private static void panel(Svg svg, String mode, double[] t, double maxT, Map<String, double[]> lines, double limit, int y, int rowH,
                              int plotW, String label) {
        double maxV = Math.max(1, limit);
        for (double[] v : lines.values()) for (double d : v) maxV = Math.max(maxV, d);
        maxV = Math.ceil(maxV);
        svg.rect(LEFT, y, plotW, rowH, "#fafafa", null).text(LEFT - 6, y + 10, Html.num(maxV, 0), "end", "tick")
                .text(LEFT - 6, y + rowH, "0", "end", "tick").text(LEFT - 30, y + rowH / 2.0 + 4, label, "end", "tick");
        if (limit > 0) {
            double yl = y + rowH - rowH * limit / maxV;
            svg.dashed(LEFT, yl, LEFT + plotW, yl, "#999").text(LEFT + plotW - 4, yl - 3, "limit " + Html.num(limit, 0), "end", "tick");
        }
        if (lines.isEmpty()) svg.text(LEFT + plotW / 2.0, y + rowH / 2.0, "not recorded in this run", "middle", "note");
        int li = 0;
        for (var e : lines.entrySet()) {
            double[] v = e.getValue();
            double[] xs = new double[v.length], ys = new double[v.length];
            double peak = 0, sum = 0;
            for (int i = 0; i < v.length; i++) {
                xs[i] = LEFT + plotW * t[i] / maxT;
                ys[i] = y + rowH - rowH * v[i] / maxV;
                peak = Math.max(peak, v[i]);
                sum += v[i];
            }
            String c = LINE_COLORS[li % LINE_COLORS.length];
            svg.polyline(xs, ys, c, mode + " " + e.getKey() + ": mean " + Html.num(sum / Math.max(1, v.length), 1) + ", max " + Html.num(peak, 0));
            svg.rect(LEFT + plotW + 10, y + 4 + li * 14, 10, 3, c, null).text(LEFT + plotW + 24, y + 9 + li * 14, e.getKey(), "start", "tick");
            li++;
        }
    }

    static double niceStep(double raw) {
        if (raw <= 0) return 1;
        double p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
        return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
    }

    private static final String CSS = """
            body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;margin:24px 32px;max-width:1180px}
            h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 4px}
            .sub,.note{color:#666;margin:2px 0 8px}code{font-size:12px}
            table{border-collapse:collapse;margin:6px 0}th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
            th:first-child,td:first-child{text-align:left}th{background:#f3f3f3;font-weight:600}
            #skipped-causes td:nth-child(-n+4),#skipped-causes td:last-child{text-align:left}tr.total td{font-weight:600}
            .swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
            .plot{overflow-x:auto}svg{display:block;font-size:12px}
            svg text.tick{font-size:11px;fill:#444}svg text.lab{font-size:13px;font-weight:600}svg text.val{font-size:11px;fill:#222}
            svg text.axis{font-size:12px;fill:#444}svg text.note{font-size:14px;fill:#888}
            .verdict{border:1px solid #ccc;border-left:6px solid #888;border-radius:4px;padding:8px 12px;margin:6px 0;background:#fbfbfb}
            .verdict.kind-cpu_bound{border-left-color:#e67e22}.verdict.kind-io_bound{border-left-color:#2e86c1}
            .verdict.kind-transport_bound{border-left-color:#8e44ad}.verdict.kind-trainer_bound{border-left-color:#27ae60}
            .verdict.kind-balanced{border-left-color:#7f8c8d}.verdict.kind-data_bound{border-left-color:#d35400}.verdict.kind-straggler_bound{border-left-color:#c0392b}
            .vhead{font-size:15px;margin-bottom:3px}.mode{color:#fff;border-radius:3px;padding:1px 7px;font-size:12px}
            .lbl{display:inline-block;min-width:70px;color:#666}
            #errors{color:#b00;background:#fee;padding:8px}
            """;
}
