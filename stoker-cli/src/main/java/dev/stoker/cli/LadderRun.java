package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.report.RunData;
import dev.stoker.transport.BatchProvider;
import dev.stoker.transport.FeedServer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * One rung of the wait-time ladder: a feed in one mode, a {@link FeedServer}, and one trainer
 * process per rank; collects what the trainers measured.
 */
final class LadderRun {

    /** The Python the Python trainer runs on: Debian's, with its python3-numpy. */
    static final String PYTHON = "/usr/bin/python3";

    /**
     * Which trainer process runs per rank: the Java one ({@code stoker trainer}) or the Python client's
     * ({@code python3 -m stoker.bench_trainer}, with {@code pythonPath} on its PYTHONPATH). Both write the same report.
     * {@code toPixelValues}: the trainer turns a compact batch's {@code pixel_values_u8} into {@code pixel_values}
     * before its step (Java: {@code CompactPixels}; Python: the torch function), inside its measured wait.
     */
    record Trainer(String name, Path pythonPath, boolean toPixelValues) {
        static final Trainer JAVA = new Trainer("java", null);

        Trainer(String name, Path pythonPath) { this(name, pythonPath, false); }

        Trainer withPixelValues(boolean on) { return new Trainer(name, pythonPath, on); }

        /** {@code java} or {@code python}; the latter needs the repository's clients/python (see {@link #findPythonClient}). */
        static Trainer of(String name) {
            return switch (name.trim().toLowerCase(java.util.Locale.ROOT)) {
                case "java" -> JAVA;
                case "python" -> {
                    if (!Files.isExecutable(Path.of(PYTHON)))
                        throw new Main.InvalidInputException("--trainer python: " + PYTHON + " not found (apt-get install python3 python3-numpy)");
                    yield new Trainer("python", findPythonClient());
                }
                default -> throw new Main.InvalidInputException("--trainer must be java or python, got '" + name + "'");
            };
        }
    }

    /**
     * The folder holding the Python client's package ({@code clients/python}, which contains {@code stoker/}):
     * searched above the working directory, then above this code's jar or classes folder.
     */
    static Path findPythonClient() {
        var starts = new ArrayList<Path>();
        starts.add(Path.of("").toAbsolutePath());
        try {
            var source = LadderRun.class.getProtectionDomain().getCodeSource();
            if (source != null) starts.add(Path.of(source.getLocation().toURI()).toAbsolutePath());
        } catch (java.net.URISyntaxException | SecurityException | IllegalArgumentException e) {
            // no usable code location: the working directory only
        }
        for (Path start : starts)
            for (Path p = start; p != null; p = p.getParent()) {
                Path client = p.resolve("clients/python");
                if (Files.isRegularFile(client.resolve("stoker/__init__.py"))) return client;
            }
        throw new Main.InvalidInputException("--trainer python: cannot find the Python client (clients/python/stoker) above "
                + starts.stream().map(Path::toString).collect(java.util.stream.Collectors.joining(" or "))
                + "; run from within the Stoker repository");
    }

    private LadderRun() {}

    static RunData.Summary run(String mode, java.util.function.Supplier<FeedService> feedFactory, int ranks, int steps, long stepMillis,
                      long expectedBatchBytes, Path workDir) throws IOException, InterruptedException {
        return run(mode, feedFactory, ranks, steps, stepMillis, expectedBatchBytes, workDir, Trainer.JAVA);
    }

