package dev.stoker.plan.pack;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout.Resume;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * A packed job's schedule: the global order of a {@link SampleSchedule} cut into steps by a {@link PackPlanner}, and
 * each rank's share of every step as the {@link ScheduledBatch} the feed encodes — its {@code indices} the rank's pack,
 * its {@code pack} the whole step's plan, its {@code after} the state that resumes the job right after the step (the
 * next step's cursor and label, and each source's cursor there, as {@link SampleSchedule#resumeAt} makes them).
 *
 * <p>All ranks of a job walk the same steps, each asking for the step at the same cursor; the steps are planned once
 * and kept in a small cache ({@value #CACHE_STEPS} steps, least recently used out) so that ranks a few steps apart
 * share the work.
 *
 * <p><b>The origin walk</b>: this planner's steps from the origin (epoch 0, position 0), each planned from the one
 * before's {@code next}. Steps run across epoch ends ({@link PackPlanner}), so an epoch's first step no longer starts
 * at its position 0 but where the step across the end before it stopped, and only the walk from the origin knows
 * where that is. Batches are numbered on it:
 * <ul>
 *   <li>A batch's epoch ({@link ScheduledBatch#epoch()}) is the epoch its step starts in.</li>
 *   <li>Its step within the epoch ({@link ScheduledBatch#step()}) is the number of origin-walk steps that start in
 *       that epoch before the batch's cursor ({@link #stepInEpoch}): 0 for the first step that starts in the epoch.
 *       A job resumed at any step's {@code next} numbers its batches as the uninterrupted job did; a cursor saved with
 *       another rank count, no step boundary of this walk, counts the walk's steps that start before it, and the
 *       steps after it count on from there (until the next epoch, whose first step the walk is asked for again).
 *       (epoch, step) is unique per step of a walk: the count rises by one a step within an epoch.</li>
 *   <li>{@link #stepsBefore}: the origin-walk steps that start before a cursor, the label of an unlabelled job's step
 *       there.</li>
 * </ul>
 * What the walk finds is kept: each epoch's first step and its label ({@value #EPOCH_MARKS} epochs at most, the
 * latest kept besides the origin), so a cursor is counted from its own epoch's first step once that is known, and a rank iterator
 * that walks on from a step of the origin walk marks each epoch it enters without asking. Counting a cursor of epoch
 * E the first time plans every step before it — about E epochs of planning (1.5 – 2 µs a sample on the reference
 * data): a job resumed late in a long run pays that once, at its start.
 *
 * <p>As a {@link StepSchedule}: a schedule {@link #labelled labelled} at a step's cursor labels that step as it was told and
 * each step after it one more; an unlabelled one labels a step by the origin walk's steps before it ({@link #stepsBefore}).
 * The labelled views of one schedule share its planner, its step cache and the origin walk's marks. A step's positions
 * vary, so {@link #stepsPerEpoch()} and {@link #positionsPerStep()} are 0; the samples the planner leaves out of every
 * pack are the step's {@link #leftOut}.
 *
 * <p>Threading: safe to share; the step cache and the walk's marks are synchronized (one walk at a time, so ranks
 * resuming together walk once), and the planner plans one step at a time.
 */
public final class PackedSchedule implements StepSchedule {
    static final int CACHE_STEPS = 256;
    /** Epochs whose first origin-walk step is kept. */
    static final int EPOCH_MARKS = 1 << 16;
    /** Positions {@link #scanLimit()} allows: each step walked is planned (about 1.3 µs a sample). */
    static final long SCAN_LIMIT = 1L << 16;

    private final PackPlanner planner;
    private final SampleSchedule order;
    private final Map<Key, Planned> cache;
    /** The origin walk's marks and last count, shared by the labelled views; its monitor guards them. */
    private final Walk walk;
    /** The cursor whose step has the label {@link #labelStep}; null: labels count from the origin. */
    private final ScheduleCursor labelAt;
    private final long labelStep;

    /** What the origin walk found: each epoch's first step and the last cursor counted. Guarded by its own monitor. */
    private static final class Walk {
        /** Epoch E → the first origin-walk step whose cursor is at or after (E, 0), and its label. */
        final TreeMap<Long, Mark> marks = new TreeMap<>();
        ScheduleCursor countedAt;
        Count counted;
    }

    private record Key(ScheduleCursor cursor, long label) { }

    /** An origin-walk step: its cursor and its label counted from the origin. */
    private record Mark(ScheduleCursor cursor, long label) { }

    /**
     * What the origin walk says of a cursor: {@code before} steps start before it, {@code inEpoch} of them in its epoch,
     * and whether a step of the walk starts at it ({@code boundary}).
     */
    record Count(long before, long inEpoch, boolean boundary) { }

    private record Planned(PackedStep step, Resume after) { }

    public PackedSchedule(PackPlanner planner) {
        this.planner = Objects.requireNonNull(planner, "planner");
        this.order = planner.order();
        this.cache = new LinkedHashMap<>(CACHE_STEPS * 2, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<Key, Planned> eldest) { return size() > CACHE_STEPS; }
        };
        this.walk = new Walk();
        walk.marks.put(0L, new Mark(planner.aligned(ScheduleCursor.START), 0));
        this.labelAt = null;
        this.labelStep = -1;
    }

    /** A view of {@code of} labelled at {@code labelAt} (null: from the origin), sharing its planner, cache and walk. */
    private PackedSchedule(PackedSchedule of, ScheduleCursor labelAt, long labelStep) {
        this.planner = of.planner;
        this.order = of.order;
        this.cache = of.cache;
        this.walk = of.walk;
        this.labelAt = labelAt;
        this.labelStep = labelAt == null ? -1 : labelStep;
    }

    public PackPlanner planner() { return planner; }

    @Override
    public int ranks() { return planner.ranks(); }

    @Override
    public SampleSchedule order() { return order; }

    /** Where the planner starts a step at or after {@code c} ({@link PackPlanner#aligned}). */
    @Override
    public ScheduleCursor aligned(ScheduleCursor c) { return planner.aligned(c); }

    /** This schedule with the step at {@code at} (aligned) labelled {@code label}, each later step one more; below 0: from the origin. */
    @Override
    public PackedSchedule labelled(ScheduleCursor at, long label) {
        if (label < 0) return labelAt == null ? this : new PackedSchedule(this, null, -1);
        return new PackedSchedule(this, planner.aligned(at), label);
    }

    @Override
    public ScheduleCursor labelAt() { return labelAt; }

    @Override
    public long labelStep() { return labelStep; }

    /**
     * The label of the step at {@code c} (aligned): the label this schedule was given at its {@link #labelAt()}, the steps
     * walked from there for a cursor after it (a cursor no step of that walk starts at counts the steps before it), and
     * the origin walk's count for a cursor before it or without labels ({@link #stepsBefore}). Walks plan every step they
     * pass: for a start or a move, not per batch.
     */
    @Override
    public long globalStep(ScheduleCursor c) {
        var a = planner.aligned(c);
        if (labelAt == null || before(a, labelAt)) return stepsBefore(a);
        var x = labelAt;
        long label = labelStep;
        while (before(x, a)) x = entry(x, label++).step().next();
        return label;
    }

    private static boolean before(ScheduleCursor a, ScheduleCursor b) {
        return a.epoch() < b.epoch() || (a.epoch() == b.epoch() && a.position() < b.position());
    }

    /** Rank {@code rank}'s packs from {@code start} on, the first labelled as this schedule labels the step there. */
    @Override
    public Iterator<ScheduledBatch> iterator(ScheduleCursor start, int rank) {
        return iterator(start, globalStep(start), rank);
    }

    /**
     * Rank {@code rank}'s pack of the step at {@code at}, labelled {@code label}; its step within the epoch is counted on
     * the origin walk ({@link #stepInEpoch}), which plans the epoch's steps before it the first time.
     */
    @Override
    public ScheduledBatch step(ScheduleCursor at, long label, int rank) {
        if (rank < 0 || rank >= planner.ranks())
            throw new IllegalArgumentException("rank " + rank + " outside [0, " + planner.ranks() + ")");
        Planned e = entry(at, label);
        PackedStep s = e.step();
        return new ScheduledBatch(s.cursor(), stepInEpoch(s.cursor()), s.globalStep(), rank, s.records()[rank].clone(), e.after(), s);
    }

    /** The steps walked from {@code from} (aligned) that start before {@code to}, at most {@code max}. */
    @Override
    public long stepsBetween(ScheduleCursor from, ScheduleCursor to, long max) {
        var x = planner.aligned(from);
        long n = 0;
        while (n < max && before(x, to)) {
            x = planner.plan(x, n).next();
            n++;
        }
        return n;
    }

    /** 0: a step takes as many positions as its packs hold. */
    @Override
    public long stepsPerEpoch() { return 0; }

    /** 0: a step takes as many positions as its packs hold. */
    @Override
    public int positionsPerStep() { return 0; }

    /** The whole epoch: steps take every position but a few at its end, not known without planning it. */
    @Override
    public long positionsPerEpoch() { return order.datasetSize(); }

    @Override
    public long scanLimit() { return SCAN_LIMIT; }

    /**
     * The samples the step of {@code b} left out of every pack: {@link PackedStep#filtered()}, over a budget alone
     * ({@code N tokens > --pack-tokens T}, {@code P patches > --pack-patches Q}, or a text-only sample that would not fit
     * beside the dummy image), and {@link PackedStep#skipped()}, which the shape index marks an error or filtered.
     *
     * @throws IllegalArgumentException when {@code b} has no pack plan (it is not a packed job's batch)
     */
    @Override
    public List<LeftOut> leftOut(ScheduledBatch b) {
        PackedStep step = b.pack();
        if (step == null) throw new IllegalArgumentException("rank " + b.rank() + "'s batch of epoch " + b.epoch() + " step "
                + b.step() + " is not a packed job's: it has no pack plan");
        var out = new ArrayList<LeftOut>(step.filtered().length + step.skipped().length);
        for (int record : step.filtered()) {
            String cause = overBudget(record);
            out.add(new LeftOut(record, cause, cause.contains("> --pack-patches") ? "over --pack-patches" : "over --pack-tokens"));
        }
        for (int record : step.skipped()) {
            var kind = planner.shapes().shape(record).kind();
            out.add(new LeftOut(record, kind == SampleShape.Kind.ERROR ? "marked an error by the shape index"
                    : "marked filtered by the shape index", "marked by the shape index"));
        }
        return out;
    }

    /** Why the planner filtered {@code record}: the budget it is over alone, with both numbers. */
    private String overBudget(int record) {
        SampleShape s = planner.shapes().shape(record);
        if (s.tokens() > planner.tokenBudget()) return s.tokens() + " tokens > --pack-tokens " + planner.tokenBudget();
        if (planner.patchBudget() > 0 && s.patches() > planner.patchBudget())
            return s.patches() + " patches > --pack-patches " + planner.patchBudget();
        return s.tokens() + " tokens + the dummy image's " + planner.dummy().tokens() + " > --pack-tokens " + planner.tokenBudget()
                + " (text only: in a step with images its pack gets the dummy image beside it)";
    }

    @Override
    public String name() { return "the packed schedule"; }

    @Override
    public String unit() { return "pack"; }

    /**
     * Per segment of the rank's pack, in order: {@code {"step", "rank", "segment", "source", "sample", "tokens", "patches",
     * "cost"}}; the dummy image's segment, where the planner gives the pack one, has source and sample −1 (as the
     * metadata's {@code sample_index} lists it).
     */
    @Override
    public List<Map<String, Object>> describe(ScheduledBatch b) {
        var step = b.pack();
        var mix = order.mix();
        int[] pack = b.indices();
        int segments = pack.length + (step.dummyImage()[b.rank()] ? 1 : 0);
        var out = new ArrayList<Map<String, Object>>(segments);
        for (int k = 0; k < segments; k++) {
            var line = new LinkedHashMap<String, Object>();
            line.put("step", b.globalStep());
            line.put("rank", b.rank());
            line.put("segment", k);
            SampleShape shape;
            if (k < pack.length) {
                int record = pack[k];
                int src = mix == null ? 0 : mix.sourceOfRecord(record);
                line.put("source", src);
                line.put("sample", mix == null ? record : record - mix.base(src));
                shape = planner.shapes().shape(record);
            } else {
                line.put("source", -1);
                line.put("sample", -1);
                shape = planner.dummy();
            }
            line.put("tokens", shape.tokens());
            line.put("patches", shape.patches());
            line.put("cost", planner.cost().flops(shape));
            out.add(line);
        }
        return out;
    }

    /** The step's {@code {"step", "costs", "imbalance", "tokens", "filtered"}}: per rank its pack's predicted cost and tokens. */
    @Override
    public List<Map<String, Object>> describeStep(ScheduledBatch b) {
        var step = b.pack();
        var summary = new LinkedHashMap<String, Object>();
        summary.put("step", b.globalStep());
        summary.put("costs", step.costs());
        summary.put("imbalance", step.imbalance());
        summary.put("tokens", step.tokens());
        summary.put("filtered", step.filtered());
        return List.of(summary);
    }

    /** The step at {@code c} labelled {@code label}, planned once for all ranks. */
    public PackedStep step(ScheduleCursor c, long label) { return entry(c, label).step(); }

    /** The state that resumes the job right after {@code step}: its {@code next} cursor, labelled one more. */
    public Resume resumeAfter(PackedStep step) { return order.resumeAt(step.next(), step.globalStep() + 1); }

    /** The state of a job about to take the step at {@code c} (aligned as the planner aligns it), labelled {@code label}. */
    public Resume resumeAt(ScheduleCursor c, long label) { return order.resumeAt(planner.aligned(c), label); }

    /** The cursor of the step {@code globalStep} steps from the origin (epoch 0, position 0): the origin walk's. */
    @Override
    public ScheduleCursor cursorAt(long globalStep) {
        if (globalStep < 0) throw new IllegalArgumentException("global step must be >= 0, got " + globalStep);
        synchronized (walk) {
            Mark from = walk.marks.firstEntry().getValue();
            for (Mark m : walk.marks.descendingMap().values()) {
                if (m.label() <= globalStep) {
                    from = m;
                    break;
                }
            }
            ScheduleCursor c = from.cursor();
            for (long i = from.label(); i < globalStep; i++) c = walkStep(c, i);
            return c;
        }
    }

    /**
     * The origin-walk steps that start before {@code c} (aligned as the planner aligns it): the label of the step at
     * {@code c} counted from the origin, as an unlabelled job gives it ({@link #cursorAt} of it is {@code c} when a
     * step of the walk starts there). Plans every step before {@code c} the first time: for a start or a move, not per
     * batch.
     */
    public long stepsBefore(ScheduleCursor c) { return count(planner.aligned(c)).before(); }

    /**
     * The origin-walk steps that start in {@code c}'s epoch before {@code c} (aligned as the planner aligns it): the
     * step within the epoch of a batch at {@code c}; 0 for the epoch's first step, which need not start at position 0.
     */
    public long stepInEpoch(ScheduleCursor c) { return count(planner.aligned(c)).inEpoch(); }

    /**
     * The label of the step at {@code c}: {@code label} when it is given (≥ 0, from a resume state), else the steps of the
     * origin walk that start before {@code c} ({@link #stepsBefore}: steps run across epoch ends, so epochs are not
     * counted apart; a cursor that is no step boundary, saved with another rank count, counts the steps that start
     * before it).
     */
    public long labelAt(ScheduleCursor c, long label) { return label >= 0 ? label : stepsBefore(c); }

    /** Counts {@code c} on the origin walk, from the mark of its epoch (walking there first when it is not known). */
    Count count(ScheduleCursor c) {
        synchronized (walk) {
            if (c.equals(walk.countedAt)) return walk.counted;
            Mark from = walk.marks.floorEntry(c.epoch()).getValue();
            ScheduleCursor x = from.cursor();
            long label = from.label();
            while (x.epoch() < c.epoch()) x = walkStep(x, label++);
            long n = 0;
            while (x.epoch() == c.epoch() && x.position() < c.position()) {
                x = walkStep(x, label++);
                n++;
            }
            walk.countedAt = c;
            walk.counted = new Count(label, n, x.equals(c));
            return walk.counted;
        }
    }

    /** The origin-walk step after the one at {@code x} labelled {@code label}; marks the epochs it enters. Holds {@link #walk}. */
    private ScheduleCursor walkStep(ScheduleCursor x, long label) {
        ScheduleCursor next = planner.plan(x, label).next();
        if (next.epoch() != x.epoch()) mark(x.epoch(), next, label + 1);
        return next;
    }

    /** Marks {@code next} (labelled {@code label}) as the first step at or after the start of each epoch after {@code epoch} up to its own. */
    private void mark(long epoch, ScheduleCursor next, long label) {
        synchronized (walk) {
            for (long e = epoch + 1; e <= next.epoch(); e++) walk.marks.putIfAbsent(e, new Mark(next, label));
            while (walk.marks.size() > EPOCH_MARKS) walk.marks.remove(walk.marks.higherKey(0L)); // keep the origin's
        }
    }

    /** Rank {@code rank}'s batches from {@code start} on, its first step labelled {@code startLabel}, endlessly (epoch after epoch). */
    public Iterator<ScheduledBatch> iterator(ScheduleCursor start, long startLabel, int rank) {
        if (rank < 0 || rank >= planner.ranks()) throw new IllegalArgumentException("rank " + rank + " outside [0, " + planner.ranks() + ")");
        if (startLabel < 0) throw new IllegalArgumentException("the first step's label must be >= 0, got " + startLabel);
        return new Iterator<>() {
            private ScheduleCursor cursor = start;
            private long label = startLabel;
            private long epoch = -1;
            private long inEpoch;
            private boolean onOriginWalk; // this iterator's steps are the origin walk's
            private long originLabel;     // the current step's label counted from the origin, while onOriginWalk

            @Override
            public boolean hasNext() { return true; }

            @Override
            public ScheduledBatch next() {
                Planned e = entry(cursor, label);
                PackedStep s = e.step();
                if (s.cursor().epoch() != epoch) {
                    if (epoch >= 0 && onOriginWalk) { // on the walk, the first step to start in an epoch is its first
                        mark(epoch, s.cursor(), originLabel);
                        inEpoch = 0;
                    } else {
                        Count k = count(s.cursor());
                        inEpoch = k.inEpoch();
                        onOriginWalk = k.boundary();
                        originLabel = k.before();
                    }
                    epoch = s.cursor().epoch();
                }
                var batch = new ScheduledBatch(s.cursor(), inEpoch, s.globalStep(), rank, s.records()[rank].clone(), e.after(), s);
                inEpoch++;
                originLabel++;
                cursor = s.next();
                label++;
                return batch;
            }
        };
    }

    private Planned entry(ScheduleCursor c, long label) {
        var key = new Key(c, label);
        synchronized (cache) {
            Planned e = cache.get(key);
            if (e != null) return e;
        }
        PackedStep s = planner.plan(c, label);
        Planned e = new Planned(s, resumeAfter(s));
        synchronized (cache) {
            Planned raced = cache.putIfAbsent(key, e);
            return raced != null ? raced : e;
        }
    }
}
