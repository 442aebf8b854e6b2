package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.Ticker;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.IntFunction;

/**
 * The samples a feed skipped, and its bad-input policy ({@link ErrorPolicy}): every skipped sample counted by stage and
 * by cause ({@link SkipCounts}), and each one appended to the errors file when there is one ({@link ErrorsFile}: one JSON
 * object per line, flushed per batch: {@code docs/run-data.md}).
 *
 * <p>A skipped sample is an error (broken: a missing image, a malformed line) or filtered (sound, but
 * dropped by a limit the user set: {@code --max-seq-len}, {@code --max-images}; {@link Kind}). Both are
 * skipped, so per rank delivered + skipped = scheduled; only errors count toward the error rate, and
 * {@code --on-error fail} stops at errors only.
 *
 * <p>Samples are recorded when their batch is delivered, so that per rank delivered + skipped =
 * scheduled holds for what the trainer saw. The policy is judged at the same point and, already when a
 * rank's stream produces a batch (before a trainer asks for it), under FAIL (an error in it).
 *
 * <p>Judged early ({@link EarlyJudgement}): under SKIP, a source whose first {@link #EARLY_SAMPLES} samples from the feed's
 * start all fail stops the feed at once rather than after {@link #MIN_SCHEDULED_FOR_RATE} samples. Each sample is judged
 * as soon as its outcome is known ({@link #outcome}: a fetch or parse error, an encoded sample), before its batch is made,
 * so the judgement needs no trainer and no room in the prefetch buffers, and again from the batches made (errors found
 * only while pixels are written). Both the rate and the early judgement are off with a rate limit of 1. Once failed, the
 * failure is final: every later call returns it, and the listeners (the feeder, which fails every rank) were told once.
 *
 * <p>Samples a step took from the order but gave no rank (a packed step's records over a budget alone, or marked by the
 * shape index: {@link StepSchedule#leftOut}) reach no rank's batch, so the feed hands each step to {@link #leftOut} once,
 * which records and counts them as filtered.
 *
 * <p>Threading: thread-safe; writers are pipeline threads and consumer threads, readers anyone.
 * The file is written under the lock; bad samples are rare, so this costs nothing on good batches.
 */
public final class FeedErrors implements AutoCloseable {
    public static final int MAX_RECORDS = 10_000;
    /**
     * Scheduled samples (of delivered batches, all ranks) before the error rate is judged: below
     * this a single bad sample early in a run would be a rate of several percent.
     */
    public static final long MIN_SCHEDULED_FOR_RATE = 100;
    /**
     * Failed samples with none delivered, from a feed's start, that stop it under a rate limit below 1
     * without waiting for {@link #MIN_SCHEDULED_FOR_RATE}: in a shuffled order, 32 failures in a row out of
     * a source that is 50% good happen once in 4 billion starts, while a source none of whose samples can be
     * read is stopped within its first batches.
     */
    public static final int EARLY_SAMPLES = 32;
    /** Distinct causes counted apart; later new causes are counted as {@link #OTHER_REASON} of their kind and stage. */
    public static final int MAX_CAUSES = 32;
    /** The reason a cause beyond {@link #MAX_CAUSES} is counted under. */
    public static final String OTHER_REASON = "other";
    /** Causes quoted in the message of a run failed for its error rate. */
    static final int LAST_CAUSES = 3;
    /** Most common causes named in a failure's message. */
    static final int TOP_CAUSES = 3;

    /**
     * Skipped samples of one cause.
     *
     * @param kind    {@code error} or {@code filtered}
     * @param stage   the stage that refused them, lower case
     * @param reason  the cause's class ({@link SampleException#reason()}), or {@link #OTHER_REASON}
     * @param count   samples skipped for it
     * @param example the id of the first of them
     */
    public record Cause(String kind, String stage, String reason, long count, String example) {
        /** {@code stage: reason}. */
        public String label() { return stage + ": " + reason; }
    }