    static RunData.Summary run(String mode, java.util.function.Supplier<FeedService> feedFactory, int ranks, int steps, long stepMillis,
                      long expectedBatchBytes, Path workDir, Trainer trainer) throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path socket = workDir.resolve("feed-" + mode + ".sock");
        var feedRef = new java.util.concurrent.atomic.AtomicReference<FeedService>();
        BatchProvider provider = new BatchProvider() {
            @Override
            public void validate(int rank, int world) {
                if (world != ranks) throw new IllegalArgumentException("world size " + world + " differs from the job's " + ranks);
                if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
            }

            @Override
            public long expectedBatchBytes() { return expectedBatchBytes; }

            @Override
            public boolean sharedMemory() { return FeedFactory.mode(mode) == dev.stoker.pipeline.feed.FeedMode.ZERO_COPY; }

            @Override
            public CompletableFuture<? extends Delivery> next(int rank) { return feedRef.get().next(rank); }
        };
        var processes = new ArrayList<Process>();
        try (var server = new FeedServer(socket, provider, true)) {
            // Copy-mode trainers allocate and touch their receive buffers before they say hello, and the server
            // its send buffers before it counts them: the feed starts only then, with no head start in any mode.
            long receiveBuffer = FeedFactory.mode(mode) == dev.stoker.pipeline.feed.FeedMode.ZERO_COPY ? 0 : expectedBatchBytes;
            for (int r = 0; r < ranks; r++)
                processes.add(startTrainer(trainer, socket, r, ranks, steps, stepMillis, receiveBuffer,
                        workDir.resolve(mode + "-rank" + r + ".json"), workDir));
            if (!server.awaitHellos(ranks, 120_000)) throw new IOException("trainer processes did not connect; see " + workDir);
            try (FeedService feed = feedFactory.get()) {
                feedRef.set(feed);
                server.open();
                long timeoutMillis = 120_000 + steps * (stepMillis + 5_000L);
                // on a terminal: samples/s, batches delivered of ranks·steps, buffers, the verdict so far, ETA
                try (var status = StatusLine.start(new java.io.PrintWriter(System.err, true), () -> {
                    var m = feed.feeder().metrics();
                    return new StatusLine.Sample(System.nanoTime(), m.deliveredSamples(), m.deliveredBatches(), m.bufferedBatches(),
                            java.util.OptionalDouble.empty(), mode + " · " + feed.feeder().verdict().kind().label(), (long) ranks * steps);
                })) {
                    for (Process p : processes) {
                        if (!p.waitFor(timeoutMillis, TimeUnit.MILLISECONDS)) throw new IOException("trainer did not finish in time; see " + workDir);
                        var badInput = feed.feeder().errors().failure(); // the trainers got it as an ERROR frame
                        if (badInput != null) throw badInput;
                        if (p.exitValue() != 0) throw new IOException("trainer exited with " + p.exitValue() + "; see " + workDir);
                    }
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (server.leasesHeld() > 0 && System.nanoTime() < deadline) Thread.sleep(5); // the trainers' last RELEASE/BYE
                var metrics = feed.metrics();
                // the verdict with the trainers' side: how much they waited, and how much of that was transfer
                var trainers = summarize(mode, workDir);
                var verdict = feed.verdict(trainers.steadyWaitRatio(), trainers.steadyTransferShare());
                metrics.put("verdict", verdict.toJson());
                metrics.put("server", java.util.Map.of("batches_sent", server.batchesSent(), "bytes_sent", server.bytesSent(),
                        "refs_sent", server.refsSent(), "leases_held", server.leasesHeld()));
                new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(workDir.resolve(mode + "-pipeline.json").toFile(), metrics);
            }
        } finally {
            for (Process p : processes) p.destroyForcibly();
        }
        return summarize(mode, workDir);
    }

    private static Process startTrainer(Trainer trainer, Path socket, int rank, int world, int steps, long stepMillis,
                                        long receiveBuffer, Path report, Path workDir) throws IOException {
        var cmd = new ArrayList<String>();
        if (trainer.pythonPath() != null) {
            cmd.addAll(List.of(PYTHON, "-m", "stoker.bench_trainer"));
        } else {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            cmd.addAll(List.of(java, "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true",
                    "-cp", System.getProperty("java.class.path"), "dev.stoker.cli.Main", "trainer"));
            if (receiveBuffer > 0) cmd.addAll(List.of("--receive-buffer", Long.toString(receiveBuffer)));
        }
        cmd.addAll(List.of("--socket", socket.toString(), "--rank", Integer.toString(rank), "--world", Integer.toString(world),
                "--steps", Integer.toString(steps), "--step-ms", Long.toString(stepMillis), "--report", report.toString()));
        if (trainer.toPixelValues()) cmd.add("--to-pixel-values");
        Files.deleteIfExists(report);
        var pb = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(workDir.resolve("trainer-rank" + rank + ".log").toFile());
        if (trainer.pythonPath() != null) {
            String old = pb.environment().get("PYTHONPATH");
            pb.environment().put("PYTHONPATH", trainer.pythonPath() + (old == null || old.isEmpty() ? "" : java.io.File.pathSeparator + old));
            pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
        }
        return pb.start();
    }

    /** What the trainers of {@code mode} measured: their reports in {@code workDir}, summarized as the report does. */
    private static RunData.Summary summarize(String mode, Path workDir) throws IOException {
        for (var m : RunData.load(workDir).modes())
            if (m.name().equals(mode)) return RunData.summarize(m);
        throw new IOException("no trainer reports of mode " + mode + " in " + workDir);
    }

}
