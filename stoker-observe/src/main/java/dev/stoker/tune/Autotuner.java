package dev.stoker.tune;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Sets a running feed's knobs ({@link Knob}: CPU threads, fetch concurrency, prefetch depth) from what it measures, one
 * knob at a time and each change with evidence: a window of delivered samples/s before, a window after, and the change
 * rolled back when the window after is not better beyond noise (a raise) or is worse (a lowering).
 *
 * <p>Design (docs/cache-and-autotune.md §3.1, issue 30): after a warm-up window, the tuner measures a baseline window,
 * reads which stage limits the feed from the same window (operational analysis, as {@code Bottleneck}'s verdict does: the
 * CPU pool busy ≥ {@value #CPU_BOUND} of its threads is CPU-bound; fetches in flight at their limit ≥
 * {@value #FETCH_PINNED} of the time is fetch-bound), and tries the move that evidence points to first: +1 thread, ×2
 * fetches, ×2 prefetch batches, or −1 thread (contention: FFmpeg's process-wide open lock, SPDL's demux curve, or
 * simply more threads than cores with other work beside). It waits a settling time, measures the window after, and
 * compares (noise: {@link Policy#z} standard errors of the two windows' rates, each from the rates of its blocks of
 * {@link Policy#blockNanos}); the window after ends as soon as the difference is beyond noise, or at
 * {@link Policy#maxWindowNanos}:
 * <ul>
 *   <li>after a rollback the restored setting's baseline is measured again, so that a drift of the machine's other load
 *       is not read as the next move's effect;</li>
 *   <li>a raise is kept when samples/s rose by more than the noise and more than {@link Policy#minGain} (a raise that
 *       buys nothing costs memory and cores), or when, with no loss beyond noise, it moved the bottleneck: the stage it
 *       widened was saturated before and is not after, while the other one is (two stages limiting at the same rate hide
 *       each other's raise; the next move widens the new bottleneck);</li>
 *   <li>a raise of fetches on a fetch-bound feed is sized by Little's law (fetches in flight = rate × latency, both read
 *       from the window) for the rate the CPU pool could reach at its most threads, up to {@value #FETCH_MAX_FACTOR}× in
 *       one decision, rather than doubled: a feed started at one fetch per rank is not walked up one doubling per window;</li>
 *   <li>a lowering is kept unless samples/s fell by more than {@link Policy#lowerTolerance} (or, before the window's
 *       end, beyond noise), or the stage it narrowed, not saturated before, now is (no headroom left): it frees cores and
 *       memory;</li>
 *   <li>a trial whose first block is already a clear loss (below the baseline by more than {@value #EARLY_SDS} of its
 *       blocks' standard deviations and {@value #EARLY_LOSS} of its rate) is rolled back at once, without waiting for the
 *       window: a contention probe that halves the rate costs one block;</li>
 *   <li>a rolled-back move is not tried again until a kept change or a hold's end; a kept move is tried again first
 *       (momentum), its reverse not at all until then.</li>
 * </ul>
 * When no move is left, the tuner holds for {@link Policy#holdWindows} windows, doubled (up to
 * {@link Policy#maxHoldWindows}) each time a round of probes keeps nothing, so that a tuned feed is not disturbed by
 * probes more than rarely (the cost of the default feed must stay ≤ 5%). When the trainers hardly wait for data
 * (less than {@link Policy#minWaitShare} of their time) there is nothing to win and the tuner changes nothing.
 *
 * <p>Time comes only from the {@link Observation}s: the tuner has no clock and no thread of its own, so tests drive it
 * with made-up ticks and a simulated pipeline, deterministically.
 *
 * <p>Threading: {@link #observe} from one thread at a time (the feed's tuning thread); {@link #decisions}, {@link #kept},
 * {@link #rolledBack} and {@link #summary} from any thread.
 */
public final class Autotuner {
    /** The CPU pool's busy share from which the feed is called CPU-bound. */
    static final double CPU_BOUND = 0.8;
    /** The share of ticks with fetches pinned at their limit from which the feed is called fetch-bound. */
    static final double FETCH_PINNED = 0.5;
    /** Headroom of a fetch concurrency sized by Little's law over the rate the CPU stage could reach. */
    static final double FETCH_HEADROOM = 1.25;
    /** The most a sized fetch raise multiplies the concurrency by in one decision (a bounded step). */
    static final int FETCH_MAX_FACTOR = 8;
    /** A trial's first block this many of the baseline's block standard deviations below its rate ends the trial at once … */
    static final double EARLY_SDS = 3.0;
    /** … when it is also this share below it (a move that costs this much costs it for every second it is tried). */
    static final double EARLY_LOSS = 0.10;
    /** The baseline's blocks needed before its spread is trusted for an early end. */
    static final int EARLY_MIN_BLOCKS = 3;
    /** How many decisions are kept for the report (the first ones and the last ones matter; a run makes few). */
    static final int DECISIONS_KEPT = 1000;

    /**
     * How the tuner measures and judges.
     *
     * @param warmUpNanos      no change before this long after the first tick (the JIT, the first batches)
     * @param settleNanos      after a change, how long before the window after starts (the pipeline refills)
     * @param minWindowNanos   a window lasts at least this long
     * @param maxWindowNanos   … and at most this long: a baseline ends earlier once its rate is known to
     *                         {@code targetError}, a trial once its difference from the baseline is beyond noise
     * @param blockNanos       the rate's noise is measured over blocks of at least this long (batch means: a tick
     *                         delivers whole batches, so per-tick rates overstate it)
     * @param blockSamples     … holding at least this many delivered samples (a few steps' worth: {@link #withBlockSamples})
     * @param targetError      the relative standard error at which a baseline window may end
     * @param z                standard errors a raise's gain must exceed (for windows of many blocks; fewer blocks ask more)
     * @param minGain          and the least relative gain that keeps a raise
     * @param lowerTolerance   the most relative loss that still keeps a lowering
     * @param minWaitShare     below this share of the trainers' time spent waiting, the tuner changes nothing
     * @param holdWindows      windows held after a round of probes that kept nothing
     * @param maxHoldWindows   the most the hold grows to (it doubles per fruitless round)
     */
    public record Policy(long warmUpNanos, long settleNanos, long minWindowNanos, long maxWindowNanos, long blockNanos, long blockSamples,
                         double targetError, double z, double minGain, double lowerTolerance, double minWaitShare, int holdWindows,
                         int maxHoldWindows) {
        /**
         * 5 s warm-up, 1 s settling, windows of 4–12 s in blocks of 1 s, a baseline known to 5%, 2 standard errors and 3%
         * for a raise, 3% for a lowering (or a run of lowerings, against the rate before the first), hold 8 → 128 windows.
         */
        public static final Policy DEFAULT = new Policy(TimeUnit.SECONDS.toNanos(5), TimeUnit.SECONDS.toNanos(1),
                TimeUnit.SECONDS.toNanos(4), TimeUnit.SECONDS.toNanos(12), TimeUnit.SECONDS.toNanos(1), 0, 0.05, 2.0, 0.03, 0.03, 0.05, 8,
                128);

        /** With blocks of at least {@code samples} delivered samples (a feed's: a few steps of all its ranks' batches). */
        public Policy withBlockSamples(long samples) {
            return new Policy(warmUpNanos, settleNanos, minWindowNanos, maxWindowNanos, blockNanos, samples, targetError, z, minGain,
                    lowerTolerance, minWaitShare, holdWindows, maxHoldWindows);
        }

        public Policy {
            if (warmUpNanos < 0 || settleNanos < 0) throw new IllegalArgumentException("warm-up and settling must be >= 0");
            if (minWindowNanos <= 0 || maxWindowNanos < minWindowNanos)
                throw new IllegalArgumentException("windows need 0 < min <= max, got " + minWindowNanos + ", " + maxWindowNanos);
            if (blockNanos <= 0 || blockSamples < 0 || !(targetError >= 0))
                throw new IllegalArgumentException("blocks must be positive, their samples and the target error >= 0");
            if (!(z >= 0) || !(minGain >= 0) || !(lowerTolerance >= 0) || !(minWaitShare >= 0))
                throw new IllegalArgumentException("z, gains and shares must be >= 0");
            if (holdWindows < 1 || maxHoldWindows < holdWindows) throw new IllegalArgumentException("need 1 <= hold <= max hold");
        }
    }

    /** A knob and a direction. */
    record Move(Knob knob, boolean up) {
        Move reverse() { return new Move(knob, !up); }
    }

    /**
     * One window's figures.
     *
     * @param samplesPerS         delivered samples per second over the window
     * @param standardError       the standard error of that rate, from the per-tick rates
     * @param waitShare           trainers' waiting time / (window × ranks)
     * @param cpuBusyFraction     mean busy threads / threads
     * @param fetchPinnedFraction share of ticks whose fetches in flight were at ≥ 90% of their limit
     * @param fetchInFlight       mean fetches in flight per tick, all ranks
     * @param bufferFullFraction  share of ticks with some rank's buffer full
     * @param bufferEmptyFraction share of ticks with every rank's buffer empty
     */
    record Window(double samplesPerS, double standardError, int blocks, double waitShare, double cpuBusyFraction, double fetchPinnedFraction,
                  double fetchInFlight, double bufferFullFraction, double bufferEmptyFraction) {}

    /**
     * Student's t two-sided 95% critical values for 1–30 degrees of freedom (any statistics table; 1.96 beyond): a window
     * holds a handful of blocks, and a noise estimated from so few is itself uncertain, so {@link Policy#z} is scaled by
     * t(df) / 1.96, df the two windows' blocks less two.
     */
    private static final double[] T95 = {12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
            2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04};

    /** {@link Policy#z} for a comparison of windows of {@code blocksA} and {@code blocksB} blocks. */
    private double z(int blocksA, int blocksB) {
        int df = blocksA + blocksB - 2;
        double t = df < 1 ? T95[0] : df <= T95.length ? T95[df - 1] : 1.96;
        return policy.z() * t / 1.96;
    }

    /** A move being tried; {@code sized}: its step came from the stage model (Little's law), not the knob's fixed step. */
    private record Trial(Move move, int from, int to, boolean sized, String why) {}

    private enum Phase { WARM_UP, SETTLE, MEASURE }

    private final Knobs knobs;
    private final Policy policy;
    private final Consumer<Decision> listener;

    // the tuning thread's state
    private Observation origin, prev, windowStart, blockStart;
    private Phase phase = Phase.WARM_UP;
    private long phaseStartNanos;
    private final List<Double> blockRates = new ArrayList<>();
    private double cpuBusySum, inFlightSum;
    private int ticks, pinnedTicks, fullTicks, emptyTicks;
    private Window baseline;
    private Trial trial;
    private final Set<Move> tried = new HashSet<>();
    private Move lastKept;
    /** The rate before the first of a run of kept lowerings: the run as a whole may not lose more than the tolerance. */
    private double lowerReference;
    private int holdLeft, holdWindows;

    // read from any thread
    private final List<Decision> decisions = new ArrayList<>(); // guarded by this
    private int decided, kept, rolledBack; // guarded by this
    private volatile String state = "warming up";

    /** A tuner of {@code knobs}; {@code listener} hears each decision as it is made (on the tuning thread). */
    public Autotuner(Knobs knobs, Policy policy, Consumer<Decision> listener) {
        this.knobs = java.util.Objects.requireNonNull(knobs, "knobs");
        this.policy = java.util.Objects.requireNonNull(policy, "policy");
        this.listener = listener == null ? d -> { } : listener;
        this.holdWindows = policy.holdWindows();
    }

    /** One tick of the feed: the tuner measures, and at a window's end may change, keep or roll back one knob. */
    public void observe(Observation o) {
        if (origin == null) {
            origin = prev = o;
            phaseStartNanos = o.nanos();
            return;
        }
        if (o.nanos() < prev.nanos()) throw new IllegalArgumentException("ticks went back in time: " + o.nanos() + " < " + prev.nanos());
        switch (phase) {
            case WARM_UP -> {
                if (o.nanos() - phaseStartNanos >= policy.warmUpNanos()) startWindow(o);
            }
            case SETTLE -> {
                if (o.nanos() - phaseStartNanos >= policy.settleNanos()) startWindow(o);
            }
            case MEASURE -> {
                int blocksBefore = blockRates.size();
                accumulate(o);
                long took = o.nanos() - windowStart.nanos();
                if (trial != null && took < policy.minWindowNanos() && blockRates.size() > blocksBefore && clearLoss(blockRates.getLast())) {
                    rollBackAtOnce(blockRates.getLast(), o);
                } else if (took >= policy.minWindowNanos()) {
                    var w = window(o);
                    boolean last = took >= policy.maxWindowNanos();
                    if (trial != null) judge(w, o, last);
                    else if (last || w.standardError() <= policy.targetError() * w.samplesPerS()) onWindow(w, o);
                }
            }
        }
        prev = o;
    }

    private void startWindow(Observation o) {
        phase = Phase.MEASURE;
        windowStart = blockStart = o;
        blockRates.clear();
        cpuBusySum = inFlightSum = 0;
        ticks = pinnedTicks = fullTicks = emptyTicks = 0;
    }

    private void accumulate(Observation b) {
        if (b.nanos() - prev.nanos() <= 0) return;
        long block = b.nanos() - blockStart.nanos();
        if (block >= policy.blockNanos() && b.deliveredSamples() - blockStart.deliveredSamples() >= policy.blockSamples()) {
            blockRates.add((b.deliveredSamples() - blockStart.deliveredSamples()) * 1e9 / block);
            blockStart = b;
        }
        ticks++;
        cpuBusySum += Math.min(1.0, (double) b.cpuBusy() / Math.max(1, knobs.get(Knob.CPU_THREADS)));
        inFlightSum += b.fetchInFlight();
        long fetchLimit = (long) knobs.get(Knob.FETCH_CONCURRENCY) * b.ranks();
        if (b.fetchInFlight() >= 0.9 * fetchLimit) pinnedTicks++;
        if (b.anyBufferFull()) fullTicks++;
        if (b.allBuffersEmpty()) emptyTicks++;
    }

    /** The window from its start to {@code end}: its rate, and that rate's standard error from the blocks' rates. */
    private Window window(Observation end) {
        double seconds = (end.nanos() - windowStart.nanos()) / 1e9;
        double rate = (end.deliveredSamples() - windowStart.deliveredSamples()) / seconds;
        double se;
        int n = blockRates.size();
        if (n < 2) {
            se = Math.max(rate, 1); // one block says nothing about its noise
        } else {
            double mean = blockRates.stream().mapToDouble(Double::doubleValue).average().orElse(0), ss = 0;
            for (double r : blockRates) ss += (r - mean) * (r - mean);
            se = Math.sqrt(ss / (n - 1) / n);
        }
        double wait = Math.clamp((end.waitNanos() - windowStart.waitNanos()) / (seconds * 1e9 * end.ranks()), 0.0, 1.0);
        int t = Math.max(1, ticks);
        return new Window(rate, se, n, wait, cpuBusySum / t, (double) pinnedTicks / t, inFlightSum / t, (double) fullTicks / t,
                (double) emptyTicks / t);
    }

    private void onWindow(Window w, Observation at) {
        baseline = w;
        if (holdLeft > 0) {
            holdLeft--;
            state = "holding (" + holdLeft + " windows left)";
            startWindow(at);
            return;
        }
        next(at);
    }

    /**
     * Reads the trial's window {@code after} so far: decides as soon as the difference from the baseline is beyond noise
     * (kept, or rolled back), else goes on measuring until the window's {@code last} tick, when a raise within noise is
     * rolled back (it bought nothing) and a lowering within {@link Policy#lowerTolerance} kept (it frees resources).
     */
    private void judge(Window after, Observation at, boolean last) {
        var t = trial;
        var before = baseline;
        double diff = after.samplesPerS() - before.samplesPerS();
        double noise = z(after.blocks(), before.blocks()) * Math.hypot(after.standardError(), before.standardError());
        boolean keep, reliefOnly = false;
        String reading;
        if (t.move().up()) {
            double needed = Math.max(noise, policy.minGain() * before.samplesPerS());
            String moved;
            if (diff > needed) {
                keep = true;
                reading = String.format(Locale.ROOT, "gain %+.1f samples/s beats the %.1f needed", diff, needed);
            } else if (diff >= -needed && (moved = bottleneckMoved(t.move(), before, after)) != null) {
                keep = true; // necessary, not yet sufficient: the stage it limited no longer does, another one does
                reliefOnly = true;
                reading = String.format(Locale.ROOT, "gain %+.1f samples/s within the %.1f needed, but %s: kept, the next move widens "
                        + "that stage", diff, needed, moved);
            } else if (diff < -needed || last) {
                keep = false;
                reading = diff < -needed ? String.format(Locale.ROOT, "loss %.1f samples/s beyond noise %.1f", -diff, needed)
                        : String.format(Locale.ROOT, "gain %+.1f samples/s within the %.1f needed: not worth the cost", diff, needed);
            } else {
                return; // not yet clear: measure on
            }
        } else {
            // against the rate before a run of lowerings began, so that small losses do not add up step by step
            double reference = t.move().equals(lastKept) ? Math.max(before.samplesPerS(), lowerReference) : before.samplesPerS();
            double allowed = policy.lowerTolerance() * reference;
            diff = after.samplesPerS() - reference;
            String saturated = saturatedByLowering(t.move(), before, after);
            if (diff < -Math.max(noise, allowed) || last && diff < -allowed) {
                keep = false;
                reading = String.format(Locale.ROOT, "loss %.1f samples/s beyond the %.1f allowed", -diff, Math.max(noise, allowed));
            } else if (saturated != null) {
                keep = false; // no loss yet, but no headroom left either: the next drift of the load makes it the bottleneck
                reading = String.format(Locale.ROOT, "change %+.1f samples/s, but %s: no headroom left", diff, saturated);
            } else if (last || diff > noise) {
                keep = true;
                reading = String.format(Locale.ROOT, "change %+.1f samples/s within the %.1f allowed: kept, it frees resources", diff, allowed);
            } else {
                return;
            }
        }
        conclude(t, before, after, keep, reliefOnly, reading, noise, diff, at);
    }

    /**
     * Whether a trial's block at {@code rate} is a loss too large to be noise: the baseline has at least
     * {@value #EARLY_MIN_BLOCKS} blocks, and {@code rate} is below its rate by more than {@value #EARLY_SDS} of its blocks'
     * standard deviations and more than {@value #EARLY_LOSS} of it (a sequential test's early stop for a large effect: a
     * contention probe that halves the rate then costs one block, not a whole window).
     */
    private boolean clearLoss(double rate) {
        var b = baseline;
        if (b == null || b.blocks() < EARLY_MIN_BLOCKS) return false;
        double blockSd = b.standardError() * Math.sqrt(b.blocks());
        return rate < b.samplesPerS() - Math.max(EARLY_SDS * blockSd, EARLY_LOSS * b.samplesPerS());
    }

    /** Rolls the open trial back on its first block's clear loss ({@link #clearLoss}). */
    private void rollBackAtOnce(double blockRate, Observation at) {
        var t = trial;
        var before = baseline;
        var after = window(at);
        double blockSd = before.standardError() * Math.sqrt(before.blocks());
        String reading = String.format(Locale.ROOT, "its first block at %.1f samples/s is below the %.1f before by more than %.0f of the "
                + "baseline's block standard deviations (%.1f) and %.0f%%: rolled back at once", blockRate, before.samplesPerS(), EARLY_SDS,
                blockSd, 100 * EARLY_LOSS);
        conclude(t, before, after, false, false, reading, EARLY_SDS * blockSd, after.samplesPerS() - before.samplesPerS(), at);
    }

    /** Ends the open trial: keeps or rolls back its move, records the decision, and goes on to the next move or a fresh baseline. */
    private void conclude(Trial t, Window before, Window after, boolean keep, boolean reliefOnly, String reading, double noise, double diff,
                          Observation at) {
        trial = null;
        if (keep) {
            if (!t.move().up() && !t.move().equals(lastKept)) lowerReference = before.samplesPerS();
            baseline = after;
            tried.clear();
            tried.add(t.move().reverse());
            // momentum only for a step that paid by itself: after a relief or a step the model sized, the evidence orders
            lastKept = reliefOnly || t.sized() ? null : t.move();
            // a change that paid means the feed moved: probes pay again soon; a lowering kept for its savings alone does not
            if (diff > noise) holdWindows = policy.holdWindows();
        } else {
            knobs.set(t.move().knob(), t.from());
            tried.add(t.move());
            lastKept = null;
        }
        record(new Decision(0, (at.nanos() - origin.nanos()) / 1_000_000, t.move().knob(), t.from(), t.to(), keep, before.samplesPerS(),
                after.samplesPerS(), noise, before.waitShare(), after.waitShare(), t.why() + "; " + reading));
        if (keep) {
            next(at); // the window after is the new setting's baseline
        } else { // a fresh baseline of the restored setting: the old one may be stale (other load on the machine drifts)
            state = "measuring after a rollback";
            phase = Phase.SETTLE;
            phaseStartNanos = at.nanos();
        }
    }

    /** Tries the next move the baseline's evidence points to; holds when there is none or nothing to win. */
    private void next(Observation at) {
        var b = baseline;
        if (b.waitShare() < policy.minWaitShare()) {
            state = String.format(Locale.ROOT, "holding: trainers wait %.0f%% of the time, nothing to win", 100 * b.waitShare());
            startWindow(at);
            return;
        }
        for (var m : order(b)) {
            if (tried.contains(m)) continue;
            var k = m.knob();
            int from = knobs.get(k);
            int step = m.up() ? k.up(from) : k.down(from);
            int sized = m.up() && k == Knob.FETCH_CONCURRENCY && fetchBound(b) ? sizedFetch(b, from, at.ranks()) : 0;
            int to = Math.clamp(Math.max(step, sized), knobs.min(k), knobs.max(k));
            if (to == from) continue;
            boolean bySize = sized > step && to > step;
            trial = new Trial(m, from, to, bySize, evidence(m, b) + (bySize ? "; " + sizedWhy(b, at.ranks()) : ""));
            knobs.set(k, to);
            state = "trying " + k.option() + " " + from + " → " + to;
            phase = Phase.SETTLE;
            phaseStartNanos = at.nanos();
            return;
        }
        holdLeft = holdWindows;
        holdWindows = Math.min(policy.maxHoldWindows(), 2 * holdWindows);
        tried.clear();
        lastKept = null;
        state = "holding (" + holdLeft + " windows left)";
        startWindow(at);
    }

    /** The moves in the order the evidence points to: the last kept one first, then the limiting stage's. */
    private List<Move> order(Window b) {
        var order = new ArrayList<Move>(6);
        if (lastKept != null) order.add(lastKept);
        var cpuUp = new Move(Knob.CPU_THREADS, true);
        var fetchUp = new Move(Knob.FETCH_CONCURRENCY, true);
        var prefetchUp = new Move(Knob.PREFETCH_BATCHES, true);
        var cpuDown = new Move(Knob.CPU_THREADS, false);
        var fetchDown = new Move(Knob.FETCH_CONCURRENCY, false);
        // the lowerings last: contention probes (threads), and fetches that the fetch stage does not use up
        if (cpuBound(b)) order.addAll(List.of(cpuUp, fetchUp, prefetchUp, cpuDown, fetchDown));
        else if (fetchBound(b)) order.addAll(List.of(fetchUp, cpuUp, prefetchUp, cpuDown));
        else order.addAll(List.of(prefetchUp, fetchUp, cpuUp, cpuDown, fetchDown));
        return order;
    }

    private static boolean cpuBound(Window b) { return b.cpuBusyFraction() >= CPU_BOUND; }

    private static boolean fetchBound(Window b) { return b.fetchPinnedFraction() >= FETCH_PINNED; }

    /**
     * What a kept raise's window shows beyond its rate (null: nothing): the stage the raise widened was saturated before
     * and is not after, while the other stage is. Two stages that limit at nearly the same rate (the CPU at 1 thread, the
     * fetches at 2 per rank, both near 45 samples/s) hide each other's raise: neither raise alone gains, both together
     * double the rate, so a raise that moved the bottleneck is kept without a gain, and the next move widens the new one.
     */
    private static String bottleneckMoved(Move m, Window before, Window after) {
        if (m.knob() == Knob.FETCH_CONCURRENCY && fetchBound(before) && !fetchBound(after) && cpuBound(after))
            return String.format(Locale.ROOT, "fetches are no longer pinned (%.0f%% → %.0f%% of the time) and the CPU pool is busy %.0f%%",
                    100 * before.fetchPinnedFraction(), 100 * after.fetchPinnedFraction(), 100 * after.cpuBusyFraction());
        if (m.knob() == Knob.CPU_THREADS && cpuBound(before) && !cpuBound(after) && fetchBound(after))
            return String.format(Locale.ROOT, "the CPU pool is no longer saturated (busy %.0f%% → %.0f%%) and fetches are pinned %.0f%% of the time",
                    100 * before.cpuBusyFraction(), 100 * after.cpuBusyFraction(), 100 * after.fetchPinnedFraction());
        return null;
    }

    /** What a lowering's window shows beyond its rate (null: nothing): the stage it narrowed, not saturated before, now is. */
    private static String saturatedByLowering(Move m, Window before, Window after) {
        if (m.knob() == Knob.FETCH_CONCURRENCY && !fetchBound(before) && fetchBound(after))
            return String.format(Locale.ROOT, "fetches are now pinned %.0f%% of the time (%.0f%% before)", 100 * after.fetchPinnedFraction(),
                    100 * before.fetchPinnedFraction());
        if (m.knob() == Knob.CPU_THREADS && !cpuBound(before) && cpuBound(after))
            return String.format(Locale.ROOT, "the CPU pool is now busy %.0f%% (%.0f%% before)", 100 * after.cpuBusyFraction(),
                    100 * before.cpuBusyFraction());
        return null;
    }

    /**
     * The fetch concurrency per rank that the rate the CPU stage could reach needs, by Little's law (Plumber's operational
     * analysis): fetches in flight = rate × fetch latency, the latency read from the window itself (mean in flight / rate),
     * the reachable rate the window's rate over the CPU threads it kept busy, times the threads the pool may have; with
     * {@link #FETCH_HEADROOM}, rounded up to a power of two, at most {@link #FETCH_MAX_FACTOR}× {@code from}. 0 when the
     * window does not tell (no rate).
     */
    private int sizedFetch(Window b, int from, int ranks) {
        if (!(b.samplesPerS() > 0) || !(b.fetchInFlight() > 0)) return 0;
        double need = reachable(b) * latency(b) * FETCH_HEADROOM / ranks;
        long pow2 = Long.highestOneBit(Math.max(1, (long) Math.ceil(need)));
        if (pow2 < need) pow2 <<= 1;
        return (int) Math.min(pow2, (long) from * FETCH_MAX_FACTOR);
    }

    private double reachable(Window b) {
        double busyThreads = Math.max(0.25, b.cpuBusyFraction() * knobs.get(Knob.CPU_THREADS));
        return b.samplesPerS() / busyThreads * knobs.max(Knob.CPU_THREADS);
    }

    private static double latency(Window b) { return b.fetchInFlight() / b.samplesPerS(); }

    private String sizedWhy(Window b, int ranks) {
        return String.format(Locale.ROOT, "sized by Little's law: %.0f ms per fetch × %.0f samples/s the CPU pool could reach at %d threads "
                + "× %.2f headroom / %d ranks", 1e3 * latency(b), reachable(b), knobs.max(Knob.CPU_THREADS), FETCH_HEADROOM, ranks);
    }

    private String evidence(Move m, Window b) {
        String figures = String.format(Locale.ROOT, "CPU busy %.0f%% of %d threads, fetches pinned %.0f%% of the time at %d per rank, "
                        + "buffers full %.0f%% / empty %.0f%%", 100 * b.cpuBusyFraction(), knobs.get(Knob.CPU_THREADS),
                100 * b.fetchPinnedFraction(), knobs.get(Knob.FETCH_CONCURRENCY), 100 * b.bufferFullFraction(), 100 * b.bufferEmptyFraction());
        String kind = cpuBound(b) ? "CPU-bound" : fetchBound(b) ? "fetch-bound" : "no stage saturated";
        if (m.equals(lastKept)) return "the last step paid (" + kind + ": " + figures + ")";
        if (!m.up()) return "contention probe: fewer " + (m.knob() == Knob.CPU_THREADS ? "threads" : "fetches") + " may be as fast ("
                + kind + ": " + figures + ")";
        return kind + ": " + figures;
    }

    private void record(Decision d) {
        Decision numbered;
        synchronized (this) {
            decided++;
            if (d.kept()) kept++;
            else rolledBack++;
            numbered = new Decision(decided, d.atMillis(), d.knob(), d.from(), d.to(), d.kept(), d.beforeSamplesPerS(), d.afterSamplesPerS(),
                    d.noiseSamplesPerS(), d.beforeWaitShare(), d.afterWaitShare(), d.why());
            if (decisions.size() == DECISIONS_KEPT) decisions.remove(DECISIONS_KEPT / 2); // keep the first half and the latest
            decisions.add(numbered);
        }
        listener.accept(numbered);
    }

    /** The decisions so far, in order (at most {@value #DECISIONS_KEPT}: the first ones and the latest). */
    public synchronized List<Decision> decisions() { return List.copyOf(decisions); }

    public synchronized int kept() { return kept; }

    public synchronized int rolledBack() { return rolledBack; }

    /** One line for the status line: the knobs now and what the tuner is doing. */
    public String summary() {
        int k, r;
        synchronized (this) {
            k = kept;
            r = rolledBack;
        }
        return "autotune " + knobs.get(Knob.CPU_THREADS) + "T/" + knobs.get(Knob.FETCH_CONCURRENCY) + "F/" + knobs.get(Knob.PREFETCH_BATCHES)
                + "P, " + k + " kept " + r + " rolled back, " + state;
    }
}
