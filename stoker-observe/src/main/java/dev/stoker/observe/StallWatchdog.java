package dev.stoker.observe;

import dev.stoker.core.Ticker;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.LongFunction;

/**
 * Watches a running feed once a second and, when a stage makes no progress for a while (30 s by
 * default) although work is waiting for it, logs one warning naming the stage and what it waits on.
 *
 * <p>Stages and their rules (a stage is <em>pending</em> when work waits for it; its clock restarts
 * whenever it progresses or is not pending):
 * <ul>
 *   <li>fetch: pending while fetches are in flight; progress = a sample fetched. Waits on the object store.</li>
 *   <li>encode: pending while the CPU pool has queued or running tasks; progress = a sample encoded.</li>
 *   <li>rank r: pending while its prefetch buffer is full and its trainer has taken at least one batch;
 *       progress = a batch delivered to it. A trainer that is merely slow takes a batch now and then and
 *       never trips it (trainer-bound is not a stall), nor does a rank whose trainer has not connected yet.</li>
 *   <li>store: pending while the shared-memory store is exhausted ({@code inUse >= 95%} of its budget);
 *       progress = bytes in use fell or any batch was delivered.</li>
 * </ul>
 * A stage warns once per stall episode; the episode ends when it progresses or stops being pending.
 * When nothing is pending (everything idle because nobody asks) nothing warns.
 *
 * <p>Design: the decision is the pure {@link #step} over {@link Observation}s, tested with constructed
 * inputs; the running part only probes, calls it and logs. Its time is a {@link Ticker}'s, so that a test
 * moves it by hand instead of waiting out a stall.
 *
 * <p>Threading: one daemon thread probes and logs; {@link #stallMillis(long)} may be called from any thread.
 */
public final class StallWatchdog implements AutoCloseable {
    public static final long STALL_SECONDS_DEFAULT = 30;
    public static final long INTERVAL_MILLIS = 1000;
    /** The store counts as exhausted from this share of its budget in use. */
    static final double STORE_EXHAUSTED_SHARE = 0.95;

    private static final System.Logger LOG = System.getLogger(StallWatchdog.class.getName());

    /**
     * What the watchdog reads once a tick. Cumulative: {@code fetched}, {@code encoded}, {@code rankDelivered}
     * (batches per rank). Instant: the rest. {@code storeBudget} is 0 without a store.
     */
    public record Observation(long tMillis, long fetched, long fetchInFlight, long encoded, long cpuQueued, long cpuBusy,
                              long[] rankDelivered, boolean[] rankBufferFull, long storeInUse, long storeBudget, long storeLeases) {}

    /** Per stage: when its clock started and whether this episode has warned. */
    record Clock(long sinceMillis, boolean warned) {}

    /**
     * The decision state between ticks: the previous observation (null before the first) and each stage's clock.
     */
    public record State(Observation last, Map<String, Clock> clocks) {
        public static State initial() { return new State(null, Map.of()); }
    }

    /** One step's result: the next state and the warnings to log now (at most one per stage). */
    public record Step(State state, List<String> warnings) {}

    /** The pure decision: from the previous state and this tick's observation, the next state and the warnings due. */
    public static Step step(State state, Observation o, long stallMillis) {
        var prev = state.last();
        var clocks = new HashMap<>(state.clocks());
        var warnings = new ArrayList<String>();
        if (prev == null) {
            return new Step(new State(o, Map.of()), List.of());
        }
        String secs = seconds(stallMillis);
        // fetch
        check(clocks, warnings, "fetch", o, prev.tMillis(), stallMillis, o.fetchInFlight() > 0, o.fetched() > prev.fetched(),
                () -> "stall: no sample fetched for " + secs + ", " + o.fetchInFlight() + " fetches in flight (waiting on the object store)");
        // encode
        check(clocks, warnings, "encode", o, prev.tMillis(), stallMillis, o.cpuQueued() > 0 || o.cpuBusy() > 0, o.encoded() > prev.encoded(),
                () -> "stall: no sample encoded for " + secs + " with " + o.cpuQueued() + " queued"
                        + (o.cpuBusy() > 0 ? " and " + o.cpuBusy() + " running" : "") + " (CPU stage stuck?)");
        // ranks
        long deliveredNow = 0, deliveredPrev = 0;
        for (int r = 0; r < o.rankDelivered().length; r++) {
            long now = o.rankDelivered()[r];
            long before = r < prev.rankDelivered().length ? prev.rankDelivered()[r] : 0;
            deliveredNow += now;
            deliveredPrev += before;
            boolean full = r < o.rankBufferFull().length && o.rankBufferFull()[r];
            int rank = r;
            check(clocks, warnings, "rank " + r, o, prev.tMillis(), stallMillis, full && now > 0, now > before,
                    () -> "stall: rank " + rank + " has taken no batch for " + secs + ", its buffer is full (the trainer stopped reading)");
        }
        // store
        boolean exhausted = o.storeBudget() > 0 && o.storeInUse() >= STORE_EXHAUSTED_SHARE * o.storeBudget();
        check(clocks, warnings, "store", o, prev.tMillis(), stallMillis, exhausted, o.storeInUse() < prev.storeInUse() || deliveredNow > deliveredPrev,
                () -> "stall: store budget exhausted: " + bytes(o.storeInUse()) + " in use"
                        + (o.storeLeases() > 0 ? " by " + o.storeLeases() + " leases (trainers hold their batches)"
                                               : " (batches wait in buffers or are being written)"));
        return new Step(new State(o, Map.copyOf(clocks)), List.copyOf(warnings));
    }

