package dev.stoker.cli;

import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.batch.Batch;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;

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
        this.sourceConfig = b.build();
    }

    static FeedFactory open(FeedOptions options, EncodeOptions encode) throws IOException {
        if (options.ranks < 1) throw new Main.InvalidInputException("--ranks must be at least 1");
        if (options.batch < 1) throw new Main.InvalidInputException("--batch must be at least 1");
        return new FeedFactory(options, encode, Tokenizers.open(options.tokenizer));
    }

    FeedConfig config(FeedMode mode) {
        return FeedConfig.of(mode, encode, options.ranks, options.batch).withSeed(options.seed)
                .withCpuThreads(options.cpuThreads()).withFetchConcurrency(options.fetchConcurrency)
                .withPrefetch(options.prefetchBatches, options.prefetchBytes);
    }

    static FeedMode mode(String name) {
        try {
            return FeedMode.valueOf(name.trim().toUpperCase(Locale.ROOT).replace('-', '_'));
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("unknown mode '" + name + "'; expected serial, concurrent or prefetch");
        }
    }

    /** Starts a feed in {@code mode}; the pipeline is up when this returns. */
    LadderRun.Feed start(String mode) {
        Feeder feeder;
        try {
            feeder = Feeder.open(location, sourceConfig, config(mode(mode)), tokenizer);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return new LadderRun.Feed() {
            @Override
            public CompletableFuture<Batch> next(int rank) { return feeder.rank(rank).next(); }

            @Override
            public Object metrics() { return feeder.metrics(); }

            @Override
            public void close() { feeder.close(); }
        };
    }

    @Override
    public void close() { tokenizer.close(); }
}
