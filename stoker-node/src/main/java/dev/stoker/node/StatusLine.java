package dev.stoker.node;

import dev.stoker.core.SampleException;
import dev.stoker.pipeline.feed.FeedErrors;
import dev.stoker.pipeline.feed.FeedMetrics;
import dev.stoker.pipeline.feed.FeedTuning;
import java.io.PrintWriter;
import java.util.List;
import java.util.Locale;
import java.util.OptionalDouble;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * A one-line live status on stderr for long runs, rewritten in place every second: samples/s,
 * delivered batches, buffered batches, skipped samples (errors and filtered, each with its most common
 * causes) when there are any, a packed job's imbalance and padding fraction
 * ({@code imbalance 1.02 pad 3.1%}, its recent steps), the trainers' wait ratio when known, the verdict kind, the autotuner's
 * knobs and last decision ({@code --autotune on}), and an ETA when
 * the total is known. Completely quiet when the console is not a terminal or when the
 * environment variable {@code CI} is set.
 *
 * <p>Design: {@link #format} is a pure function of two {@link Sample}s; the running part only samples,
 * formats and writes. {@link #close()} erases the line so that later output starts on a clean line.
 *
 * <p>Threading: one daemon thread writes; {@link #close()} may be called from any thread.
 */
public final class StatusLine implements AutoCloseable {
    static final long INTERVAL_MILLIS = 1000;
    /** Carriage return, then erase to the end of the line (ANSI EL). */
    static final String REWRITE = "\r\u001b[K";
    /** Causes shown per kind of skipped sample. */
    static final int CAUSES_SHOWN = 2;

    /**
     * The figures at one moment.
     *
     * @param nanos            a monotonic time stamp ({@link System#nanoTime()})
     * @param deliveredSamples samples handed to trainers so far
     * @param deliveredBatches batches handed to trainers so far
     * @param bufferedBatches  batches ready in the ranks' buffers now
     * @param waitRatio        the trainers' wait-time ratio (0..1), when known
     * @param verdict          the bottleneck verdict's label (e.g. "I/O-bound"), or null when none yet
     * @param totalBatches     the batches the run will deliver in all, or -1 when unbounded or unknown
     * @param errorSamples     broken samples skipped so far
     * @param filteredSamples  samples dropped by a limit (--max-seq-len, --max-images) so far
     * @param causes           the skipped samples by cause, the most common first ({@link FeedErrors#counts()})
     * @param sources          per source of a mix, its share of what was delivered
     * @param pack             a packed job's recent imbalance and padding fraction; null when the job is not packed
     * @param autotune         the autotuner's knobs and last decision ({@link FeedTuning#summary()}); null when it is off
     * @param cache            the cache of preprocessed samples' counters; null when the job runs without it
     */
    public record Sample(long nanos, long deliveredSamples, long deliveredBatches, long bufferedBatches, OptionalDouble waitRatio,
                  String verdict, long totalBatches, long errorSamples, long filteredSamples, List<FeedErrors.Cause> causes,
                  List<FeedMetrics.Source> sources, Packing pack, String autotune, dev.stoker.cache.CacheStats cache) {
        public Sample {
            causes = List.copyOf(causes);
            sources = List.copyOf(sources);
        }

        /** A sample without the autotuner's figures and the cache's. */
        public Sample(long nanos, long deliveredSamples, long deliveredBatches, long bufferedBatches, OptionalDouble waitRatio,
                      String verdict, long totalBatches, long errorSamples, long filteredSamples, List<FeedErrors.Cause> causes,
                      List<FeedMetrics.Source> sources, Packing pack) {
            this(nanos, deliveredSamples, deliveredBatches, bufferedBatches, waitRatio, verdict, totalBatches, errorSamples, filteredSamples,
                    causes, sources, pack, null, null);
        }

        /** This sample with the autotuner's text (null: off). */
        public Sample withAutotune(String text) {
            return new Sample(nanos, deliveredSamples, deliveredBatches, bufferedBatches, waitRatio, verdict, totalBatches, errorSamples,
                    filteredSamples, causes, sources, pack, text, cache);
        }

        /** This sample with {@code feeder}'s autotuner's text, when it has one. */
        public Sample withAutotune(dev.stoker.pipeline.feed.Feeder feeder) {
            return withAutotune(feeder.autotune().map(FeedTuning::summary).orElse(null));
        }

        /** This sample with the cache's counters (null: the job runs without it). */
        public Sample withCache(dev.stoker.cache.CacheStats stats) {
            return new Sample(nanos, deliveredSamples, deliveredBatches, bufferedBatches, waitRatio, verdict, totalBatches, errorSamples,
                    filteredSamples, causes, sources, pack, autotune, stats);
        }

        /** A sample of an unpacked feed. */
        public Sample(long nanos, long deliveredSamples, long deliveredBatches, long bufferedBatches, OptionalDouble waitRatio,
                      String verdict, long totalBatches, long errorSamples, long filteredSamples, List<FeedErrors.Cause> causes,
                      List<FeedMetrics.Source> sources) {
            this(nanos, deliveredSamples, deliveredBatches, bufferedBatches, waitRatio, verdict, totalBatches, errorSamples, filteredSamples,
                    causes, sources, null);
        }

        /** A sample of a feed of one source. */
        public Sample(long nanos, long deliveredSamples, long deliveredBatches, long bufferedBatches, OptionalDouble waitRatio,
                      String verdict, long totalBatches, long errorSamples, long filteredSamples, List<FeedErrors.Cause> causes) {
            this(nanos, deliveredSamples, deliveredBatches, bufferedBatches, waitRatio, verdict, totalBatches, errorSamples, filteredSamples,
                    causes, List.of());
        }

        /** The figures of a feed's counters {@code m} now; the trainers' wait ratio unknown. */
        public static Sample of(FeedMetrics.Snapshot m, String verdict, long totalBatches) {
            return of(m, verdict, totalBatches, OptionalDouble.empty());
        }

        /**
         * What {@code stoker serve}'s status line shows for a local job: its feed's delivery, buffers and skipped samples, the
         * trainers' wait ratio over their recent steps as they reported it, the verdict kind (with that wait ratio), and the
         * total when {@code --steps} bounds the run.
         */
        public static Sample of(RankLedger ledger) {
            var cache = ledger.feeder().config().cache();
            return of(ledger.feeder().metrics(), ledger.verdict().kind().label(), ledger.steps() > 0 ? ledger.steps() * ledger.localRanks().count() : -1,
                    ledger.timings().recentWaitRatio()).withAutotune(ledger.feeder()).withCache(cache == null ? null : cache.store().stats());
        }

        /** The figures of a feed's counters {@code m} now, with the trainers' wait ratio as they reported it (empty: unknown). */
        public static Sample of(FeedMetrics.Snapshot m, String verdict, long totalBatches, OptionalDouble waitRatio) {
            var p = m.pack();
            return new Sample(System.nanoTime(), m.deliveredSamples(), m.deliveredBatches(), m.bufferedBatches(), waitRatio,
                    verdict, totalBatches, m.errorSamples(), m.filteredSamples(), m.skippedByCause(), m.sources(),
                    p == null ? null : new Packing(p.recentImbalance(), p.recentPaddingFraction()));
        }
    }

    /**
     * A packed job's figures on the line: over its recent steps ({@code PackStats}' window), the mean max / mean predicted
     * rank cost and the mean padding fraction (1 − real tokens / (R·N)).
     */
    public record Packing(double imbalance, double paddingFraction) {}

    /** Whether to show a status line at all: only on a terminal and never under CI. */
    static boolean enabled(boolean terminal, String ciEnv) {
        return terminal && ciEnv == null;
    }

    /** {@link #enabled(boolean, String)} for this process: {@code System.console()} is a terminal and {@code CI} is not set. */
    static boolean enabled() {
        var console = System.console();
        return enabled(console != null && console.isTerminal(), System.getenv("CI"));
    }

    /** The status text (no control characters) from the previous sample (null on the first) and this one. */
    static String format(Sample prev, Sample now) {
        var sb = new StringBuilder("stoker: ");
        double seconds = prev == null ? 0 : (now.nanos() - prev.nanos()) / 1e9;
        double samplesPerSecond = seconds > 0 ? Math.max(0, now.deliveredSamples() - prev.deliveredSamples()) / seconds : Double.NaN;
        double batchesPerSecond = seconds > 0 ? Math.max(0, now.deliveredBatches() - prev.deliveredBatches()) / seconds : Double.NaN;
        sb.append(Double.isNaN(samplesPerSecond) ? "-" : rate(samplesPerSecond)).append(" samples/s");
        sb.append(" | ").append(now.deliveredBatches());
        if (now.totalBatches() >= 0) sb.append('/').append(now.totalBatches());
        sb.append(" batches delivered");
        sb.append(" | ").append(now.bufferedBatches()).append(" buffered");
        skipped(sb, now.errorSamples(), "errors", SampleException.Kind.ERROR, now.causes());
        skipped(sb, now.filteredSamples(), "filtered", SampleException.Kind.FILTERED, now.causes());
        if (now.sources().size() > 1 && now.deliveredSamples() > 0) { // the mix as delivered: each source's share
            sb.append(" | mix");
            for (var src : now.sources()) sb.append(' ').append(src.name()).append(String.format(Locale.ROOT, " %.0f%%", 100 * src.share()));
        }
        if (now.pack() != null)
            sb.append(String.format(Locale.ROOT, " | imbalance %.2f pad %.1f%%", now.pack().imbalance(), 100 * now.pack().paddingFraction()));
        if (now.cache() != null && now.cache().hits() + now.cache().misses() > 0)
            sb.append(String.format(Locale.ROOT, " | cache %.0f%% hit", 100 * now.cache().hitRate()));
        now.waitRatio().ifPresent(w -> sb.append(" | wait ").append(String.format(Locale.ROOT, "%.0f%%", 100 * w)));
        if (now.verdict() != null && !now.verdict().isEmpty()) sb.append(" | ").append(now.verdict());
        if (now.autotune() != null) sb.append(" | ").append(now.autotune());
        if (now.totalBatches() >= 0) {
            long left = Math.max(0, now.totalBatches() - now.deliveredBatches());
            sb.append(" | ETA ");
            if (left == 0) sb.append("0s");
            else if (Double.isNaN(batchesPerSecond) || batchesPerSecond <= 0) sb.append('-');
            else sb.append(duration(Math.round(left / batchesPerSecond)));
        }
        return sb.toString();
    }

    /** {@code | 12 errors (fetch: file not found 10, decode: … 2, …)} when {@code count} is not 0. */
    private static void skipped(StringBuilder sb, long count, String what, SampleException.Kind kind, List<FeedErrors.Cause> causes) {
        if (count == 0) return;
        sb.append(" | ").append(count).append(' ').append(what);
        var shown = causes.stream().filter(c -> c.kind().equals(kind.label())).toList();
        if (shown.isEmpty()) return;
        sb.append(" (");
        for (int i = 0; i < Math.min(CAUSES_SHOWN, shown.size()); i++)
            sb.append(i == 0 ? "" : ", ").append(shown.get(i).label()).append(' ').append(shown.get(i).count());
        if (shown.size() > CAUSES_SHOWN) sb.append(", …");
        sb.append(')');
    }

    static String rate(double perSecond) {
        return perSecond >= 100 ? String.format(Locale.ROOT, "%.0f", perSecond) : String.format(Locale.ROOT, "%.1f", perSecond);
    }

    static String duration(long seconds) {
        if (seconds >= 3600) return String.format(Locale.ROOT, "%dh%02dm", seconds / 3600, seconds % 3600 / 60);
        if (seconds >= 60) return String.format(Locale.ROOT, "%dm%02ds", seconds / 60, seconds % 60);
        return seconds + "s";
    }

    private final PrintWriter out;
    private final Supplier<Sample> probe;
    private final ScheduledExecutorService scheduler; // null when quiet
    private Sample prev; // only the scheduler thread touches it
    private boolean written; // guarded by this

    private StatusLine(PrintWriter out, Supplier<Sample> probe, boolean show, long intervalMillis) {
        this.out = out;
        this.probe = probe;
        if (!show) {
            this.scheduler = null;
            return;
        }
        this.scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
            var t = new Thread(r, "stoker-status-line");
            t.setDaemon(true);
            return t;
        });
        this.prev = safeProbe();
        scheduler.scheduleWithFixedDelay(this::tick, intervalMillis, intervalMillis, TimeUnit.MILLISECONDS);
    }

    /** Starts a status line on {@code out} if {@link #enabled()}; otherwise one that never writes. */
    public static StatusLine start(PrintWriter out, Supplier<Sample> probe) {
        return new StatusLine(out, probe, enabled(), INTERVAL_MILLIS);
    }

    /** For tests: shows or not as told, at the given interval. */
    static StatusLine start(PrintWriter out, Supplier<Sample> probe, boolean show, long intervalMillis) {
        return new StatusLine(out, probe, show, intervalMillis);
    }

    /** Whether this status line writes at all. */
    boolean active() { return scheduler != null; }

    private Sample safeProbe() {
        try {
            return probe.get();
        } catch (RuntimeException e) {
            return null; // a probe racing shutdown; the next tick tries again
        }
    }

    private void tick() {
        var now = safeProbe();
        if (now == null) return;
        String text = format(prev, now);
        prev = now;
        synchronized (this) {
            if (scheduler.isShutdown()) return;
            out.print(REWRITE + text);
            out.flush();
            written = true;
        }
    }

    /** Stops updating and erases the line (if anything was written). */
    @Override
    public void close() {
        if (scheduler == null) return;
        scheduler.shutdownNow();
        synchronized (this) {
            if (written) {
                out.print(REWRITE);
                out.flush();
                written = false;
            }
        }
    }
}