    /**
     * What a feed skipped so far.
     *
     * @param errors   broken samples skipped (what the error rate counts)
     * @param filtered samples dropped by a limit the user set
     * @param byStage  skipped samples (errors and filtered) per stage
     * @param causes   skipped samples per cause, the most common first (at most {@link #MAX_CAUSES} plus an
     *                 {@link #OTHER_REASON} per kind and stage)
     */
    public record Counts(long errors, long filtered, Map<SampleException.Stage, Long> byStage, List<Cause> causes) {
        public static final Counts NONE = new Counts(0, 0, Map.of(), List.of());

        /** The most common {@code n} causes of {@code kind}. */
        public List<Cause> top(Kind kind, int n) {
            return causes.stream().filter(c -> c.kind().equals(kind.label())).limit(n).toList();
        }
    }

    private final ErrorPolicy policy;
    private final double maxErrorRate;
    /** The job's errors file; null: none. */
    private final ErrorsFile file;
    private final SkipCounts counts = new SkipCounts();
    private final List<Consumer<BadInputException>> listeners = new ArrayList<>();
    private long scheduled;
    private long priorErrors, priorScheduled;
    /** The schedule the feed walks: it places the early judgement's samples and names what its steps leave out; null: none. */
    private final StepSchedule schedule;
    private final EarlyJudgement early;
    private BadInputException failure;

    private FeedErrors(ErrorPolicy policy, double maxErrorRate, ErrorsFile file, StepSchedule schedule, EarlyJudgement early) {
        this.policy = policy;
        this.maxErrorRate = maxErrorRate;
        this.file = file;
        this.schedule = schedule;
        this.early = early;
    }

    /** The policy of {@code config}, appending to its errors file (created with its folders) when it names one; not judged early. */
    static FeedErrors open(FeedConfig config) throws IOException { return open(config, null, List.of("the manifest")); }

    /**
     * {@link #open(FeedConfig)} for a feed of {@code schedule} (null: none) over {@code sources} (their names in messages, in
     * the order the records number them; one: the manifest's), starting at {@code config.start()} on the ranks
     * {@code config.localRanks()}: each source judged early on its own ({@link EarlyJudgement}), its wait by the real
     * clock. A feed that does not start at the origin (a restarted service, a trainer's resume) judges its error rate over
     * the job so far, as the errors file tells it, rather than from zero at each start (audit #13). Before the start it
     * counts the samples the schedule had up to there ({@link #priorScheduled()}, in this schedule's steps: exact unless
     * the rank count changed) and the file's errors among them ({@link #priorErrors()}; filtered entries are not errors);
     * samples it lists from after the start (a job moved back) are counted again when they are skipped again.
     */
    static FeedErrors open(FeedConfig config, StepSchedule schedule, List<String> sources) throws IOException {
        return open(config, schedule, sources, Ticker.system());
    }

    /** {@link #open(FeedConfig, StepSchedule, List)} with the early judgement's wait measured by {@code ticker}. */
    static FeedErrors open(FeedConfig config, StepSchedule schedule, List<String> sources, Ticker ticker) throws IOException {
        boolean judged = schedule != null && config.onError() == ErrorPolicy.SKIP && config.maxErrorRate() < 1;
        var early = judged ? EarlyJudgement.of(schedule, config.start(), config.localRanks(), sources, config.maxErrorRate(), ticker)
                : EarlyJudgement.off(sources);
        var file = config.errorsFile() == null ? null : ErrorsFile.open(config.errorsFile());
        var opened = new FeedErrors(config.onError(), config.maxErrorRate(), file, schedule, early);
        if (file != null && schedule != null) opened.countBefore(config.start(), config.localRanks());
        return opened;
    }

    /** The job's samples before {@code start}, and the listed errors among them, go into the error rate. */
    private void countBefore(ScheduleCursor start, RankRange local) {
        long before = start.epoch() * schedule.positionsPerEpoch() + start.position();
        // the local ranks' share of the positions before the start: a node's errors file lists its own ranks' samples only
        int ranks = schedule.ranks();
        priorScheduled = local.count() == ranks ? before : before * local.count() / ranks;
        priorErrors = file.errorsBefore(schedule.order(), start);
    }

