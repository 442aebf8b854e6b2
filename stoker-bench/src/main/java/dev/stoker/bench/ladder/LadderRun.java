package dev.stoker.bench.ladder;

import dev.stoker.bench.trainer.SimulatedTrainer;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.io.AtomicFiles;
import dev.stoker.node.RankLedger;
import dev.stoker.node.StatusLine;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.report.RunData;
import dev.stoker.transport.FeedServer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * One rung of the wait-time ladder: a feed in one mode behind a gated {@link FeedServer}, and one
 * trainer process per rank; collects what the trainers measured and writes {@code MODE-pipeline.json}
 * (docs/run-data.md) beside their reports.
 */
public final class LadderRun {
    private LadderRun() {}

    /**
     * Runs {@code mode}: starts the trainers, waits for their hellos, then starts the feed ({@code feedFactory}) and lets
     * them in, so that no mode gets a head start; returns the trainers' figures as the report summarizes them.
     */
    public static RunData.Summary run(String name, FeedMode mode, Supplier<RankLedger> feedFactory, int ranks, int steps, long stepMillis,
                                      long expectedBatchBytes, Path workDir, TrainerProcesses.Kind trainer, boolean toPixelValues)
            throws IOException, InterruptedException {
        return run(name, mode, feedFactory, ranks, steps, stepMillis, expectedBatchBytes, workDir, trainer, toPixelValues, 0, 0);
    }

    /**
     * {@link #run(String, FeedMode, Supplier, int, int, long, long, Path, TrainerProcesses.Kind, boolean)} with trainers that
     * measure their compute floor: each keeps copies of its first {@code cacheBatches} batches and replays them for
     * {@code replaySteps} steps (on top of {@code steps}) without asking the service (headspace; 0, 0: none).
     */
    public static RunData.Summary run(String name, FeedMode mode, Supplier<RankLedger> feedFactory, int ranks, int steps, long stepMillis,
                                      long expectedBatchBytes, Path workDir, TrainerProcesses.Kind trainer, boolean toPixelValues,
                                      int cacheBatches, int replaySteps) throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path socket = workDir.resolve("feed-" + name + ".sock");
        var feedRef = new AtomicReference<RankLedger>();
        boolean zeroCopy = mode == FeedMode.ZERO_COPY;
        BatchProvider provider = new BatchProvider() {
            @Override
            public void validate(int rank, int world) {
                if (world != ranks) throw new IllegalArgumentException("world size " + world + " differs from the job's " + ranks);
                if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
            }

            @Override
            public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
                return feedRef.get().join(rank, connection, resume, fingerprint); // after open(): the feed is up
            }

            @Override public long expectedBatchBytes() { return expectedBatchBytes; }

            @Override public boolean sharedMemory() { return zeroCopy; }

            @Override
            public CompletableFuture<? extends Delivery> next(int rank, long connection) { return feedRef.get().next(rank, connection); }

            @Override // the trainers' timings also reach the ledger: the pipeline file's "trainers" is the service's view of them
            public void report(int rank, long connection, long waitNanos, long stepNanos) {
                feedRef.get().report(rank, connection, waitNanos, stepNanos);
            }

            @Override
            public void reportHeadspace(int rank, long connection, long floorNanos, long replayedSteps) {
                feedRef.get().reportHeadspace(rank, connection, floorNanos, replayedSteps);
            }
        };
        var processes = new ArrayList<Process>();
        try (var server = new FeedServer(socket, provider, true)) {
            // Copy-mode trainers allocate and touch their receive buffers before they say hello, and the server
            // its send buffers before it counts them: the feed starts only then, with no head start in any mode.
            long receiveBuffer = zeroCopy ? 0 : expectedBatchBytes;
            for (int r = 0; r < ranks; r++) {
                var s = SimulatedTrainer.Settings.of(socket, r, ranks, steps, stepMillis, workDir.resolve(name + "-rank" + r + ".json"))
                        .withReceiveBuffer(receiveBuffer).withPixelValues(toPixelValues).withHeadspace(cacheBatches, replaySteps);
                processes.add(TrainerProcesses.start(trainer, s, workDir.resolve("trainer-rank" + r + ".log")));
            }
            if (!server.awaitHellos(ranks, 120_000)) throw new IOException("trainer processes did not connect; see " + workDir);
            try (RankLedger feed = feedFactory.get()) {
                feedRef.set(feed);
                server.open();
                long timeoutMillis = 120_000 + steps * (stepMillis + 5_000L) + replaySteps * (stepMillis + 1_000L);
                // on a terminal: samples/s, batches delivered of ranks·steps, buffers, skipped samples, the verdict so far, ETA
                try (var status = StatusLine.start(new PrintWriter(System.err, true), () -> StatusLine.Sample.of(feed.feeder().metrics(),
                        name + " · " + feed.feeder().verdict().kind().label(), (long) ranks * steps).withAutotune(feed.feeder()))) {
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
                var trainers = summarize(name, workDir);
                metrics.put("verdict", feed.verdict(trainers.steadyWaitRatio(), trainers.steadyTransferShare()).toJson());
                metrics.put("server", Map.of("batches_sent", server.batchesSent(), "bytes_sent", server.bytesSent(),
                        "refs_sent", server.refsSent(), "leases_held", server.leasesHeld()));
                AtomicFiles.writeJson(workDir.resolve(name + "-pipeline.json"), metrics);
            }
        } finally {
            for (Process p : processes) p.destroyForcibly();
        }
        return summarize(name, workDir);
    }

    /** What the trainers of {@code mode} measured: their reports in {@code workDir}, summarized as the report does. */
    static RunData.Summary summarize(String mode, Path workDir) throws IOException {
        for (var m : RunData.load(workDir).modes())
            if (m.name().equals(mode)) return RunData.summarize(m);
        throw new IOException("no trainer reports of mode " + mode + " in " + workDir);
    }
}
