package dev.stoker.node;

import dev.stoker.encode.batch.LargestBatch;
import dev.stoker.pipeline.feed.FeedEngine;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.pipeline.feed.TaskProducer;
import dev.stoker.plan.StepSchedules;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.DataSources;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.function.Consumer;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.ClassicActorSystemProvider;

/**
 * The pipelines a {@link NodeConfig} describes: a local job's feed in any mode ({@link #start}), or a
 * cluster node's task producer ({@link #openTasks}). Owns the tokenizer they share, and the data
 * set's location and source settings, checked once when it opens.
 *
 * <p>One actor system per process: every feed the node opens (a local job's, and each one it reopens when its
 * trainers move the job) runs its streams on the system handed in ({@link #open(NodeConfig, ClassicActorSystemProvider)},
 * a cluster member's) or, for a local node, on one these feeds start with the first feed and stop on {@link #close()}.
 */
public final class NodeFeeds implements AutoCloseable {
    private final NodeConfig config;
    private final List<DataSources.Spec> sources;
    private final QwenTokenizer tokenizer;
    /** The system the feeds run on: handed in, or this node's own (made by the first feed, {@link #ownSystem}). */
    private ClassicActorSystemProvider system;
    private ActorSystem ownSystem;

    private NodeFeeds(NodeConfig config, List<DataSources.Spec> sources, QwenTokenizer tokenizer, ClassicActorSystemProvider system) {
        this.config = config;
        this.sources = sources;
        this.tokenizer = tokenizer;
        this.system = system;
    }

    /** Opens the tokenizer of {@code config}; its data set must be given. The feeds run on an actor system of their own. */
    public static NodeFeeds open(NodeConfig config) throws IOException { return open(config, null); }

