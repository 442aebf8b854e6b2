package dev.stoker.pipeline.feed;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.validate.ShapeIndexes;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.ClassicActorSystemProvider;
import org.apache.pekko.stream.BoundedSourceQueue;
import org.apache.pekko.stream.Materializer;
import org.apache.pekko.stream.QueueOfferResult;
import org.apache.pekko.stream.javadsl.Keep;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;

/**
 * Produces single scheduled batches on request, into a shared-memory store: the worker side of a
 * cluster job. Where a {@link Feeder} walks each rank's schedule by itself, a task producer makes
 * exactly the batch it is asked for — (cursor, rank) — so that a coordinator can place any batch
 * on any node, and redo it elsewhere when a node dies: the batch's content depends only on the
 * manifest, the seed, the schedule shape and the encoding, never on which worker made it.
 *
 * <p>Design: each worker is one Pekko stream of the same shape as the zero-copy feed
 * ({@link SamplePipeline#storedFlow}: fetch F, prepare T, allocate, fill in place), fed through a
 * bounded queue; the stream preserves order, so a worker's results complete its requests in the
 * order they were made. Workers are made on first use and share the node's CPU pool and source.
 *
 * <p>Threading: {@link #produce} is safe from any thread; results complete on stream threads.
 */
public final class TaskProducer implements AutoCloseable {
    /** Requests a worker queues before {@link #produce} refuses more. */
    public static final int QUEUE_PER_WORKER = 64;

    private final FeedConfig config;
    /** The job's steps, unlabelled: each request names its step's cursor and the coordinator's label for it. */
    private final StepSchedule schedule;
    private final long fingerprint;
    private final FeedEngine engine;
    private final FeedMetrics metrics;
    private final Materializer materializer;
    private final SamplePipeline pipeline;
    private final StoredBatchWriter writer;
    private final int maxWorkers;
    private final ConcurrentHashMap<Integer, Worker> workers = new ConcurrentHashMap<>();
    private volatile boolean closed;

    /** One stream and the requests it has not answered yet, oldest first. */
    private final class Worker {
        final BoundedSourceQueue<ScheduledBatch> queue;
        final CompletableFuture<?> terminated;
        final ArrayDeque<CompletableFuture<StoredBatch>> waiting = new ArrayDeque<>();

        Worker() {
            var flow = pipeline.storedFlow(config.fetchConcurrency(), config.cpuThreads(), writer);
            var running = Source.<ScheduledBatch>queue(QUEUE_PER_WORKER).via(flow)
                    .toMat(Sink.foreach(this::arrived), Keep.both())
                    .run(materializer);
            this.queue = running.first();
            // on the stream's own thread as it ends, not on the common pool (PekkoFutures says why)
            this.terminated = PekkoFutures.direct(running.second())
                    .whenComplete((done, err) -> failAll(err != null ? err : new IllegalStateException("worker stream ended")));
        }

        void arrived(StoredBatch b) {
            CompletableFuture<StoredBatch> f;
            synchronized (this) {
                f = waiting.pollFirst();
            }
            if (f == null || !f.complete(b)) b.release(); // nobody waits for it any more
        }

        synchronized void failAll(Throwable err) {
            for (var f : waiting) f.completeExceptionally(err);
            waiting.clear();
        }

        CompletableFuture<StoredBatch> submit(ScheduledBatch b) {
            var f = new CompletableFuture<StoredBatch>();
            synchronized (this) {
                var result = queue.offer(b);
                if (result != QueueOfferResult.enqueued())
                    return CompletableFuture.failedFuture(new IllegalStateException("worker queue refused step "
                            + b.globalStep() + " rank " + b.rank() + ": " + result));
                waiting.addLast(f);
            }
            return f;
        }
    }

    private TaskProducer(StepSchedule schedule, FeedEngine engine, SamplePipeline pipeline, StoredBatchWriter writer, int maxWorkers) {
        this.config = engine.config();
        this.schedule = schedule;
        this.engine = engine;
        this.fingerprint = engine.fingerprint();
        this.metrics = engine.metrics();
        this.materializer = engine.materializer();
        this.pipeline = pipeline;
        this.writer = writer;
        this.maxWorkers = maxWorkers;
    }

