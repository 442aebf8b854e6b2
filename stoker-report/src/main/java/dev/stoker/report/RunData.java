package dev.stoker.report;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * What a run directory holds ({@code ./stoker bench ladder --work-dir DIR}, or a served job's
 * {@code stoker serve --report-dir DIR}, mode {@code job}): per mode, the trainers' per-step reports
 * ({@code MODE-rankR.json}) and the pipeline's counters ({@code MODE-pipeline.json}). Anything missing is absent here, never an error: a report is built
 * from whatever the run recorded.
 */
public record RunData(Path dir, List<Mode> modes, JsonNode ablation) {
    /** The file {@code stoker bench cluster --ablate} writes its table to, in its work dir. */
    public static final String ABLATION_FILE = "ablation.json";

    /** A run without an ablation table. */
    public RunData(Path dir, List<Mode> modes) { this(dir, modes, null); }

    /** The ladder's rungs in their natural order; other modes follow, by name. */
    public static final List<String> LADDER_ORDER = List.of("serial", "concurrent", "prefetch", "zero-copy");
    /** Steps left out of the steady-state figures (the same rule as the ladder's table). */
    public static final int STEADY_SKIP_STEPS = 3;
    /** The share of each rank's first steps left out of {@link Summary#steadySamplesPerSecond} (issue 30: the first 10%). */
    public static final double STEADY_SKIP_FRACTION = 0.1;

    private static final Pattern RANK_FILE = Pattern.compile("(.+)-rank(\\d+)\\.json");
    private static final Pattern PIPELINE_FILE = Pattern.compile("(.+)-pipeline\\.json");

    /** One step of one rank: [wait_ns, compute_ns, batch_bytes, samples, transfer_ns]. */
    public record Step(long waitNanos, long computeNanos, long batchBytes, long samples, long transferNanos) {}

    /** One trainer rank's report. */
    public record Rank(int rank, double connectWaitMillis, double elapsedMillis, long bytesReceived, long refsReceived,
                       boolean sharedMemory, List<Step> steps) {}

    /** One mode of the ladder: its ranks (by rank) and its pipeline JSON (null when absent). */
    public record Mode(String name, List<Rank> ranks, JsonNode pipeline) {}

    /**
     * The figures of the ladder's summary table (what {@code bench ladder} prints and the report shows).
     *
     * @param steadyTransferShare of the steady-state wait, the part spent moving batches after their
     *                            reply began to arrive (empty when the trainers waited 0)
     * @param steadySamplesPerSecond samples/s after each rank's first {@link #STEADY_SKIP_FRACTION} of steps: the samples of
     *                            the later steps over the longest rank's time in them (its steps' wait + compute); 0 when
     *                            no rank has a later step
     */
    public record Summary(String mode, int ranks, double waitRatio, double steadyWaitRatio, double samplesPerSecond,
                          double firstBatchMillis, double meanWaitMillis, double meanStepMillis, long bytesReceived,
                          long samples, long steps, java.util.OptionalDouble steadyTransferShare, double steadySamplesPerSecond) {}

