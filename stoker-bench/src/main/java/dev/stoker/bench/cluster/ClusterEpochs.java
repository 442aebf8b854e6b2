package dev.stoker.bench.cluster;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code stoker bench cluster --epochs N}: the job's epochs one after the other over the same nodes' caches of preprocessed
 * samples, to measure what the cache (and its affinity, docs/cluster.md) does for epoch 2 and later on a cluster. Each epoch
 * is a {@link ClusterBench} run of one epoch's steps, in its own order (seed, seed + 1, …, as a job's epochs each have
 * theirs): with spread placement a sample falls to another node than in the epoch before, which is what the affinity is
 * for. The nodes keep their addresses (the same ports, the same namespaces' subnet: a cache entry's home is named by its
 * node's address) and their cache folders ({@code nodeI} under {@code --cache-dir}, else under the work dir's
 * {@code cache}, emptied first so that epoch 1 starts cold); before an epoch's nodes stop, the run waits until every entry
 * offered to its home was taken. A restart between epochs (the nodes' JVMs start again) is the price of running each epoch
 * as a job of its own; the trainers' samples/s leave the start out.
 *
 * <p>The last stdout line: {@code {"epochs": [{"epoch", "seed", "steps", "samples_per_s", "steady_samples_per_s", "wait_ratio",
 * "hits", "hits_local", "hits_at_home", "misses", "fallbacks", "hit_rate", "cache_bytes_between_nodes",
 * "batch_bytes_between_nodes", "ok"}, …], "cache", "cache_affinity", "entries", "speedup", "runs": [each epoch's JSON line]}}.
 */
public final class ClusterEpochs {
    private ClusterEpochs() {}

    /**
     * Steps of one epoch of {@code config}'s data for its ranks and batch (the samples over ranks × batch, the last partial
     * step left out, as a job's epoch does).
     */
    public static int stepsPerEpoch(NodeConfig config) throws IOException {
        try (var sources = dev.stoker.source.mix.DataSources.open(config.sources(), config.sourceConfig(), config.indexCache())) {
            long samples = sources.feedSource().records().size();
            long steps = samples / ((long) config.ranks() * config.batch());
            if (steps < 1)
                throw new ConfigException("--data " + config.data() + " holds " + samples + " samples, fewer than one step of "
                        + config.ranks() + " ranks × batch " + config.batch());
            return (int) Math.min(steps, Integer.MAX_VALUE);
        }
    }

    /** Runs {@code epochs} epochs in turn; 0 when every run ended cleanly. */
    public static int run(ClusterBench.Settings s, int epochs, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        if (epochs < 2) throw new ConfigException("--epochs must be >= 2 (one epoch is a plain run), got " + epochs);
        var base = s.config();
        if (!base.isGiven(NodeConfig.CACHE))
            throw new ConfigException("--epochs needs --cache on (the nodes keep their caches from epoch to epoch) or --cache off "
                    + "(the baseline: every epoch decodes)");
        if (base.get(NodeConfig.PACK_TOKENS) > 0)
            throw new ConfigException("--epochs runs padded batches; --pack-tokens is not supported here");
        boolean cache = base.get(NodeConfig.CACHE);
        Path dir = (s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-epochs")).toAbsolutePath();
        Path cacheRoot = null;
        if (cache) {
            if (base.isGiven(NodeConfig.CACHE_DIR)) {
                cacheRoot = base.get(NodeConfig.CACHE_DIR);
            } else {
                cacheRoot = dir.resolve("cache");
                deleteTree(cacheRoot); // the bench's own folders: epoch 1 starts cold
            }
        }
        Integer port = s.port();
        if (port == null && s.noNetns()) port = ClusterBench.freePortRange(base.get(NodeConfig.NODES)); // the same addresses every epoch
        long seed = base.get(NodeConfig.SEED);
        Integer octet = null;
        var runs = new ArrayList<Map<String, Object>>();
        var rows = new ArrayList<Map<String, Object>>();
        int exit = 0;
        for (int e = 1; e <= epochs; e++) {
            var config = base.toBuilder().set(NodeConfig.SEED, seed + e - 1).build();
            Path epochDir = dir.resolve("epoch" + e);
            out.printf("%n=== epoch %d of %d: seed %d, %d steps, cache %s%s ===%n", e, epochs, seed + e - 1, s.steps(), cache ? "on" : "off",
                    cache ? ", affinity " + (config.get(NodeConfig.CACHE_AFFINITY) ? "on" : "off") : "");
            out.flush();
            var pass = new ClusterBench.Pass(octet, cacheRoot, epochDir.resolve("report"), cache && e < epochs);
            var run = ClusterBench.measure(new ClusterBench.Settings(config, s.steps(), s.stepMillis(), s.nicMbit(), s.noNetns(), port,
                    s.nodeHeap(), s.timeoutSeconds(), epochDir), pass, out, err);
            if (run.subnetOctet() != null) octet = run.subnetOctet();
            if (run.exit() != 0) exit = 1;
            runs.add(run.result());
            rows.add(row(e, seed + e - 1, s.steps(), run));
            if (run.result() == null) break; // the nodes did not run: the next epoch would find nothing
        }
        var result = new LinkedHashMap<String, Object>();
        result.put("epochs", rows);
        result.put("cache", cache);
        result.put("cache_affinity", cache && base.get(NodeConfig.CACHE_AFFINITY));
        // the entries epoch 1 read: each of its media reads found nothing (cold) and made one
        result.put("entries", rows.isEmpty() || !cache ? null : rows.getFirst().get("reads"));
        result.put("speedup", speedups(rows));
        result.put("work_dir", dir.toString());
        result.put("runs", runs);
        printTable(out, rows);
        out.println(new ObjectMapper().writeValueAsString(result));
        out.flush();
        if (exit != 0) err.println("stoker: bench cluster --epochs: a run did not end cleanly (see above); its row says so");
        return exit;
    }

    static Map<String, Object> row(int epoch, long seed, int steps, ClusterBench.Outcome run) {
        var r = new LinkedHashMap<String, Object>();
        var j = run.result();
        r.put("epoch", epoch);
        r.put("seed", seed);
        r.put("steps", steps);
        r.put("ok", run.exit() == 0);
        for (String k : List.of("samples_per_s", "steady_samples_per_s", "wait_ratio", "samples")) r.put(k, j == null ? null : j.get(k));
        var stats = j == null ? null : (Map<?, ?>) j.get("cache_stats");
        r.put("hits", stats == null ? null : stats.get("hits"));
        r.put("hits_local", stats == null ? null : stats.get("localHits"));
        r.put("hits_at_home", stats == null ? null : stats.get("remoteHits"));
        r.put("misses", stats == null ? null : stats.get("misses"));
        r.put("fallbacks", stats == null ? null : stats.get("fallbacks"));
        r.put("reads", stats == null ? null : (Long) stats.get("hits") + (Long) stats.get("misses") + (Long) stats.get("fallbacks"));
        r.put("hit_rate", stats == null ? null : stats.get("hit_rate"));
        r.put("offered", stats == null ? null : stats.get("offered"));
        r.put("taken", stats == null ? null : stats.get("taken"));
        r.put("cache_bytes_between_nodes", stats == null ? null : stats.get("cache_bytes_between_nodes"));
        r.put("batch_bytes_between_nodes", j == null ? null : sum(j.get("per_node_flight_bytes_sent")));
        return r;
    }

    /** Each epoch's samples/s over epoch 1's (null where either is missing). */
    static List<Double> speedups(List<Map<String, Object>> rows) {
        var out = new ArrayList<Double>();
        Object first = rows.isEmpty() ? null : rows.getFirst().get("samples_per_s");
        for (var r : rows)
            out.add(first instanceof Number f && f.doubleValue() > 0 && r.get("samples_per_s") instanceof Number n
                    ? Math.round(n.doubleValue() / f.doubleValue() * 1000) / 1000.0 : null);
        return out;
    }

    static void printTable(PrintWriter out, List<Map<String, Object>> rows) {
        out.printf("%nepochs over the same nodes' caches%n");
        out.printf("%5s %6s %10s %10s %8s %7s %7s %7s %7s %9s %9s %12s %12s %5s%n", "epoch", "steps", "samples/s", "steady", "wait", "hits",
                "local", "at home", "misses", "fallbacks", "hit rate", "cache MB", "batch MB", "ok");
        for (var r : rows)
            out.printf("%5s %6s %10s %10s %8s %7s %7s %7s %7s %9s %9s %12s %12s %5s%n", r.get("epoch"), r.get("steps"), or(r.get("samples_per_s")),
                    or(r.get("steady_samples_per_s")), or(r.get("wait_ratio")), or(r.get("hits")), or(r.get("hits_local")), or(r.get("hits_at_home")),
                    or(r.get("misses")), or(r.get("fallbacks")), or(r.get("hit_rate")), mb(r.get("cache_bytes_between_nodes")),
                    mb(r.get("batch_bytes_between_nodes")), r.get("ok"));
        out.println("samples/s over epoch 1's: " + speedups(rows) + "; cache MB: entries fetched from their homes and taken by them; "
                + "batch MB: batches pulled over Flight");
        out.flush();
    }

    /** A figure as the table shows it; "-" where there is none (the cache off has no hits or misses). */
    private static Object or(Object v) { return v == null ? "-" : v; }

    private static String mb(Object bytes) { return bytes instanceof Number n ? String.format(java.util.Locale.ROOT, "%.1f", n.doubleValue() / 1e6) : "-"; }

    private static Long sum(Object list) {
        long t = 0;
        if (list instanceof List<?> l) for (Object o : l) if (o instanceof Number n && n.longValue() > 0) t += n.longValue();
        return t;
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root, java.nio.file.LinkOption.NOFOLLOW_LINKS)) return;
        try (var walk = Files.walk(root)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) Files.delete(p);
        }
    }
}
