package dev.stoker.bench.cluster;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code stoker bench cluster --ablate}: the talk's scale ablation as one experiment. The 2×2 of {zero-copy retrieval on/off}
 * × {spread/pack placement}, at the setting given (small) and at one with {@code scale}× the ranks, workers ("data streams")
 * and batch (large), each a {@link ClusterBench} run on the same nodes. "Retrieval off" is {@code --retrieval relay}: batches
 * made on a node other than the coordinator's reach their ranks' nodes through the coordinator's node, as a driver that hands
 * out every batch would; "pack" puts every worker on the coordinator's node (the talk's co-located generator). The figures
 * go to a table, to {@code ablation.json} in the work dir (which {@code stoker report} renders) and to the last stdout line,
 * {@code {"ablation": [...], "gain": {...}, "talk": {...}}}: per scale, each layout's samples/s over both knobs off's.
 */
public final class ClusterAblation {
    /** The talk's scale-up: 4× data-parallel ranks and 4× batch (and 200 streams, here workers × 4). */
    public static final int DEFAULT_SCALE = 4;
    static final String FILE = "ablation.json";
    /** The talk's own figures, set beside the table (docs/benchmarks.md cites them). */
    static final Map<String, Object> TALK = Map.of(
            "small", "neither knob helped at small scale",
            "large", "after 4x data-parallel ranks, 200 data streams and 4x batch the co-located generator's NIC saturated; the two "
                    + "knobs together gave +50% throughput (wait back under 10%, GPU ~90%)");

    private ClusterAblation() {}

    /** One cell: a scale's layout. */
    record Cell(String scale, NodeConfig.Placement placement, NodeConfig.Retrieval retrieval) {
        String name() {
            return scale + "-" + placement.name().toLowerCase(Locale.ROOT) + "-" + retrieval.name().toLowerCase(Locale.ROOT);
        }
    }

