package dev.stoker.pipeline.feed;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.source.mix.MixedSource;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.ClassicActorSystemProvider;
import org.apache.pekko.stream.Materializer;

/**
 * What a job's feed ({@link Feeder}) and a cluster node's task producer ({@link TaskProducer}) are assembled from alike:
 * the records of the job's sources, indexed once; the CPU pool, sized for the streams that will submit to it and warmed
 * up while the records are read; the metrics, counting per source; the job's fingerprint; and the Pekko materializer the
 * streams run on.
 *
 * <p>One actor system per process: a node hands its own in ({@link #start}'s {@code system}, the node's or the cluster
 * member's), and every feed or producer it opens, a feed reopened at another step included, runs its streams on a
 * materializer of its own made from it and shut down with it. A feed started alone (a test, a benchmark) passes none and
 * the engine starts a system of its own, closed with it.
 *
 * <p>Threading: {@link #start} blocks while the records are indexed; the CPU pool's warm-up and a system of the engine's
 * own start meanwhile on threads of their own, and {@link #awaitReady} waits for both. The accessors are safe from any
 * thread after that; {@link #close} once.
 */
public final class FeedEngine implements AutoCloseable {
    /**
     * The Pekko settings every system of a Stoker process starts from (a cluster member adds its own on top): Pekko logs
     * through SLF4J at WARNING, leaves the JVM's shutdown to the process, and streams' own stages run on a small
     * dispatcher (the work itself runs on the CPU pool).
     */
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
    private final FeedSource source;
    private final SampleRecords records;
    private final List<String> sourceNames;
    private final FeedMetrics metrics;
    private final CpuPool cpu;
    private final long fingerprint;
    private final CompletableFuture<Void> warmed;
    /** The system the streams run on: handed in, or the engine's own ({@link #ownSystem}). */
    private final CompletableFuture<? extends ClassicActorSystemProvider> system;
    private final boolean ownSystem;
    private volatile Materializer materializer;
    /** What the warm-up's rehearsal did (null inside: none ran). */
    private final java.util.concurrent.atomic.AtomicReference<FeedRehearsal.Result> rehearsal;

    /**
     * Whether the warm-up rehearses the feed's stream ({@link FeedRehearsal}) after the CPU pool's kernels, and the store a
     * zero-copy one writes into (null: the batches are assembled on the heap).
     */
    record Rehearse(dev.stoker.store.ShmObjectStore store) {}

    private FeedEngine(FeedConfig config, FeedSource source, SampleRecords records, List<String> sourceNames, FeedMetrics metrics,
                       CpuPool cpu, CompletableFuture<Void> warmed, CompletableFuture<? extends ClassicActorSystemProvider> system,
                       boolean ownSystem, java.util.concurrent.atomic.AtomicReference<FeedRehearsal.Result> rehearsal) {
        this.rehearsal = rehearsal;
        this.config = config;
        this.source = source;
        this.records = records;
        this.sourceNames = sourceNames;
        this.metrics = metrics;
        this.cpu = cpu;
        this.fingerprint = Feeder.fingerprint(records.digest(), config);
        this.warmed = warmed;
        this.system = system;
        this.ownSystem = ownSystem;
    }

    /** Pekko's settings for a Stoker process: {@link #PEKKO_CONFIG} over Pekko's reference settings. */
    public static Config pekkoConfig() {
        return ConfigFactory.parseString(PEKKO_CONFIG).withFallback(ConfigFactory.defaultReference(FeedEngine.class.getClassLoader()))
                .resolve();
    }

    /** A process's one actor system for its feeds ({@link #pekkoConfig()}); its owner terminates it. */
    public static ActorSystem newSystem(String name) { return ActorSystem.create(name, pekkoConfig()); }