    /**
     * Reads the manifest through {@code source}, fixes the schedule of {@code config} (its mode is ignored: batches always
     * go into {@code store}) and warms the CPU pool up; at most {@code maxWorkers} workers may be used, their streams on
     * {@code system} (the node's one actor system; null: one of the producer's own). The caller owns {@code source} and
     * {@code store}.
     */
    public static TaskProducer start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store, int maxWorkers,
                                     ClassicActorSystemProvider system) throws IOException {
        return start(config, source, tokenizer, store, maxWorkers, null, system);
    }

    /**
     * {@link #start(FeedConfig, FeedSource, QwenTokenizer, ShmObjectStore, int, ClassicActorSystemProvider)} with where a
     * packed job's shapes come from ({@code shapes}, asked only when steps are packed; null: measured here from image
     * headers): the local feed's source ({@link Feeder.ShapeSource}), so that a cluster node plans its packs from what
     * {@code stoker plan} and {@code stoker serve} plan them from.
     */
    public static TaskProducer start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store, int maxWorkers,
                                     Feeder.ShapeSource shapes, ClassicActorSystemProvider system) throws IOException {
        if (maxWorkers <= 0) throw new IllegalArgumentException("max workers must be positive, got " + maxWorkers);
        int threads = config.cpuThreads();
        int perWorker = threads + 1 + StoredBatchWriter.BATCHES_FILLING * (config.packing().samplesPerRankAtMost(config.batchSize()) + 1);
        var engine = FeedEngine.start(config, source, tokenizer, maxWorkers * perWorker + threads, true, system, null);
        var records = engine.records();
        StepSchedule schedule;
        try {
            schedule = Feeder.steps(config, records, () -> shapes != null ? shapes.shapes(records, source)
                    : ShapeIndexes.measure(records, source, tokenizer, config.encode(), threads));
            engine.awaitReady();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            engine.close();
            throw new IOException("interrupted while measuring the samples' shapes", e);
        } catch (IOException | RuntimeException e) {
            engine.close();
            throw e;
        }
        var pipeline = new SamplePipeline(records, source, engine.cpu(), engine.metrics(), config.encode(), config.packing().padTo());
        var writer = new StoredBatchWriter(store, engine.cpu(), engine.metrics(), config.ranks(), 0, config.encode(),
                config.packing().packPadTo());
        return new TaskProducer(schedule, engine, pipeline, writer, maxWorkers);
    }

    /** The job's steps, unlabelled. */
    public StepSchedule schedule() { return schedule; }

    public FeedConfig config() { return config; }

    /** The job's fingerprint, as {@link Feeder#fingerprint()} computes it: equal on every node reading the same data set. */
    public long fingerprint() { return fingerprint; }

    /** Workers made so far. */
    public int workers() { return workers.size(); }

    /**
     * Rank {@code rank}'s batch of the global step at {@code cursor}, labelled {@code globalStep} (the
     * coordinator's label, which a resized job counts on from its trainers': {@link StepSchedule#labelled}),
     * made by worker {@code worker} (made on first use) into the store; the caller owns the result and
     * releases it. Requests to one worker complete in the order they were made.
     */
    public CompletableFuture<StoredBatch> produce(int worker, ScheduleCursor cursor, long globalStep, int rank) {
        if (closed) return CompletableFuture.failedFuture(new IllegalStateException("task producer closed"));
        if (worker < 0 || worker >= maxWorkers)
            return CompletableFuture.failedFuture(new IllegalArgumentException("worker " + worker + " outside [0, " + maxWorkers + ")"));
        ScheduledBatch scheduled;
        try {
            scheduled = schedule.step(cursor, globalStep, rank);
        } catch (IllegalArgumentException e) {
            return CompletableFuture.failedFuture(e);
        }
        return workers.computeIfAbsent(worker, w -> new Worker()).submit(scheduled);
    }

    /** The pipeline's counters (fetched, encoded, stage latencies). */
    public FeedMetrics.Snapshot metrics() {
        return metrics.snapshot(List.of(), null, FeedErrors.Counts.NONE);
    }

    /** How long a closing producer lets its workers' batches in flight finish before it fails their streams. */
    static final long CLOSE_GRACE_MILLIS = 2_000;

    /** Whether every worker's stream ended before {@code deadline} ({@link System#nanoTime()}). */
    private boolean awaitWorkers(long deadline) {
        boolean all = true;
        for (var w : workers.values()) {
            try {
                w.terminated.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            } catch (ExecutionException e) {
                // ended, failed
            } catch (TimeoutException e) {
                all = false;
            }
        }
        return all;
    }

    /** Stops the workers, the CPU pool and the writer; batches not handed out are released. */
    @Override
    public void close() {
        closed = true;
        for (var w : workers.values()) {
            w.queue.complete();
            w.failAll(new IllegalStateException("task producer closed"));
        }
        // the streams stop before what they use: the CPU pool, the writer. A completed queue lets the batches in flight
        // finish; a stream stuck past the grace (a fetch that hangs) is aborted by engine.close, which shuts its materializer
        // down (its CPU work still ends in the pool, which engine.close waits for). A completed queue cannot be failed:
        // Pekko's bounded queue refuses ("The queue has already been completed"), and that refusal, thrown from here, once
        // left the engine and the writer open
        awaitWorkers(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(CLOSE_GRACE_MILLIS));
        engine.close();
        writer.close();
    }
}
