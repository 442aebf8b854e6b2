package dev.stoker.pipeline.pack;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout.Resume;
import dev.stoker.pipeline.schedule.SampleSchedule;
import dev.stoker.pipeline.schedule.ScheduledBatch;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

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
 * <p>Step within the epoch ({@link ScheduledBatch#step()}): the number of this planner's steps that start before the
 * batch's cursor in its epoch, walking from the epoch's position 0 — so a job resumed mid-epoch labels its batches as
 * the uninterrupted job did; a cursor saved with another rank count, which is no step boundary of this one, counts
 * the steps before it.
 *
 * <p>Threading: safe to share; the cache is synchronized and the planner plans one step at a time.
 */
public final class PackedSchedule {
    static final int CACHE_STEPS = 256;

    private final PackPlanner planner;
    private final SampleSchedule order;
    private final Map<Key, Planned> cache = new LinkedHashMap<>(CACHE_STEPS * 2, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Key, Planned> eldest) { return size() > CACHE_STEPS; }
    };
    private ScheduleCursor countedAt;
    private long countedSteps;

    private record Key(ScheduleCursor cursor, long label) { }

    private record Planned(PackedStep step, Resume after) { }

    public PackedSchedule(PackPlanner planner) {
        this.planner = java.util.Objects.requireNonNull(planner, "planner");
        this.order = planner.order();
    }

    public PackPlanner planner() { return planner; }

    public int ranks() { return planner.ranks(); }

    /** The step at {@code c} labelled {@code label}, planned once for all ranks. */
    public PackedStep step(ScheduleCursor c, long label) { return entry(c, label).step(); }

    /** The state that resumes the job right after {@code step}: its {@code next} cursor, labelled one more. */
    public Resume resumeAfter(PackedStep step) { return order.resumeAt(step.next(), step.globalStep() + 1); }

    /** The state of a job about to take the step at {@code c} (aligned as the planner aligns it), labelled {@code label}. */
    public Resume resumeAt(ScheduleCursor c, long label) { return order.resumeAt(planner.aligned(c), label); }

    /** The cursor of the step {@code globalStep} steps from the origin (epoch 0, position 0), walking the steps there. */
    public ScheduleCursor cursorAt(long globalStep) {
        if (globalStep < 0) throw new IllegalArgumentException("global step must be >= 0, got " + globalStep);
        ScheduleCursor c = planner.aligned(ScheduleCursor.START);
        for (long i = 0; i < globalStep; i++) c = planner.plan(c, i).next();
        return c;
    }

    /** Steps of this planner that start before {@code c} in its epoch, walking from the epoch's position 0. */
    public long stepInEpoch(ScheduleCursor c) {
        synchronized (this) {
            if (c.equals(countedAt)) return countedSteps;
        }
        ScheduleCursor x = new ScheduleCursor(c.epoch(), 0);
        long n = 0;
        while (x.epoch() == c.epoch() && x.position() < c.position()) {
            x = planner.plan(x, n).next();
            n++;
        }
        synchronized (this) {
            countedAt = c;
            countedSteps = n;
        }
        return n;
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

            @Override
            public boolean hasNext() { return true; }

            @Override
            public ScheduledBatch next() {
                Planned e = entry(cursor, label);
                PackedStep s = e.step();
                if (s.cursor().epoch() != epoch) {
                    epoch = s.cursor().epoch();
                    inEpoch = s.cursor().position() == 0 ? 0 : stepInEpoch(s.cursor());
                }
                var batch = new ScheduledBatch(s.cursor(), inEpoch, s.globalStep(), rank, s.records()[rank].clone(), e.after(), s);
                inEpoch++;
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
