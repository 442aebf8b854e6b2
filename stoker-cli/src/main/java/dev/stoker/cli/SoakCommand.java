package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Unmatched;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker bench soak}: a long run of the real service, to show that its memory stays flat.
 * Starts {@code stoker serve} (zero-copy, its own Unix socket, a metrics port) as a child process,
 * then one {@code stoker trainer} process per rank that reads for the run's duration, and every
 * {@code --sample-every-s} records: the service's resident memory ({@code VmRSS} of
 * {@code /proc/PID/status}, split into anonymous memory, the heap and native memory where a leak
 * would show, and shared memory, the store's segments the service has mapped), the bytes of the
 * store's arena directory on {@code --shm-dir}, the store's own in-use and mapped bytes, and the
 * samples delivered and skipped (scraped from the metrics endpoint). At the end the trainers stop
 * at a step boundary, the service gets SIGTERM and must exit 0 leaving no arena behind.
 *
 * <p>Flat: after the warm-up (heap and store growing to their working size), the least-squares
 * slope of a series, per 10 minutes, is at most {@value #FLAT_FRACTION} of its median or
 * {@value #FLAT_FLOOR_BYTES} bytes, whichever is larger. The raw series is in {@code soak.csv}; a
 * short run extrapolates noise, so the verdict means something only for a run of many minutes.
 *
 * <p>Why processes and not threads: the service's RSS must be its own, and SIGTERM must take the
 * same path as in production (the shutdown that removes sockets and shared-memory files).
 */
@Command(name = "soak", mixinStandardHelpOptions = true,
        description = {"Run `stoker serve` (zero-copy) with one trainer process per rank for a long time and record, every "
                + "--sample-every-s, the service's RSS, the store's shared memory and the samples delivered and skipped.",
                "Writes soak.csv and soak.json into --work-dir. Options not listed here (e.g. --max-pixels, --threads, --shm-budget, "
                        + "--fetch-latency-ms, --s3-endpoint) are passed to serve.",
                "The last stdout line is JSON {\"seconds\":…, \"rss_bytes\":{\"start\",\"median\",\"max\",\"end\",\"slope_per_10min\",\"flat\"}, "
                        + "\"shm_bytes\":{…}, \"delivered_samples\":…, \"skipped_samples\":…, \"leftovers\":[…], …}."})
final class SoakCommand implements Callable<Integer> {
    /** The launcher's JVM_FLAGS, which {@code ./stoker serve} runs with. */
    static final List<String> JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--sun-misc-unsafe-memory-access=allow", "-Dai.djl.offline=true", "-Djava.awt.headless=true");
    static final double FLAT_FRACTION = 0.01;
    static final long FLAT_FLOOR_BYTES = 4L << 20;
    static final String[] COLUMNS = {"t_s", "rss_bytes", "rss_anon_bytes", "rss_shmem_bytes", "shm_bytes", "store_in_use_bytes",
            "store_mapped_bytes", "store_leases", "delivered_samples", "skipped_samples", "delivered_batches"};
    private static final long START_TIMEOUT_SECONDS = 300;
    private static final long STOP_TIMEOUT_SECONDS = 60;

    @Spec CommandSpec spec;

    @Option(names = "--data", required = true, description = "The manifest (local path, file://… or s3://…) serve feeds from.")
    String data;

    @Option(names = "--minutes", defaultValue = "30", description = "How long the trainers read (default: ${DEFAULT-VALUE}).")
    double minutes;

    @Option(names = "--seconds", description = "The run's length in seconds instead of --minutes (short runs, tests).")
    Double seconds;

    @Option(names = "--ranks", defaultValue = "2", description = "Trainer processes, one per rank (default: ${DEFAULT-VALUE}).")
    int ranks;

    @Option(names = "--batch", defaultValue = "8", description = "Samples per rank and step (default: ${DEFAULT-VALUE}).")
    int batch;

    @Option(names = "--step-ms", defaultValue = "100", description = "Each trainer's simulated GPU step, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--sample-every-s", defaultValue = "10", description = "Seconds between samples (default: ${DEFAULT-VALUE}).")
    double sampleEverySeconds;

    @Option(names = "--warm-up-s",
            description = "Samples before this many seconds are left out of the slopes (default: a fifth of the run, at most 300).")
    Double warmUpSeconds;

    @Option(names = "--shm-dir", defaultValue = "/dev/shm", description = "The store's directory, passed to serve (default: ${DEFAULT-VALUE}).")
    Path shmDir;

    @Option(names = "--work-dir", description = "Where soak.csv, soak.json, the logs and the socket go (default: a temp folder).")
    Path workDir;

    @Unmatched
    List<String> serveOptions = new ArrayList<>();

    /** One sample of the service; -1 where a figure could not be read. */
    record Sample(double tSeconds, long rss, long rssAnon, long rssShmem, long shm, long storeInUse, long storeMapped, long leases,
                  long delivered, long skipped, long batches) {
        long[] values() { return new long[] {rss, rssAnon, rssShmem, shm, storeInUse, storeMapped, leases, delivered, skipped, batches}; }
    }

    /** start, median, max, end and the slope after the warm-up of one series; slope NaN with fewer than two samples after it. */
    record Series(long start, long median, long max, long end, double slopePer10Min, boolean flat) {
        Map<String, Object> toJson() {
            var m = new LinkedHashMap<String, Object>();
            m.put("start", start);
            m.put("median", median);
            m.put("max", max);
            m.put("end", end);
            m.put("slope_per_10min", Double.isNaN(slopePer10Min) ? null : Math.round(slopePer10Min));
            m.put("flat", flat);
            return m;
        }
    }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        double runSeconds = seconds != null ? seconds : minutes * 60;
        if (!(runSeconds > 0)) throw new Main.InvalidInputException("--minutes/--seconds must be positive");
        if (!(sampleEverySeconds > 0)) throw new Main.InvalidInputException("--sample-every-s must be positive");
        if (ranks < 1 || batch < 1 || stepMillis < 0) throw new Main.InvalidInputException("--ranks and --batch must be >= 1, --step-ms >= 0");
        double warmUp = warmUpSeconds != null ? warmUpSeconds : Math.min(300, runSeconds / 5);
        for (String reserved : List.of("--socket", "--mode", "--metrics-port", "--metrics-file", "--job", "--steps"))
            if (serveOptions.stream().anyMatch(o -> o.equals(reserved) || o.startsWith(reserved + "=")))
                throw new Main.InvalidInputException(reserved + " is set by bench soak");
        Path dir = workDir != null ? Files.createDirectories(workDir) : Files.createTempDirectory("stoker-soak");
        Path socket = dir.resolve("soak.sock");
        Path metricsFile = dir.resolve("serve-metrics.json");
        Files.deleteIfExists(metricsFile);

        var children = new ArrayList<Process>();
        Thread cleanup = new Thread(() -> children.forEach(Process::destroy), "soak-cleanup");
        Runtime.getRuntime().addShutdownHook(cleanup);
        try {
            var serveCmd = new ArrayList<String>(javaCommand());
            serveCmd.addAll(envOptions("STOKER_HEAP_OPTS"));
            serveCmd.addAll(envOptions("STOKER_JAVA_OPTS"));
            serveCmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName(), "serve", "--data", data,
                    "--ranks", Integer.toString(ranks), "--batch", Integer.toString(batch), "--mode", "zero-copy", "--job", "soak",
                    "--socket", socket.toString(), "--shm-dir", shmDir.toString(), "--metrics-port", "0",
                    "--metrics-file", metricsFile.toString()));
            serveCmd.addAll(serveOptions);
            Path serveLog = dir.resolve("serve.log");
            Process serve = new ProcessBuilder(serveCmd).redirectErrorStream(true).redirectOutput(serveLog.toFile()).start();
            children.add(serve);
            String banner = awaitListening(serve, serveLog);
            URI metricsUri = URI.create(find(banner, "metrics on (http://127\\.0\\.0\\.1:\\d+/metrics)", serveLog));
            Path arena = Path.of(find(banner, "shared memory (\\S+) \\(budget", serveLog));
            long budget = Long.parseLong(find(banner, "\\(budget (\\d+) bytes\\)", serveLog));
            out.printf("soak: serve pid %d, %d ranks × batch %d, step %d ms, %.0f s, sample every %.1f s, warm-up %.0f s%n",
                    serve.pid(), ranks, batch, stepMillis, runSeconds, sampleEverySeconds, warmUp);
            out.printf("soak: data %s, arena %s (budget %d bytes), work dir %s%n", data, arena, budget, dir);
            out.flush();

            long t0 = System.nanoTime();
            var trainers = new ArrayList<Process>();
            for (int r = 0; r < ranks; r++) {
                Process t = startTrainer(socket, r, (long) (runSeconds * 1000), dir);
                trainers.add(t);
                children.add(t);
            }
            var http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
            var samples = new ArrayList<Sample>();
            long intervalNanos = (long) (sampleEverySeconds * 1e9);
            long graceNanos = TimeUnit.SECONDS.toNanos(60) + TimeUnit.MILLISECONDS.toNanos(20 * stepMillis);
            long endNanos = t0 + (long) (runSeconds * 1e9);
            boolean trainersTimedOut = false;
            try (BufferedWriter csv = Files.newBufferedWriter(dir.resolve("soak.csv"))) {
                csv.write(String.join(",", COLUMNS));
                csv.newLine();
                // a sample at once, then every interval; when the trainers are done, one last sample with the service still up
                for (long next = t0 + intervalNanos; ; next += intervalNanos) {
                    if (!serve.isAlive()) throw new IOException("serve exited with " + serve.exitValue() + " during the run; see " + serveLog);
                    Sample s = sample(serve.pid(), arena, http, metricsUri, (System.nanoTime() - t0) / 1e9);
                    samples.add(s);
                    writeRow(csv, s);
                    if (trainers.stream().noneMatch(Process::isAlive)) break;
                    if (System.nanoTime() - (endNanos + graceNanos) > 0) {
                        trainersTimedOut = true;
                        break;
                    }
                    waitForTrainers(trainers, next - System.nanoTime()); // returns early when they all exit
                }
            }
            for (Process t : trainers) if (t.isAlive()) t.destroyForcibly();
            double elapsed = (System.nanoTime() - t0) / 1e9;

            serve.destroy(); // SIGTERM: the service's orderly stop
            boolean stopped = serve.waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS);
            if (!stopped) serve.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            int serveExit = stopped ? serve.exitValue() : -1;
            List<String> leftovers = leftovers(arena, serve.pid(), socket);

            var trainerSteps = new ArrayList<Long>();
            var trainerExits = new ArrayList<Integer>();
            long trainerSamples = 0;
            for (int r = 0; r < ranks; r++) {
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
            long delivered = samples.getLast().delivered(), skipped = samples.getLast().skipped(), batches = samples.getLast().batches();
            JsonNode store = null, server = null;
            if (Files.isRegularFile(metricsFile)) { // written on shutdown: the final counts
                JsonNode metrics = new ObjectMapper().readTree(metricsFile.toFile());
                JsonNode pipeline = metrics.path("pipeline");
                delivered = pipeline.path("deliveredSamples").asLong(delivered);
                skipped = pipeline.path("skippedSamples").asLong(skipped);
                batches = pipeline.path("deliveredBatches").asLong(batches);
                store = metrics.get("store");
                server = metrics.get("server");
            }

            var series = new LinkedHashMap<String, Series>();
            series.put("rss_bytes", series(samples, warmUp, Sample::rss));
            series.put("rss_anon_bytes", series(samples, warmUp, Sample::rssAnon));
            series.put("rss_shmem_bytes", series(samples, warmUp, Sample::rssShmem));
            series.put("shm_bytes", series(samples, warmUp, Sample::shm));
            series.put("store_in_use_bytes", series(samples, warmUp, Sample::storeInUse));

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

            var json = new LinkedHashMap<String, Object>();
            var config = new LinkedHashMap<String, Object>();
            config.put("data", data);
            config.put("seconds", runSeconds);
            config.put("ranks", ranks);
            config.put("batch", batch);
            config.put("step_ms", stepMillis);
            config.put("sample_every_s", sampleEverySeconds);
            config.put("warm_up_s", warmUp);
            config.put("shm_dir", shmDir.toString());
            config.put("serve_options", serveOptions);
            config.put("cores", Runtime.getRuntime().availableProcessors());
            json.put("config", config);
            json.put("summary", summary);
            json.put("columns", List.of(COLUMNS));
            json.put("rows", samples.stream().map(s -> {
                var row = new ArrayList<Object>();
                row.add(s.tSeconds());
                for (long v : s.values()) row.add(v);
                return row;
            }).toList());
            new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(dir.resolve("soak.json").toFile(), json);
            out.println(new ObjectMapper().writeValueAsString(summary));
            boolean ok = !trainersTimedOut && serveExit == 0 && leftovers.isEmpty() && trainerExits.stream().allMatch(e -> e == 0);
            if (!ok) spec.commandLine().getErr().println("stoker: soak did not end cleanly" + (trainersTimedOut ? " (trainers overran)" : "")
                    + "; see " + dir);
            return ok ? 0 : 1;
        } finally {
            children.forEach(p -> { if (p.isAlive()) p.destroyForcibly(); });
            try {
                Runtime.getRuntime().removeShutdownHook(cleanup);
            } catch (IllegalStateException e) {
                // the JVM is shutting down: the hook runs anyway
            }
        }
    }

    /** This JVM's java with the launcher's flags: the start of every child JVM command line of the benchmarks. */
    static List<String> javaCommand() {
        var cmd = new ArrayList<String>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(JVM_FLAGS);
        return cmd;
    }

    /** The words of an environment variable the launcher also passes to the JVM (STOKER_HEAP_OPTS, STOKER_JAVA_OPTS). */
    static List<String> envOptions(String name) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? List.of() : Arrays.asList(v.trim().split("\\s+"));
    }

    private Process startTrainer(Path socket, int rank, long durationMillis, Path dir) throws IOException {
        var cmd = new ArrayList<String>(javaCommand());
        // as bench ladder's trainers: a small heap, the service's figures are what this run measures
        cmd.addAll(List.of("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                Main.class.getName(), "trainer", "--socket", socket.toString(), "--rank", Integer.toString(rank),
                "--world", Integer.toString(ranks), "--steps", Integer.toString(Integer.MAX_VALUE), "--step-ms", Long.toString(stepMillis),
                "--duration-ms", Long.toString(durationMillis), "--job", "soak",
                "--report", dir.resolve("trainer-rank" + rank + ".json").toString()));
        Files.deleteIfExists(dir.resolve("trainer-rank" + rank + ".json"));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve("trainer-rank" + rank + ".log").toFile()).start();
    }

    /** Waits for serve's last start-up line ("listening on"); returns its output so far. */
    private static String awaitListening(Process serve, Path log) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(START_TIMEOUT_SECONDS);
        while (System.nanoTime() - deadline < 0) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains("stoker serve: listening on ")) return text;
            if (!serve.isAlive()) throw new IOException("serve exited with " + serve.exitValue() + " before listening:\n" + tail(text));
            Thread.sleep(50);
        }
        throw new IOException("serve did not listen within " + START_TIMEOUT_SECONDS + " s; see " + log);
    }

    private static String find(String text, String regex, Path log) throws IOException {
        Matcher m = Pattern.compile(regex).matcher(text);
        if (!m.find()) throw new IOException("serve's output lacks /" + regex + "/; see " + log);
        return m.group(1);
    }

    private static String tail(String text) {
        String[] lines = text.split("\n");
        return String.join("\n", Arrays.copyOfRange(lines, Math.max(0, lines.length - 20), lines.length));
    }

    private static void waitForTrainers(List<Process> trainers, long nanos) throws InterruptedException {
        long deadline = System.nanoTime() + nanos;
        for (Process t : trainers) {
            long left = deadline - System.nanoTime();
            if (left <= 0) return;
            t.waitFor(left, TimeUnit.NANOSECONDS);
        }
    }

    private static void writeRow(BufferedWriter csv, Sample s) throws IOException {
        var sb = new StringBuilder(String.format(java.util.Locale.ROOT, "%.3f", s.tSeconds()));
        for (long v : s.values()) sb.append(',').append(v);
        csv.write(sb.toString());
        csv.newLine();
        csv.flush();
    }

    /** One sample: /proc of the service, its arena's files, one scrape of its metrics. */
    static Sample sample(long pid, Path arena, HttpClient http, URI metrics, double tSeconds) throws InterruptedException {
        Map<String, Long> status = procStatus(pid);
        Map<String, Double> scraped = scrape(http, metrics);
        return new Sample(tSeconds, status.getOrDefault("VmRSS", -1L), status.getOrDefault("RssAnon", -1L),
                status.getOrDefault("RssShmem", -1L), directoryBytes(arena),
                metric(scraped, "stoker_store_bytes_in_use"), metric(scraped, "stoker_store_bytes_mapped"),
                metric(scraped, "stoker_store_leases"), metric(scraped, "stoker_samples_delivered_total"),
                metric(scraped, "stoker_samples_skipped_total"), metric(scraped, "stoker_batches_delivered_total"));
    }

    /** The memory lines of {@code /proc/PID/status} ({@code VmRSS:   123 kB}), in bytes. */
    static Map<String, Long> procStatus(long pid) {
        var m = new LinkedHashMap<String, Long>();
        try {
            for (String line : Files.readAllLines(Path.of("/proc", Long.toString(pid), "status"))) {
                String[] parts = line.split("\\s+");
                if (parts.length == 3 && parts[0].endsWith(":") && parts[2].equals("kB"))
                    m.put(parts[0].substring(0, parts[0].length() - 1), Long.parseLong(parts[1]) * 1024);
            }
        } catch (IOException | NumberFormatException e) {
            // the process is gone: no figures
        }
        return m;
    }

    /** Bytes of the regular files under {@code dir} (segment files on a tmpfs are fully allocated); 0 when it is gone. */
    static long directoryBytes(Path dir) {
        long total = 0;
        try (Stream<Path> files = Files.list(dir)) {
            for (Path p : files.toList()) {
                try {
                    if (Files.isRegularFile(p)) total += Files.size(p);
                } catch (NoSuchFileException e) {
                    // deleted while listed
                }
            }
        } catch (IOException e) {
            return 0;
        }
        return total;
    }

    /** The samples of a Prometheus text page, by name with labels ({@code name{a="b"}}); empty when the scrape fails. */
    static Map<String, Double> scrape(HttpClient http, URI uri) throws InterruptedException {
        var m = new LinkedHashMap<String, Double>();
        try {
            var response = http.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
            if (response.statusCode() != 200) return m;
            for (String line : response.body().split("\n")) {
                if (line.isBlank() || line.startsWith("#")) continue;
                int space = line.lastIndexOf(' ');
                if (space > 0) m.put(line.substring(0, space), Double.parseDouble(line.substring(space + 1)));
            }
        } catch (IOException | NumberFormatException e) {
            // the service is busy or stopping: this sample lacks its counters
        }
        return m;
    }

    private static long metric(Map<String, Double> scraped, String name) {
        Double v = scraped.get(name);
        return v == null ? -1 : Math.round(v);
    }

    /** The summary of one series; the slope is a least-squares fit over the samples at or after {@code warmUpSeconds}. */
    static Series series(List<Sample> samples, double warmUpSeconds, java.util.function.ToLongFunction<Sample> f) {
        var valid = samples.stream().filter(s -> f.applyAsLong(s) >= 0).toList();
        if (valid.isEmpty()) return new Series(-1, -1, -1, -1, Double.NaN, false);
        long[] sorted = valid.stream().mapToLong(f).sorted().toArray();
        long median = sorted[(sorted.length - 1) / 2];
        var steady = valid.stream().filter(s -> s.tSeconds() >= warmUpSeconds).toList();
        double slope = Double.NaN;
        if (steady.size() >= 2) {
            double mt = steady.stream().mapToDouble(Sample::tSeconds).average().orElseThrow();
            double mv = steady.stream().mapToDouble(s -> f.applyAsLong(s)).average().orElseThrow();
            double num = 0, den = 0;
            for (Sample s : steady) {
                num += (s.tSeconds() - mt) * (f.applyAsLong(s) - mv);
                den += (s.tSeconds() - mt) * (s.tSeconds() - mt);
            }
            slope = den == 0 ? Double.NaN : num / den * 600;
        }
        boolean flat = !Double.isNaN(slope) && slope <= Math.max(FLAT_FRACTION * median, FLAT_FLOOR_BYTES);
        return new Series(f.applyAsLong(valid.getFirst()), median, sorted[sorted.length - 1], f.applyAsLong(valid.getLast()), slope, flat);
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
