package dev.stoker.pipeline.feed;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.plan.pack.Packing;
import java.nio.file.Path;
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
 * @param warmUpMillis         how long the warm-up before the feed opens may take, so that the JIT compiles the hot path
 *                             before a trainer waits on it: each CPU thread encodes a made-up sample ({@link CpuWarmUp}, a
 *                             third of it when a rehearsal follows), then the feed's stream runs over a made-up data set
 *                             ({@link FeedRehearsal}); 0: none
 * @param onError              what a bad sample does: SKIP (default) leaves it out of its batch, FAIL stops the feed at
 *                             the first error; filtered samples (over {@code --max-seq-len}, {@code --max-images}) are
 *                             left out under both
 * @param maxErrorRate         under SKIP, the share of errors (of the samples scheduled in delivered batches, all ranks,
 *                             since the job started; filtered samples not counted) above which the feed fails; judged
 *                             from {@link FeedErrors#MIN_SCHEDULED_FOR_RATE} scheduled samples on, so that a bad sample
 *                             among the first few does not end a run, and at once when the first
 *                             {@link FeedErrors#EARLY_SAMPLES} samples all fail; {@link #MAX_ERROR_RATE_DEFAULT} by
 *                             default; 1: no limit, not even the early one
 * @param errorsFile           JSON Lines file every bad sample is appended to ({@code docs/run-data.md}); null: none
 * @param startLabel           the global-step label of the step at {@code start} (a trainer's own count, kept across a
 *                             change of rank count: {@link dev.stoker.plan.schedule.SampleSchedule#labelled}); −1: steps
 *                             are counted from the schedule's origin
 * @param localRanks           the ranks this feed builds rank feeds for (a node of a multi-node job serves its own); the
 *                             schedule is {@code ranks}' all the same, so rank r gets the same batches on any node
 * @param packing              whether and how a step's samples are packed, one row per rank ({@link Packing#OFF}: a
 *                             batch of {@code batchSize} padded samples per rank, as before)
 * @param autotune             whether {@link dev.stoker.tune.Autotuner} sets the CPU threads, the fetch concurrency and
 *                             the prefetch depth while the feed runs, starting from the values above and within
 *                             {@link #cpuThreadsMax()}, {@link #fetchConcurrencyMax()} and {@link #prefetchBatchesMax()}
 *                             ({@code --autotune on}, the default); off, they are pinned
 * @param cache                the cache of preprocessed samples the CPU threads read and write; null: none. It changes
 *                             no byte of any batch (an entry is what decoding gives), so it is not part of the fingerprint
 */
public record FeedConfig(FeedMode mode, EncodeOptions encode, int ranks, int batchSize, long seed, ScheduleCursor start,
                         int cpuThreads, int fetchConcurrency, int prefetchBatches, long prefetchBytes, long warmUpMillis,
                         ErrorPolicy onError, double maxErrorRate, Path errorsFile, long startLabel,
                         RankRange localRanks, Packing packing, boolean autotune, dev.stoker.encode.cache.PreprocessedCache cache) {
    public static final long SEED_DEFAULT = 1234;
    public static final int FETCH_CONCURRENCY_DEFAULT = 64;
    public static final long WARM_UP_MILLIS_DEFAULT = 3000;
    /**
     * The default limit on the share of broken samples: 10%. Web-scraped image sets commonly lose a few percent of
     * their images, which must not end a run (nor the noise of the first 100 samples: at 5% broken, 11 or more of 100
     * happen about one time in a hundred); more than one in ten is a systemic fault (a wrong folder, a lost shard, a
     * manifest of another layout) that would train on a fraction of the data or on none.
     */
    public static final double MAX_ERROR_RATE_DEFAULT = 0.1;
    public static final int PREFETCH_BATCHES_DEFAULT = 4;
    /**
     * A rank's prefetch buffer in bytes unless given: 128 MiB, one batch of 8 images at 451,584 pixels in float32 (87 MB)
     * or several smaller ones; the batches being filled and the trainer's lease come on top. A zero-copy batch's bytes are
     * shared memory held until the trainer has read it, so the buffer's bytes are the job's memory; a deeper buffer only
     * absorbs jitter, and a trainer that waits is waiting on an empty buffer anyway (issue 30's memory item: 1 GiB let a
     * rank keep four such batches; docs/benchmarks.md, "Memory against the peers").
     */
    public static final long PREFETCH_BYTES_DEFAULT = 128L << 20;
    /**
     * A node's feed ({@code serve}, {@code node}, {@code launch}, {@code bench ladder}) is tuned unless told: the knobs given are
     * starting points. A feed built in code ({@link #of}) is pinned unless {@link #withAutotune} says otherwise.
     */
    public static final boolean AUTOTUNE_DEFAULT = true;
    /**
     * The most fetches in flight per rank stream the tuner goes to (or the one given, when more): the pinned default, so
     * that a tuned feed never holds more fetched samples than a pinned one with the defaults. A fetch stage as wide as 256
     * per rank kept up to 256 fetched samples per rank waiting for the CPU: a 2-rank serve of 600 KB images ran out of a
     * 512 MB heap within seconds (HostileTrainerServeTest).
     */
    public static final int FETCH_CONCURRENCY_TUNED_MAX = FETCH_CONCURRENCY_DEFAULT;
    /** The most prefetch batches per rank the tuner goes to (or the one given, when more); bytes stay bounded by prefetchBytes. */
    public static final int PREFETCH_BATCHES_TUNED_MAX = 16;

    public FeedConfig {
        Objects.requireNonNull(mode, "mode");
        Objects.requireNonNull(encode, "encode");
        Objects.requireNonNull(start, "start");
        Objects.requireNonNull(onError, "onError");
        Objects.requireNonNull(localRanks, "localRanks");
        Objects.requireNonNull(packing, "packing");
        if (ranks <= 0) throw new IllegalArgumentException("ranks must be positive, got " + ranks);
        if (localRanks.last() >= ranks)
            throw new IllegalArgumentException("local ranks " + localRanks + " outside the world's ranks 0-" + (ranks - 1));
        if (batchSize <= 0) throw new IllegalArgumentException("batch size must be positive, got " + batchSize);
        if (cpuThreads <= 0) throw new IllegalArgumentException("CPU threads must be positive, got " + cpuThreads);
        if (fetchConcurrency <= 0) throw new IllegalArgumentException("fetch concurrency must be positive, got " + fetchConcurrency);
        if (prefetchBatches <= 0) throw new IllegalArgumentException("prefetch batches must be positive, got " + prefetchBatches);
        if (prefetchBytes <= 0) throw new IllegalArgumentException("prefetch bytes must be positive, got " + prefetchBytes);
        if (warmUpMillis < 0) throw new IllegalArgumentException("warm-up must be >= 0 ms, got " + warmUpMillis);
        if (!(maxErrorRate >= 0 && maxErrorRate <= 1))
            throw new IllegalArgumentException("max error rate must be in [0, 1], got " + maxErrorRate);
    }

    /**
     * Defaults for everything but the mode, the encoding and the rank/batch shape (the node's defaults, defined here once):
     * bad samples skipped up to {@link #MAX_ERROR_RATE_DEFAULT} of them, no errors file, knobs pinned (no autotune).
     */
    public static FeedConfig of(FeedMode mode, EncodeOptions encode, int ranks, int batchSize) {
        return new FeedConfig(mode, encode, ranks, batchSize, SEED_DEFAULT, ScheduleCursor.START,
                Runtime.getRuntime().availableProcessors(), FETCH_CONCURRENCY_DEFAULT, PREFETCH_BATCHES_DEFAULT,
                PREFETCH_BYTES_DEFAULT, WARM_UP_MILLIS_DEFAULT, ErrorPolicy.SKIP, MAX_ERROR_RATE_DEFAULT, null, -1, RankRange.all(ranks),
                Packing.OFF, false, null);
    }

    public FeedConfig withMode(FeedMode m) {
        return new FeedConfig(m, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    public FeedConfig withSeed(long s) {
        return new FeedConfig(mode, encode, ranks, batchSize, s, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    /** Starting at {@code c}, steps counted from the origin. */
    public FeedConfig withStart(ScheduleCursor c) { return withStart(c, -1); }

    /** Starting at {@code c}, whose step is labelled {@code label} (−1: counted from the origin). */
    public FeedConfig withStart(ScheduleCursor c, long label) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, c, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, label, localRanks, packing, autotune, cache);
    }

    public FeedConfig withCpuThreads(int n) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, n, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    public FeedConfig withFetchConcurrency(int n) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, n, prefetchBatches, prefetchBytes, warmUpMillis,
                onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    public FeedConfig withPrefetch(int batches, long bytes) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, batches, bytes, warmUpMillis,
                onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    /** With a CPU warm-up of {@code millis} per thread before the feed opens (0: none). */
    public FeedConfig withWarmUp(long millis) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                millis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    /** With bad samples handled by {@code policy}; under SKIP the feed fails above {@code maxRate} errors (1: never). */
    public FeedConfig withErrorPolicy(ErrorPolicy policy, double maxRate) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, policy, maxRate, errorsFile, startLabel, localRanks, packing, autotune, cache);
    }

    /** Building rank feeds for {@code local} only, of the same world and schedule. */
    public FeedConfig withLocalRanks(RankRange local) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, local, packing, autotune, cache);
    }

    /** With every bad sample appended to {@code file} as one JSON line (null: no file). */
    public FeedConfig withErrorsFile(Path file) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, file, startLabel, localRanks, packing, autotune, cache);
    }

    /** Packed: each step's samples planned into one row per rank as {@code p} says ({@link Packing#OFF}: not packed). */
    public FeedConfig withPacking(Packing p) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, p, autotune, cache);
    }

    /** With the cache of preprocessed samples {@code c} (null: none). */
    public FeedConfig withCache(dev.stoker.encode.cache.PreprocessedCache c) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, autotune, c);
    }

    /** With the knobs tuned while the feed runs ({@code on}) or pinned ({@code off}). */
    public FeedConfig withAutotune(boolean on) {
        return new FeedConfig(mode, encode, ranks, batchSize, seed, start, cpuThreads, fetchConcurrency, prefetchBatches, prefetchBytes,
                warmUpMillis, onError, maxErrorRate, errorsFile, startLabel, localRanks, packing, on, cache);
    }

    /**
     * The most CPU threads the feed may run: the cores, or the threads given when more; off autotune, the threads given.
     * The CPU pool is sized (its queue, its per-thread decode memory, its video workers) for this many.
     */
    public int cpuThreadsMax() { return autotune ? Math.max(cpuThreads, Runtime.getRuntime().availableProcessors()) : cpuThreads; }

    /** The most fetches in flight per rank stream: {@link #FETCH_CONCURRENCY_TUNED_MAX}, or the concurrency given when more or off autotune. */
    public int fetchConcurrencyMax() { return autotune ? Math.max(fetchConcurrency, FETCH_CONCURRENCY_TUNED_MAX) : fetchConcurrency; }

    /** The most prefetch batches per rank: {@link #PREFETCH_BATCHES_TUNED_MAX}, or the depth given when more or off autotune. */
    public int prefetchBatchesMax() { return autotune ? Math.max(prefetchBatches, PREFETCH_BATCHES_TUNED_MAX) : prefetchBatches; }

    /** Whether steps are packed ({@code --pack-tokens N}, N > 0); then {@link #batchSize} does not apply. */
    public boolean packed() { return packing.on(); }
}