    /**
     * {@link #open(NodeConfig)} whose feeds run their streams on {@code system}, the process's one actor system (a cluster
     * member's; the caller owns it); null: on a system of these feeds' own.
     */
    public static NodeFeeds open(NodeConfig config, ClassicActorSystemProvider system) throws IOException {
        var sources = config.sources();
        if (sources.isEmpty()) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…)");
        for (var s : sources) {
            try {
                DatasetLocation.parse(s.data());
                if (s.imageRoot() != null) DataSources.rootLocation(s.imageRoot());
            } catch (IllegalArgumentException e) {
                throw new ConfigException("--data: " + e.getMessage());
            }
        }
        return new NodeFeeds(config, sources, tokenizer(config.get(NodeConfig.TOKENIZER)), system);
    }

    /** The actor system the feeds run on: the one handed in, else this node's own, started on first use. */
    private synchronized ClassicActorSystemProvider system() {
        if (system == null) system = ownSystem = FeedEngine.newSystem("stoker-node");
        return system;
    }

    /** Opens the job's sources. */
    private DataSources openSources() {
        return DataSources.open(sources, config.sourceConfig(), config.indexCache());
    }

    /** The tokenizer {@code file} names, or the bundled Qwen2 tokenizer when it is null. */
    public static QwenTokenizer tokenizer(Path file) throws IOException {
        if (file == null) return QwenTokenizer.bundled();
        if (!Files.isRegularFile(file)) throw new ConfigException(file + ": tokenizer file not found");
        return QwenTokenizer.load(file);
    }

    public NodeConfig config() { return config; }

    /**
     * The pack planner of a packed job of {@code config} over {@code records} and their {@code shapes}: the job's global
     * order ({@link Feeder#schedule}: seed, sources, mix), {@code --ranks} packs per step within {@code --pack-tokens} and
     * {@code --pack-patches}, balanced as {@code --balance} says by the cost model of {@link NodeConfig#packing()}, a pack
     * without an image in a step with one getting the dummy image of the job's processing
     * ({@link dev.stoker.encode.batch.DummyImage}). For the packing benchmark, which compares plannings; a job walks its
     * {@link #schedule}.
     */
    public static PackPlanner packPlanner(NodeConfig config, SampleRecords records, ShapeIndex shapes) {
        var feedConfig = config.feedConfig(FeedMode.PREFETCH);
        try {
            return StepSchedules.planner(Feeder.schedule(feedConfig, records), feedConfig.packing(), shapes, Feeder.dummyShape(feedConfig));
        } catch (IllegalArgumentException e) {
            throw new ConfigException(e.getMessage());
        }
    }

    /**
     * The steps of {@code config}'s job over {@code records} (read through {@code source}), unlabelled: batches of its order,
     * or packs planned from it with the shapes {@link #shapes} finds (validate's length index in {@code lengthsDir}, else
     * measured; {@code say} is told which). What {@code stoker plan} prints.
     */
    public static StepSchedule schedule(NodeConfig config, FeedSource source, SampleRecords records, Path lengthsDir,
                                        Consumer<String> say) throws IOException, InterruptedException {
        var feedConfig = config.feedConfig(FeedMode.PREFETCH);
        try {
            return Feeder.steps(feedConfig, records, () -> {
                try (var tokenizer = tokenizer(config.get(NodeConfig.TOKENIZER))) {
                    return shapes(config, source, records, tokenizer, lengthsDir, say);
                }
            });
        } catch (IllegalArgumentException e) {
            throw new ConfigException(e.getMessage());
        }
    }

    /**
     * The shapes of {@code records} (read from {@code source}) that a packed job of {@code config} plans with, known
     * without decoding: from the length index {@code stoker validate} wrote for these records and settings in
     * {@code lengthsDir} (null: {@link NodeConfig#lengthsDir()}), else measured in-process on {@link NodeConfig#threads()}
     * threads (validate's scan). {@code say} is told which, in one line.
     *
     * @throws IOException when a length index is there but cannot be used (corrupt, of format 1, of another size)
     */
    public static ShapeIndex shapes(NodeConfig config, FeedSource source, SampleRecords records, QwenTokenizer tokenizer, Path lengthsDir,
                                    Consumer<String> say)
            throws IOException, InterruptedException {
        Path dir = lengthsDir != null ? lengthsDir : config.lengthsDir();
        var options = config.encodeOptions();
        var loaded = dev.stoker.encode.validate.ShapeIndexes.load(dir, records, options,
                dev.stoker.encode.validate.LengthIndex.tokenizerId(config.get(NodeConfig.TOKENIZER)));
        if (loaded != null) {
            say.accept("shapes: " + records.size() + " records from stoker validate's length index in " + dir);
            return loaded;
        }
        long t0 = System.nanoTime();
        var measured = dev.stoker.encode.validate.ShapeIndexes.measure(records, source, tokenizer, options, config.threads());
        say.accept(String.format(java.util.Locale.ROOT, "shapes: %d records measured from image headers in %.1f s (no length index for "
                + "these settings in %s: stoker validate writes one)", records.size(), (System.nanoTime() - t0) / 1e9, dir));
        return measured;
    }

    /**
     * Records a header scan reads, at most, to size shared memory from the data when there is no length index: past it the
     * scan would hold up the start for minutes (validate's pace is some thousand records a second on two cores), and the
     * store is sized from the configuration's worst case; {@code stoker validate} writes an index that is read instead.
     */
    public static final int SCAN_MAX_RECORDS = 200_000;

    /**
     * The shared memory this node's store needs ({@link ShmBudget}), its largest batch taken from the data where the
     * configuration's worst case would not fit ({@link ShmBudget#worstCaseFits}) and the samples' shapes can be known
     * cheaply: from {@code stoker validate}'s length index for these records and settings ({@link NodeConfig#lengthsDir}),
     * else from a header scan of a local data set of at most {@link #SCAN_MAX_RECORDS} records (every record parsed, its
     * images' headers read, validate's scan); else the worst case, as before. A packed job's packs are bounded by
     * {@code --pack-tokens} alone. An audio family's job (issue 32) always takes its data's, from its length index (format
     * 4 keeps each clip's frames) or the scan: the worst case counts no audio feature. {@code say} is told of a scan, or why
     * the shapes stay unknown.
     *
     * @throws IOException when a length index is there but cannot be used (corrupt, of format 1, of another size)
     */
    public ShmBudget shmBudget(Consumer<String> say) throws IOException, InterruptedException {
        var worst = config.shm();
        // an audio job's worst case counts no audio features (issue 32): its clips are known only from the data
        if (config.packed() || worst.worstCaseFits() && config.audioPreset() == null) return worst;
        return fromData(worst, say);
    }

    /**
     * {@code worst} (the configuration's {@link ShmBudget}) with its largest batch taken from the data where the samples'
     * shapes can be known cheaply, as {@link #shmBudget} says; {@code worst} itself where they cannot (a packed job, no
     * index and a data set that is not local or too large to scan, or one that cannot be read: then the feed says why). An
     * audio family's job takes its clips' frames from its index or the scan, a cluster node's as a local feed's.
     * What a cluster node sizes its store by for each job it is sent.
     *
     * @throws IOException when a length index is there but cannot be used (corrupt, of format 1, of another size)
     */
    public ShmBudget fromData(ShmBudget worst, Consumer<String> say) throws IOException, InterruptedException {
        return fromData(worst, SCAN_MAX_RECORDS, say);
    }

    /** {@link #fromData(ShmBudget, Consumer)} scanning at most {@code maxScanRecords} records. */
    ShmBudget fromData(ShmBudget worst, int maxScanRecords, Consumer<String> say) throws IOException, InterruptedException {
        if (config.packed()) return worst;
        var found = dataShapes(maxScanRecords);
        if (found.largest() != null) return worst.withData(found.largest(), found.source());
        boolean audio = config.encodeOptions().audio() != null; // an audio job's index (format 4, keyed by --audio-pad) keeps its clips' frames
        String why = found.unknown() + (found.unreadable() || audio ? "" : "; stoker validate writes a length index that is read instead");
        say.accept("shared memory: the samples' shapes are unknown (" + why + "): sized from the configuration's worst case"
                + (audio && !found.unreadable() ? ", which counts no audio features: give --shm-budget if the batches' clips need more "
                        + "(docs/audio.md)" : ""));
        return worst;
    }

    /**
     * The data's largest padded batch ({@link LargestBatch#padded}) and where its shapes came from, or why they are unknown:
     * {@code unreadable} when the data set could not be read (the feed itself reports it, in its own words).
     */
    private record DataShapes(LargestBatch largest, String source, String unknown, boolean unreadable) {}

    /**
     * The data's shapes, known cheaply: from {@code stoker validate}'s length index for these records and settings
     * ({@link NodeConfig#lengthsDir}), else a header scan of a local data set of at most {@code maxScanRecords} records
     * (every record parsed, its images' headers read and its videos indexed: validate's scan); else why not.
     *
     * @throws IOException when a length index is there but cannot be used (corrupt, of format 1, of another size)
     */
    private DataShapes dataShapes(int maxScanRecords) throws IOException, InterruptedException {
        try (var opened = openSources()) {
            var feedSource = opened.feedSource();
            dev.stoker.source.SampleRecords records;
            try {
                records = feedSource.records();
            } catch (IOException | RuntimeException e) {
                return new DataShapes(null, null, "cannot read " + config.data() + ": " + e.getMessage(), true);
            }
            var options = config.encodeOptions();
            boolean repeats = sources.size() > 1; // a mix by weight may take a record twice in one step
            Path dir = config.lengthsDir();
            var index = dev.stoker.encode.validate.ShapeIndexes.load(dir, records, options,
                    dev.stoker.encode.validate.LengthIndex.tokenizerId(config.get(NodeConfig.TOKENIZER)));
            if (index != null)
                return new DataShapes(LargestBatch.padded(options, config.batch(), index, repeats), "stoker validate's length index in " + dir,
                        null, false);
            String unknown = unscannable(sources, records.size(), maxScanRecords);
            if (unknown != null) return new DataShapes(null, null, unknown, false);
            long t0 = System.nanoTime();
            var shapes = dev.stoker.encode.validate.ShapeIndexes.measure(records, feedSource, tokenizer, options, config.threads());
            return new DataShapes(LargestBatch.padded(options, config.batch(), shapes, repeats), String.format(java.util.Locale.ROOT,
                    "a header scan of %d records in %.1f s", records.size(), (System.nanoTime() - t0) / 1e9), null, false);
        }
    }

    /** Why the sources' shapes are not scanned at start (not all local, or too many records), or null when they are. */
    static String unscannable(List<DataSources.Spec> sources, long records, int maxScanRecords) {
        for (var s : sources) {
            if (!(DatasetLocation.parse(s.data()) instanceof DatasetLocation.Local)) return s.data() + " is not a local file";
            if (s.imageRoot() != null && !(DataSources.rootLocation(s.imageRoot()) instanceof DatasetLocation.Local))
                return "its images are under " + s.imageRoot() + ", not local";
        }
        if (records > maxScanRecords) return records + " records, more than the " + maxScanRecords + " a start-up header scan reads";
        return null;
    }

    /**
     * The size server and trainers prepare their buffers for: twice a batch of single-image samples at
     * the pixel cap (multi-image samples need headroom), at most the prefetch bytes.
     */
    public long expectedBatchBytes() { return Math.min(config.get(NodeConfig.PREFETCH_BYTES), 2 * config.oneBatchBytes()); }

    /**
     * The size of each segment a zero-copy store prepares at start: twice a batch of single-image samples at the pixel cap
     * (multi-image samples need headroom, as {@link #expectedBatchBytes} says), a pack at its largest; one batch under
     * {@code --shm-resident}, whose store gives pages back. A batch larger than the prepared segments makes a new one mid-epoch,
     * and first-touching its pages costs more than the batch's work on some machines (measured with the store keeping its
     * pages: the cache restart of docs/benchmarks.md, one to three images per sample, made 8 segments in its warm epoch,
     * 10–11 with segments of one batch).
     */
    static long prewarmBytes(NodeConfig config) { return prewarmBytes(config, -1); }

    /**
     * {@link #prewarmBytes(NodeConfig)}, or a video job's largest batch from its data, {@code dataBatch}
     * ({@link #videoBatchBytes}), where it is known (positive).
     */
    static long prewarmBytes(NodeConfig config, long dataBatch) {
        if (dataBatch > 0) return dataBatch;
        return config.packed() || config.get(NodeConfig.SHM_RESIDENT) != null ? config.oneBatchBytes() : 2 * config.oneBatchBytes();
    }

    /**
     * Video records a start-up scan indexes, at most, to size a video job's prepared segments where there is no length
     * index: each record's videos are indexed (validate's pace, ~57 records/s on the 2-core test VM: 512 take ~9 s).
     */
    static final int VIDEO_SCAN_MAX_RECORDS = 512;

    /**
     * A zero-copy video job's largest batch from its data, for the segments its store prepares at start ({@link #prewarmBytes}
     * and {@link #prewarmSegments}); -1 for a job without video or a packed one, or where the data's shapes are unknown. A
     * video's frames are bounded by neither {@code --max-pixels} nor {@code --max-images}, so segments prepared for batches of
     * single images held none of a video job's batches, and its store made every segment they took mid-epoch, first-touching
     * their pages on its maker thread while the fills waited (measured, docs/benchmarks.md's cache restart over 24 clips:
     * 5 segments of ~230 MB made in the warm epoch, the maker thread ~80% of a core, the warm epoch 9 samples/s against 25
     * with segments of the data's batch prepared). From {@code shm} where it holds the data's shapes, else from
     * {@code stoker validate}'s length index, else a scan of a local data set of at most {@link #VIDEO_SCAN_MAX_RECORDS}
     * records. Only the prepared segments follow: the store's budget and object limit stay as {@code shm} says.
     */
    long videoBatchBytes(ShmBudget shm, Consumer<String> say) {
        if (config.packed() || config.encodeOptions().video() == null) return -1;
        if (shm.fromData()) return shm.largestBatchBytes();
        DataShapes found;
        try {
            found = dataShapes(VIDEO_SCAN_MAX_RECORDS);
        } catch (IOException e) {
            say.accept("shared memory: segments prepared for batches of single images, not this video data's (" + e.getMessage() + ")");
            return -1;
        } catch (InterruptedException e) { // the start is being given up: the feed's opening sees the interrupt
            Thread.currentThread().interrupt();
            return -1;
        }
        if (found.largest() == null) {
            if (!found.unreadable()) // the feed itself reports an unreadable data set
                say.accept("shared memory: segments prepared for batches of single images, not this video data's (" + found.unknown()
                        + "; stoker validate writes a length index that is read instead)");
            return -1;
        }
        long worst = shm.worstCaseBatchBytes(); // bounds every batch the feed makes
        long bytes = worst < 0 ? found.largest().bytes() : Math.min(worst, found.largest().bytes());
        say.accept(String.format(java.util.Locale.ROOT, "shared memory: segments prepared for the data's largest batch, %d bytes (%s)",
                bytes, found.source()));
        return bytes;
    }

    /**
     * How many segments a zero-copy store prepares at start (each of {@link #prewarmBytes}): per local rank, as many as the
     * rank can hold at once — the batches its prefetch buffer can hold (the fewer of {@code --prefetch-batches} and
     * {@code --prefetch-bytes} over one batch at the pixel cap, {@link NodeConfig#oneBatchBytes}, at least one), the
     * {@link Feeder#BATCHES_FILLING} batches being filled and the {@link ShmBudget#LEASES_PER_TRAINER} its trainer may hold.
     * Counted from what the buffer can hold rather than from {@code --prefetch-batches} alone: every prepared byte stays
     * resident for the whole job (issue 30's memory item: 6 segments of 2 batches each were 1.2 GB of the 2.0 GB a 1-rank,
     * batch-8 job used). Fewer than a rank holds at once and the store makes the rest mid-epoch, on its maker thread, while
     * the fills wait (measured: the cache restart of docs/benchmarks.md, 5 prepared, made 2–4 more in its warm epoch, each
     * 90–330 ms of first-touched pages on the test VM, with the CPU pool idle).
     */
    static int prewarmSegments(NodeConfig config) { return prewarmSegments(config, -1); }

    /** {@link #prewarmSegments(NodeConfig)} with a video job's largest batch from its data, {@code dataBatch}, where it is known (positive). */
    static int prewarmSegments(NodeConfig config, long dataBatch) {
        long one = Math.max(1, dataBatch > 0 ? dataBatch : config.oneBatchBytes());
        long buffered = Math.max(1, Math.min(config.get(NodeConfig.PREFETCH_BATCHES), config.get(NodeConfig.PREFETCH_BYTES) / one));
        return Math.toIntExact(config.localRanks().count() * (buffered + Feeder.BATCHES_FILLING + ShmBudget.LEASES_PER_TRAINER));
    }

    /**
     * Starts the job's feed in {@code mode}, from {@code --start-step}, each rank ending after {@code --steps} (0: never),
     * bad samples appended to {@code errorsFile} (null: none); the pipeline is up when this returns. ZERO_COPY gets a
     * shared-memory store of its own, closed (and its files removed) with the ledger.
     */
    public RankLedger start(FeedMode mode, Path errorsFile) { return start(mode, errorsFile, config.shm()); }

    /**
     * {@link #start(FeedMode, Path)} whose zero-copy store has the budget of {@code shm} ({@link #shmBudget}); where its
     * largest batch is the data's, a batch past it fails the feed naming its samples
     * ({@link ShmObjectStore#limitObjects}).
     */
    public RankLedger start(FeedMode mode, Path errorsFile, ShmBudget shm) {
        var sourceConfig = config.sourceConfig();
        var feedConfig = config.feedConfig(mode).withErrorsFile(errorsFile).withCache(config.preprocessedCache());
        long expected = expectedBatchBytes();
        ShmObjectStore store = null;
        try {
            if (mode == FeedMode.ZERO_COPY) {
                store = ShmObjectStore.open(config.storeConfig(shm.budgetBytes()));
                if (shm.fromData()) store.limitObjects(shm.largestBatchBytes(), "the data's largest batch, " + shm.dataSource());
                Long resident = config.get(NodeConfig.SHM_RESIDENT);
                if (resident != null) store.limitResident(resident);
                // each rank's buffered and in-flight batches get a segment, touched now rather than on the first steps
                long dataBatch = videoBatchBytes(shm, line -> System.err.println("stoker: " + line));
                store.prewarm(prewarmBytes(config, dataBatch), prewarmSegments(config, dataBatch));
            }
            // a packed job's shapes (asked for only then): validate's length index when there is one for these settings, else
            // measured at start
            Feeder.ShapeSource shapes = (records, source) -> shapes(config, source, records, tokenizer, null,
                    line -> System.err.println("stoker: " + line));
            var feeder = Feeder.open(openSources(), feedConfig, tokenizer, store, config.startStep(), shapes, system());
            var reopenStore = store;
            return new RankLedger(feeder, store, expected, config.steps(), (at, step) -> {
                try {
                    return Feeder.open(openSources(), feedConfig.withStart(at, step), tokenizer, reopenStore, -1, shapes, system());
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        } catch (IOException e) {
            if (store != null) store.close();
            throw new UncheckedIOException(e);
        } catch (RuntimeException e) {
            if (store != null) store.close();
            throw e;
        }
    }

    /**
     * A cluster node's side of the job: a task producer writing zero-copy batches into {@code store}
     * (the node's), reading through a source of its own, at most {@code maxWorkers} workers. Closing
     * the result closes the producer, its source and these feeds.
     */
    public Tasks openTasks(ShmObjectStore store, int maxWorkers) throws IOException { return openTasks(store, maxWorkers, true); }

    /**
     * {@link #openTasks(ShmObjectStore, int)}; {@code makes} false for a member that takes no workers ({@code --slots 0}: it
     * makes no batch), which then opens no cache of preprocessed samples (it would only list the folder).
     */
    public Tasks openTasks(ShmObjectStore store, int maxWorkers, boolean makes) throws IOException {
        var source = openSources();
        try {
            // a packed job's shapes as a local feed's (start): validate's length index when there is one, else measured
            Feeder.ShapeSource shapes = (records, feedSource) -> shapes(config, feedSource, records, tokenizer, null,
                    line -> System.err.println("stoker: " + line));
            var cache = makes ? config.preprocessedCache() : null;
            var producer = TaskProducer.start(config.feedConfig(FeedMode.ZERO_COPY).withCache(cache),
                    source.feedSource(), tokenizer, store, maxWorkers, shapes, system());
            return new Tasks(producer, () -> {
                try {
                    source.close();
                } finally {
                    // a node has no status line or metrics of its own for the cache: what this job's made batches found in it
                    if (cache != null) System.err.println("stoker: " + cacheLine(cache.store().stats(), cache.store().root()));
                    close();
                }
            });
        } catch (IOException | RuntimeException e) {
            source.close();
            throw e;
        }
    }

    /**
     * The line a cluster node logs when a job's batches are done ({@code --cache on}): its cache's lookups over the job, e.g.
     * {@code "the job's cache of preprocessed samples: 12 hits, 0 misses, 0 written, 0 corrupt (--cache-dir /c)"}.
     */
    static String cacheLine(dev.stoker.cache.CacheStats s, Path dir) {
        return "the job's cache of preprocessed samples: " + s.hits() + " hits, " + s.misses() + " misses, " + s.written() + " written, "
                + s.corrupt() + " corrupt (--cache-dir " + dir + ")";
    }

    /** A task producer and what to close after it. */
    public record Tasks(TaskProducer producer, Runnable resources) implements AutoCloseable {
        @Override
        public void close() {
            try {
                producer.close();
            } finally {
                resources.run();
            }
        }
    }

    @Override
    public void close() {
        try {
            tokenizer.close();
        } finally {
            ActorSystem own;
            synchronized (this) {
                own = ownSystem;
                ownSystem = null;
            }
            if (own != null) {
                own.terminate();
                try {
                    own.getWhenTerminated().toCompletableFuture().get(Feeder.CLOSE_TIMEOUT_SECONDS, java.util.concurrent.TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
                    // its daemon threads end with the process
                }
            }
        }
    }
}
