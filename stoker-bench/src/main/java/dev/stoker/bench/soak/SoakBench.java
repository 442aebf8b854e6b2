package dev.stoker.bench.soak;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ChildJvm;
import dev.stoker.bench.ChildProcesses;
import dev.stoker.bench.trainer.SimulatedTrainer;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * {@code stoker bench soak}: a long run of the real service, to show that its memory stays flat
 * (docs/soak.md). Starts {@code stoker serve} (zero-copy, its own Unix socket, a metrics port) as a
 * child process with a config file written from the soak's settings, then one {@code stoker trainer}
 * process per rank that reads for the run's duration, and every {@code sampleEverySeconds} records a
 * {@link ServiceSample}. At the end the trainers stop at a step boundary, the service gets SIGTERM and
 * must exit 0 leaving no arena behind. Writes {@code soak.csv} and {@code soak.json} into the work dir;
 * the last line printed is the summary as JSON.
 *
 * <p>Why processes and not threads: the service's RSS must be its own, and SIGTERM must take the
 * same path as in production (the shutdown that removes sockets and shared-memory files).
 */
public final class SoakBench {
    /** Options of serve that the soak sets itself. */
    public static final List<String> RESERVED = List.of("--socket", "--mode", "--metrics-port", "--metrics-file", "--job", "--steps");
    /** The serve settings a soak takes and passes on: the feed, the store, the service, but for {@link #RESERVED}. */
    public static final List<ConfigKey<?>> SERVE_KEYS = NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA,
            ConfigKey.Group.STORE, ConfigKey.Group.SERVE)).stream().filter(k -> !RESERVED.contains(k.option())).toList();
    private static final Set<ConfigKey<?>> OWN_FIELDS = Set.of(NodeConfig.DATA_KEY, NodeConfig.RANKS, NodeConfig.BATCH, NodeConfig.SHM_DIR);
    private static final long START_TIMEOUT_SECONDS = 300;
    private static final long STOP_TIMEOUT_SECONDS = 60;

    /**
     * @param config             what serve runs (data, ranks, batch, store, …: {@link #SERVE_KEYS})
     * @param seconds            how long the trainers read
     * @param sampleEverySeconds seconds between samples
     * @param warmUpSeconds      samples before this are left out of the slopes (null: a fifth of the run, at most 300)
     * @param stepMillis         each trainer's simulated GPU step
     * @param workDir            where soak.csv, soak.json, the logs and the socket go (null: a temp folder)
     */
    public record Settings(NodeConfig config, double seconds, double sampleEverySeconds, Double warmUpSeconds, long stepMillis, Path workDir) {}

    private SoakBench() {}

    /** Runs the soak; 0 when the trainers and serve exited 0 and serve left nothing behind, else 1 (said on {@code err}). */
    public static int run(Settings s, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        var config = s.config();
        double runSeconds = s.seconds();
        if (!(runSeconds > 0)) throw new ConfigException("--minutes/--seconds must be positive");
        if (!(s.sampleEverySeconds() > 0)) throw new ConfigException("--sample-every-s must be positive");
        if (s.stepMillis() < 0) throw new ConfigException("--step-ms must be >= 0");
        if (config.data() == null) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…) serve feeds from");
        double warmUp = s.warmUpSeconds() != null ? s.warmUpSeconds() : Math.min(300, runSeconds / 5);
        int ranks = config.ranks();
        Path dir = s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-soak");
        Path socket = dir.resolve("soak.sock");
        Path metricsFile = dir.resolve("serve-metrics.json");
        Path serveConfig = Files.writeString(dir.resolve("serve.yaml"), config.toYaml(SERVE_KEYS));
        Files.deleteIfExists(metricsFile);

        try (var children = new ChildProcesses("soak")) {
            var jvm = new ArrayList<>(ChildJvm.envOptions("STOKER_HEAP_OPTS"));
            jvm.addAll(ChildJvm.envOptions("STOKER_JAVA_OPTS"));
            var serveCmd = ChildJvm.stoker(jvm, List.of("serve", "--config", serveConfig.toString(), "--mode", "zero-copy", "--job", "soak",
                    "--socket", socket.toString(), "--metrics-port", "0", "--metrics-file", metricsFile.toString()));
            Path serveLog = dir.resolve("serve.log");
            Process serve = children.start(new ProcessBuilder(serveCmd).redirectErrorStream(true).redirectOutput(serveLog.toFile()));
            String banner = ChildProcesses.awaitLine(serve, serveLog, "stoker serve: listening on ", START_TIMEOUT_SECONDS, "serve");
            URI metricsUri = URI.create(find(banner, "metrics on (http://127\\.0\\.0\\.1:\\d+/metrics)", serveLog));
            Path arena = Path.of(find(banner, "shared memory (\\S+) \\(budget", serveLog));
            long budget = Long.parseLong(find(banner, "\\(budget (\\d+) bytes\\)", serveLog));
            out.printf("soak: serve pid %d, %d ranks × batch %d, step %d ms, %.0f s, sample every %.1f s, warm-up %.0f s%n",
                    serve.pid(), ranks, config.batch(), s.stepMillis(), runSeconds, s.sampleEverySeconds(), warmUp);
            out.printf("soak: data %s, arena %s (budget %d bytes), work dir %s%n", config.data(), arena, budget, dir);
            out.flush();

            long t0 = System.nanoTime();
            var trainers = new ArrayList<Process>();
            for (int r = 0; r < ranks; r++) {
                Path report = dir.resolve("trainer-rank" + r + ".json");
                Files.deleteIfExists(report);
                var trainer = SimulatedTrainer.Settings.of(socket, r, ranks, Integer.MAX_VALUE, s.stepMillis(), report).withJob("soak")
                        .withDuration((long) (runSeconds * 1000));
                // as the ladder's trainers: a small heap, the service's figures are what this run measures
                trainers.add(children.start(new ProcessBuilder(TrainerProcesses.javaCommand(TrainerProcesses.SMALL_JVM, trainer))
                        .redirectErrorStream(true).redirectOutput(dir.resolve("trainer-rank" + r + ".log").toFile())));
            }
            var http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
            var samples = new ArrayList<ServiceSample>();
            long intervalNanos = (long) (s.sampleEverySeconds() * 1e9);
            long graceNanos = TimeUnit.SECONDS.toNanos(60) + TimeUnit.MILLISECONDS.toNanos(20 * s.stepMillis());
            long endNanos = t0 + (long) (runSeconds * 1e9);
            boolean trainersTimedOut = false;
            try (BufferedWriter csv = Files.newBufferedWriter(dir.resolve("soak.csv"))) {
                csv.write(String.join(",", ServiceSample.COLUMNS));
                csv.newLine();
                // a sample at once, then every interval; when the trainers are done, one last sample with the service still up
                for (long next = t0 + intervalNanos; ; next += intervalNanos) {
                    if (!serve.isAlive()) throw new IOException("serve exited with " + serve.exitValue() + " during the run; see " + serveLog);
                    ServiceSample sample = ServiceSample.take(serve.pid(), arena, http, metricsUri, (System.nanoTime() - t0) / 1e9);
                    samples.add(sample);
                    writeRow(csv, sample);
                    if (trainers.stream().noneMatch(Process::isAlive)) break;
                    if (System.nanoTime() - (endNanos + graceNanos) > 0) {
                        trainersTimedOut = true;
                        break;
                    }
                    waitForTrainers(trainers, next - System.nanoTime()); // returns early when they all exit
                }
            }
            for (Process t : trainers) if (t.isAlive()) t.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            double elapsed = (System.nanoTime() - t0) / 1e9;

            serve.destroy(); // SIGTERM: the service's orderly stop
            boolean stopped = serve.waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS);
            if (!stopped) serve.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            int serveExit = stopped ? serve.exitValue() : -1;
            List<String> leftovers = leftovers(arena, serve.pid(), socket);

            var result = new SoakResult(s, warmUp, elapsed, samples, budget, serveExit, leftovers, serveConfig);
            result.readTrainers(dir, trainers);
            result.readMetrics(metricsFile);
            result.print(out, config.get(NodeConfig.SHM_DIR));
            result.write(dir.resolve("soak.json"), serveOptions(config));
            out.println(new ObjectMapper().writeValueAsString(result.summary()));
            out.flush();
            boolean ok = !trainersTimedOut && serveExit == 0 && leftovers.isEmpty() && result.trainerExits().stream().allMatch(e -> e == 0);
            if (!ok) err.println("stoker: soak did not end cleanly" + (trainersTimedOut ? " (trainers overran)" : "") + "; see " + dir);
            return ok ? 0 : 1;
        }
    }

    /** The serve settings given besides data, ranks, batch and store folder, as options: what soak.json's config lists. */
    static List<String> serveOptions(NodeConfig config) {
        var out = new ArrayList<String>();
        for (var k : SERVE_KEYS)
            if (config.isGiven(k) && !OWN_FIELDS.contains(k)) {
                out.add(k.option());
                out.add(k.format(config.get(k)));
            }
        return out;
    }

    private static String find(String text, String regex, Path log) throws IOException {
        Matcher m = Pattern.compile(regex).matcher(text);
        if (!m.find()) throw new IOException("serve's output lacks /" + regex + "/; see " + log);
        return m.group(1);
    }

    private static void waitForTrainers(List<Process> trainers, long nanos) throws InterruptedException {
        long deadline = System.nanoTime() + nanos;
        for (Process t : trainers) {
            long left = deadline - System.nanoTime();
            if (left <= 0) return;
            t.waitFor(left, TimeUnit.NANOSECONDS);
        }
    }

    private static void writeRow(BufferedWriter csv, ServiceSample s) throws IOException {
        var sb = new StringBuilder(String.format(Locale.ROOT, "%.3f", s.tSeconds()));
        for (long v : s.values()) sb.append(',').append(v);
        csv.write(sb.toString());
        csv.newLine();
        csv.flush();
    }

    /** What the service left on its way out: its arena, other arenas of its pid, its socket. */
    static List<String> leftovers(Path arena, long pid, Path socket) throws IOException {
        var left = new ArrayList<String>();
        if (Files.exists(arena)) left.add(arena.toString());
        Path parent = arena.getParent();
        if (parent != null && Files.isDirectory(parent)) {
            try (Stream<Path> entries = Files.list(parent)) {
                entries.filter(p -> p.getFileName().toString().matches(".*-" + pid + "-[0-9a-f]+") && !p.equals(arena))
                        .forEach(p -> left.add(p.toString()));
            }
        }
        if (Files.exists(socket)) left.add(socket.toString());
        return left;
    }
}