    private static void check(Map<String, Clock> clocks, List<String> warnings, String stage, Observation o, long prevMillis, long stallMillis,
                              boolean pending, boolean progressed, java.util.function.Supplier<String> message) {
        if (!pending || progressed) {
            clocks.put(stage, new Clock(o.tMillis(), false)); // the episode (if any) ends; the clock restarts
            return;
        }
        var c = clocks.get(stage);
        if (c == null) {
            // no clock yet (the first ticks): it starts at the previous observation
            c = new Clock(prevMillis, false);
            clocks.put(stage, c);
        }
        if (!c.warned() && o.tMillis() - c.sinceMillis() >= stallMillis) {
            warnings.add(message.get());
            clocks.put(stage, new Clock(c.sinceMillis(), true));
        }
    }

    static String seconds(long millis) {
        return millis % 1000 == 0 ? (millis / 1000) + " s" : String.format(Locale.ROOT, "%.1f s", millis / 1000.0);
    }

    static String bytes(long b) {
        if (b >= 1L << 30) return String.format(Locale.ROOT, "%.1f GiB", b / (double) (1L << 30));
        if (b >= 1L << 20) return String.format(Locale.ROOT, "%.1f MiB", b / (double) (1L << 20));
        if (b >= 1L << 10) return String.format(Locale.ROOT, "%.1f KiB", b / (double) (1L << 10));
        return b + " B";
    }

    private final LongFunction<Observation> probe;
    private final Consumer<String> sink;
    private final Ticker ticker;
    private final long startNanos;
    private final ScheduledExecutorService scheduler;
    private volatile long stallMillis;
    private State state = State.initial(); // only the scheduler thread touches it
    private volatile long warningsLogged;
    private volatile long ticks;
    private final java.util.Deque<String> recent = new java.util.ArrayDeque<>(); // guarded by itself
    private static final int RECENT = 16;

    /**
     * Starts watching at once: every {@code intervalMillis}, {@code probe} is called with the ms since
     * start and each due warning goes to {@code sink}.
     */
    public StallWatchdog(long stallMillis, long intervalMillis, LongFunction<Observation> probe, Consumer<String> sink) {
        this(stallMillis, intervalMillis, probe, sink, Ticker.system());
    }

    /**
     * {@link #StallWatchdog(long, long, LongFunction, Consumer)} on {@code ticker}'s time: the ticks still come every
     * {@code intervalMillis} of real time, and each reads the ms since start from {@code ticker}.
     */
    public StallWatchdog(long stallMillis, long intervalMillis, LongFunction<Observation> probe, Consumer<String> sink, Ticker ticker) {
        if (intervalMillis <= 0) throw new IllegalArgumentException("watchdog interval must be positive, got " + intervalMillis);
        this.stallMillis = stallMillis;
        this.probe = probe;
        this.sink = sink;
        this.ticker = ticker;
        this.startNanos = ticker.read();
        this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            var t = new Thread(r, "stoker-stall-watchdog");
            t.setDaemon(true);
            return t;
        });
        scheduler.scheduleWithFixedDelay(this::tick, intervalMillis, intervalMillis, TimeUnit.MILLISECONDS);
    }

    /** Watches with the default one-second interval, logging warnings to {@code System.Logger} at WARNING. */
    public StallWatchdog(long stallMillis, LongFunction<Observation> probe) {
        this(stallMillis, INTERVAL_MILLIS, probe, msg -> LOG.log(System.Logger.Level.WARNING, msg));
    }

    private void tick() {
        long limit = stallMillis;
        if (limit <= 0) {
            state = State.initial(); // disabled: forget every clock
            return;
        }
        Observation o;
        try {
            o = probe.apply(TimeUnit.NANOSECONDS.toMillis(ticker.read() - startNanos));
        } catch (RuntimeException e) {
            return; // a probe racing close(); the next tick tries again
        }
        var s = step(state, o, limit);
        state = s.state();
        ticks++;
        for (var w : s.warnings()) {
            warningsLogged++;
            synchronized (recent) {
                if (recent.size() == RECENT) recent.removeFirst();
                recent.addLast(w);
            }
            try {
                sink.accept(w);
            } catch (RuntimeException e) {
                // a broken log handler must not stop the watchdog
            }
        }
    }

    /** Changes the stall threshold; 0 or less disables the watchdog until set again. */
    public void stallMillis(long millis) { this.stallMillis = millis; }

    public long stallMillis() { return stallMillis; }

    /** Warnings logged so far. */
    public long warningsLogged() { return warningsLogged; }

    /** Observations judged so far (a tick of a disabled watchdog judges none). */
    public long ticks() { return ticks; }

    /** The last warnings logged (at most 16), oldest first. */
    public List<String> recentWarnings() {
        synchronized (recent) {
            return List.copyOf(recent);
        }
    }

    @Override
    public void close() {
        scheduler.shutdownNow();
    }
}
