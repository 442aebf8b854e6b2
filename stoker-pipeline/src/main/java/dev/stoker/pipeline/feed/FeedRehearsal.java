package dev.stoker.pipeline.feed;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.DataSources;
import dev.stoker.store.ShmObjectStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.stream.KillSwitches;
import org.apache.pekko.stream.javadsl.Keep;
import org.apache.pekko.actor.ClassicActorSystemProvider;
import org.apache.pekko.stream.Materializer;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;

/**
 * Runs the job's own stream — fetch from a local manifest, prepare, allocate in the store, write pixels, release — over a
 * made-up data set before the feed opens, so that the JIT has compiled the whole per-sample path, not only the CPU
 * stage's kernels ({@link CpuWarmUp}), when the first trainer asks.
 *
 * <p>Why: on the 2-core test VM a restarted service with a warm cache (every sample a cache hit) delivered its first
 * epoch of 300 samples at 200–230 samples/s and its second, in the same process, at 280–350: `-XX:+PrintCompilation`
 * over the first showed ~1,400 compilations while it ran (the Pekko stream's stages, the manifest's JSON parse, the
 * local reads, the batch writer), C1 and C2 taking a quarter of the machine, the local readers' threads mostly
 * interpreted.
 *
 * <p>Nothing of the job is touched: the records are made-up ones in a temporary folder (deleted after), read through a
 * source of their own; the pipeline counts into metrics of its own; the encoders use a throwaway cache
 * ({@link CpuPool.ScratchCache}) so the job's cache gets no entry and counts no hit; the batches go through the job's
 * store (its segments, made here, are reused by the feed) and are released at once. A rehearsal that fails is logged
 * and skipped: the feed starts as it would without it.
 */
final class FeedRehearsal {
    private static final System.Logger LOG = System.getLogger(FeedRehearsal.class.getName());
    /** The made-up data set's distinct records; the rehearsal walks them round after round. */
    static final int RECORDS = 16;
    /** At most this many samples go through (a per-sample method's first C1 compile comes after ~200 calls). */
    static final int MAX_SAMPLES = 384;
    /** How long the stream may take past the deadline to finish the samples already in it (local reads, cache hits). */
    static final long DRAIN_MILLIS = 5_000;
    /** How long giving the encoders the job's cache back may wait for a sample still being encoded. */
    static final long RESTORE_MILLIS = 120_000;

    /**
     * What a rehearsal did: the samples that went through, in how long, and why it stopped early or did not run (null: it
     * ran to its deadline or its {@link #MAX_SAMPLES}).
     */
    record Result(int samples, long millis, String failure) {}

    private FeedRehearsal() {}

    /**
     * Streams up to {@link #MAX_SAMPLES} made-up samples through {@code config}'s stream until {@code deadlineNanos}
     * ({@link System#nanoTime}): into {@code store} as the zero-copy feed writes them, or assembled on the heap when it is
     * null. Runs the streams on a materializer of its own on {@code system}'s actor system, shut down after. Never throws:
     * a failure is logged and returned.
     */
    static Result run(FeedConfig config, CpuPool cpu, ShmObjectStore store,
                      CompletableFuture<? extends ClassicActorSystemProvider> system, long deadlineNanos) {
        return run(config, cpu, store, system, deadlineNanos, MAX_SAMPLES, null);
    }

