package dev.stoker.bench.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.NodeConfig;
import dev.stoker.report.RunData;
import dev.stoker.testkit.netns.NetnsTestBed;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.IntStream;

/**
 * What a cluster run measured, as its JSON line (also the table's source): the trainers' reports,
 * the cards' counters, the link samples, the coordinator's metrics file and the nodes' own.
 */
final class ClusterSummary {
    /**
     * The facts of a finished run.
     *
     * @param indexOf     a member's cluster address → its node index
     * @param before      each node's card counters before the trainers started (netns only)
     * @param after       and after they finished
     * @param wallSeconds from trainer launch to the last trainer's exit
     * @param jobArgs     the job's feed settings as options
     */
    record Facts(Path dir, Map<String, Integer> indexOf, int ranks, int workers, boolean netns, NetnsTestBed.Counters[] before,
                 NetnsTestBed.Counters[] after, List<LinkSampler.Sample> links, double wallSeconds, List<String> jobArgs) {}

    private ClusterSummary() {}

    static Map<String, Object> summarize(ClusterBench.Settings s, Facts f) throws IOException {
        var mapper = new ObjectMapper();
        int nodes = s.config().get(NodeConfig.NODES);
        Path dir = f.dir();
        RunData.Mode mode = RunData.load(dir).modes().stream().filter(m -> m.name().equals(ClusterBench.MODE)).findFirst()
                .orElseThrow(() -> new IOException("no trainer reports in " + dir));
        var summary = RunData.summarize(mode);
        double elapsedSeconds = 0;
        var perRankWait = new ArrayList<Double>();
        var perRankSteady = new ArrayList<Double>();
        var stepsPerRank = new ArrayList<Integer>();
        var samplesPerRank = new ArrayList<Long>();
        long steadySamples = 0;
        double steadySeconds = 0;
        // the steady window in wall-clock time: from when every rank is past its first steps to the last rank's end (a rank
        // whose batches are all local, rank 0 under pack, may finish long before the others: its end would close the window)
        double windowStart = Double.NEGATIVE_INFINITY, windowEnd = Double.NEGATIVE_INFINITY;
        var starts = new HashMap<Integer, Long>();
        for (int r = 0; r < f.ranks(); r++) {
            Path p = ClusterBench.report(dir, r);
            if (Files.isRegularFile(p)) {
                JsonNode rep = mapper.readTree(p.toFile());
                if (rep.has("start_unix_ms")) starts.put(r, rep.get("start_unix_ms").asLong());
            }
        }
        for (int r = 0; r < f.ranks(); r++) {
            int rank = r;
            var rep = mode.ranks().stream().filter(x -> x.rank() == rank).findFirst().orElse(null);
            if (rep == null) {
                perRankWait.add(null);
                perRankSteady.add(null);
                stepsPerRank.add(0);
                samplesPerRank.add(0L);
                continue;
            }
            elapsedSeconds = Math.max(elapsedSeconds, rep.elapsedMillis() / 1000);
            long wait = 0, compute = 0, sw = 0, sc = 0, samples = 0, ss = 0;
            for (int i = 0; i < rep.steps().size(); i++) {
                var step = rep.steps().get(i);
                wait += step.waitNanos();
                compute += step.computeNanos();
                samples += step.samples();
                if (i >= RunData.STEADY_SKIP_STEPS) {
                    sw += step.waitNanos();
                    sc += step.computeNanos();
                    ss += step.samples();
                }
            }
            perRankWait.add(round(ratio(wait, compute)));
            perRankSteady.add(sw + sc == 0 ? null : round(ratio(sw, sc)));
            stepsPerRank.add(rep.steps().size());
            samplesPerRank.add(samples);
            steadySamples += ss;
            steadySeconds = Math.max(steadySeconds, (sw + sc) / 1e9);
            Long start = starts.get(r);
            if (start == null || rep.steps().size() <= RunData.STEADY_SKIP_STEPS) {
                windowStart = Double.NaN;
            } else {
                long warm = 0;
                for (int i = 0; i < RunData.STEADY_SKIP_STEPS; i++) warm += rep.steps().get(i).waitNanos() + rep.steps().get(i).computeNanos();
                windowStart = Math.max(windowStart, start + warm / 1e6);
                windowEnd = Math.max(windowEnd, start + rep.elapsedMillis());
            }
        }
        // the samples that bound the window from inside it
        LinkSampler.Sample first = null, last = null;
        for (var ls : f.links()) {
            if (ls.unixMillis() >= windowStart && first == null) first = ls;
            if (ls.unixMillis() <= windowEnd) last = ls;
        }
        boolean steadyLinks = first != null && last != null && last.unixMillis() - first.unixMillis() >= 1000;
        double steadyLinkSeconds = steadyLinks ? (last.unixMillis() - first.unixMillis()) / 1000.0 : 0;

        Path metricsFile = ClusterBench.metricsFile(dir);
        JsonNode metrics = Files.isRegularFile(metricsFile) ? mapper.readTree(metricsFile.toFile()) : mapper.createObjectNode();
        // each node's own counters: from serve's metrics file (asked of every node at stop), else the node's metrics file
        var stats = new JsonNode[nodes];
        for (JsonNode n : metrics.path("nodes")) {
            Integer i = f.indexOf().get(n.path("address").asText());
            if (i != null) stats[i] = n;
        }
        for (int i = 1; i < nodes; i++)
            if (stats[i] == null && Files.isRegularFile(ClusterBench.statsFile(dir, i))) stats[i] = mapper.readTree(ClusterBench.statsFile(dir, i).toFile());
        var workerNodes = new ArrayList<Integer>();
        for (JsonNode a : metrics.path("worker_nodes")) workerNodes.add(a.isNull() ? null : f.indexOf().get(a.asText()));
        var workersPerNode = new ArrayList<Integer>();
        for (int i = 0; i < nodes; i++) {
            int node = i;
            workersPerNode.add((int) workerNodes.stream().filter(x -> x != null && x == node).count());
        }

        var tx = new ArrayList<Long>();
        var rx = new ArrayList<Long>();
        var utilTx = new ArrayList<Double>();
        var utilRx = new ArrayList<Double>();
        var steadyUtilTx = new ArrayList<Double>();
        var steadyUtilRx = new ArrayList<Double>();
        var flightSent = new ArrayList<Long>();
        var pulled = new ArrayList<Long>();
        var produced = new ArrayList<Long>();
        var local = new ArrayList<Long>();
        var relayed = new ArrayList<Long>();
        long nicMbit = s.nicMbit();
        double linkBytesPerSecond = nicMbit * 1e6 / 8;
        for (int i = 0; i < nodes; i++) {
            long flight = stats[i] == null ? -1 : stats[i].path("flightBytesSent").asLong();
            long pull = stats[i] == null ? -1 : stats[i].path("pulledBytes").asLong();
            flightSent.add(flight);
            pulled.add(pull);
            produced.add(stats[i] == null ? -1 : stats[i].path("produced").asLong());
            local.add(stats[i] == null ? -1 : stats[i].path("localHandOuts").asLong());
            long relay = stats[i] == null ? 0 : stats[i].path("relayedBytes").asLong();
            relayed.add(stats[i] == null ? -1 : relay);
            if (f.netns()) {
                tx.add(f.after()[i].txBytes() - f.before()[i].txBytes());
                rx.add(f.after()[i].rxBytes() - f.before()[i].rxBytes());
            } else {
                tx.add(flight);
                rx.add(pull < 0 ? pull : pull + relay); // a relaying node takes in what it passes on
            }
            boolean limited = f.netns() && nicMbit > 0 && elapsedSeconds > 0;
            utilTx.add(limited ? round(tx.get(i) / (elapsedSeconds * linkBytesPerSecond)) : null);
            utilRx.add(limited ? round(rx.get(i) / (elapsedSeconds * linkBytesPerSecond)) : null);
            boolean steady = limited && steadyLinks;
            steadyUtilTx.add(steady ? round((last.counters().get(i).txBytes() - first.counters().get(i).txBytes())
                    / (steadyLinkSeconds * linkBytesPerSecond)) : null);
            steadyUtilRx.add(steady ? round((last.counters().get(i).rxBytes() - first.counters().get(i).rxBytes())
                    / (steadyLinkSeconds * linkBytesPerSecond)) : null);
        }

        var json = new LinkedHashMap<String, Object>();
        json.put("samples_per_s", round2(summary.samplesPerSecond()));
        json.put("steady_samples_per_s", steadySeconds == 0 ? null : round2(steadySamples / steadySeconds));
        json.put("wait_ratio", round(summary.waitRatio()));
        json.put("steady_wait_ratio", round(summary.steadyWaitRatio()));
        json.put("per_node_bytes", tx);
        json.put("per_node_rx_bytes", rx);
        json.put("link_utilisation", utilTx);
        json.put("link_utilisation_rx", utilRx);
        json.put("steady_link_utilisation", steadyUtilTx);
        json.put("steady_link_utilisation_rx", steadyUtilRx);
        json.put("steady_link_window_s", steadyLinks ? round2(steadyLinkSeconds) : null);
        json.put("bytes_source", f.netns() ? "interfaces" : "flight_counters");
        json.put("per_node_flight_bytes_sent", flightSent);
        json.put("per_node_pulled_bytes", pulled);
        json.put("per_node_batches_made", produced);
        json.put("per_node_local_handouts", local);
        json.put("per_node_relayed_bytes", relayed);
        json.put("worker_nodes", workerNodes);
        json.put("workers_per_node", workersPerNode);
        json.put("per_rank_wait_ratio", perRankWait);
        json.put("per_rank_steady_wait_ratio", perRankSteady);
        json.put("steps_per_rank", stepsPerRank);
        json.put("samples_per_rank", samplesPerRank);
        json.put("samples", summary.samples());
        json.put("bytes_to_trainers", mode.ranks().stream().mapToLong(r -> r.steps().stream().mapToLong(RunData.Step::batchBytes).sum()).sum());
        json.put("ttfb_ms", round2(summary.firstBatchMillis()));
        json.put("mean_wait_ms", round2(summary.meanWaitMillis()));
        json.put("elapsed_s", round2(elapsedSeconds));
        json.put("wall_s", round2(f.wallSeconds()));
        json.put("placement", ClusterBench.placement(s.config()));
        json.put("retrieval", ClusterBench.retrieval(s.config()));
        json.put("nodes", nodes);
        json.put("nic_mbit", f.netns() ? nicMbit : 0);
        json.put("netns", f.netns());
        json.put("dead_nodes", metrics.path("dead_nodes").size());
        json.put("redone", metrics.path("redone").asLong() + metrics.path("refetched").asLong());
        // the coordinator's own view: what every node's trainers reported to their node, gathered over the cluster (the
        // trainers' files above are the trainers' side of the same steps; remote ranks are in both)
        JsonNode measured = metrics.path("trainers");
        var coordinatorPerRank = new ArrayList<Double>();
        var coordinatorStepsPerRank = new ArrayList<Long>();
        for (int r = 0; r < f.ranks(); r++) {
            coordinatorPerRank.add(null);
            coordinatorStepsPerRank.add(0L);
        }
        for (JsonNode x : measured.path("ranks")) {
            int r = x.path("rank").asInt(-1);
            if (r < 0 || r >= f.ranks()) continue;
            coordinatorPerRank.set(r, x.path("wait_ratio").isNumber() ? round(x.path("wait_ratio").asDouble()) : null);
            coordinatorStepsPerRank.set(r, x.path("steps_reported").asLong());
        }
        var coordinatorPerNode = new ArrayList<Double>();
        for (int i = 0; i < nodes; i++) coordinatorPerNode.add(null);
        for (JsonNode x : measured.path("nodes")) {
            Integer i = f.indexOf().get(x.path("node").asText());
            if (i != null && x.path("wait_ratio").isNumber()) coordinatorPerNode.set(i, round(x.path("wait_ratio").asDouble()));
        }
        json.put("coordinator_wait_ratio", measured.path("wait_ratio").isNumber() ? round(measured.path("wait_ratio").asDouble()) : null);
        json.put("coordinator_per_rank_wait_ratio", coordinatorPerRank);
        json.put("coordinator_steps_per_rank", coordinatorStepsPerRank);
        json.put("coordinator_per_node_wait_ratio", coordinatorPerNode);
        json.put("coordinator_refused_reports", measured.path("refused_reports").asLong(0));
        json.put("verdict", metrics.path("verdict").path("kind").asText(null));
        cacheFigures(json, metrics, stats, s);
        json.put("settings", settings(s, f));
        return json;
    }

