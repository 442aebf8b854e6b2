package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.Ticker;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The early judgement of a feed under SKIP: a source whose first {@link FeedErrors#EARLY_SAMPLES} samples from the feed's
 * start all fail stops the feed at once, rather than after {@link FeedErrors#MIN_SCHEDULED_FOR_RATE} samples — a wrong
 * image folder, a manifest of another layout: a feed that would hand out empty batches forever. A sample among a
 * source's first that is not an error (encoded, delivered or filtered) ends that source's judgement; when every source's
 * has ended, the judgement is over.
 *
 * <p>Placed once: the first samples of each source are found by walking the schedule's steps from the feed's start, step
 * by step, over the ranks this feed serves in order, each share's samples in order — the walk the feed's rank iterators
 * make, so each sample is known by (epoch, step within the epoch, rank, position in the share), whatever the schedule
 * (batches of B samples, or packs whose sizes vary). Counting by place makes the judgement independent of thread timing;
 * a sample seen twice (as it fails, then in its batch) counts once. A source of so small a share that its first samples
 * lie beyond the schedule's {@link StepSchedule#scanLimit()} is left to the error rate.
 *
 * <p>The wait: a batch every sample of which failed while the judgement is open waits for it, at most
 * {@link #WAIT_MILLIS} by the {@link Ticker} given, so that a wrong folder reaches the trainer as the judgement's error
 * rather than as an empty batch first.
 *
 * <p>Threading: {@link #judge} and {@link #end} are called under the owner's lock ({@link FeedErrors}); {@link #isOver}
 * and {@link #after} from any thread.
 */
final class EarlyJudgement {
    /** How long an empty batch waits for the judgement before it is handed out anyway (see {@link #after}). */
    static final long WAIT_MILLIS = 10_000;
    /** How often the waits are checked against the ticker while any is open. */
    static final long POLL_MILLIS = 50;

    /** A share of a step: its epoch, its step within the epoch, its rank. */
    private record StepRank(long epoch, long step, int rank) { }

    /** A share's samples, and per position its source and its ordinal among that source's first samples (−1: not among them). */
    private record Place(int[] records, int[] source, int[] ordinal) { }

    /** An empty batch waiting for the judgement, until {@code deadline} by the ticker. */
    private record Wait(CompletableFuture<?> released, Runnable release, long deadline) { }

    private final Map<StepRank, Place> places;
    private final List<String> sourceNames;
    private final String source;
    private final double maxErrorRate;
    private final FeedError[][] failed;
    private final int[] failedCount;
    private final boolean[] done;
    private int sourcesLeft;
    /** Whether the judgement is over (or off): read without the lock on every sample's outcome. */
    private volatile boolean over;
    /** Completes when the judgement is over (or off), or the feed failed. */
    private final CompletableFuture<Void> overFuture = new CompletableFuture<>();
    private final Ticker ticker;
    private final List<Wait> waits = new ArrayList<>(); // guarded by itself
    private boolean polling; // guarded by waits

    private EarlyJudgement(Map<StepRank, Place> places, int sources, List<String> sourceNames, double maxErrorRate, boolean over,
                           Ticker ticker) {
        this.places = places;
        this.sourceNames = List.copyOf(sourceNames);
        this.source = String.join(" + ", sourceNames);
        this.maxErrorRate = maxErrorRate;
        this.failed = new FeedError[sources][FeedErrors.EARLY_SAMPLES];
        this.failedCount = new int[sources];
        this.done = new boolean[sources];
        this.sourcesLeft = sources;
        this.over = over;
        this.ticker = ticker;
        if (over) overFuture.complete(null);
    }

    /** No early judgement: under FAIL, without a rate limit, or without a schedule to place samples by. */
    static EarlyJudgement off(List<String> sourceNames) {
        return new EarlyJudgement(Map.of(), 1, sourceNames, 1, true, Ticker.system());
    }

    /**
     * The judgement of a feed of {@code schedule} from {@code start} over the ranks {@code local}, its sources named
     * {@code sourceNames} (in the order the records number them), under {@code maxErrorRate} (named in its message).
     */
    static EarlyJudgement of(StepSchedule schedule, ScheduleCursor start, RankRange local, List<String> sourceNames, double maxErrorRate,
                             Ticker ticker) {
        var mix = schedule.order().mix();
        int sources = mix == null ? 1 : mix.sources();
        var places = new HashMap<StepRank, Place>();
        var ranks = new ArrayList<Iterator<ScheduledBatch>>(local.count());
        for (int r = local.first(); r <= local.last(); r++) ranks.add(schedule.iterator(start, r));
        int[] seen = new int[sources];
        int left = sources;
        for (long scanned = 0; left > 0 && scanned < schedule.scanLimit(); ) {
            for (var it : ranks) {
                var b = it.next();
                int[] records = b.indices();
                int[] source = new int[records.length], ordinal = new int[records.length];
                boolean any = false;
                for (int p = 0; p < records.length; p++) {
                    int src = mix == null ? 0 : mix.sourceOfRecord(records[p]);
                    source[p] = src;
                    ordinal[p] = -1;
                    if (seen[src] >= FeedErrors.EARLY_SAMPLES) continue;
                    ordinal[p] = seen[src];
                    any = true;
                    if (++seen[src] == FeedErrors.EARLY_SAMPLES) left--;
                }
                scanned += records.length;
                if (any) places.put(new StepRank(b.epoch(), b.step(), b.rank()), new Place(records, source, ordinal));
            }
        }
        return new EarlyJudgement(places, sources, sourceNames, maxErrorRate, false, ticker);
    }

    /** Whether the judgement is over (or off, or the feed failed). */
    boolean isOver() { return over; }

    /**
     * The judgement over a batch made of rank {@code rank}'s share of (epoch, step), {@code skipped} its samples left
     * out: each position's outcome. Returns the failure it finds, or null. Under the owner's lock.
     */
    BadInputException judge(long epoch, long step, int rank, List<SkippedSample> skipped) {
        if (over) return null;
        var place = places.get(new StepRank(epoch, step, rank));
        if (place == null) return null; // no sample of this share is among its source's first
        var byIndex = new HashMap<Integer, SkippedSample>(skipped.size() * 2);
        for (var s : skipped) byIndex.put(s.datasetIndex(), s);
        BadInputException stop = null;
        int[] records = place.records();
        for (int p = 0; p < records.length && stop == null && !over; p++) {
            var s = byIndex.get(records[p]);
            stop = judge(epoch, step, rank, p, s == null || s.kind() != Kind.ERROR ? null : FeedError.of(epoch, step, rank, s));
        }
        return stop;
    }

    /**
     * The judgement of one sample, at {@code position} of rank {@code rank}'s share of (epoch, step): {@code failedAs} when
     * it is an error, null when it is not (encoded, delivered or filtered). Only each source's first samples from the
     * start count: one that is not an error ends its source's judgement, the last of them failing stops the feed. Under
     * the owner's lock.
     */
    BadInputException judge(long epoch, long step, int rank, int position, FeedError failedAs) {
        if (over) return null;
        var place = places.get(new StepRank(epoch, step, rank));
        if (place == null || position < 0 || position >= place.ordinal().length || place.ordinal()[position] < 0) return null;
        return judge(place.source()[position], place.ordinal()[position], failedAs);
    }

    /** The judgement of the {@code ordinal}-th sample of source {@code src} from the start. */
    private BadInputException judge(int src, int ordinal, FeedError failedAs) {
        if (done[src]) return null;
        if (failedAs == null) {
            done[src] = true;
            if (--sourcesLeft == 0) {
                over = true;
                overFuture.complete(null);
            }
            return null;
        }
        if (failed[src][ordinal] != null) return null;
        failed[src][ordinal] = failedAs;
        if (++failedCount[src] < FeedErrors.EARLY_SAMPLES) return null;
        over = true; // overFuture completes as the feed fails with this judgement (end)
        var all = List.of(failed[src]);
        return new BadInputException(String.format(Locale.ROOT,
                "bad input: the first %d samples of %s all failed, none delivered (a source is judged on its first %d samples "
                        + "under max error rate %s); %s", all.size(), sourceNames.size() == 1 ? source : "source " + src + " ("
                        + sourceNames.get(src) + ")", FeedErrors.EARLY_SAMPLES, maxErrorRate, mostCommon(all)), all);
    }

    /** The feed failed (by this judgement or another rule): nothing waits for the judgement any more. */
    void end() {
        over = true;
        overFuture.complete(null);
    }

    /** {@code most common cause: stage: reason, n of m (e.g. …); then …} over {@code failed}. */
    private static String mostCommon(List<FeedError> failed) {
        var byCause = new LinkedHashMap<String, List<FeedError>>();
        for (var e : failed)
            byCause.computeIfAbsent(e.stage().name().toLowerCase(Locale.ROOT) + ": " + e.reason(), k -> new ArrayList<>()).add(e);
        var ranked = byCause.entrySet().stream().sorted(Comparator.comparingInt(c -> -c.getValue().size())).limit(FeedErrors.TOP_CAUSES)
                .toList();
        var sb = new StringBuilder(ranked.size() > 1 ? "most common causes: " : "most common cause: ");
        for (int i = 0; i < ranked.size(); i++) {
            var c = ranked.get(i);
            sb.append(i == 0 ? "" : "; then ").append(c.getKey()).append(", ").append(c.getValue().size()).append(" of ")
                    .append(failed.size()).append(" (e.g. ").append(c.getValue().getFirst().describe()).append(')');
        }
        return sb.toString();
    }

    /**
     * {@code b}, once it may be handed out: at once, unless every sample of it failed while the judgement is still open.
     * Such a batch waits for the judgement, at most {@link #WAIT_MILLIS} by the ticker; the pipeline runs ahead of the
     * trainer by its fetches in flight, so the first samples are usually judged within moments.
     */
    <B extends FeedBatch> CompletableFuture<B> after(B b) {
        if (b == null || over || b.samples() > 0 || b.scheduled() == 0) return CompletableFuture.completedFuture(b);
        var out = new CompletableFuture<B>();
        overFuture.thenRun(() -> out.complete(b));
        synchronized (waits) {
            waits.add(new Wait(out, () -> out.complete(b), ticker.read() + TimeUnit.MILLISECONDS.toNanos(WAIT_MILLIS)));
            if (!polling) {
                polling = true;
                pollLater();
            }
        }
        return out;
    }

    /** Hands out every waiting batch whose wait is over by the ticker now; returns the waits still open. */
    int expireWaits() {
        long now = ticker.read();
        var due = new ArrayList<Runnable>();
        int open;
        synchronized (waits) {
            waits.removeIf(w -> {
                if (w.released().isDone()) return true;
                if (now - w.deadline() < 0) return false;
                due.add(w.release());
                return true;
            });
            open = waits.size();
        }
        due.forEach(Runnable::run);
        return open;
    }

    private void pollLater() {
        CompletableFuture.delayedExecutor(POLL_MILLIS, TimeUnit.MILLISECONDS).execute(() -> {
            int open = expireWaits();
            synchronized (waits) {
                if (open == 0 && waits.isEmpty()) polling = false;
                else pollLater();
            }
        });
    }
}
