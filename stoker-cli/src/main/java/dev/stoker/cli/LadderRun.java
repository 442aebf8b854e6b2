package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.pipeline.batch.Batch;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.BatchProvider;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.Tensor;
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
    /** The feed under test: each rank's next batch. */
    interface Feed extends AutoCloseable {
        CompletableFuture<Batch> next(int rank);

        /** The pipeline's counters (written next to the trainers' reports). */
        Object metrics();

        @Override
        void close();
    }

    /** What the trainers of one mode measured. */
    record Result(String mode, int ranks, double waitRatio, double steadyWaitRatio, double samplesPerSecond,
                  double ttfbMillis, double meanWaitMillis, double meanStepMillis, long bytesReceived, long samples,
                  List<long[]> perRankWaitNanos) {}

    private static final int STEADY_SKIP_STEPS = 3;

    private LadderRun() {}

    static Result run(String mode, java.util.function.Supplier<Feed> feedFactory, int ranks, int steps, long stepMillis,
                      long expectedBatchBytes, Path workDir) throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path socket = workDir.resolve("feed-" + mode + ".sock");
        var feedRef = new java.util.concurrent.atomic.AtomicReference<Feed>();
        BatchProvider provider = new BatchProvider() {
            @Override
            public void validate(int rank, int world) {
                if (world != ranks) throw new IllegalArgumentException("world size " + world + " differs from the job's " + ranks);
                if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
            }

            @Override
            public long expectedBatchBytes() { return expectedBatchBytes; }

            @Override
            public CompletableFuture<Prepared> next(int rank) {
                return feedRef.get().next(rank).thenApply(b -> toTensors(b, ranks));
            }
        };
        var processes = new ArrayList<Process>();
        try (var server = new FeedServer(socket, provider, true)) {
            for (int r = 0; r < ranks; r++) processes.add(startTrainer(socket, r, ranks, steps, stepMillis, workDir.resolve(mode + "-rank" + r + ".json"), workDir));
            if (!server.awaitHellos(ranks, 120_000)) throw new IOException("trainer processes did not connect; see " + workDir);
            try (Feed feed = feedFactory.get()) {
                feedRef.set(feed);
                server.open();
                long timeoutMillis = 120_000 + steps * (stepMillis + 5_000L);
                for (Process p : processes) {
                    if (!p.waitFor(timeoutMillis, TimeUnit.MILLISECONDS)) throw new IOException("trainer did not finish in time; see " + workDir);
                    if (p.exitValue() != 0) throw new IOException("trainer exited with " + p.exitValue() + "; see " + workDir);
                }
                new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(workDir.resolve(mode + "-pipeline.json").toFile(), feed.metrics());
            }
        } finally {
            for (Process p : processes) p.destroyForcibly();
        }
        return summarize(mode, ranks, workDir);
    }

    static BatchProvider.Prepared toTensors(Batch b, int world) {
        int bs = b.samples(), len = b.length();
        var tensors = new ArrayList<Tensor>();
        tensors.add(Tensor.of("input_ids", b.inputIds(), bs, len));
        tensors.add(Tensor.of("labels", b.labels(), bs, len));
        tensors.add(Tensor.of("attention_mask", b.attentionMask(), bs, len));
        tensors.add(Tensor.of("position_ids", b.positionIds(), 3, bs, len));
        tensors.add(Tensor.of("pixel_values", b.pixelValues(), b.layout().pixelRows(), b.layout().pixelRowLength()));
        tensors.add(Tensor.of("image_grid_thw", b.imageGridThw(), b.layout().images(), 3));
        long[] index = new long[bs];
        for (int i = 0; i < bs; i++) index[i] = b.datasetIndices()[i];
        tensors.add(Tensor.of("sample_index", index, bs));
        return new BatchProvider.Prepared(new BatchLayout.Meta(b.epoch(), b.step(), b.rank(), world, bs), tensors);
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