    /** Samples the schedule had before this feed's start (0 without an errors file, or at the origin). */
    public synchronized long priorScheduled() { return priorScheduled; }

    /** Errors the errors file lists from before this feed's start. */
    public synchronized long priorErrors() { return priorErrors; }

    /**
     * One sample's outcome in a rank's stream, as soon as it is known (from any pipeline thread): for the early
     * judgement, an error or an encoded sample among the feed's first samples; everything else waits for its batch.
     */
    void outcome(SamplePipeline.Outcome o) {
        if (early.isOver()) return;
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null) return;
            BadInputException stop = switch (o) {
                case SamplePipeline.Failed f -> early.judge(f.slot().batch().epoch(), f.slot().batch().step(), f.slot().batch().rank(),
                        f.slot().position(), f.kind() == Kind.ERROR ? FeedError.of(f.slot().batch().epoch(), f.slot().batch().step(),
                                f.slot().batch().rank(), f.skipped()) : null);
                case SamplePipeline.Encoded e -> early.judge(e.slot().batch().epoch(), e.slot().batch().step(), e.slot().batch().rank(),
                        e.slot().position(), null);
                default -> null; // fetched or prepared: its pixels may still fail
            };
            if (stop == null) return;
            tell = fail(stop);
        }
        notify(tell);
    }

    /**
     * A rank's stream produced {@code b}: under FAIL an error in it, under SKIP a source whose first samples all fail,
     * fails the feed here, before a trainer asks for it. Returns the feed's failure (this one or an earlier one), or null
     * while it runs.
     */
    BadInputException produced(FeedBatch b) {
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null) return failure;
            var stop = policy == ErrorPolicy.FAIL ? stopAtFirstError(b.epoch(), b.step(), b.rank(), b.skippedSamples())
                    : early.judge(b.epoch(), b.step(), b.rank(), b.skippedSamples());
            if (stop == null) return null;
            tell = fail(stop);
        }
        return notify(tell);
    }

    /**
     * {@code b} is being handed to its rank: records its skipped samples and judges the policy.
     * Returns the feed's failure (then {@code b} must not be delivered), or null.
     */
    BadInputException delivered(FeedBatch b) {
        return delivered(b.epoch(), b.step(), b.rank(), b.scheduled(), b.skippedSamples());
    }

    /** Rank {@code rank}'s batch of (epoch, step), {@code scheduled} samples of which {@code skipped} were left out, is being handed out. */
    BadInputException delivered(long epoch, long step, int rank, int scheduledInBatch, List<SkippedSample> skipped) {
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null) return failure;
            BadInputException stop;
            if (policy == ErrorPolicy.FAIL) {
                stop = stopAtFirstError(epoch, step, rank, skipped);
                if (stop == null) {
                    if (!skipped.isEmpty()) recordAll(epoch, step, rank, skipped); // filtered only
                    scheduled += scheduledInBatch;
                }
            } else {
                if (!skipped.isEmpty()) recordAll(epoch, step, rank, skipped);
                scheduled += scheduledInBatch;
                stop = early.judge(epoch, step, rank, skipped);
                if (stop == null) stop = judgeRate();
            }
            if (stop == null) return null;
            tell = fail(stop);
        }
        return notify(tell);
    }

    /** Under FAIL: when {@code skipped} holds an error, records the batch's skipped samples and returns the failure naming it. Under the lock. */
    private BadInputException stopAtFirstError(long epoch, long step, int rank, List<SkippedSample> skipped) {
        if (skipped.stream().noneMatch(s -> s.kind() == Kind.ERROR)) return null;
        var bad = recordAll(epoch, step, rank, skipped).stream().filter(e -> e.kind() == Kind.ERROR).toList();
        return new BadInputException("bad input, stopped at the first bad sample (error policy FAIL): " + bad.getFirst().describe()
                + (bad.size() > 1 ? " (and " + (bad.size() - 1) + " more in the same batch)" : ""), bad);
    }

    /** Under SKIP: the job's error rate so far against the limit, from {@link #MIN_SCHEDULED_FOR_RATE} samples on. Under the lock. */
    private BadInputException judgeRate() {
        long bad = counts.errors() + priorErrors, of = scheduled + priorScheduled;
        if (maxErrorRate >= 1 || of < MIN_SCHEDULED_FOR_RATE || bad <= maxErrorRate * of) return null;
        var last = counts.lastErrors();
        var lastCauses = new StringBuilder();
        for (var e : last) lastCauses.append(lastCauses.isEmpty() ? "" : "; ").append(e.describe());
        long filtered = counts.filtered();
        return new BadInputException(String.format(Locale.ROOT,
                "bad input: %d of %d scheduled samples failed (%.2f%%)%s, over the limit of %.2f%% (max error rate %s)%s; %s; last: %s",
                bad, of, 100.0 * bad / of, priorScheduled == 0 ? "" : String.format(Locale.ROOT,
                        ", %d of %d of them before this service started (from the errors file)", priorErrors, priorScheduled),
                100 * maxErrorRate, maxErrorRate, filtered == 0 ? "" : " (" + filtered + " more filtered, not counted)",
                counts.mostCommonErrors(TOP_CAUSES), lastCauses), last);
    }

    /** Records the samples skipped in rank {@code rank}'s batch of (epoch, step) and writes them to the file; returns them. */
    synchronized List<FeedError> recordAll(long epoch, long step, int rank, List<SkippedSample> skipped) {
        var recorded = new ArrayList<FeedError>(skipped.size());
        for (var s : skipped) {
            var e = FeedError.of(epoch, step, rank, s);
            record(e);
            recorded.add(e);
        }
        flush();
        return recorded;
    }

    /** Steps whose left-out samples were recorded, the latest {@link #LEFT_OUT_STEPS_KEPT}; older: at or below {@link #leftOutFloor}. */
    private final TreeSet<ScheduleCursor> leftOutRecorded = new TreeSet<>(STEP_ORDER);
    /** The latest step forgotten from {@link #leftOutRecorded}: a step at or before it counts as recorded. Null: none forgotten. */
    private ScheduleCursor leftOutFloor;
    /** Recorded steps remembered one by one; the feed's ranks are far fewer steps apart (their prefetch is a few batches). */
    static final int LEFT_OUT_STEPS_KEPT = 4096;
    private static final Comparator<ScheduleCursor> STEP_ORDER =
            Comparator.comparingLong(ScheduleCursor::epoch).thenComparingLong(ScheduleCursor::position);

    /**
     * The step of {@code batch} (any rank's share of it) is being taken: records the samples it took from the order but
     * gave no rank ({@link StepSchedule#leftOut}: a packed step's records over a budget alone, or marked by the shape
     * index) as {@link Kind#FILTERED} samples of stage {@code manifest} (decided from the shape index, before any fetch),
     * named by {@code sampleId} (the feed passes {@code records::id}, the id a sample has until its line is read, as the
     * pipeline names a sample it could not read), in the errors file with rank −1 (no rank got them), and counted among the
     * scheduled samples of the error rate (they are positions of the job, as a batch's filtered samples are). The shape
     * index's errors count as filtered too: {@code stoker validate} found and reported them, and the feed never reads
     * them, so they say nothing about whether its inputs can be read (the early judgement and the rate judge what the feed
     * reads).
     *
     * <p>Exactly once per step. Who calls: the feed, from the rank iterator of its <em>first local rank</em>
     * ({@code config.localRanks().first()}) as that rank's stream takes each step; every step reaches every local rank,
     * so one rank's iterator sees them all. A step already recorded (by its cursor: one of the last
     * {@value #LEFT_OUT_STEPS_KEPT} recorded, or older than all of them) is ignored, so further callers for the same step
     * record nothing. Unlike a batch's skipped samples, these are recorded when the step is taken, not when a batch is
     * delivered: they belong to no rank's batch. A feed moved back is a new feed (and a new {@code FeedErrors}).
     *
     * @return the samples recorded now (0 for a step recorded already, or one that left nothing out)
     * @throws IllegalArgumentException when {@code batch} is not a step of this feed's kind of schedule, or the feed has none
     */
    int leftOut(ScheduledBatch batch, IntFunction<String> sampleId) {
        if (schedule == null) throw new IllegalArgumentException("a step's left-out samples are recorded against its schedule: open this "
                + "FeedErrors with the feed's StepSchedule");
        var left = schedule.leftOut(batch);
        if (left.isEmpty()) return 0;
        synchronized (this) {
            var at = batch.cursor();
            if (leftOutFloor != null && STEP_ORDER.compare(at, leftOutFloor) <= 0) return 0;
            if (!leftOutRecorded.add(at)) return 0;
            if (leftOutRecorded.size() > LEFT_OUT_STEPS_KEPT) leftOutFloor = leftOutRecorded.pollFirst();
            for (var l : left)
                record(new FeedError(idOf(sampleId, l.record()), l.record(), batch.epoch(), batch.step(), -1,
                        SampleException.Stage.MANIFEST, l.cause(), Kind.FILTERED, l.reason()));
            scheduled += left.size();
            flush();
            return left.size();
        }
    }

    /** The id {@code sampleId} gives {@code record}, or {@code record N} when it gives none. */
    private static String idOf(IntFunction<String> sampleId, int record) {
        String id = sampleId == null ? null : sampleId.apply(record);
        return id == null || id.isBlank() ? "record " + record : id;
    }

    private void record(FeedError e) {
        counts.add(e);
        if (file != null) file.append(e); // unless an earlier run of this job listed it already
    }

    private void flush() {
        if (file != null) file.flush();
    }

    private List<Consumer<BadInputException>> fail(BadInputException e) {
        failure = e;
        early.end();
        return List.copyOf(listeners);
    }

    /**
     * {@code b}, once it may be handed out: at once, unless every sample of it failed while the early judgement is
     * still open. Such a batch waits for the judgement (at most {@link EarlyJudgement#WAIT_MILLIS}), so that a wrong image
     * folder reaches the trainer as the judgement's error rather than as an empty batch first.
     */
    <B extends FeedBatch> CompletableFuture<B> afterEarlyJudgement(B b) { return early.after(b); }

    private BadInputException notify(List<Consumer<BadInputException>> tell) {
        BadInputException f;
        synchronized (this) {
            f = failure;
        }
        for (var l : tell) l.accept(f);
        return f;
    }

    /** Calls {@code listener} once when the policy fails the feed (at once if it already has). */
    public void onFailure(Consumer<BadInputException> listener) {
        BadInputException now;
        synchronized (this) {
            now = failure;
            if (now == null) listeners.add(listener);
        }
        if (now != null) listener.accept(now);
    }

    /** Why the policy failed the feed, or null while it runs. */
    public synchronized BadInputException failure() { return failure; }

    public ErrorPolicy policy() { return policy; }

    /** Skipped samples recorded, errors and filtered: skipped in delivered batches, or those of the batch that failed the feed under FAIL. */
    public synchronized long total() { return counts.total(); }

    /** Broken samples recorded (what the error rate counts). */
    public synchronized long errors() { return counts.errors(); }

    /** Samples recorded as dropped by a limit the user set ({@code --max-seq-len}, {@code --max-images}). */
    public synchronized long filtered() { return counts.filtered(); }

    /** Samples scheduled in delivered batches, all ranks (the denominator of the error rate). */
    public synchronized long scheduled() { return scheduled; }

    /** Skipped samples (errors and filtered) per stage. */
    public synchronized Map<SampleException.Stage, Long> byStage() { return counts.byStage(); }

    /** The counts by kind, stage and cause. */
    public synchronized Counts counts() { return counts.counts(); }

    /** The kept records, in the order they were recorded (which is not the schedule order across ranks). */
    public synchronized List<FeedError> records() { return counts.records(); }

    /** Closes the errors file (everything recorded is already flushed). */
    @Override
    public synchronized void close() {
        if (file != null) file.close();
    }
}
