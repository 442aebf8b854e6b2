package dev.stoker.node;

import dev.stoker.observe.Headspace;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.TreeMap;

/**
 * What the trainers of a job measured, as they report it with each request (docs/protocol.md, NEXT):
 * per rank, each step's wait for its batch and its compute, with the bytes and samples of the batch
 * the ledger handed out for that step. The wait-time ratio of a rank is Σ wait / Σ (wait + compute),
 * as in the benchmarks' trainer files (docs/run-data.md); the service writes the same files from this
 * record ({@code --report-dir}).
 *
 * <p>Keyed by global rank, so that a node serving part of a world's ranks keeps only those it serves.
 * Each rank keeps its totals over the whole run, the last {@link #KEPT_STEPS} steps in full (what a
 * report's timeline shows; a long job's file stays bounded), and a recent window of
 * {@link #RECENT_STEPS} steps for the live figures (status line, Prometheus).
 *
 * <p>Headspace: a trainer that replayed batches it had already received (the clients' headspace option) reports its
 * compute floor once, with the NEXT after the replay; a rank's {@link Headspace} sets that floor against the mean step of
 * its steady steps (after the first {@link #STEADY_SKIP_STEPS}, as the verdict's wait ratio), so the figures say how much
 * per step the data side can win at most. Replayed steps are not steps of the service's batches: they are not in the
 * wait ratio.
 *
 * <p>Threading: safe from any thread; each rank's connection thread records, readers copy under the lock.
 */
public final class TrainerTimings {
    /** Steps per rank kept in full for the report files. */
    public static final int KEPT_STEPS = 20_000;
    /** Steps per rank in the recent window of the live wait ratio. */
    public static final int RECENT_STEPS = 32;

    /** One step of one rank, as the run-data files hold it: wait, compute, batch bytes and samples. */
    public record Step(long waitNanos, long stepNanos, long bytes, long samples) {}

    /**
     * One rank's figures: steps reported, total wait and compute, the wall-clock time of its first
     * request (ms since the epoch) and the monotonic times of its first request and last report.
     */
    public record RankFigures(int rank, long steps, long waitNanos, long stepNanos, long bytes, long samples, long startUnixMillis,
                              long elapsedNanos, OptionalDouble recentWaitRatio, Headspace headspace) {
        /** Σ wait / Σ (wait + compute), 0 before any report. */
        public double waitRatio() { return ratio(waitNanos, stepNanos); }
    }

    private static final class RankRecord {
        final int rank;
        long firstRequestNanos = -1, firstRequestUnixMillis, lastReportNanos;
        long steps, wait, step, bytes, samples;
        long steadyWait, steadyStep; // the totals after the first STEADY_SKIP_STEPS steps (the steady state)
        long handedBytes, handedSamples; // the batch handed out last: the one the next report is about
        long floorNanos = -1, floorSteps; // the trainer's compute floor (headspace), -1 before it reports one
        final java.util.ArrayDeque<Step> kept = new java.util.ArrayDeque<>();

        RankRecord(int rank) { this.rank = rank; }
    }

    private final Object lock = new Object();
    private final Map<Integer, RankRecord> ranks = new TreeMap<>();

    private RankRecord rank(int r) { return ranks.computeIfAbsent(r, RankRecord::new); }

    /** Rank {@code rank} asked for a batch (its first request starts its clock, as a trainer's file does). */
    public void requested(int rank) {
        synchronized (lock) {
            var r = rank(rank);
            if (r.firstRequestNanos < 0) {
                r.firstRequestNanos = System.nanoTime();
                r.firstRequestUnixMillis = System.currentTimeMillis();
            }
        }
    }

    /** A batch of {@code bytes} and {@code samples} was handed to rank {@code rank}: its trainer's next report is about it. */
    public void handedOut(int rank, long bytes, long samples) {
        synchronized (lock) {
            var r = rank(rank);
            r.handedBytes = bytes;
            r.handedSamples = samples;
        }
    }

    /** Rank {@code rank}'s trainer reports its step on the batch handed out last. */
    public void report(int rank, long waitNanos, long stepNanos) {
        synchronized (lock) {
            var r = rank(rank);
            r.lastReportNanos = System.nanoTime();
            if (r.steps >= STEADY_SKIP_STEPS) {
                r.steadyWait += waitNanos;
                r.steadyStep += stepNanos;
            }
            r.steps++;
            r.wait += waitNanos;
            r.step += stepNanos;
            r.bytes += r.handedBytes;
            r.samples += r.handedSamples;
            if (r.kept.size() == KEPT_STEPS) r.kept.pollFirst();
            r.kept.addLast(new Step(waitNanos, stepNanos, r.handedBytes, r.handedSamples));
        }
    }