    /** Runs the eight cells in turn; 0 when every run ended cleanly. */
    public static int run(ClusterBench.Settings s, int scale, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        if (scale < 2) throw new ConfigException("--ablate-scale must be >= 2, got " + scale);
        var base = s.config();
        int workers = base.workers();
        if ((long) workers * scale > NodeConfig.MAX_CLUSTER_WORKERS)
            throw new ConfigException("--ablate's large setting needs " + workers + " × " + scale + " workers, more than "
                    + NodeConfig.MAX_CLUSTER_WORKERS + ": lower --workers or --ablate-scale");
        Path dir = (s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-ablation")).toAbsolutePath();
        var rows = new ArrayList<Map<String, Object>>();
        int exit = 0;
        for (var sc : List.of(Map.entry("small", 1), Map.entry("large", scale))) {
            int f = sc.getValue();
            var scaled = base.toBuilder().set(NodeConfig.RANKS, base.ranks() * f).set(NodeConfig.BATCH, base.batch() * f)
                    .set(NodeConfig.WORKERS, workers * f);
            for (var retrieval : List.of(NodeConfig.Retrieval.RELAY, NodeConfig.Retrieval.DIRECT))
                for (var placement : List.of(NodeConfig.Placement.PACK, NodeConfig.Placement.SPREAD)) {
                    var cell = new Cell(sc.getKey(), placement, retrieval);
                    var config = scaled.set(NodeConfig.PLACEMENT, placement).set(NodeConfig.RETRIEVAL, retrieval).build();
                    out.printf("%n=== ablation %s: %d ranks × batch %d, %d workers, placement %s, retrieval %s ===%n", cell.name(),
                            config.ranks(), config.batch(), config.workers(), ClusterBench.placement(config), ClusterBench.retrieval(config));
                    out.flush();
                    // the large setting's trainers share the machine with f× as many, each batch f× larger: f² the default limit
                    Long timeout = s.timeoutSeconds() != null ? s.timeoutSeconds()
                            : ClusterBench.defaultTimeoutSeconds(s.steps(), s.stepMillis()) * f * f;
                    var run = ClusterBench.measure(new ClusterBench.Settings(config, s.steps(), s.stepMillis(), s.nicMbit(), s.noNetns(),
                            s.port(), s.nodeHeap(), timeout, dir.resolve(cell.name())), out, err);
                    if (run.exit() != 0) exit = 1;
                    rows.add(row(cell, config, run));
                }
        }
        var result = new LinkedHashMap<String, Object>();
        result.put("ablation", rows);
        result.put("gain", gains(rows));
        result.put("talk", TALK);
        result.put("scale", scale);
        result.put("settings", Map.of("nodes", base.get(NodeConfig.NODES), "steps", s.steps(), "step_ms", s.stepMillis(),
                "nic_mbit", s.nicMbit(), "netns", !s.noNetns(), "work_dir", dir.toString()));
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(dir.resolve(FILE).toFile(), result);
        printTable(out, rows);
        out.println(new ObjectMapper().writeValueAsString(result));
        out.flush();
        if (exit != 0) err.println("stoker: bench cluster --ablate: a run did not end cleanly (see above); its row says so");
        return exit;
    }

    static Map<String, Object> row(Cell cell, NodeConfig config, ClusterBench.Outcome run) {
        var r = new LinkedHashMap<String, Object>();
        var j = run.result();
        r.put("scale", cell.scale());
        r.put("placement", ClusterBench.placement(config));
        r.put("retrieval", ClusterBench.retrieval(config));
        r.put("ranks", config.ranks());
        r.put("batch", config.batch());
        r.put("workers", config.workers());
        r.put("ok", run.exit() == 0);
        for (String k : List.of("samples_per_s", "steady_samples_per_s", "wait_ratio", "steady_wait_ratio", "netns"))
            r.put(k, j == null ? null : j.get(k));
        r.put("busiest_tx_utilisation", j == null ? null : max(j.get("steady_link_utilisation")));
        r.put("coordinator_node_tx_bytes", j == null ? null : first(j.get("per_node_bytes")));
        r.put("relayed_bytes", j == null ? null : sum(j.get("per_node_relayed_bytes")));
        return r;
    }

    /** Per scale: each layout's samples/s over that of both knobs off (pack + relay). */
    static Map<String, Object> gains(List<Map<String, Object>> rows) {
        var out = new LinkedHashMap<String, Object>();
        for (String scale : List.of("small", "large")) {
            Double off = null;
            for (var r : rows)
                if (scale.equals(r.get("scale")) && "pack".equals(r.get("placement")) && "relay".equals(r.get("retrieval"))
                        && r.get("samples_per_s") instanceof Number n) off = n.doubleValue();
            var g = new LinkedHashMap<String, Object>();
            for (var r : rows)
                if (scale.equals(r.get("scale")))
                    g.put(r.get("placement") + "+" + r.get("retrieval"), off == null || off == 0 || !(r.get("samples_per_s") instanceof Number n)
                            ? null : Math.round(n.doubleValue() / off * 1000) / 1000.0);
            out.put(scale, g);
        }
        return out;
    }

    static void printTable(PrintWriter out, List<Map<String, Object>> rows) {
        out.printf("%nablation (the talk: small scale, neither knob helped; large, both together +50%%)%n");
        out.printf("%-6s %-7s %-9s %5s %5s %7s %10s %10s %8s %8s %10s %5s%n", "scale", "place", "retrieval", "ranks", "batch", "workers",
                "samples/s", "steady", "wait", "steady", "busiest tx", "ok");
        for (var r : rows)
            out.printf("%-6s %-7s %-9s %5s %5s %7s %10s %10s %8s %8s %10s %5s%n", r.get("scale"), r.get("placement"), r.get("retrieval"),
                    r.get("ranks"), r.get("batch"), r.get("workers"), r.get("samples_per_s"), r.get("steady_samples_per_s"),
                    r.get("wait_ratio"), r.get("steady_wait_ratio"), r.get("busiest_tx_utilisation"), r.get("ok"));
        out.println("gain over pack+relay (both off), samples/s: " + gains(rows));
        out.flush();
    }

    private static Double max(Object list) {
        Double m = null;
        if (list instanceof List<?> l) for (Object o : l) if (o instanceof Number n && (m == null || n.doubleValue() > m)) m = n.doubleValue();
        return m;
    }

    private static Object first(Object list) { return list instanceof List<?> l && !l.isEmpty() ? l.getFirst() : null; }

    private static Long sum(Object list) {
        long t = 0;
        if (list instanceof List<?> l) for (Object o : l) if (o instanceof Number n && n.longValue() > 0) t += n.longValue();
        return t;
    }
}
