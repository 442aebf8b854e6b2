package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.observe.PackStats;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.core.SampleException.Kind;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.IntFunction;

/**
 * The samples a feed skipped, and its bad-input policy ({@link ErrorPolicy}): every skipped sample
 * counted by stage and by cause, the first {@link #MAX_RECORDS} kept in memory, and each one appended
 * to the errors file when there is one (one JSON object per line, flushed per batch: {@code docs/run-data.md}).
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
 * <p>Judged early: under SKIP, a feed whose first {@link #EARLY_SAMPLES} samples from its start, in the
 * global order (step by step, rank by rank), all fail stops at once rather than after
 * {@link #MIN_SCHEDULED_FOR_RATE} samples — a wrong image folder, a manifest of another layout: a feed
 * that would hand out empty batches forever. Each sample is judged as soon as its outcome is known
 * ({@link #outcome}: a fetch or parse error, an encoded sample), before its batch is made, so the
 * judgement needs no trainer and no room in the prefetch buffers, and again from the batches made
 * (errors found only while pixels are written); a sample among the first that is not an error (encoded,
 * or filtered) ends the judgement. Counting by position makes it independent of thread timing. Both the
 * rate and the early judgement are off with a rate limit of 1. Once failed, the failure is final: every
 * later call returns it, and the listeners (the feeder, which fails every rank) were told once.
 *
 * <p>A packed job ({@link #open(FeedConfig, PackedSchedule, List)}): a rank's batch is its pack, whose size varies by
 * step and rank, so the early judgement places the first samples from the packed schedule's first steps (each pack's
 * segments, step by step, local rank by local rank) instead of by batch size; and the samples the planner leaves out of
 * every pack (over a budget alone, or marked by the shape index) reach no rank's batch, so the feed hands each step's
 * to {@link #packSkipped} once, which records and counts them as filtered.
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

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final System.Logger LOG = System.getLogger(FeedErrors.class.getName());

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

    /** Samples of one cause, the first of them kept as the example. */
    private static final class Tally {
        final Kind kind;
        final SampleException.Stage stage;
        final String reason;
        final FeedError example;
        long count;

        Tally(Kind kind, SampleException.Stage stage, String reason, FeedError example) {
            this.kind = kind;
            this.stage = stage;
            this.reason = reason;
            this.example = example;
        }

        Cause cause() { return new Cause(kind.label(), stage.name().toLowerCase(Locale.ROOT), reason, count, example.sampleId()); }
    }

    private final ErrorPolicy policy;
    private final double maxErrorRate;
    private final String source;
    private final Path file;
    private BufferedWriter out;
    private final List<FeedError> records = new ArrayList<>();
    private final ArrayDeque<FeedError> last = new ArrayDeque<>(LAST_CAUSES);
    private final EnumMap<SampleException.Stage, Long> byStage = new EnumMap<>(SampleException.Stage.class);
    private final LinkedHashMap<String, Tally> causes = new LinkedHashMap<>();
    private final List<Consumer<BadInputException>> listeners = new ArrayList<>();
    private long total, errors, filtered;
    private long scheduled;
    private long priorErrors, priorScheduled;
    /** The schedule the early judgement places samples by; null: no early judgement. */
    private final SampleSchedule schedule;
    /** The feed's first step, as steps since the schedule's origin (epoch × steps per epoch + step). */
    private final long startStep;
    /** The sources' names in messages, in the order the records number them. */
    private final List<String> sourceNames;
    /**
     * For a mix of sources: each of the first {@link #EARLY_SAMPLES} positions of every source from the start (counted from
     * the feed's start in the global order) to its source and its ordinal among that source's samples; null for one source,
     * whose ordinal is the position.
     */
    private final Map<Long, int[]> earlyPlaces;
    /** The early judgement's failed samples per source by ordinal from the start; each ordinal once. */
    private final FeedError[][] earlyFailed;
    private final int[] earlyFailedCount;
    /** Per source: its judgement is over (a sample of it among its first was not an error). */
    private final boolean[] earlyDone;
    private int earlySourcesLeft;
    /** Whether the early judgement is over (or off): read without the lock on every sample's outcome. */
    private volatile boolean earlyJudged;
    /** Completes when the early judgement is over (or off), or the feed failed: see {@link #afterEarlyJudgement}. */
    private final CompletableFuture<Void> earlyOver = new CompletableFuture<>();
    private BadInputException failure;

    private FeedErrors(ErrorPolicy policy, double maxErrorRate, List<String> sources, Path file, BufferedWriter out, SampleSchedule schedule,
                       PackedSchedule packed, dev.stoker.core.ScheduleCursor start, long startLabel, RankRange local) {
        this.policy = policy;
        this.local = schedule == null ? null : local;
        this.maxErrorRate = maxErrorRate;
        this.sourceNames = List.copyOf(sources);
        this.source = String.join(" + ", sources);
        this.file = file;
        this.out = out;
        this.schedule = schedule;
        this.packed = packed;
        this.startStep = schedule == null || packed != null ? 0
                : start.epoch() * schedule.stepsPerEpoch() + start.position() / schedule.positionsPerStep();
        this.earlyJudged = schedule == null || policy != ErrorPolicy.SKIP || maxErrorRate >= 1;
        if (earlyJudged) earlyOver.complete(null);
        int n = schedule != null && schedule.mix() != null ? schedule.mix().sources() : 1;
        this.earlyFailed = new FeedError[n][EARLY_SAMPLES];
        this.earlyFailedCount = new int[n];
        this.earlyDone = new boolean[n];
        this.earlySourcesLeft = n;
        this.earlyPlaces = earlyJudged || packed != null || schedule.mix() == null ? null : earlyPlaces(schedule, start, startStep, local);
        this.earlyPacks = earlyJudged || packed == null ? null : earlyPacks(packed, start, Math.max(0, startLabel), local);
    }

    /** A packed job's schedule (null: unpacked): its steps place the early judgement's samples and name the planner's skips. */
    private final PackedSchedule packed;

    /**
     * A packed job's first steps from the feed's start, per (epoch, step in the epoch, rank) of a local rank: the pack's
     * records and, per position, its source and its ordinal among that source's first {@link #EARLY_SAMPLES} samples (−1:
     * not among them); only the packs holding such a position. Null for an unpacked job.
     */
    private final Map<StepRank, EarlyPack> earlyPacks;

    private record StepRank(long epoch, long step, int rank) { }

    private record EarlyPack(int[] records, int[] source, int[] ordinal) { }

    /**
     * Positions scanned at most, in a packed job, to find every source's first samples: each step is planned to be
     * scanned (about 1.3 µs a sample), so the scan stops sooner than an unpacked job's {@link #EARLY_SCAN_LIMIT}; a source
     * of a share below 32 in 65,536 is judged by the rate.
     */
    static final long EARLY_PACK_SCAN_LIMIT = 1L << 16;

    /**
     * Each source's first {@link #EARLY_SAMPLES} samples of a packed job from {@code start}, in the order {@link #judgeEarly}
     * counts them: step by step, over the local ranks in order, each pack's segments in order. The steps are those the
     * feed's rank iterators yield ({@link PackedSchedule#iterator}), so their (epoch, step, rank) are the batches'.
     */
    private static Map<StepRank, EarlyPack> earlyPacks(PackedSchedule packed, dev.stoker.core.ScheduleCursor start, long startLabel,
                                                       RankRange local) {
        var mix = packed.planner().order().mix();
        int sources = mix == null ? 1 : mix.sources();
        var places = new HashMap<StepRank, EarlyPack>();
        var ranks = new ArrayList<java.util.Iterator<dev.stoker.plan.schedule.ScheduledBatch>>(local.count());
        for (int r = local.first(); r <= local.last(); r++) ranks.add(packed.iterator(start, startLabel, r));
        int[] seen = new int[sources];
        int left = sources;
        for (long scanned = 0; left > 0 && scanned < EARLY_PACK_SCAN_LIMIT; ) {
            for (int i = 0; i < ranks.size(); i++) {
                var b = ranks.get(i).next();
                int[] records = b.indices();
                int[] source = new int[records.length], ordinal = new int[records.length];
                boolean any = false;
                for (int p = 0; p < records.length; p++) {
                    int src = mix == null ? 0 : mix.sourceOfRecord(records[p]);
                    source[p] = src;
                    ordinal[p] = -1;
                    if (seen[src] >= EARLY_SAMPLES) continue;
                    ordinal[p] = seen[src];
                    any = true;
                    if (++seen[src] == EARLY_SAMPLES) left--;
                }
                scanned += records.length;
                if (any) places.put(new StepRank(b.epoch(), b.step(), b.rank()), new EarlyPack(records, source, ordinal));
            }
        }
        return places;
    }

    /**
     * The ranks this feed serves (null without a schedule): the early judgement counts positions over their shares only, in the
     * global order of those ranks, since a node of a multi-node job never sees the others' samples.
     */
    private final RankRange local;

    /** Positions one step has of the ranks this feed serves (an unpacked job's). */
    private long localPositionsPerStep() { return (long) local.count() * schedule.batchSize(); }

    /** Positions scanned at most to find every source's first samples: a source of a smaller share is judged by the rate. */
    static final long EARLY_SCAN_LIMIT = 1L << 22;

    /** Each source's first {@link #EARLY_SAMPLES} positions from {@code start}, as {@link #judgeEarly} counts positions. */
    private static Map<Long, int[]> earlyPlaces(SampleSchedule schedule, dev.stoker.core.ScheduleCursor start, long startStep,
                                                RankRange local) {
        var mix = schedule.mix();
        var places = new HashMap<Long, int[]>();
        int[] seen = new int[mix.sources()];
        int left = mix.sources();
        var c = schedule.aligned(start);
        long pps = schedule.positionsPerStep();
        for (long scanned = 0; left > 0 && scanned < EARLY_SCAN_LIMIT; scanned += pps, c = schedule.next(c)) {
            long stepOffset = c.epoch() * schedule.stepsPerEpoch() + c.position() / pps - startStep;
            for (int r = local.first(); r <= local.last(); r++) {
                int[] batch = schedule.batchAt(c, r);
                for (int p = 0; p < batch.length; p++) {
                    int src = mix.sourceOfRecord(batch[p]);
                    if (seen[src] >= EARLY_SAMPLES) continue;
                    places.put((stepOffset * local.count() + r - local.first()) * schedule.batchSize() + p, new int[] {src, seen[src]});
                    if (++seen[src] == EARLY_SAMPLES) left--;
                }
            }
        }
        return places;
    }

    /** The policy of {@code config}, appending to its errors file (created with its folders) when it names one; not judged early. */
    static FeedErrors open(FeedConfig config) throws IOException { return open(config, null, "the manifest"); }

    /** {@link #open(FeedConfig, SampleSchedule, String)} for a source named as the manifest. */
    static FeedErrors open(FeedConfig config, SampleSchedule schedule) throws IOException { return open(config, schedule, "the manifest"); }

    /**
     * {@link #open(FeedConfig)} for a feed of {@code schedule} (null: none) over {@code source} (its name in messages: the
     * manifest's) starting at {@code config.start()}: a feed that does not start at the origin (a restarted service, a
     * trainer's resume) judges its error rate over the job so far, as the errors file tells it, rather than from zero at
     * each start (audit #13). Before the start it counts the samples the schedule had up to there ({@link #priorScheduled()},
     * in this schedule's steps: exact unless the rank count changed) and the file's errors among them ({@link #priorErrors()};
     * filtered entries are not errors); samples it lists from after the start (a job moved back) are counted again when they
     * are skipped again.
     */
    static FeedErrors open(FeedConfig config, SampleSchedule schedule, String source) throws IOException {
        return open(config, schedule, List.of(source));
    }

    /** {@link #open(FeedConfig, SampleSchedule, String)} over several sources mixed by {@code schedule}, named in its order: each judged early on its own. */
    static FeedErrors open(FeedConfig config, SampleSchedule schedule, List<String> source) throws IOException {
        return open(config, schedule, null, source);
    }

    /**
     * {@link #open(FeedConfig, SampleSchedule, List)} for a packed job: {@code packed}'s steps, from {@code config.start()},
     * place the early judgement's samples (its order, {@code packed.planner().order()}, is the schedule), and
     * {@link #packSkipped} names the samples its planner leaves out of every pack. {@code config.startLabel()} labels the
     * first step as the feed's rank iterators do (a label below 0 is taken as 0: labels do not change a plan, they only
     * let this share the steps the feed plans).
     */
    static FeedErrors open(FeedConfig config, PackedSchedule packed, List<String> source) throws IOException {
        java.util.Objects.requireNonNull(packed, "packed");
        return open(config, packed.planner().order(), packed, source);
    }

    private static FeedErrors open(FeedConfig config, SampleSchedule schedule, PackedSchedule packed, List<String> source) throws IOException {
        Path file = config.errorsFile();
        if (file == null) return new FeedErrors(config.onError(), config.maxErrorRate(), source, null, null, schedule, packed, config.start(),
                config.startLabel(), config.localRanks());
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) Files.createDirectories(parent);
        var listed = listed(file);
        var out = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        var opened = new FeedErrors(config.onError(), config.maxErrorRate(), source, file, out, schedule, packed, config.start(),
                config.startLabel(), config.localRanks());
        opened.written.addAll(listed.keySet());
        if (schedule != null) opened.countBefore(schedule, config.start(), listed);
        return opened;
    }

    /** The job's samples before {@code start}, and the listed errors among them, go into the error rate. */
    private void countBefore(SampleSchedule schedule, dev.stoker.core.ScheduleCursor start, Map<Long, Boolean> listed) {
        // a packed job's steps consume every position of an epoch but its dropped rest (fewer than R samples within the
        // budgets; not known without planning the epoch): its positions are counted, packed, filtered or skipped alike
        long perEpoch = packed != null ? schedule.datasetSize() : schedule.stepsPerEpoch() * schedule.positionsPerStep();
        // the local ranks' share of the positions before the start: a node's errors file lists its own ranks' samples only
        long before = start.epoch() * perEpoch + start.position();
        int ranks = packed != null ? packed.ranks() : schedule.ranks(); // a packed job's order has no ranks of its own
        priorScheduled = local.count() == ranks ? before : before * local.count() / ranks;
        int[] positionOf = null;
        for (var entry : listed.entrySet()) {
            if (!entry.getValue()) continue; // filtered: not an error
            long key = entry.getKey();
            long epoch = key >>> 32;
            int index = (int) key;
            if (epoch > start.epoch()) continue;
            if (epoch == start.epoch()) {
                if (positionOf == null) {
                    int[] perm = schedule.permutationCopy(epoch);
                    positionOf = new int[perm.length];
                    for (int p = 0; p < perm.length; p++) positionOf[perm[p]] = p;
                }
                if (index < 0 || index >= positionOf.length || positionOf[index] >= start.position()) continue;
            }
            priorErrors++;
        }
    }

    /** Samples the schedule had before this feed's start (0 without an errors file, or at the origin). */
    public synchronized long priorScheduled() { return priorScheduled; }

    /** Errors the errors file lists from before this feed's start. */
    public synchronized long priorErrors() { return priorErrors; }

    /** (epoch, dataset index) of every sample the errors file lists already: a resumed run does not list them again (audit #13). */
    private final java.util.Set<Long> written = new java.util.HashSet<>();

    private static long key(long epoch, int datasetIndex) { return epoch << 32 | (datasetIndex & 0xffffffffL); }

    /** The samples {@code file} lists: (epoch, index) key → whether an error (true) or filtered; lines before kinds existed are errors. */
    private static Map<Long, Boolean> listed(Path file) throws IOException {
        var listed = new HashMap<Long, Boolean>();
        if (!Files.exists(file)) return listed;
        try (var lines = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            while ((line = lines.readLine()) != null) {
                if (line.isBlank()) continue;
                try {
                    var node = JSON.readTree(line);
                    if (node.hasNonNull("epoch") && node.hasNonNull("index"))
                        listed.put(key(node.get("epoch").asLong(), node.get("index").asInt()),
                                !Kind.FILTERED.label().equals(node.path("kind").asText(Kind.ERROR.label())));
                } catch (IOException notOurs) {
                    // a line not written by us (cut short by a kill): it names no sample to skip again
                }
            }
        }
        return listed;
    }

    /**
     * One sample's outcome in a rank's stream, as soon as it is known (from any pipeline thread): for the early
     * judgement, an error or an encoded sample among the feed's first samples; everything else waits for its batch.
     */
    void outcome(SamplePipeline.Outcome o) {
        if (earlyJudged) return;
        List<Consumer<BadInputException>> tell;
        synchronized (this) {
            if (failure != null) return;
            BadInputException stop = switch (o) {
                case SamplePipeline.Failed f -> judgeEarly(f.slot().batch().epoch(), f.slot().batch().step(), f.slot().batch().rank(),
                        f.slot().position(), f.kind() == Kind.ERROR ? error(f.slot().batch().epoch(), f.slot().batch().step(),
                                f.slot().batch().rank(), f.skipped()) : null);
                case SamplePipeline.Encoded e -> judgeEarly(e.slot().batch().epoch(), e.slot().batch().step(), e.slot().batch().rank(),
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
                    : judgeEarly(b.epoch(), b.step(), b.rank(), b.skippedSamples());
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
                stop = judgeEarly(epoch, step, rank, skipped);
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

    /** The early judgement over a batch made of rank {@code rank}'s share of (epoch, step): each position's outcome. Under the lock. */
    private BadInputException judgeEarly(long epoch, long step, int rank, List<SkippedSample> skipped) {
        if (earlyJudged) return null;
        int[] indices;
        if (earlyPacks != null) {
            var early = earlyPacks.get(new StepRank(epoch, step, rank));
            if (early == null) return null; // no sample of this pack is among its source's first
            indices = early.records();
        } else {
            indices = schedule.batchFor(epoch, step, rank);
        }
        var byIndex = new HashMap<Integer, SkippedSample>(skipped.size() * 2);
        for (var s : skipped) byIndex.put(s.datasetIndex(), s);
        BadInputException stop = null;
        for (int p = 0; p < indices.length && stop == null && !earlyJudged; p++) {
            var s = byIndex.get(indices[p]);
            stop = judgeEarly(epoch, step, rank, p, s == null || s.kind() != Kind.ERROR ? null : error(epoch, step, rank, s));
        }
        return stop;
    }

    /**
     * The early judgement of one sample, at {@code position} of rank {@code rank}'s share of (epoch, step): {@code failed}
     * when it is an error, null when it is not (encoded, delivered or filtered). Only the feed's first {@link #EARLY_SAMPLES}
     * positions from its start count: a sample among them that is not an error ends the judgement, the last of them failing
     * stops the feed. A sample seen twice (as it fails, then in its batch) counts once. Under the lock.
     */
    private BadInputException judgeEarly(long epoch, long step, int rank, int position, FeedError failed) {
        if (earlyJudged) return null;
        int src, ordinal;
        if (earlyPacks != null) { // a packed job: the pack's positions, placed from its steps
            var early = earlyPacks.get(new StepRank(epoch, step, rank));
            if (early == null || position < 0 || position >= early.ordinal().length || early.ordinal()[position] < 0) return null;
            return judgeEarly(early.source()[position], early.ordinal()[position], failed);
        }
        long at = (epoch * schedule.stepsPerEpoch() + step - startStep) * localPositionsPerStep()
                + (long) (rank - local.first()) * schedule.batchSize() + position;
        if (earlyPlaces == null) {
            if (at < 0 || at >= EARLY_SAMPLES) return null; // before the start (a trainer moved the feed back) or after the first samples
            src = 0;
            ordinal = (int) at;
        } else {
            var place = earlyPlaces.get(at);
            if (place == null) return null; // not among its source's first samples
            src = place[0];
            ordinal = place[1];
        }
        return judgeEarly(src, ordinal, failed);
    }

    /** The early judgement of the {@code ordinal}-th sample of source {@code src} from the feed's start. Under the lock. */
    private BadInputException judgeEarly(int src, int ordinal, FeedError failed) {
        if (earlyDone[src]) return null;
        if (failed == null) {
            earlyDone[src] = true;
            if (--earlySourcesLeft == 0) {
                earlyJudged = true;
                earlyOver.complete(null);
            }
            return null;
        }
        if (earlyFailed[src][ordinal] != null) return null;
        earlyFailed[src][ordinal] = failed;
        if (++earlyFailedCount[src] < EARLY_SAMPLES) return null;
        earlyJudged = true; // earlyOver completes as the feed fails with this judgement
        var all = List.of(earlyFailed[src]);
        return new BadInputException(String.format(Locale.ROOT,
                "bad input: the first %d samples of %s all failed, none delivered (a source is judged on its first %d samples "
                        + "under max error rate %s); %s", all.size(), sourceNames.size() == 1 ? source : "source " + src + " ("
                        + sourceNames.get(src) + ")", EARLY_SAMPLES, maxErrorRate, mostCommon(all)), all);
    }

    /** Under SKIP: the job's error rate so far against the limit, from {@link #MIN_SCHEDULED_FOR_RATE} samples on. Under the lock. */
    private BadInputException judgeRate() {
        long bad = errors + priorErrors, of = scheduled + priorScheduled;
        if (maxErrorRate >= 1 || of < MIN_SCHEDULED_FOR_RATE || bad <= maxErrorRate * of) return null;
        var lastCauses = new StringBuilder();
        for (var e : last) lastCauses.append(lastCauses.isEmpty() ? "" : "; ").append(e.describe());
        return new BadInputException(String.format(Locale.ROOT,
                "bad input: %d of %d scheduled samples failed (%.2f%%)%s, over the limit of %.2f%% (max error rate %s)%s; %s; last: %s",
                bad, of, 100.0 * bad / of, priorScheduled == 0 ? "" : String.format(Locale.ROOT,
                        ", %d of %d of them before this service started (from the errors file)", priorErrors, priorScheduled),
                100 * maxErrorRate, maxErrorRate, filtered == 0 ? "" : " (" + filtered + " more filtered, not counted)",
                mostCommonCounted(), lastCauses), List.copyOf(last));
    }

    /** {@code most common cause: stage: reason, n of m (e.g. …); then …} over {@code failed}. */
    private static String mostCommon(List<FeedError> failed) {
        var byCause = new LinkedHashMap<String, List<FeedError>>();
        for (var e : failed) byCause.computeIfAbsent(e.stage().name().toLowerCase(Locale.ROOT) + ": " + e.reason(), k -> new ArrayList<>()).add(e);
        var ranked = byCause.entrySet().stream().sorted(Comparator.comparingInt(c -> -c.getValue().size())).limit(TOP_CAUSES).toList();
        var sb = new StringBuilder(ranked.size() > 1 ? "most common causes: " : "most common cause: ");
        for (int i = 0; i < ranked.size(); i++) {
            var c = ranked.get(i);
            sb.append(i == 0 ? "" : "; then ").append(c.getKey()).append(", ").append(c.getValue().size()).append(" of ").append(failed.size())
                    .append(" (e.g. ").append(c.getValue().getFirst().describe()).append(')');
        }
        return sb.toString();
    }

    /** The most common error causes of the whole feed, as {@link #mostCommon} words them. Under the lock. */
    private String mostCommonCounted() {
        var ranked = causes.values().stream().filter(t -> t.kind == Kind.ERROR).sorted(Comparator.comparingLong(t -> -t.count))
                .limit(TOP_CAUSES).toList();
        var sb = new StringBuilder(ranked.size() > 1 ? "most common causes: " : "most common cause: ");
        for (int i = 0; i < ranked.size(); i++) {
            var t = ranked.get(i);
            sb.append(i == 0 ? "" : "; then ").append(t.cause().label()).append(", ").append(t.count).append(" of ").append(errors)
                    .append(" (e.g. ").append(t.example.sampleId()).append(')');
        }
        return sb.toString();
    }

    private static FeedError error(long epoch, long step, int rank, SkippedSample s) {
        return new FeedError(s.sampleId(), s.datasetIndex(), epoch, step, rank, s.stage(), s.cause(), s.kind(), s.reason());
    }

    /** Records the samples skipped in rank {@code rank}'s batch of (epoch, step) and writes them to the file; returns them. */
    synchronized List<FeedError> recordAll(long epoch, long step, int rank, List<SkippedSample> skipped) {
        var recorded = new ArrayList<FeedError>(skipped.size());
        for (var s : skipped) {
            var e = error(epoch, step, rank, s);
            record(e);
            recorded.add(e);
        }
        flush();
        return recorded;
    }

    /** Steps whose planner skips were recorded, most recent {@link #PACK_STEPS_KEPT}; older ones are at or below {@link #packFloor}. */
    private final java.util.TreeSet<dev.stoker.core.ScheduleCursor> packStepsRecorded = new java.util.TreeSet<>(STEP_ORDER);
    /** The latest step forgotten from {@link #packStepsRecorded}: a step at or before it counts as recorded. Null: none forgotten. */
    private dev.stoker.core.ScheduleCursor packFloor;
    /** Recorded steps remembered one by one; the feed's ranks are far fewer steps apart (their prefetch is a few batches). */
    static final int PACK_STEPS_KEPT = 4096;
    private static final Comparator<dev.stoker.core.ScheduleCursor> STEP_ORDER =
            Comparator.comparingLong(dev.stoker.core.ScheduleCursor::epoch).thenComparingLong(dev.stoker.core.ScheduleCursor::position);

    /**
     * A packed job's step, {@code batch} (any rank's: {@link ScheduledBatch#pack()} is the whole step's plan), is being
     * taken: records the samples its planner left out of every pack — {@link PackedStep#filtered()}, over a budget alone
     * ({@code N tokens > --pack-tokens T}, {@code P patches > --pack-patches Q}, or a text-only sample that would not fit
     * beside the dummy image), and {@link PackedStep#skipped()}, which the shape index marks an error or filtered — as
     * {@link Kind#FILTERED} samples of stage {@code manifest} (decided from the shape index, before any fetch), named by
     * {@code sampleId} (the feed passes {@code records::id}, the id a sample has until its line is read, as the pipeline
     * names a sample it could not read), in the errors file with rank −1 (no rank got them), and counted among the
     * scheduled samples of the error rate (they are positions of the job, as an unpacked job's filtered samples are). The
     * shape index's errors count as filtered too: {@code stoker validate} found and reported them, and the feed never
     * reads them, so they say nothing about whether its inputs can be read (the early judgement and the rate judge what
     * the feed reads).
     *
     * <p>Exactly once per step. Who calls: the feed, from the rank iterator of its <em>first local rank</em>
     * ({@code config.localRanks().first()}) as that rank's stream takes each step (in {@code Feeder.start}, beside the
     * iterator wrapper that records the step's {@code PackStats}); every step reaches every local rank, so one rank's
     * iterator sees them all. A step already recorded (by its cursor: one of the last {@value #PACK_STEPS_KEPT} recorded,
     * or older than all of them) is ignored, so further callers for the same step (other ranks' iterators) record
     * nothing. Unlike a batch's skipped samples, these are recorded when the step is taken, not when a batch is
     * delivered: they belong to no rank's batch. A feed moved back is a new feed (and a new {@code FeedErrors}).
     *
     * @return the samples recorded now (0 for a step recorded already, or one whose packs hold every position)
     * @throws IllegalArgumentException when {@code batch} is not a packed job's, or this is not a packed job's
     */
    int packSkipped(ScheduledBatch batch, IntFunction<String> sampleId) {
        PackedStep step = batch.pack();
        if (step == null) throw new IllegalArgumentException("rank " + batch.rank() + "'s batch of epoch " + batch.epoch() + " step "
                + batch.step() + " is not a packed job's: it has no pack plan");
        if (packed == null) throw new IllegalArgumentException("the planner's skips are recorded for a packed job only: open this "
                + "FeedErrors with its PackedSchedule");
        synchronized (this) {
            var at = step.cursor();
            if (packFloor != null && STEP_ORDER.compare(at, packFloor) <= 0) return 0;
            if (step.filtered().length + step.skipped().length == 0 || !packStepsRecorded.add(at)) return 0;
            if (packStepsRecorded.size() > PACK_STEPS_KEPT) packFloor = packStepsRecorded.pollFirst();
            var planner = packed.planner();
            int n = 0;
            for (int record : step.filtered()) {
                String cause = overBudget(planner, record);
                record(new FeedError(idOf(sampleId, record), record, batch.epoch(), batch.step(), -1, SampleException.Stage.MANIFEST,
                        cause, Kind.FILTERED, cause.contains("> --pack-patches") ? "over --pack-patches" : "over --pack-tokens"));
                n++;
            }
            for (int record : step.skipped()) {
                var kind = planner.shapes().shape(record).kind();
                record(new FeedError(idOf(sampleId, record), record, batch.epoch(), batch.step(), -1, SampleException.Stage.MANIFEST,
                        kind == SampleShape.Kind.ERROR ? "marked an error by the shape index" : "marked filtered by the shape index",
                        Kind.FILTERED, "marked by the shape index"));
                n++;
            }
            scheduled += n;
            flush();
            return n;
        }
    }

    /** The id {@code sampleId} gives {@code record}, or {@code record N} when it gives none. */
    private static String idOf(IntFunction<String> sampleId, int record) {
        String id = sampleId == null ? null : sampleId.apply(record);
        return id == null || id.isBlank() ? "record " + record : id;
    }

    /** Why the planner filtered {@code record}: the budget it is over alone, with both numbers. */
    private static String overBudget(PackPlanner planner, int record) {
        SampleShape s = planner.shapes().shape(record);
        if (s.tokens() > planner.tokenBudget()) return s.tokens() + " tokens > --pack-tokens " + planner.tokenBudget();
        if (planner.patchBudget() > 0 && s.patches() > planner.patchBudget())
            return s.patches() + " patches > --pack-patches " + planner.patchBudget();
        return s.tokens() + " tokens + the dummy image's " + planner.dummy().tokens() + " > --pack-tokens " + planner.tokenBudget()
                + " (text only: in a step with images its pack gets the dummy image beside it)";
    }

    private void record(FeedError e) {
        total++;
        if (e.kind() == Kind.FILTERED) {
            filtered++;
        } else {
            errors++;
            if (last.size() == LAST_CAUSES) last.removeFirst();
            last.addLast(e);
        }
        byStage.merge(e.stage(), 1L, Long::sum);
        count(e);
        if (records.size() < MAX_RECORDS) records.add(e);
        if (out == null || !written.add(key(e.epoch(), e.datasetIndex()))) return; // listed by an earlier run of this job already
        var line = new LinkedHashMap<String, Object>();
        line.put("id", e.sampleId());
        line.put("index", e.datasetIndex());
        line.put("epoch", e.epoch());
        line.put("step", e.step());
        line.put("rank", e.rank());
        line.put("kind", e.kind().label());
        line.put("stage", e.stage().name().toLowerCase(Locale.ROOT));
        line.put("cause", e.cause());
        try {
            out.write(JSON.writeValueAsString(line));
            out.write('\n');
        } catch (IOException ex) {
            fileFailed(ex);
        }
    }

    /** Counts {@code e} under its cause; past {@link #MAX_CAUSES} causes, a new one is counted as its kind and stage's "other". */
    private void count(FeedError e) {
        String reason = e.reason();
        String key = e.kind() + "\u0000" + e.stage() + "\u0000" + reason;
        var tally = causes.get(key);
        if (tally == null && causes.size() >= MAX_CAUSES) {
            reason = OTHER_REASON;
            key = e.kind() + "\u0000" + e.stage() + "\u0000" + reason;
            tally = causes.get(key);
        }
        if (tally == null) causes.put(key, tally = new Tally(e.kind(), e.stage(), reason, e));
        tally.count++;
    }

    private void flush() {
        if (out == null) return;
        try {
            out.flush();
        } catch (IOException ex) {
            fileFailed(ex);
        }
    }

    /** A full disk must not stop training over its error log: warn once, keep counting, write no more. */
    private void fileFailed(IOException ex) {
        LOG.log(System.Logger.Level.WARNING, "cannot write the errors file " + file + ", skipped samples are only counted from now on: " + ex);
        try {
            out.close();
        } catch (IOException ignored) {
            // already failing
        }
        out = null;
    }

    private List<Consumer<BadInputException>> fail(BadInputException e) {
        failure = e;
        earlyOver.complete(null);
        return List.copyOf(listeners);
    }

    /**
     * {@code b}, once it may be handed out: at once, unless every sample of it failed while the early judgement is
     * still open. Such a batch waits for the judgement (at most {@link #EARLY_WAIT_MILLIS}), so that a wrong image
     * folder reaches the trainer as the judgement's error rather than as an empty batch first; the pipeline runs
     * ahead of the trainer by its fetches in flight, so the first samples are usually judged within moments.
     */
    <B extends FeedBatch> CompletableFuture<B> afterEarlyJudgement(B b) {
        if (b == null || earlyJudged || b.samples() > 0 || b.scheduled() == 0) return CompletableFuture.completedFuture(b);
        return earlyOver.thenApply(x -> b).completeOnTimeout(b, EARLY_WAIT_MILLIS, java.util.concurrent.TimeUnit.MILLISECONDS);
    }

    /** How long an empty batch waits for the early judgement before it is handed out anyway (see {@link #afterEarlyJudgement}). */
    static final long EARLY_WAIT_MILLIS = 10_000;

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
    public synchronized long total() { return total; }

    /** Broken samples recorded (what the error rate counts). */
    public synchronized long errors() { return errors; }

    /** Samples recorded as dropped by a limit the user set ({@code --max-seq-len}, {@code --max-images}). */
    public synchronized long filtered() { return filtered; }

    /** Samples scheduled in delivered batches, all ranks (the denominator of the error rate). */
    public synchronized long scheduled() { return scheduled; }

    /** Skipped samples (errors and filtered) per stage. */
    public synchronized Map<SampleException.Stage, Long> byStage() { return Map.copyOf(byStage); }

    /** The counts by kind, stage and cause. */
    public synchronized Counts counts() {
        var list = causes.values().stream().map(Tally::cause).sorted(Comparator.comparingLong(c -> -c.count())).toList();
        return new Counts(errors, filtered, Map.copyOf(byStage), list);
    }

    /** The kept records, in the order they were recorded (which is not the schedule order across ranks). */
    public synchronized List<FeedError> records() { return List.copyOf(records); }

    /** Closes the errors file (everything recorded is already flushed). */
    @Override
    public synchronized void close() {
        if (out == null) return;
        try {
            out.close();
        } catch (IOException ex) {
            LOG.log(System.Logger.Level.WARNING, "cannot close the errors file " + file + ": " + ex);
        }
        out = null;
    }
}
