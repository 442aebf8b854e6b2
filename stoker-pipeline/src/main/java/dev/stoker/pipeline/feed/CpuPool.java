package dev.stoker.pipeline.feed;

import dev.stoker.core.Ticker;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.text.QwenTokenizer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The CPU stage's dedicated pool: a fixed number of threads, each owning one {@link SampleEncoder}
 * (and so one native decoder handle and its resize buffers), created on that thread at first use.
 *
 * <p>Threading: the queue is bounded at {@code capacity} (a linked queue: a packed job's bound, sized for packs of up to
 * N one-token samples, is never allocated up front); callers bound their own in-flight tasks
 * (every stream stage that submits here is a mapAsync of known parallelism), so a rejection means
 * that bound was broken and fails the stream loudly instead of queueing without limit.
 */
final class CpuPool implements AutoCloseable {
    /** How long close waits before it warns that a CPU thread is still busy (it goes on waiting, and warns again as long). */
    static final long CLOSE_WARN_NANOS = TimeUnit.SECONDS.toNanos(10);
    /** How often close looks at its clock while it waits. */
    private static final long CLOSE_POLL_MILLIS = 100;
    private final ThreadPoolExecutor executor;
    private final Ticker ticker;
    private final AtomicInteger closeWarnings = new AtomicInteger();
    /** The worker processes videos decode in; null when the job has no video or decodes in process. */
    private final dev.stoker.video.isolate.IsolatedDecoder workers;
    /** The most threads {@link #resize} may set. */
    private final int maxThreads;
    /** The cache of preprocessed samples every thread's encoder uses; null: none. */
    private final dev.stoker.encode.cache.PreprocessedCache cache;
    private volatile WarmUpCache lastWarmUpCache;

    CpuPool(int threads, int capacity, EncodeOptions options, QwenTokenizer tokenizer) {
        this(threads, threads, capacity, options, tokenizer, Ticker.system(), null);
    }

    /** A pool of {@code threads} that {@link #resize} may take to {@code maxThreads} (the autotuner's ceiling). */
    CpuPool(int threads, int maxThreads, int capacity, EncodeOptions options, QwenTokenizer tokenizer) {
        this(threads, maxThreads, capacity, options, tokenizer, Ticker.system(), null);
    }

    /** As above, with the cache of preprocessed samples every thread's encoder reads and writes (null: none). */
    CpuPool(int threads, int maxThreads, int capacity, EncodeOptions options, QwenTokenizer tokenizer,
            dev.stoker.encode.cache.PreprocessedCache cache) {
        this(threads, maxThreads, capacity, options, tokenizer, Ticker.system(), cache);
    }

    /** With the clock close measures its wait by (a test moves one by hand). */
    CpuPool(int threads, int capacity, EncodeOptions options, QwenTokenizer tokenizer, Ticker ticker) {
        this(threads, threads, capacity, options, tokenizer, ticker, null);
    }

    private CpuPool(int threads, int maxThreads, int capacity, EncodeOptions options, QwenTokenizer tokenizer, Ticker ticker,
                    dev.stoker.encode.cache.PreprocessedCache cache) {
        if (threads < 1 || maxThreads < threads)
            throw new IllegalArgumentException("CPU threads need 1 <= threads <= max, got " + threads + ", " + maxThreads);
        this.ticker = ticker;
        this.maxThreads = maxThreads;
        this.cache = cache;
        var counter = new AtomicInteger();
        // the default decode budget is the heap's half shared among the most threads this pool may have, which all decode at once
        EncodeOptions perThread = options.withDecodeMemory(options.decodeMemoryBytes(maxThreads));
        // videos decode in worker processes, one per CPU thread at most, unless the job decodes them in process
        var video = options.video();
        this.workers = video != null && video.decode() == dev.stoker.encode.video.VideoEncoding.Decode.WORKERS
                ? new dev.stoker.video.isolate.IsolatedDecoder(maxThreads, java.util.List.of()) : null;
        dev.stoker.video.decode.FrameDecoder decoder = workers != null ? workers : dev.stoker.video.decode.FrameDecoder.IN_PROCESS;
        this.executor = new ThreadPoolExecutor(threads, threads, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(capacity),
                r -> new EncoderThread(r, "stoker-cpu-" + counter.incrementAndGet(), perThread, tokenizer, decoder, cache),
                new ThreadPoolExecutor.AbortPolicy());
    }

    /**
     * Starts every thread and builds its encoder (native decoder handle, tokenizer template, resize
     * buffers) before the first sample arrives, so that start-up cost is not charged to the first batch.
     */
    void prestart(long timeoutMillis) {
        executor.prestartAllCoreThreads();
        onEveryThread(encoder -> encoder, timeoutMillis);
    }

