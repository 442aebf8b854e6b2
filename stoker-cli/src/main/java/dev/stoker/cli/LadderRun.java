package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
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
    /** What the trainers of one mode measured. */
    record Result(String mode, int ranks, double waitRatio, double steadyWaitRatio, double samplesPerSecond,
                  double ttfbMillis, double meanWaitMillis, double meanStepMillis, long bytesReceived, long samples,
                  List<long[]> perRankWaitNanos) {}

    private static final int STEADY_SKIP_STEPS = 3;

    private LadderRun() {}

    static Result run(String mode, java.util.function.Supplier<FeedService> feedFactory, int ranks, int steps, long stepMillis,
                      long expectedBatchBytes, Path workDir) throws IOException, InterruptedException {
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
            public boolean sharedMemory() { return feedRef.get().sharedMemory(); }

            @Override
            public CompletableFuture<? extends Delivery> next(int rank) { return feedRef.get().next(rank); }
        };
        var processes = new ArrayList<Process>();
        try (var server = new FeedServer(socket, provider, true)) {
            for (int r = 0; r < ranks; r++) processes.add(startTrainer(socket, r, ranks, steps, stepMillis, workDir.resolve(mode + "-rank" + r + ".json"), workDir));
            if (!server.awaitHellos(ranks, 120_000)) throw new IOException("trainer processes did not connect; see " + workDir);
            try (FeedService feed = feedFactory.get()) {
                feedRef.set(feed);
                server.open();
                long timeoutMillis = 120_000 + steps * (stepMillis + 5_000L);
                for (Process p : processes) {
                    if (!p.waitFor(timeoutMillis, TimeUnit.MILLISECONDS)) throw new IOException("trainer did not finish in time; see " + workDir);
                    if (p.exitValue() != 0) throw new IOException("trainer exited with " + p.exitValue() + "; see " + workDir);
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (server.leasesHeld() > 0 && System.nanoTime() < deadline) Thread.sleep(5); // the trainers' last RELEASE/BYE
                var metrics = feed.metrics();
                metrics.put("server", java.util.Map.of("batches_sent", server.batchesSent(), "bytes_sent", server.bytesSent(),
                        "refs_sent", server.refsSent(), "leases_held", server.leasesHeld()));
                new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(workDir.resolve(mode + "-pipeline.json").toFile(), metrics);
            }
        } finally {
            for (Process p : processes) p.destroyForcibly();
        }
        return summarize(mode, ranks, workDir);
    }

    private static Process startTrainer(Path socket, int rank, int world, int steps, long stepMillis, Path report, Path workDir)
            throws IOException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        var cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true",
                "-cp", System.getProperty("java.class.path"), "dev.stoker.cli.Main", "trainer",
                "--socket", socket.toString(), "--rank", Integer.toString(rank), "--world", Integer.toString(world),
                "--steps", Integer.toString(steps), "--step-ms", Long.toString(stepMillis), "--report", report.toString()));
        Files.deleteIfExists(report);
        return new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(workDir.resolve("trainer-rank" + rank + ".log").toFile()).start();
    }

    private static Result summarize(String mode, int ranks, Path workDir) throws IOException {
        var mapper = new ObjectMapper();
        long wait = 0, compute = 0, steadyWait = 0, steadyCompute = 0, bytes = 0, samples = 0, steps = 0;
        double maxElapsedMillis = 0, ttfb = 0;
        var perRank = new ArrayList<long[]>();
        for (int r = 0; r < ranks; r++) {
            JsonNode rep = mapper.readTree(workDir.resolve(mode + "-rank" + r + ".json").toFile());
            maxElapsedMillis = Math.max(maxElapsedMillis, rep.get("elapsed_ms").asDouble());
            bytes += rep.get("bytes_received").asLong();
            JsonNode st = rep.get("steps");
            long[] waits = new long[st.size()];
            for (int i = 0; i < st.size(); i++) {
                long w = st.get(i).get(0).asLong(), c = st.get(i).get(1).asLong();
                waits[i] = w;
                wait += w;
                compute += c;
                samples += st.get(i).get(3).asLong();
                steps++;
                if (i >= STEADY_SKIP_STEPS) { steadyWait += w; steadyCompute += c; }
            }
            if (waits.length > 0) ttfb = Math.max(ttfb, waits[0] / 1e6);
            perRank.add(waits);
        }
        return new Result(mode, ranks, ratio(wait, compute), ratio(steadyWait, steadyCompute),
                samples / (maxElapsedMillis / 1000.0), ttfb, steps == 0 ? 0 : wait / 1e6 / steps,
                steps == 0 ? 0 : (wait + compute) / 1e6 / steps, bytes, samples, perRank);
    }

    private static double ratio(long wait, long compute) {
        return wait + compute == 0 ? 0 : (double) wait / (wait + compute);
    }
}
