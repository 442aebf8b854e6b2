package dev.stoker.cli;

import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Locale;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;

/** Builds a {@link Feeder} per ladder mode from the command's options; owns the shared tokenizer. */
final class FeedFactory implements AutoCloseable {
    private final FeedOptions options;
    private final EncodeOptions encode;
    private final DatasetLocation location;
    private final SourceConfig sourceConfig;
    private final QwenTokenizer tokenizer;

    private FeedFactory(FeedOptions options, EncodeOptions encode, QwenTokenizer tokenizer) {
        this.options = options;
        this.encode = encode;
        this.tokenizer = tokenizer;
        try {
            this.location = DatasetLocation.parse(options.data);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--data: " + e.getMessage());
        }
        var b = SourceConfig.builder().region(options.s3Region).pathStyle(options.s3PathStyle)
                .fetchLatencyMillis(options.fetchLatencyMillis).maxInFlight(Math.max(options.fetchConcurrency, 1));
        if (options.s3Endpoint != null) b.endpointOverride(options.s3Endpoint);
        try {
            this.sourceConfig = b.build();
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--s3-*/--fetch-*: " + e.getMessage()); // the message never holds a credential
        }
    }

    static FeedFactory open(FeedOptions options, EncodeOptions encode) throws IOException {
        if (options.ranks < 1) throw new Main.InvalidInputException("--ranks must be at least 1");
        if (options.batch < 1) throw new Main.InvalidInputException("--batch must be at least 1");
        if (!(options.maxErrorRate >= 0 && options.maxErrorRate <= 1))
            throw new Main.InvalidInputException("--max-error-rate must be between 0 and 1, got " + options.maxErrorRate);
        return new FeedFactory(options, options.withPixelFormat(encode), Tokenizers.open(options.tokenizer));
    }

    FeedConfig config(FeedMode mode) {
        return FeedConfig.of(mode, encode, options.ranks, options.batch).withSeed(options.seed)
                .withCpuThreads(options.cpuThreads()).withFetchConcurrency(options.fetchConcurrency)
                .withPrefetch(options.prefetchBatches, options.prefetchBytes).withWarmUp(options.warmUpMillis)
                .withErrorPolicy(options.onError, options.maxErrorRate).withErrorsFile(options.errorsFile);
    }

    static FeedMode mode(String name) {
        try {
            return FeedMode.valueOf(name.trim().toUpperCase(Locale.ROOT).replace('-', '_'));
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("unknown mode '" + name + "'; expected serial, concurrent, prefetch or zero-copy");
        }
    }

    /**
     * Starts a feed in {@code mode} as a trainer server's provider; the pipeline is up when this
     * returns. ZERO_COPY gets a shared-memory store of its own, closed (and its files removed) with it.
     */
    FeedService start(String mode, long expectedBatchBytes) {
        return start(mode, expectedBatchBytes, 0, 0);
    }

    /** {@link #start(String, long)} from global step {@code startStep}, ending each rank after {@code steps} steps (0: never). */
    FeedService start(String mode, long expectedBatchBytes, long startStep, long steps) {
        return start(mode, expectedBatchBytes, startStep, steps, options.errorsFile);
    }

    /** {@link #start(String, long, long, long)} appending bad samples to {@code errorsFile} (null: none) instead of --errors-file. */
    FeedService start(String mode, long expectedBatchBytes, long startStep, long steps, java.nio.file.Path errorsFile) {
        var feedMode = mode(mode);
        ShmObjectStore store = null;
        try {
            if (feedMode == FeedMode.ZERO_COPY) {
                store = ShmObjectStore.open(storeConfig());
                // segments for each rank's buffered and in-flight batches, touched now rather than on the first steps;
                // each holds expectedBatchBytes: twice a batch of one image per sample at the pixel cap (two-image samples
                // made 138 MB batches at the reference settings; a smaller segment put a new one on the first batch's path)
                store.prewarm(expectedBatchBytes, options.ranks * (options.prefetchBatches + 2));
            }
            var feeder = Feeder.open(location, sourceConfig, config(feedMode).withErrorsFile(errorsFile), tokenizer, store, startStep);
            var reopenStore = store;
            return new FeedService(feeder, store, expectedBatchBytes, steps, at -> {
                try { // only while nothing was delivered: the errors file starts afresh with the moved pipeline
                    return Feeder.open(location, sourceConfig, config(feedMode).withErrorsFile(errorsFile).withStart(at), tokenizer, reopenStore, -1);
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
     * A cluster node's side of a job over these options: a task producer writing zero-copy batches
     * into {@code store} (the node's), reading through a source it owns. The factory (its tokenizer)
     * must stay open while the producer runs.
     */
    dev.stoker.cluster.JobFactory.Opened openTasks(ShmObjectStore store, int maxWorkers) throws IOException {
        var source = dev.stoker.source.ObjectSources.open(location, sourceConfig);
        try {
            var producer = dev.stoker.pipeline.feed.TaskProducer.start(config(FeedMode.ZERO_COPY),
                    dev.stoker.pipeline.feed.FeedSource.of(source), tokenizer, store, maxWorkers);
            return new dev.stoker.cluster.JobFactory.Opened(producer, source);
        } catch (IOException | RuntimeException e) {
            source.close();
            throw e;
        }
    }

    StoreConfig storeConfig() {
        try {
            return new StoreConfig(options.shmDir, options.shmBudgetBytes(), StoreConfig.DEFAULT_INSTANCE_NAME);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--shm-dir/--shm-budget: " + e.getMessage());
        }
    }

    @Override
    public void close() { tokenizer.close(); }
}
