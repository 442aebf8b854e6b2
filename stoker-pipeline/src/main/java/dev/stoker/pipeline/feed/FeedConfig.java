package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.schedule.ScheduleCursor;
import java.util.Objects;

/**
 * Everything that shapes one feeding job apart from where the data comes from, validated once.
 *
 * @param mode                 the ladder rung
 * @param encode               how a sample becomes model inputs
 * @param ranks                trainer ranks R
 * @param batchSize            samples per rank per step B
 * @param seed                 seed of the sample order
 * @param start                global cursor of the first step delivered (resume point)
 * @param cpuThreads           threads of the CPU pool (decode, transform, tokenize, assemble); default: the cores
 * @param fetchConcurrency     samples whose bytes may be in flight per rank stream
 * @param prefetchBatches      per-rank buffer limit in batches (PREFETCH)
 * @param prefetchBytes        per-rank buffer limit in bytes (PREFETCH); one batch is always admitted into an empty buffer
 * @param warmUpMillis         how long each CPU thread encodes a made-up sample before the feed opens, so that the JIT
 *                             compiles the hot path before a trainer waits on it ({@link CpuWarmUp}); 0: none
 */
public record FeedConfig(FeedMode mode, EncodeOptions encode, int ranks, int batchSize, long seed, ScheduleCursor start,
                         int cpuThreads, int fetchConcurrency, int prefetchBatches, long prefetchBytes, long warmUpMillis) {
    public static final long SEED_DEFAULT = 0;
    public static final int FETCH_CONCURRENCY_DEFAULT = 32;
    public static final int PREFETCH_BATCHES_DEFAULT = 4;
    public static final long PREFETCH_BYTES_DEFAULT = 1L << 30;

    public FeedConfig {
        Objects.requireNonNull(mode, "mode");
        Objects.requireNonNull(encode, "encode");
        Objects.requireNonNull(start, "start");
        if (ranks <= 0) throw new IllegalArgumentException("ranks must be positive, got " + ranks);
        if (batchSize <= 0) throw new IllegalArgumentException("batch size must be positive, got " + batchSize);
        if (cpuThreads <= 0) throw new IllegalArgumentException("CPU threads must be positive, got " + cpuThreads);
        if (fetchConcurrency <= 0) throw new IllegalArgumentException("fetch concurrency must be positive, got " + fetchConcurrency);
        if (prefetchBatches <= 0) throw new IllegalArgumentException("prefetch batches must be positive, got " + prefetchBatches);
        if (prefetchBytes <= 0) throw new IllegalArgumentException("prefetch bytes must be positive, got " + prefetchBytes);
        if (warmUpMillis < 0) throw new IllegalArgumentException("warm-up must be >= 0 ms, got " + warmUpMillis);
    }

    /** Defaults for everything but the mode, the encoding and the rank/batch shape. */
    public static FeedConfig of(FeedMode mode, EncodeOptions encode, int ranks, int batchSize) {
        return new FeedConfig(mode, encode, ranks, batchSize, SEED_DEFAULT, ScheduleCursor.START,
                Runtime.getRuntime().availableProcessors(), FETCH_CONCURRENCY_DEFAULT, PREFETCH_BATCHES_DEFAULT,
                PREFETCH_BYTES_DEFAULT, 0);
    }

    public FeedConfig withMode(FeedMode m) {
        return new FeedConfig(m, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes, warmUpMillis);
    }

    public FeedConfig withSeed(long s) {
        return new FeedConfig(mode, encode, ranks, batchSize, s, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes, warmUpMillis);
    }

    public FeedConfig withStart(ScheduleCursor c) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, c, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes, warmUpMillis);
    }

    public FeedConfig withCpuThreads(int n) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, n, fetchConcurrency, prefetchBatches, prefetchBytes, warmUpMillis);
    }

    public FeedConfig withFetchConcurrency(int n) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, n, prefetchBatches, prefetchBytes, warmUpMillis);
    }

    public FeedConfig withPrefetch(int batches, long bytes) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, batches, bytes, warmUpMillis);
    }

    /** With a CPU warm-up of {@code millis} per thread before the feed opens (0: none). */
    public FeedConfig withWarmUp(long millis) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes, millis);
    }
}