    /** The counters of the cache's affinity the JSON line carries per node and added up (AffineCache.Stats' names). */
    static final List<String> CACHE_COUNTERS = List.of("localHits", "localMisses", "remoteHits", "remoteMisses", "fallbacks", "fetchedBytes",
            "offered", "outboxDropped", "taken", "takenBytes", "takeDropped", "served", "servedBytes");

    /**
     * The cache of preprocessed samples on the nodes: {@code cache} and {@code cache_affinity} (the settings in force),
     * {@code cache_stats} (each counter added up over the nodes, as serve --join's metrics hold them, and {@code hit_rate},
     * {@code hits}, {@code misses}, {@code cache_bytes_between_nodes}: entries fetched from homes plus entries homes took),
     * {@code per_node_cache_stats} (each node's; null where a node's figures are missing); null figures with the cache off.
     */
    static void cacheFigures(Map<String, Object> json, JsonNode metrics, JsonNode[] stats, ClusterBench.Settings s) {
        var c = s.config();
        boolean on = c.isGiven(NodeConfig.CACHE) && c.get(NodeConfig.CACHE);
        json.put("cache", on);
        json.put("cache_affinity", on && c.get(NodeConfig.CACHE_AFFINITY));
        var perNode = new ArrayList<Map<String, Object>>();
        Map<String, Object> total = null;
        for (JsonNode n : stats) {
            JsonNode a = n == null ? null : n.path("cacheAffinity");
            if (a == null || !a.isObject()) {
                perNode.add(null);
                continue;
            }
            var one = new LinkedHashMap<String, Object>();
            for (String k : CACHE_COUNTERS) one.put(k, a.path(k).asLong());
            perNode.add(one);
            if (total == null) total = new LinkedHashMap<>();
            for (String k : CACHE_COUNTERS) total.merge(k, a.path(k).asLong(), (x, y) -> (Long) x + (Long) y);
        }
        if (total != null) {
            long hits = (Long) total.get("localHits") + (Long) total.get("remoteHits");
            long misses = (Long) total.get("localMisses") + (Long) total.get("remoteMisses");
            long reads = hits + misses + (Long) total.get("fallbacks");
            total.put("hits", hits);
            total.put("misses", misses);
            total.put("hit_rate", reads == 0 ? 0.0 : round((double) hits / reads));
            total.put("cache_bytes_between_nodes", (Long) total.get("fetchedBytes") + (Long) total.get("takenBytes"));
        }
        json.put("cache_stats", total);
        json.put("per_node_cache_stats", on ? perNode : null);
    }

