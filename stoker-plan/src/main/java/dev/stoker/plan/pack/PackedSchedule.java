package dev.stoker.plan.pack;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout.Resume;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
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
 * <p>Threading: safe to share; the step cache and the walk's marks are synchronized (one walk at a time, so ranks
 * resuming together walk once), and the planner plans one step at a time.
 */
public final class PackedSchedule {
    static final int CACHE_STEPS = 256;
    /** Epochs whose first origin-walk step is kept. */
    static final int EPOCH_MARKS = 1 << 16;

    private final PackPlanner planner;
    private final SampleSchedule order;
    private final Map<Key, Planned> cache = new LinkedHashMap<>(CACHE_STEPS * 2, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Key, Planned> eldest) { return size() > CACHE_STEPS; }
    };
    private final Object walk = new Object();
    /** Epoch E → the first origin-walk step whose cursor is at or after (E, 0), and its label; guarded by {@link #walk}. */
    private final TreeMap<Long, Mark> marks = new TreeMap<>();
    private ScheduleCursor countedAt; // guarded by walk
    private Count counted;

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
        this.planner = java.util.Objects.requireNonNull(planner, "planner");
        this.order = planner.order();
        marks.put(0L, new Mark(planner.aligned(ScheduleCursor.START), 0));
    }

    public PackPlanner planner() { return planner; }

    public int ranks() { return planner.ranks(); }

    /** The step at {@code c} labelled {@code label}, planned once for all ranks. */
    public PackedStep step(ScheduleCursor c, long label) { return entry(c, label).step(); }

    /** The state that resumes the job right after {@code step}: its {@code next} cursor, labelled one more. */
    public Resume resumeAfter(PackedStep step) { return order.resumeAt(step.next(), step.globalStep() + 1); }

    /** The state of a job about to take the step at {@code c} (aligned as the planner aligns it), labelled {@code label}. */
    public Resume resumeAt(ScheduleCursor c, long label) { return order.resumeAt(planner.aligned(c), label); }

    /** The cursor of the step {@code globalStep} steps from the origin (epoch 0, position 0): the origin walk's. */
    public ScheduleCursor cursorAt(long globalStep) {
        if (globalStep < 0) throw new IllegalArgumentException("global step must be >= 0, got " + globalStep);
        synchronized (walk) {
            Mark from = marks.firstEntry().getValue();
            for (Mark m : marks.descendingMap().values()) {
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
            if (c.equals(countedAt)) return counted;
            Mark from = marks.floorEntry(c.epoch()).getValue();
            ScheduleCursor x = from.cursor();
            long label = from.label();
            while (x.epoch() < c.epoch()) x = walkStep(x, label++);
            long n = 0;
            while (x.epoch() == c.epoch() && x.position() < c.position()) {
                x = walkStep(x, label++);
                n++;
            }
            countedAt = c;
            counted = new Count(label, n, x.equals(c));
            return counted;
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
            for (long e = epoch + 1; e <= next.epoch(); e++) marks.putIfAbsent(e, new Mark(next, label));
            while (marks.size() > EPOCH_MARKS) marks.remove(marks.higherKey(0L)); // keep the origin's
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