    /**
     * Indexes {@code source}'s records and starts what the streams need: a CPU pool of {@code config}'s threads (that the
     * autotuner may take up to {@link FeedConfig#cpuThreadsMax()}) that
     * {@code submitters} callers may submit to at once, warmed up in the background ({@code zeroCopy}: the zero-copy
     * path's kernels too), and, when {@code system} is null, an actor system of the engine's own. The caller owns
     * {@code source}; on failure everything started here is stopped again.
     */
    static FeedEngine start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, int submitters, boolean zeroCopy,
                            ClassicActorSystemProvider system, Rehearse rehearse) throws IOException {
        var cpu = new CpuPool(config.cpuThreads(), config.cpuThreadsMax(), submitters, config.encode(), tokenizer, config.cache());
        // the pool warms up (its kernels, then, with what is left of the warm-up's time, a rehearsal of the feed's stream),
        // and a system of the engine's own starts, each on a thread of its own while the sources are indexed and the order
        // is fixed: none of them needs the records
        long warmUpMillis = config.warmUpMillis(), limit = TimeUnit.SECONDS.toMillis(FeedSource.MANIFEST_TIMEOUT_SECONDS);
        CompletableFuture<? extends ClassicActorSystemProvider> started = system != null ? CompletableFuture.completedFuture(system)
                : CompletableFuture.supplyAsync(() -> newSystem("stoker-feed"), task -> startThread(task, "stoker-feed-start"));
        var rehearsal = new java.util.concurrent.atomic.AtomicReference<FeedRehearsal.Result>();
        var warmed = CompletableFuture.runAsync(() -> {
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(warmUpMillis);
            cpu.prestart(limit);
            if (warmUpMillis <= 0) return;
            // with a rehearsal to follow, the kernels get a third of the time: the rehearsal encodes too
            cpu.warmUp(zeroCopy, rehearse != null ? warmUpMillis / 3 : warmUpMillis, limit);
            if (rehearse != null) rehearsal.set(FeedRehearsal.run(config, cpu, rehearse.store(), started, deadline));
        }, task -> startThread(task, "stoker-feed-warm-up"));
        try {
            var records = source.records();
            if (records.size() == 0) throw new IOException("manifest " + source.manifestName() + " holds no samples");
            var metrics = new FeedMetrics();
            nameSources(metrics, records, config.seed());
            var names = records instanceof MixedSource.Records mixed
                    ? mixed.sources().stream().map(SampleRecords::name).toList() : List.of(source.manifestName());
            return new FeedEngine(config, source, records, names, metrics, cpu, warmed, started, system == null, rehearsal);
        } catch (IOException | RuntimeException e) {
            stop(cpu, warmed, started, system == null);
            throw e;
        }
    }

    /** Waits for the CPU pool's warm-up and the actor system; the streams may be materialized after it. */
    void awaitReady() {
        try {
            warmed.join();
            materializer = Materializer.createMaterializer(system.join());
        } catch (CompletionException e) {
            throw e.getCause() instanceof RuntimeException r ? r : e;
        }
    }

    public FeedConfig config() { return config; }

    /** What the warm-up's rehearsal of the stream did; null when none ran (after {@link #awaitReady}). */
    FeedRehearsal.Result rehearsal() { return rehearsal.get(); }

    FeedSource source() { return source; }

    /** The job's records, numbered across its sources. */
    public SampleRecords records() { return records; }

    /** The sources' names, in the order given (one: the manifest's). */
    List<String> sourceNames() { return sourceNames; }

    FeedMetrics metrics() { return metrics; }

    CpuPool cpu() { return cpu; }

    /** The streams' materializer; after {@link #awaitReady}. */
    Materializer materializer() {
        var m = materializer;
        if (m == null) throw new IllegalStateException("the engine is not ready: awaitReady() first");
        return m;
    }

    /** What a saved position is only valid against ({@link Feeder#fingerprint()}). */
    public long fingerprint() { return fingerprint; }

    /**
     * Stops the streams' materializer (the caller has stopped its streams first), the actor system when it is the
     * engine's own (waiting at most {@link Feeder#CLOSE_TIMEOUT_SECONDS}), and the CPU pool, which waits for the samples
     * it is encoding.
     */
    @Override
    public void close() {
        var m = materializer;
        if (m != null) m.shutdown();
        stop(cpu, warmed, system, ownSystem);
    }

    private static void stop(CpuPool cpu, CompletableFuture<Void> warmed, CompletableFuture<? extends ClassicActorSystemProvider> system,
                             boolean own) {
        if (own) {
            system.handle((s, err) -> {
                if (s != null) terminate(s.classicSystem());
                return null;
            }).join();
        }
        warmed.handle((ignored, err) -> null).join();
        cpu.close();
    }

    private static void terminate(ActorSystem s) {
        s.terminate();
        try {
            s.getWhenTerminated().toCompletableFuture().get(Feeder.CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | TimeoutException e) {
            // the CPU pool is still shut down; nothing else holds resources
        }
    }

    /** Has {@code metrics} count per source of {@code records}: each of a mix, or the one. */
    static void nameSources(FeedMetrics metrics, SampleRecords records, long seed) {
        if (records instanceof MixedSource.Records mixed) {
            var mix = new SourceMix(seed, mixed.sizes(), mixed.weights());
            var names = new ArrayList<String>();
            var weights = new double[mix.sources()];
            var places = new int[mix.sources()];
            var bases = new int[mix.sources()];
            for (int i = 0; i < mix.sources(); i++) {
                names.add(mixed.sources().get(i).name());
                weights[i] = mix.weight(i);
                places[i] = mix.placesOf(i);
                bases[i] = mix.base(i);
            }
            metrics.sources(names, weights, places, bases);
        } else {
            metrics.sources(List.of(records.name()), new double[] {1}, new int[] {records.size()}, new int[] {0});
        }
    }

    private static void startThread(Runnable task, String name) {
        var t = new Thread(task, name);
        t.setDaemon(true);
        t.start();
    }
}