    /** The run's settings as the JSON line records them: each value the one in force, never a key's unset default. */
    static Map<String, Object> settings(ClusterBench.Settings s, Facts f) {
        var settings = new LinkedHashMap<String, Object>();
        settings.put("ranks", f.ranks());
        settings.put("batch", s.config().batch());
        settings.put("step_ms", s.stepMillis());
        settings.put("steps", s.steps());
        settings.put("workers", f.workers());
        settings.put("slots_per_node", f.workers());
        settings.put("max_pixels", s.config().encodeOptions().vision().maxPixels()); // in force: given, the model's or the processor's
        settings.put("fetch_latency_ms", s.config().get(NodeConfig.FETCH_LATENCY_MS));
        settings.put("data", s.config().data());
        settings.put("seed", s.config().get(NodeConfig.SEED));
        settings.put("job_args", f.jobArgs());
        settings.put("node_heap", s.nodeHeap());
        settings.put("cores", Runtime.getRuntime().availableProcessors());
        settings.put("work_dir", f.dir().toString());
        return settings;
    }

    @SuppressWarnings("unchecked")
    static void printTable(PrintWriter out, Map<String, Object> j) {
        boolean netns = (Boolean) j.get("netns");
        int nodes = (Integer) j.get("nodes");
        var tx = (List<Long>) j.get("per_node_bytes");
        var rx = (List<Long>) j.get("per_node_rx_bytes");
        var utx = (List<Double>) j.get("link_utilisation");
        var urx = (List<Double>) j.get("link_utilisation_rx");
        var sutx = (List<Double>) j.get("steady_link_utilisation");
        var surx = (List<Double>) j.get("steady_link_utilisation_rx");
        var flight = (List<Long>) j.get("per_node_flight_bytes_sent");
        var pulled = (List<Long>) j.get("per_node_pulled_bytes");
        var made = (List<Long>) j.get("per_node_batches_made");
        var local = (List<Long>) j.get("per_node_local_handouts");
        var wpn = (List<Integer>) j.get("workers_per_node");
        int ranks = (Integer) ((Map<String, Object>) j.get("settings")).get("ranks");
        out.printf("%-4s %-6s %7s %5s %10s %10s %13s %13s %13s %10s %5s %5s%n", "node", "role", "workers", "ranks",
                netns ? "tx MB" : "sent MB", netns ? "rx MB" : "recv MB", "tx use/steady", "rx use/steady", "flight out MB", "pulled MB",
                "made", "local");
        for (int i = 0; i < nodes; i++) {
            int node = i;
            long myRanks = IntStream.range(0, ranks).filter(r -> r % nodes == node).count();
            out.printf("%-4d %-6s %7d %5d %10.1f %10.1f %13s %13s %13.1f %10.1f %5d %5d%n", i, i == 0 ? "serve" : "node", wpn.get(i), myRanks,
                    tx.get(i) / 1e6, rx.get(i) / 1e6, pct(utx.get(i)) + "/" + pct(sutx.get(i)), pct(urx.get(i)) + "/" + pct(surx.get(i)),
                    flight.get(i) / 1e6, pulled.get(i) / 1e6, made.get(i), local.get(i));
        }
        out.printf("samples/s  %.2f (steady %s) over %.2f s, the slowest trainer's connect-to-end (wall from trainer launch: %.2f s)%n",
                (Double) j.get("samples_per_s"), j.get("steady_samples_per_s"), (Double) j.get("elapsed_s"), (Double) j.get("wall_s"));
        out.printf("wait ratio %.3f (steady %.3f); per rank %s, steady %s%n", (Double) j.get("wait_ratio"), (Double) j.get("steady_wait_ratio"),
                j.get("per_rank_wait_ratio"), j.get("per_rank_steady_wait_ratio"));
        out.printf("as the coordinator gathered them: wait ratio %s; per rank %s, per node %s; verdict %s%n", j.get("coordinator_wait_ratio"),
                j.get("coordinator_per_rank_wait_ratio"), j.get("coordinator_per_node_wait_ratio"), j.get("verdict"));
        out.printf("steps per rank %s, samples %s, first batch %.0f ms, mean wait %.1f ms; dead nodes %s, redone %s%n", j.get("steps_per_rank"),
                j.get("samples"), (Double) j.get("ttfb_ms"), (Double) j.get("mean_wait_ms"), j.get("dead_nodes"), j.get("redone"));
        if (netns && j.get("nic_mbit") instanceof Long m && m > 0)
            out.printf("link use: bytes over (the slowest trainer's elapsed × %d Mbit/s) / over the steady window (%s s, every rank past its "
                    + "first %d steps to the last one's end; link-samples.csv)%n", m, j.get("steady_link_window_s"), RunData.STEADY_SKIP_STEPS);
        if (!netns) out.println("(no namespaces: bytes are the nodes' Flight counters, sent and pulled; no NIC, no utilisation)");
        out.flush();
    }

    private static String pct(Double v) { return v == null ? "-" : String.format(Locale.ROOT, "%.0f%%", v * 100); }

    private static double ratio(long wait, long compute) { return wait + compute == 0 ? 0 : (double) wait / (wait + compute); }

    private static double round(double v) { return Math.round(v * 10000) / 10000.0; }

    private static double round2(double v) { return Math.round(v * 100) / 100.0; }
}
