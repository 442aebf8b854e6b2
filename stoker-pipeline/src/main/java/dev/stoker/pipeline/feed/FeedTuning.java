package dev.stoker.pipeline.feed;

import dev.stoker.tune.Autotuner;
import dev.stoker.tune.Decision;
import dev.stoker.tune.Knob;
import dev.stoker.tune.Knobs;
import dev.stoker.tune.Observation;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * A running feed's autotuning ({@code --autotune on}): its knobs as the {@link Autotuner} moves them — the CPU pool's
 * threads ({@link CpuPool#resize}), each rank stream's fetch permits ({@link FetchGate}) and each rank's prefetch depth
 * ({@link PrefetchBuffer#maxBatches(int)}) — and the thread that ticks the tuner every {@link #TICK_MILLIS} ms with the
 * feed's counters ({@link FeedMetrics}: samples delivered, the time trainers waited for them, CPU threads busy, fetches in
 * flight, the buffers' state).
 *
 * <p>Bounds: threads within {@link FeedConfig#cpuThreadsMax()} (the cores), fetches within
 * {@link FeedConfig#fetchConcurrencyMax()} (the width the streams were built with), prefetch within
 * {@link FeedConfig#prefetchBatchesMax()}; the bytes a rank buffers stay within {@link FeedConfig#prefetchBytes()} and, in
 * ZERO_COPY, the store's budget, whatever the depth. A mode without buffers (SERIAL, CONCURRENT) has a fixed prefetch
 * depth; SERIAL a fixed fetch concurrency of one.
 *
 * <p>Threading: one tuning thread calls {@link #tick}; {@link #decisions}, {@link #summary}, {@link #toJson} and
 * {@link #knob} from any thread.
 */
public final class FeedTuning implements AutoCloseable {
    /** How often the tuner reads the feed. */
    public static final long TICK_MILLIS = 500;
    private static final System.Logger LOG = System.getLogger(FeedTuning.class.getName());

    private final FeedConfig config;
    private final FeedMetrics metrics;
    private final CpuPool cpu;
    private final List<FetchGate> gates;
    private final List<PrefetchBuffer<?>> buffers;
    private final FeedKnobs knobs = new FeedKnobs();
    private final Map<Knob, Integer> start = new LinkedHashMap<>();
    private volatile Autotuner tuner;
    private ScheduledExecutorService ticker; // guarded by this; null when ticked by hand or closed

    FeedTuning(FeedConfig config, FeedMetrics metrics, CpuPool cpu, List<FetchGate> gates, List<PrefetchBuffer<?>> buffers) {
        this.config = config;
        this.metrics = metrics;
        this.cpu = cpu;
        this.gates = List.copyOf(gates);
        this.buffers = List.copyOf(buffers);
        for (var k : Knob.values()) start.put(k, knobs.get(k));
        this.tuner = new Autotuner(knobs, policy(config), FeedTuning::log);
    }

    /**
     * {@link Autotuner.Policy#DEFAULT} with blocks of at least four steps of this feed's ranks' batches (a packed job's vary:
     * time alone), so that a block's rate is not mostly the rounding of whole batches.
     */
    static Autotuner.Policy policy(FeedConfig config) {
        return Autotuner.Policy.DEFAULT.withBlockSamples(config.packed() ? 0 : 4L * config.batchSize() * config.localRanks().count());
    }

    /** Starts ticking the tuner on a daemon thread every {@link #TICK_MILLIS} ms. */
    synchronized void startTicking() {
        ticker = Executors.newSingleThreadScheduledExecutor(r -> {
            var t = new Thread(r, "stoker-feed-autotune");
            t.setDaemon(true);
            return t;
        });
        ticker.scheduleAtFixedRate(() -> {
            try {
                tick(System.nanoTime());
            } catch (RuntimeException e) { // a tuner that breaks leaves the knobs where they are; the feed goes on
                LOG.log(System.Logger.Level.WARNING, "autotune tick failed: " + e, e);
            }
        }, TICK_MILLIS, TICK_MILLIS, TimeUnit.MILLISECONDS);
    }

    /**
     * Stops the tuning thread, puts the knobs back where the feed started and from now on tunes only when {@link #tick} is
     * called, with {@code policy}: a test drives it with its own clock.
     */
    void tickByHand(Autotuner.Policy policy) {
        stopTicking();
        for (var e : start.entrySet()) knobs.set(e.getKey(), e.getValue());
        tuner = new Autotuner(knobs, policy, FeedTuning::log);
    }

    /** One tick at {@code nanos} (a monotonic clock): the feed's counters now, to the tuner. */
    void tick(long nanos) { tuner.observe(observe(nanos)); }

    private Observation observe(long nanos) {
        boolean anyFull = false, allEmpty = !buffers.isEmpty();
        for (var b : buffers) {
            long[] s = b.state();
            anyFull |= s[2] != 0;
            allEmpty &= s[0] == 0;
        }
        return new Observation(nanos, metrics.deliveredSamples.sum(), metrics.deliverWaitNanos.sum(), config.localRanks().count(),
                Math.max(0, metrics.cpuBusyNow()), metrics.fetchInFlight(), anyFull, allEmpty);
    }

    /** The knob's value now. */
    public int knob(Knob k) { return knobs.get(k); }

    /** The knob's value when the feed started (what the command line or the defaults gave). */
    public int startValue(Knob k) { return start.get(k); }

    /** The tuner's decisions so far, in order. */
    public List<Decision> decisions() { return tuner.decisions(); }

    public int kept() { return tuner.kept(); }

    public int rolledBack() { return tuner.rolledBack(); }

    /** One line for the status line: the knobs now, the decisions so far, what the tuner is doing and its last decision. */
    public String summary() {
        var all = decisions();
        if (all.isEmpty()) return tuner.summary();
        var d = all.getLast();
        return tuner.summary() + "; last " + d.knob().option() + " " + d.from() + "→" + d.to() + " " + d.outcome();
    }

    /** The {@code autotune} object of {@code docs/run-data.md}: the knobs at the start and now, and every decision. */
    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        m.put("enabled", true);
        var first = new LinkedHashMap<String, Object>();
        var now = new LinkedHashMap<String, Object>();
        for (var k : Knob.values()) {
            first.put(k.option(), start.get(k));
            now.put(k.option(), knobs.get(k));
        }
        m.put("start", first);
        m.put("now", now);
        m.put("kept", kept());
        m.put("rolled_back", rolledBack());
        m.put("decisions", decisions().stream().map(Decision::toJson).toList());
        return m;
    }

    private synchronized void stopTicking() {
        if (ticker == null) return;
        ticker.shutdownNow();
        try {
            ticker.awaitTermination(Feeder.CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        ticker = null;
    }

    @Override
    public void close() { stopTicking(); }

    private static void log(Decision d) { LOG.log(System.Logger.Level.INFO, "autotune: " + d.text()); }

    /** The feed's knobs, applied to its pool, gates and buffers. */
    private final class FeedKnobs implements Knobs {
        @Override
        public int get(Knob k) {
            return switch (k) {
                case CPU_THREADS -> cpu.threads();
                case FETCH_CONCURRENCY -> gates.isEmpty() ? (config.mode() == FeedMode.SERIAL ? 1 : config.fetchConcurrency()) : gates.getFirst().limit();
                case PREFETCH_BATCHES -> buffers.isEmpty() ? config.prefetchBatches() : buffers.getFirst().maxBatches();
            };
        }

        @Override
        public int min(Knob k) {
            return fixed(k) ? get(k) : 1;
        }

        @Override
        public int max(Knob k) {
            if (fixed(k)) return get(k);
            return switch (k) {
                case CPU_THREADS -> cpu.maxThreads();
                case FETCH_CONCURRENCY -> config.fetchConcurrencyMax();
                case PREFETCH_BATCHES -> config.prefetchBatchesMax();
            };
        }

        private boolean fixed(Knob k) {
            return k == Knob.FETCH_CONCURRENCY && gates.isEmpty() || k == Knob.PREFETCH_BATCHES && buffers.isEmpty();
        }

        @Override
        public void set(Knob k, int value) {
            if (value < min(k) || value > max(k))
                throw new IllegalArgumentException(k.option() + " must be in [" + min(k) + ", " + max(k) + "], got " + value);
            switch (k) {
                case CPU_THREADS -> cpu.resize(value);
                case FETCH_CONCURRENCY -> gates.forEach(g -> g.limit(value));
                case PREFETCH_BATCHES -> buffers.forEach(b -> b.maxBatches(value));
            }
        }
    }
}