    /** Steps of each rank left out of its headspace's mean step: the cold start (as the steady wait ratio). */
    public static final int STEADY_SKIP_STEPS = 3;

    /**
     * Rank {@code rank}'s trainer measured its compute floor: the median compute of {@code replayedSteps} steps on batches it
     * replayed (docs/protocol.md, NEXT). A later report replaces an earlier one.
     */
    public void headspace(int rank, long floorNanos, long replayedSteps) {
        if (floorNanos < 0 || replayedSteps <= 0)
            throw new IllegalArgumentException("rank " + rank + ": a compute floor of " + floorNanos + " ns over " + replayedSteps + " steps");
        synchronized (lock) {
            var r = rank(rank);
            r.floorNanos = floorNanos;
            r.floorSteps = replayedSteps;
        }
    }

    /**
     * One rank's running totals: steps reported, their wait and compute, and the wait and compute of the steps after the
     * first {@link #STEADY_SKIP_STEPS} (the steady state). Every figure only grows while the rank's trainers report: what a
     * cluster node sends its job's coordinator ({@code NodeProtocol.NodeTimings}), which checks just that.
     */
    public record Totals(int rank, long steps, long waitNanos, long stepNanos, long steadyWaitNanos, long steadyStepNanos) {}

    /** Each rank's running totals, by global rank (ranks that asked but have not reported a step included, at zero). */
    public List<Totals> totals() {
        synchronized (lock) {
            var out = new ArrayList<Totals>(ranks.size());
            for (var r : ranks.values()) out.add(new Totals(r.rank, r.steps, r.wait, r.step, r.steadyWait, r.steadyStep));
            return out;
        }
    }

    /** Whether any trainer has reported a step. */
    public boolean any() {
        synchronized (lock) {
            for (var r : ranks.values()) if (r.steps > 0) return true;
            return false;
        }
    }

    /** Each rank that has asked or reported, by global rank. */
    public List<RankFigures> ranks() {
        synchronized (lock) {
            var out = new ArrayList<RankFigures>();
            for (var r : ranks.values()) out.add(figures(r));
            return out;
        }
    }

    private static RankFigures figures(RankRecord r) {
        long w = 0, s = 0;
        int n = 0;
        for (var it = r.kept.descendingIterator(); it.hasNext() && n < RECENT_STEPS; n++) {
            var step = it.next();
            w += step.waitNanos();
            s += step.stepNanos();
        }
        return new RankFigures(r.rank, r.steps, r.wait, r.step, r.bytes, r.samples, r.firstRequestUnixMillis,
                r.firstRequestNanos < 0 || r.steps == 0 ? 0 : r.lastReportNanos - r.firstRequestNanos,
                n == 0 ? OptionalDouble.empty() : OptionalDouble.of(ratio(w, s)), headspace(r));
    }

    /**
     * The rank's headspace: its floor against the mean of its steps kept after the first {@link #STEADY_SKIP_STEPS} (all kept
     * steps when it has no more); null before it reported a floor or a step.
     */
    private static Headspace headspace(RankRecord r) {
        if (r.floorNanos < 0 || r.kept.isEmpty()) return null;
        long first = r.steps - r.kept.size(), i = first, w = 0, s = 0, n = 0;
        boolean skip = r.steps > STEADY_SKIP_STEPS;
        for (var step : r.kept) {
            if (!skip || i++ >= STEADY_SKIP_STEPS) {
                w += step.waitNanos();
                s += step.stepNanos();
                n++;
            }
        }
        return Headspace.of(r.floorNanos, r.floorSteps, w, s, n);
    }

    /** The headspace of all ranks that measured one ({@link Headspace#overall}); null when none did. */
    public Headspace headspace() {
        var each = new ArrayList<Headspace>();
        synchronized (lock) {
            for (var r : ranks.values()) {
                var h = headspace(r);
                if (h != null) each.add(h);
            }
        }
        return Headspace.overall(each);
    }

