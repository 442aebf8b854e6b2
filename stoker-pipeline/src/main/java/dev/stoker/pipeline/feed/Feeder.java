package dev.stoker.pipeline.feed;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.stoker.pipeline.JsonlManifest;
import dev.stoker.pipeline.schedule.SampleSchedule;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.SourceMetrics;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import dev.stoker.pipeline.schedule.ScheduledBatch;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.stream.Materializer;

/**
 * One feeding job: reads the manifest once, fixes the schedule, and hands each trainer rank a
 * {@link RankFeed} that yields that rank's batches in the mode of {@link FeedConfig#mode()}.
 *
 * <p>Design: the three modes differ only in how far work may run ahead; they share one
 * {@link SamplePipeline} (parse + fetch, encode, assemble) and one Pekko stream shape, so that they
 * yield identical batches. The sample order comes from the {@link SampleSchedule}, and each
 * stream preserves order (mapAsync, never mapAsyncUnordered), so thread timing never changes a batch.
 * PREFETCH runs one stream per rank rather than one shared graph fanned out: with a fan-out, one
 * rank that stops reading would back-pressure the shared upstream and stall every other rank; with
 * a stream per rank, a stalled rank holds only its own buffer. The ranks share the CPU pool and
 * the source's bounded connections.
 *
 * <p>Threading: {@link #start} blocks until the manifest is read and the streams are up; the
 * feeder is then safe to use from any thread. It owns the source only when it opened it ({@link #open}).
 */
public final class Feeder implements AutoCloseable {
    public static final long MANIFEST_TIMEOUT_SECONDS = 300;
    public static final long CLOSE_TIMEOUT_SECONDS = 10;

    private static final String PEKKO_CONFIG = """
            pekko {
              loggers = ["org.apache.pekko.event.slf4j.Slf4jLogger"]
              logging-filter = "org.apache.pekko.event.slf4j.Slf4jLoggingFilter"
              loglevel = "WARNING"
              stdout-loglevel = "OFF"
              log-dead-letters = off
              log-dead-letters-during-shutdown = off
              daemonic = on
              jvm-shutdown-hooks = off
              coordinated-shutdown.run-by-jvm-shutdown-hook = off
              actor.default-dispatcher.fork-join-executor {
                parallelism-min = 2
                parallelism-max = 4
              }
            }
            """;

    private final FeedConfig config;
    private final SampleSchedule schedule;
    private final FeedMetrics metrics;
    private final FeedErrors errors;
    private final CpuPool cpu;
    private final ActorSystem system;
    private final List<RankFeed> ranks;
    private final ObjectSource ownedSource;

    private Feeder(FeedConfig config, SampleSchedule schedule, FeedMetrics metrics, FeedErrors errors, CpuPool cpu,
                   ActorSystem system, List<RankFeed> ranks, ObjectSource ownedSource) {
        this.ownedSource = ownedSource;
        this.config = config;
        this.schedule = schedule;
        this.metrics = metrics;
        this.errors = errors;
        this.cpu = cpu;
        this.system = system;
        this.ranks = ranks;
    }

    /**
     * Opens the data set at {@code location} (local or S3) with {@code sourceConfig} and starts a
     * feed over it; the feeder owns that source and closes it on {@link #close()}.
     */
    public static Feeder open(DatasetLocation location, SourceConfig sourceConfig, FeedConfig config, QwenTokenizer tokenizer)
            throws IOException {
        var source = ObjectSources.open(location, sourceConfig);
        try {
            return start(config, FeedSource.of(source), tokenizer, source);
        } catch (IOException | RuntimeException e) {
            source.close();
            throw e;
        }
    }