    /** {@link #run(FeedConfig, CpuPool, ShmObjectStore, CompletableFuture, long)} of at most {@code maxSamples}, its folder in {@code tmpParent} (null: the system's). */
    static Result run(FeedConfig config, CpuPool cpu, ShmObjectStore store, CompletableFuture<? extends ClassicActorSystemProvider> system,
                      long deadlineNanos, int maxSamples, Path tmpParent) {
        long t0 = System.nanoTime();
        if (config.packed() || config.encode().audio() != null) return new Result(0, 0, "not for a packed or audio job");
        if (deadlineNanos - t0 <= 0) return new Result(0, 0, "no time left after the CPU warm-up");
        Path dir = null;
        CpuPool.ScratchCache scratch = null;
        Materializer materializer = null;
        try {
            dir = tmpParent == null ? Files.createTempDirectory("stoker-rehearsal-") : Files.createTempDirectory(tmpParent, "stoker-rehearsal-");
            Path manifest = write(dir);
            materializer = Materializer.createMaterializer(system.get(DRAIN_MILLIS, TimeUnit.MILLISECONDS));
            try (var sources = DataSources.open(DatasetLocation.parse(manifest.toString()), SourceConfig.defaults())) {
                var source = sources.feedSource();
                var records = source.records();
                var metrics = new FeedMetrics();
                FeedEngine.nameSources(metrics, records, 0);
                var pipeline = new SamplePipeline(records, source, cpu, metrics, config.encode(), config.packing().padTo());
                int rank = config.localRanks().first();
                var writer = store == null ? null : new StoredBatchWriter(store, cpu, metrics, config.ranks(), rank, config.encode(), 0);
                scratch = cpu.cacheOrNull() == null ? null : CpuPool.ScratchCache.open(cpu.cacheOrNull());
                // the job's cache gets no made-up entry and counts no hit: the encoders read and write a throwaway one meanwhile
                cpu.useCacheEverywhere(scratch == null ? null : scratch.cache(), DRAIN_MILLIS);
                try {
                    int b = config.batchSize();
                    var batches = new ArrayList<ScheduledBatch>();
                    for (int i = 0, at = 0; i < Math.max(1, maxSamples / b); i++) {
                        int[] idx = new int[b];
                        for (int k = 0; k < b; k++) idx[k] = at++ % records.size();
                        batches.add(new ScheduledBatch(new ScheduleCursor(0, (long) i * b), i, i, rank, idx));
                    }
                    var steps = Source.from(batches).takeWhile(x -> System.nanoTime() - deadlineNanos < 0);
                    // few samples in flight, so that those already in the stream at the deadline finish soon after it (a
                    // job's fetch width, 64 by default, would queue a minute of work on one slow CPU thread)
                    int threads = config.cpuThreads(), fetches = Math.min(config.fetchConcurrency(), 4 * threads);
                    var counted = writer != null
                            ? steps.via(pipeline.storedFlow(fetches, threads, writer)).map(sb -> {
                                sb.release();
                                return sb.samples();
                            })
                            : steps.via(pipeline.flow(false, fetches, threads)).map(batch -> {
                                batch.discard();
                                return batch.samples();
                            });
                    long wait = Math.max(0, TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime())) + DRAIN_MILLIS;
                    var run = counted.viaMat(KillSwitches.single(), Keep.right())
                            .toMat(Sink.<Integer, Integer>fold(0, Integer::sum), Keep.both()).run(materializer);
                    try {
                        int samples = run.second().toCompletableFuture().get(wait, TimeUnit.MILLISECONDS);
                        return new Result(samples, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0), null);
                    } catch (TimeoutException | InterruptedException e) {
                        // no new sample enters; what the pool is already encoding finishes before the caches are swapped back
                        run.first().abort(e);
                        throw e;
                    }
                } finally {
                    if (writer != null) writer.close();
                    // after any sample still being encoded (each is bounded): the job's encoders must not keep the scratch cache
                    cpu.useCacheEverywhere(cpu.cacheOrNull(), RESTORE_MILLIS);
                }
            }
        } catch (Exception e) {
            if (e instanceof InterruptedException) Thread.currentThread().interrupt();
            LOG.log(System.Logger.Level.WARNING, "the feed's rehearsal stopped (the feed starts without it): " + e);
            return new Result(0, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0), String.valueOf(e));
        } finally {
            if (materializer != null) materializer.shutdown();
            if (scratch != null) scratch.close();
            if (dir != null) delete(dir);
        }
    }

    /** The made-up data set: the warm-up's generated JPEG and {@link #RECORDS} LLaVA records naming it once or twice. */
    private static Path write(Path dir) throws IOException {
        Files.write(dir.resolve("a.jpg"), CpuWarmUp.jpeg());
        var lines = new StringBuilder();
        for (int i = 0; i < RECORDS; i++) {
            String image = i % 2 == 0 ? "\"a.jpg\"" : "[\"a.jpg\", \"a.jpg\"]";
            String tags = i % 2 == 0 ? "<image>\\n" : "<image>\\n<image>\\n";
            lines.append("{\"id\": \"stoker-rehearsal-").append(i).append("\", \"image\": ").append(image)
                    .append(", \"conversations\": [{\"from\": \"human\", \"value\": \"").append(tags)
                    .append("What does this picture show, number ").append(i).append("?\"}, {\"from\": \"gpt\", \"value\": \"")
                    .append("A test pattern made by the data loader while it starts.\"}]}\n");
        }
        Path manifest = dir.resolve("rehearsal.jsonl");
        Files.writeString(manifest, lines, StandardCharsets.UTF_8);
        return manifest;
    }

    private static void delete(Path dir) {
        try (var files = Files.walk(dir)) {
            for (var f : files.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(f);
        } catch (IOException e) {
            LOG.log(System.Logger.Level.WARNING, "could not delete the rehearsal's folder " + dir + ": " + e);
        }
    }
}