    /** The wait ratio over every rank's whole run, empty before any report. */
    public OptionalDouble waitRatio() {
        long w = 0, s = 0;
        for (var r : ranks()) {
            w += r.waitNanos();
            s += r.stepNanos();
        }
        return w + s == 0 ? OptionalDouble.empty() : OptionalDouble.of(ratio(w, s));
    }

    /**
     * The wait ratio of every rank's last {@link #RECENT_STEPS} steps together (what is happening now,
     * not the cold start), empty before any report.
     */
    public OptionalDouble recentWaitRatio() {
        long w = 0, s = 0;
        synchronized (lock) {
            for (var r : ranks.values()) {
                int n = 0;
                for (var it = r.kept.descendingIterator(); it.hasNext() && n < RECENT_STEPS; n++) {
                    var step = it.next();
                    w += step.waitNanos();
                    s += step.stepNanos();
                }
            }
        }
        return w + s == 0 ? OptionalDouble.empty() : OptionalDouble.of(ratio(w, s));
    }

    /**
     * The wait ratio after each rank's first {@code skip} steps (the steady state, as the ladder's
     * summary counts it), over the steps kept; the whole run's when no rank has more.
     */
    public OptionalDouble steadyWaitRatio(int skip) {
        long w = 0, s = 0;
        synchronized (lock) {
            for (var r : ranks.values()) {
                long first = r.steps - r.kept.size(); // steps already dropped from the front
                long i = first;
                for (var step : r.kept) {
                    if (i++ >= skip) {
                        w += step.waitNanos();
                        s += step.stepNanos();
                    }
                }
            }
        }
        return w + s == 0 ? waitRatio() : OptionalDouble.of(ratio(w, s));
    }

    /** The metrics file's {@code trainers} object: per rank its figures, and the wait ratio of all ranks (null before any report). */
    public Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        var list = new ArrayList<Map<String, Object>>();
        for (var r : ranks()) {
            var x = new LinkedHashMap<String, Object>();
            x.put("rank", r.rank());
            x.put("steps_reported", r.steps());
            x.put("wait_ns", r.waitNanos());
            x.put("step_ns", r.stepNanos());
            x.put("wait_ratio", r.steps() == 0 ? null : r.waitRatio());
            x.put("recent_wait_ratio", r.recentWaitRatio().isPresent() ? r.recentWaitRatio().getAsDouble() : null);
            x.put("headspace", r.headspace() == null ? null : r.headspace().toJson());
            list.add(x);
        }
        m.put("ranks", list);
        var all = waitRatio();
        m.put("wait_ratio", all.isPresent() ? all.getAsDouble() : null);
        var recent = recentWaitRatio();
        m.put("recent_wait_ratio", recent.isPresent() ? recent.getAsDouble() : null);
        var headspace = headspace();
        m.put("headspace", headspace == null ? null : headspace.toJson());
        return m;
    }

    /**
     * A rank's file in the run-data format (docs/run-data.md, {@code <mode>-rank<r>.json}): the steps
     * kept as {@code [wait_ns, compute_ns, bytes, samples, transfer_ns, convert_ns]}, transfer and
     * conversion 0 (the service does not see them), plus {@code steps_reported} and the totals, which
     * cover steps no longer kept.
     */
    public Map<String, Object> rankFile(int rank, int world, boolean sharedMemory) {
        synchronized (lock) {
            var r = rank(rank);
            var f = figures(r);
            var m = new LinkedHashMap<String, Object>();
            m.put("rank", rank);
            m.put("world", world);
            m.put("source", "service"); // measured by the trainer, recorded by the service (not a simulated trainer's file)
            m.put("connect_wait_ms", 0);
            m.put("elapsed_ms", f.elapsedNanos() / 1e6);
            m.put("start_unix_ms", r.firstRequestUnixMillis);
            m.put("bytes_received", sharedMemory ? 0 : r.bytes);
            m.put("refs_received", sharedMemory ? r.steps : 0);
            m.put("shared_memory", sharedMemory);
            m.put("steps_reported", r.steps);
            m.put("wait_ns_total", r.wait);
            m.put("step_ns_total", r.step);
            var steps = new ArrayList<long[]>(r.kept.size());
            for (var s : r.kept) steps.add(new long[] {s.waitNanos(), s.stepNanos(), s.bytes(), s.samples(), 0, 0});
            m.put("steps", steps);
            return m;
        }
    }

    private static double ratio(long wait, long step) { return wait + step == 0 ? 0 : (double) wait / (wait + step); }
}