    /** Reads the manifest through {@code source}, builds the schedule and starts the pipeline (PREFETCH streams run at once). */
    public static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer) throws IOException {
        return start(config, source, tokenizer, null);
    }

    private static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ObjectSource owned) throws IOException {
        List<JsonlManifest.Line> lines = JsonlManifest.split(source.manifestName(), readManifest(source));
        if (lines.isEmpty()) throw new IOException("manifest " + source.manifestName() + " holds no samples");
        var schedule = new SampleSchedule(config.seed(), lines.size(), config.ranks(), config.batchSize());
        var iterators = new ArrayList<Iterator<ScheduledBatch>>(config.ranks());
        for (int r = 0; r < config.ranks(); r++) iterators.add(schedule.iterator(config.start(), r));
        var metrics = new FeedMetrics();
        var errors = new FeedErrors();
        int threads = config.cpuThreads();
        var cpu = new CpuPool(threads, config.ranks() * (threads + 1) + threads, config.encode(), tokenizer);
        ActorSystem system;
        try {
            cpu.prestart(TimeUnit.SECONDS.toMillis(MANIFEST_TIMEOUT_SECONDS));
            system = ActorSystem.create("stoker-feed", pekkoConfig());
        } catch (RuntimeException e) {
            cpu.close();
            throw e;
        }
        var materializer = Materializer.createMaterializer(system);
        var pipeline = new SamplePipeline(lines, source, cpu, metrics);
        var flow = pipeline.flow(config.batchSize(), config.mode() == FeedMode.SERIAL, config.fetchConcurrency(), threads);
        long startNanos = System.nanoTime();
        var feeds = new ArrayList<RankFeed>(config.ranks());
        for (int r = 0; r < config.ranks(); r++) {
            var state = new RankState(r, startNanos, metrics, errors);
            feeds.add(config.mode() == FeedMode.PREFETCH
                    ? new PrefetchRankFeed(state, iterators.get(r), flow, materializer,
                            new PrefetchBuffer(config.prefetchBatches(), config.prefetchBytes(), RankFeed.MAX_OUTSTANDING_REQUESTS))
                    : new OnDemandRankFeed(state, iterators.get(r), flow, materializer));
        }
        return new Feeder(config, schedule, metrics, errors, cpu, system, List.copyOf(feeds), owned);
    }

    private static byte[] readManifest(FeedSource source) throws IOException {
        try {
            return source.fetchManifest().get(MANIFEST_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            throw new IOException("cannot read manifest " + source.manifestName() + ": " + e.getCause(), e.getCause());
        } catch (TimeoutException e) {
            throw new IOException("manifest " + source.manifestName() + " not read within " + MANIFEST_TIMEOUT_SECONDS + " s", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while reading manifest " + source.manifestName(), e);
        }
    }

    private static Config pekkoConfig() {
        return ConfigFactory.parseString(PEKKO_CONFIG).withFallback(ConfigFactory.defaultReference(Feeder.class.getClassLoader())).resolve();
    }

    public FeedConfig config() { return config; }

    public SampleSchedule schedule() { return schedule; }

    /** Samples in the manifest (non-blank lines). */
    public int datasetSize() { return schedule.datasetSize(); }

    /** Rank {@code rank}'s feed; the same instance on every call. */
    public RankFeed rank(int rank) {
        if (rank < 0 || rank >= ranks.size()) throw new IllegalArgumentException("rank " + rank + " outside [0, " + ranks.size() + ")");
        return ranks.get(rank);
    }

    public FeedErrors errors() { return errors; }

    /** The object source's counters when this feeder opened it ({@link #open}), else empty. */
    public Optional<SourceMetrics> sourceMetrics() {
        return Optional.ofNullable(ownedSource).map(ObjectSource::metrics);
    }

    public FeedMetrics.Snapshot metrics() {
        var perRank = new ArrayList<FeedMetrics.Rank>(ranks.size());
        for (var r : ranks)
            perRank.add(r instanceof PrefetchRankFeed p ? p.snapshot() : ((OnDemandRankFeed) r).snapshot());
        return metrics.snapshot(perRank);
    }

    /** Stops every rank's stream, the Pekko system and the CPU pool, waiting at most {@link #CLOSE_TIMEOUT_SECONDS} for each. */
    @Override
    public void close() {
        for (var r : ranks) r.close();
        system.terminate();
        try {
            system.getWhenTerminated().toCompletableFuture().get(CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | TimeoutException e) {
            // the CPU pool is still shut down below; nothing else holds resources
        }
        cpu.close();
        if (ownedSource != null) ownedSource.close();
    }
}
