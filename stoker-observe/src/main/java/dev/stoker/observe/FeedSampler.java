package dev.stoker.observe;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.LongFunction;

/**
 * Samples a running feed at a fixed interval (100 ms by default) into a bounded ring of
 * {@link Tick}s (the last 36,000 by default: an hour), from which {@link Bottleneck} tells what
 * limits the feed and reports draw queue depth over time.
 *
 * <p>Design: the pipeline's hot path is untouched — it only bumps the {@code FeedMetrics} adders it
 * already bumps; the sampler reads them (and each rank buffer's lock-guarded state, once per tick)
 * from its own daemon thread. Its cost is one small allocation per tick.
 *
 * <p>Threading: one scheduler thread writes the ring; {@link #timeline()} may be called from any thread.
 */
public final class FeedSampler implements AutoCloseable {
    public static final long INTERVAL_MILLIS_DEFAULT = 100;
    public static final int CAPACITY_DEFAULT = 36_000;

    /**
     * One tick. Cumulative: {@code fetched}, {@code encoded}, {@code delivered} (samples). Instant: the rest.
     *
     * @param bufferFull per rank, whether its buffer had no room for the next batch
     */
    public record Tick(long tMillis, long fetched, long encoded, long delivered, long fetchInFlight, long cpuBusy, long cpuQueued,
                       long storeBytes, long[] bufferedBatches, long[] bufferedBytes, boolean[] bufferFull) {
        List<Object> toRow() {
            var full = new ArrayList<Integer>(bufferFull.length);
            for (boolean f : bufferFull) full.add(f ? 1 : 0);
            return List.of(tMillis, fetched, encoded, delivered, fetchInFlight, cpuBusy, cpuQueued, storeBytes,
                    Arrays.stream(bufferedBatches).boxed().toList(), Arrays.stream(bufferedBytes).boxed().toList(), full);
        }
    }

    /**
     * The sampled ticks with the limits needed to read them.
     *
     * @param buffered    whether ranks have prefetch buffers (PREFETCH, ZERO_COPY); their buffer columns are 0 otherwise
     * @param fetchLimit  the most samples that may be in fetch at once, all ranks together
     */
    public record Timeline(long intervalMillis, int ranks, int cpuThreads, int fetchLimit, int prefetchBatches, boolean buffered,
                           List<Tick> ticks) {
        public static final List<String> COLUMNS = List.of("t_ms", "fetched", "encoded", "delivered", "fetch_in_flight", "cpu_busy",
                "cpu_queued", "store_bytes", "buffered_batches", "buffered_bytes", "buffer_full");

        /** The {@code timeline} object of {@code docs/run-data.md}. */
        public Map<String, Object> toJson() {
            var m = new LinkedHashMap<String, Object>();
            m.put("interval_ms", intervalMillis);
            m.put("ranks", ranks);
            m.put("cpu_threads", cpuThreads);
            m.put("fetch_limit", fetchLimit);
            m.put("prefetch_batches", prefetchBatches);
            m.put("buffered", buffered);
            m.put("columns", COLUMNS);
            m.put("rows", ticks.stream().map(Tick::toRow).toList());
            return m;
        }
    }

    private final long intervalMillis;
    private final Tick[] ring;
    private final LongFunction<Tick> probe;
    private final Timeline shape;
    private final long startNanos;
    private final ScheduledExecutorService scheduler;
    private long written; // guarded by this

    /**
     * Starts sampling at once: every {@code intervalMillis}, {@code probe} is called with the ms since
     * {@code startNanos}. {@code shape} gives the limits (its tick list is ignored).
     */
    public FeedSampler(long intervalMillis, int capacity, long startNanos, Timeline shape, LongFunction<Tick> probe) {
        if (intervalMillis <= 0) throw new IllegalArgumentException("sampling interval must be positive, got " + intervalMillis);
        if (capacity <= 0) throw new IllegalArgumentException("sampler capacity must be positive, got " + capacity);
        this.intervalMillis = intervalMillis;
        this.ring = new Tick[capacity];
        this.probe = probe;
        this.shape = shape;
        this.startNanos = startNanos;
        this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            var t = new Thread(r, "stoker-feed-sampler");
            t.setDaemon(true);
            return t;
        });
        scheduler.scheduleAtFixedRate(this::tick, intervalMillis, intervalMillis, TimeUnit.MILLISECONDS);
    }

    private void tick() {
        Tick t;
        try {
            t = probe.apply(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNanos));
        } catch (RuntimeException e) {
            return; // a probe racing close(); the next tick tries again
        }
        synchronized (this) {
            ring[(int) (written % ring.length)] = t;
            written++;
        }
    }

    /** The ticks kept so far, oldest first, with the feed's limits. */
    public Timeline timeline() {
        List<Tick> out;
        synchronized (this) {
            int n = (int) Math.min(written, ring.length);
            out = new ArrayList<>(n);
            for (long i = written - n; i < written; i++) out.add(ring[(int) (i % ring.length)]);
        }
        return new Timeline(intervalMillis, shape.ranks(), shape.cpuThreads(), shape.fetchLimit(), shape.prefetchBatches(),
                shape.buffered(), List.copyOf(out));
    }

    /** Stops sampling; the ticks stay readable. */
    @Override
    public void close() {
        scheduler.shutdownNow();
    }
}
