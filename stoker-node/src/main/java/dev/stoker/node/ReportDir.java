package dev.stoker.node;

import dev.stoker.core.io.AtomicFiles;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * {@code --report-dir DIR}: a served job's run directory in the format the benchmarks leave
 * (docs/run-data.md), so that {@code stoker report DIR} renders a real job as it renders a ladder
 * mode: per rank {@code job-rank<R>.json} (the steps its trainer reported, {@link TrainerTimings#rankFile})
 * and {@code job-pipeline.json} (the node's counters, stages, timeline and verdict: what
 * {@code --metrics-file} holds). The mode is named {@value #MODE}.
 *
 * <p>The files are rewritten every {@code intervalMillis} and once more on {@link #close()}, each
 * atomically ({@link AtomicFiles#writeJson}), so that a job that is killed leaves its data up to the
 * last write and a reader never sees half a file.
 *
 * <p>Threading: one daemon thread writes; {@link #close()} waits for it, then writes the last time.
 */
public final class ReportDir implements AutoCloseable {
    /** The mode name of a served job's files. */
    public static final String MODE = "job";
    /** How often the files are rewritten while the job runs. */
    public static final long INTERVAL_MILLIS = 5000;

    private final Path dir;
    private final RankLedger ledger;
    private final Supplier<Map<String, Object>> pipeline;
    private final ScheduledExecutorService scheduler;
    private final java.util.function.Consumer<String> log;
    private volatile IOException lastFailure;

    /**
     * Writes {@code ledger}'s trainer timings and {@code pipeline} (the node's counters) into {@code dir} every
     * {@code intervalMillis}; a periodic write that fails is told to {@code log} once (until one succeeds again).
     * {@code ledger} null (a cluster job's coordinator, whose ranks' steps are on their nodes): the pipeline file only, whose
     * {@code trainers} hold every rank's and node's totals.
     */
    public ReportDir(Path dir, RankLedger ledger, Supplier<Map<String, Object>> pipeline, long intervalMillis,
                     java.util.function.Consumer<String> log) throws IOException {
        this.dir = dir;
        this.ledger = ledger;
        this.pipeline = pipeline;
        this.log = log;
        java.nio.file.Files.createDirectories(dir); // a folder that cannot be made stops the launch, not the first write
        scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            var t = new Thread(r, "stoker-report-dir");
            t.setDaemon(true);
            return t;
        });
        scheduler.scheduleWithFixedDelay(this::tick, intervalMillis, intervalMillis, TimeUnit.MILLISECONDS);
    }

    public Path dir() { return dir; }

    /** The failure of the last periodic write, or null: a full disk must not stop the job, so it is kept, not thrown. */
    public IOException lastFailure() { return lastFailure; }

    private void tick() {
        try {
            write();
            lastFailure = null;
        } catch (IOException | RuntimeException e) {
            if (lastFailure == null) log.accept("warning: --report-dir " + dir + ": cannot write the run data (" + e + "); the job goes on");
            lastFailure = e instanceof IOException io ? io : new IOException(e);
        }
    }

    /** Writes every file now. */
    public synchronized void write() throws IOException {
        if (ledger != null) {
            boolean shared = ledger.sharedMemory();
            for (var r : ledger.timings().ranks())
                AtomicFiles.writeJson(dir.resolve(MODE + "-rank" + r.rank() + ".json"), ledger.timings().rankFile(r.rank(), ledger.ranks(), shared));
        }
        AtomicFiles.writeJson(dir.resolve(MODE + "-pipeline.json"), pipeline.get());
    }

    /** Stops the periodic writes and writes the files a last time. */
    @Override
    public void close() throws IOException {
        scheduler.shutdownNow();
        try {
            scheduler.awaitTermination(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        write();
    }
}