    /** Reads a run directory. Fails only when the directory cannot be listed or a file is not JSON. */
    public static RunData load(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) throw new IOException("not a directory: " + dir);
        var mapper = new ObjectMapper();
        Map<String, Map<Integer, Rank>> ranks = new TreeMap<>();
        Map<String, JsonNode> pipelines = new TreeMap<>();
        try (Stream<Path> files = Files.list(dir)) {
            for (Path f : files.sorted().toList()) {
                String name = f.getFileName().toString();
                Matcher m = RANK_FILE.matcher(name);
                if (m.matches()) {
                    JsonNode rep = read(mapper, f);
                    int r = rep.path("rank").isNumber() ? rep.get("rank").asInt() : Integer.parseInt(m.group(2));
                    ranks.computeIfAbsent(m.group(1), k -> new TreeMap<>()).put(r, rank(r, rep));
                    continue;
                }
                m = PIPELINE_FILE.matcher(name);
                if (m.matches()) pipelines.put(m.group(1), read(mapper, f));
            }
        }
        var names = new ArrayList<String>(ranks.keySet());
        for (String p : pipelines.keySet()) if (!names.contains(p)) names.add(p);
        names.sort(Comparator.comparingInt((String n) -> LADDER_ORDER.contains(n) ? LADDER_ORDER.indexOf(n) : LADDER_ORDER.size())
                .thenComparing(Comparator.naturalOrder()));
        var modes = new ArrayList<Mode>();
        for (String n : names) {
            modes.add(new Mode(n, List.copyOf(ranks.getOrDefault(n, Map.of()).values()), pipelines.get(n)));
        }
        Path ablation = dir.resolve(ABLATION_FILE);
        return new RunData(dir, List.copyOf(modes), Files.isRegularFile(ablation) ? read(mapper, ablation) : null);
    }

    private static JsonNode read(ObjectMapper mapper, Path f) throws IOException {
        try {
            return mapper.readTree(f.toFile());
        } catch (IOException e) {
            throw new IOException(f + ": " + e.getMessage(), e);
        }
    }

    private static Rank rank(int r, JsonNode rep) {
        var steps = new ArrayList<Step>();
        for (JsonNode s : rep.path("steps")) {
            steps.add(new Step(s.path(0).asLong(), s.path(1).asLong(), s.path(2).asLong(), s.path(3).asLong(), s.path(4).asLong()));
        }
        return new Rank(r, rep.path("connect_wait_ms").asDouble(), rep.path("elapsed_ms").asDouble(),
                rep.path("bytes_received").asLong(), rep.path("refs_received").asLong(),
                rep.path("shared_memory").asBoolean(false), List.copyOf(steps));
    }

    /** The summary of one mode: wait ratio overall and steady, samples/s, first batch, mean wait, bytes. */
    public static Summary summarize(Mode mode) {
        long wait = 0, compute = 0, steadyWait = 0, steadyCompute = 0, steadyTransfer = 0, bytes = 0, samples = 0, steps = 0;
        double maxElapsedMillis = 0, ttfb = 0;
        long lateSamples = 0, lateNanosMax = 0;
        for (Rank r : mode.ranks()) {
            maxElapsedMillis = Math.max(maxElapsedMillis, r.elapsedMillis());
            bytes += r.bytesReceived();
            int skip = (int) Math.ceil(STEADY_SKIP_FRACTION * r.steps().size());
            long lateNanos = 0;
            for (int i = 0; i < r.steps().size(); i++) {
                Step s = r.steps().get(i);
                if (i >= skip) {
                    lateSamples += s.samples();
                    lateNanos += s.waitNanos() + s.computeNanos();
                }
                wait += s.waitNanos();
                compute += s.computeNanos();
                samples += s.samples();
                steps++;
                if (i >= STEADY_SKIP_STEPS) {
                    steadyWait += s.waitNanos();
                    steadyCompute += s.computeNanos();
                    steadyTransfer += Math.min(s.waitNanos(), s.transferNanos());
                }
            }
            if (!r.steps().isEmpty()) ttfb = Math.max(ttfb, r.steps().getFirst().waitNanos() / 1e6);
            lateNanosMax = Math.max(lateNanosMax, lateNanos);
        }
        return new Summary(mode.name(), mode.ranks().size(), ratio(wait, compute), ratio(steadyWait, steadyCompute),
                maxElapsedMillis <= 0 ? 0 : samples / (maxElapsedMillis / 1000.0), ttfb,
                steps == 0 ? 0 : wait / 1e6 / steps, steps == 0 ? 0 : (wait + compute) / 1e6 / steps, bytes, samples, steps,
                steadyWait == 0 ? java.util.OptionalDouble.empty() : java.util.OptionalDouble.of((double) steadyTransfer / steadyWait),
                lateNanosMax == 0 ? 0 : lateSamples / (lateNanosMax / 1e9));
    }

    private static double ratio(long wait, long compute) {
        return wait + compute == 0 ? 0 : (double) wait / (wait + compute);
    }
}