    /**
     * Runs {@code task} once on every thread of the pool, with its encoder, all at once (each waits until all have started,
     * so that no thread takes two), and waits for all of them; their results in no particular order. For the pool's
     * set-up while no stream submits to it.
     */
    private <T> List<T> onEveryThread(Function<SampleEncoder, T> task, long timeoutMillis) {
        int threads = executor.getCorePoolSize();
        var allRunning = new CountDownLatch(threads);
        var done = new ArrayList<CompletableFuture<T>>(threads);
        for (int i = 0; i < threads; i++)
            done.add(withEncoder(encoder -> {
                allRunning.countDown();
                try {
                    allRunning.await(timeoutMillis, TimeUnit.MILLISECONDS); // one task per thread
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return task.apply(encoder);
            }));
        CompletableFuture.allOf(done.toArray(CompletableFuture[]::new)).orTimeout(timeoutMillis, TimeUnit.MILLISECONDS).join();
        return done.stream().map(CompletableFuture::join).toList();
    }

    /**
     * Has every thread encode a made-up sample for about {@code millis} ({@link CpuWarmUp}), all at
     * once; returns the rounds each thread did. {@code inPlace}: the ZERO_COPY path.
     *
     * <p>A service with a cache of preprocessed samples warms up through a throwaway one of the same codec (in a temporary
     * folder, deleted after): the first round fills it and the next read it back, so the JIT compiles the hit path too —
     * what every sample of a restarted service takes — while the service's own cache gets no made-up entry (it would only
     * take room and count as hits). Without one the pool warms up without a cache.
     */
    int[] warmUp(boolean inPlace, long millis, long timeoutMillis) {
        var sample = CpuWarmUp.create();
        ScratchCache scratch = cache == null ? null : ScratchCache.open(cache);
        try {
            return onEveryThread(encoder -> {
                encoder.useCache(scratch == null ? null : scratch.cache());
                try {
                    return sample.run(encoder, inPlace, millis, scratch == null ? CpuWarmUp.MAX_ROUNDS_DEFAULT : CpuWarmUp.MAX_ROUNDS_CACHED);
                } finally {
                    encoder.useCache(cache);
                }
            }, timeoutMillis).stream().mapToInt(Integer::intValue).toArray();
        } finally {
            if (scratch != null) {
                lastWarmUpCache = new WarmUpCache(scratch.dir(), scratch.store().stats());
                scratch.close();
            }
        }
    }

    /** The cache of preprocessed samples the threads' encoders use; null: none. */
    dev.stoker.encode.cache.PreprocessedCache cacheOrNull() { return cache; }

    /**
     * Has every thread's encoder use {@code c} (null: no cache) from now on, one task per thread at once; for a rehearsal
     * ({@link FeedRehearsal}) while no stream submits here.
     */
    void useCacheEverywhere(dev.stoker.encode.cache.PreprocessedCache c, long timeoutMillis) {
        onEveryThread(encoder -> encoder.useCache(c), timeoutMillis);
    }

    /** The last warm-up's scratch cache: its folder (deleted by then) and what it counted. */
    record WarmUpCache(java.nio.file.Path dir, dev.stoker.cache.CacheStats stats) {}

    /** The last warm-up's scratch cache, or null when it had none (tests). */
    WarmUpCache lastWarmUpCache() { return lastWarmUpCache; }

    /** A throwaway cache for the warm-up, of the service's codec, in a temporary folder that {@link #close} deletes. */
    record ScratchCache(java.nio.file.Path dir, dev.stoker.cache.SampleCache store, dev.stoker.encode.cache.PreprocessedCache cache)
            implements AutoCloseable {
        static final long BUDGET_BYTES = 64L << 20;

        /** A scratch cache like {@code of}; null (the warm-up runs without a cache) when none can be made. */
        static ScratchCache open(dev.stoker.encode.cache.PreprocessedCache of) {
            java.nio.file.Path dir = null;
            try {
                dir = java.nio.file.Files.createTempDirectory("stoker-warm-up-cache-");
                var store = dev.stoker.cache.SampleCache.open(dir, BUDGET_BYTES, dev.stoker.cache.SampleCache.LEVEL_DEFAULT,
                        of.store().compressed(), System::currentTimeMillis);
                return new ScratchCache(dir, store, new dev.stoker.encode.cache.PreprocessedCache(store));
            } catch (java.io.IOException | RuntimeException e) {
                if (dir != null) delete(dir);
                System.getLogger(CpuPool.class.getName()).log(System.Logger.Level.DEBUG, "warm-up without a scratch cache: " + e);
                return null;
            }
        }

        @Override
        public void close() {
            store.close();
            delete(dir);
        }

        private static void delete(java.nio.file.Path dir) {
            try (var files = java.nio.file.Files.walk(dir)) {
                for (var f : files.sorted(java.util.Comparator.reverseOrder()).toList()) java.nio.file.Files.deleteIfExists(f);
            } catch (java.io.IOException e) {
                System.getLogger(CpuPool.class.getName()).log(System.Logger.Level.WARNING, "could not delete the warm-up's cache " + dir + ": " + e);
            }
        }
    }

    /** Runs {@code task} with this pool thread's encoder. */
    <T> CompletableFuture<T> withEncoder(Function<SampleEncoder, T> task) {
        return CompletableFuture.supplyAsync(() -> task.apply(((EncoderThread) Thread.currentThread()).encoder()), executor);
    }

    <T> CompletableFuture<T> supply(Supplier<T> task) {
        return CompletableFuture.supplyAsync(task, executor);
    }

    int queued() { return executor.getQueue().size(); }

    /** The threads the pool runs now. */
    int threads() { return executor.getCorePoolSize(); }

    /** The most threads {@link #resize} may set. */
    int maxThreads() { return maxThreads; }

    /**
     * Runs {@code n} threads from now on (the autotuner): a new thread builds its encoder at its first task and takes queued
     * tasks at once; a thread over the count ends when it has finished its task (ThreadPoolExecutor's contract), so no
     * sample's work is cut short.
     */
    synchronized void resize(int n) {
        if (n < 1 || n > maxThreads) throw new IllegalArgumentException("CPU threads must be in [1, " + maxThreads + "], got " + n);
        if (n > executor.getMaximumPoolSize()) {
            executor.setMaximumPoolSize(n);
            executor.setCorePoolSize(n);
        } else {
            executor.setCorePoolSize(n);
            executor.setMaximumPoolSize(n);
        }
    }

    /**
     * Interrupts the threads and waits until every one has finished its sample: a thread may be
     * writing pixels into a shared-memory segment, which must not be recycled (and, after a
     * reposition, handed to the next pipeline) under it. A sample's work is bounded, so this ends;
     * every {@link #CLOSE_WARN_NANOS} of waiting it says that it is still waiting (audit #29: it used
     * to give up after the first 10 s).
     */
    @Override
    public void close() {
        executor.shutdownNow();
        boolean interrupted = false;
        long start = ticker.read(), warned = 0;
        while (true) {
            try {
                if (executor.awaitTermination(CLOSE_POLL_MILLIS, TimeUnit.MILLISECONDS)) break;
            } catch (InterruptedException e) {
                interrupted = true; // still wait: what the thread writes into must outlive it
            }
            long waited = ticker.read() - start;
            if (waited / CLOSE_WARN_NANOS > warned) {
                warned = waited / CLOSE_WARN_NANOS;
                closeWarnings.incrementAndGet();
                System.getLogger(CpuPool.class.getName()).log(System.Logger.Level.WARNING, "a CPU thread is still encoding a sample after "
                        + TimeUnit.NANOSECONDS.toMillis(waited) + " ms; waiting for it before the store is reused");
            }
        }
        if (workers != null) workers.close(); // after the threads: none still decodes through them
        if (interrupted) Thread.currentThread().interrupt();
    }

    /** Video decode worker processes started and died so far (0, 0 without them). */
    int[] videoWorkers() { return workers == null ? new int[2] : new int[] {workers.workersStarted(), workers.workersDied()}; }

    /** How often {@link #close} has said that it is still waiting. */
    int closeWarnings() { return closeWarnings.get(); }

    private static final class EncoderThread extends Thread {
        private final EncodeOptions options;
        private final QwenTokenizer tokenizer;
        private final dev.stoker.video.decode.FrameDecoder decoder;
        private final dev.stoker.encode.cache.PreprocessedCache cache;
        private SampleEncoder encoder;

        EncoderThread(Runnable r, String name, EncodeOptions options, QwenTokenizer tokenizer, dev.stoker.video.decode.FrameDecoder decoder,
                      dev.stoker.encode.cache.PreprocessedCache cache) {
            super(r, name);
            this.cache = cache;
            this.options = options;
            this.tokenizer = tokenizer;
            this.decoder = decoder;
            setDaemon(true);
        }

        SampleEncoder encoder() {
            if (encoder == null) encoder = new SampleEncoder(options, tokenizer, decoder).useCache(cache);
            return encoder;
        }
    }
}
