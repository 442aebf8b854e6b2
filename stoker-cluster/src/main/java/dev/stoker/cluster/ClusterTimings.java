package dev.stoker.cluster;

import dev.stoker.observe.Bottleneck;
import dev.stoker.observe.BottleneckVerdict;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The trainers' timings of a cluster job as its coordinator gathers them: every node answers for the trainers connected to
 * it ({@link NodeProtocol.NodeTimings}, each rank's running totals of wait and compute as its trainer reported them with
 * each NEXT), and this adds them up per rank, per node and over the whole world, so that remote ranks have a measured wait
 * ratio in the coordinator's metrics, status line and verdict as local ones do.
 *
 * <p>Trust: a node is a member holding the cluster key, but a buggy or hostile one must not corrupt the job's figures.
 * A report is taken whole or not at all ({@link #offer}); it is refused, and the node's figures before it are kept, when it
 * names another node than the one asked, another job, more ranks than the world, a rank outside the world or twice, a rank
 * whose batches that node never asked the coordinator for ({@link #served}: a node reports only its own ranks), a
 * negative or absurd figure (over {@link #MAX_NANOS} ns or {@link #MAX_STEPS} steps: no run is that long, and the sums
 * over ranks cannot overflow), a rank's steps adding up to more time than the job has run ({@link #CLOCK_SLACK_NANOS}
 * allowed), a steady total above its whole-run total, time without steps, or any total below what the same node
 * reported for that rank before (they only grow).
 *
 * <p>Nodes are kept by incarnation ({@link #incarnation}: the address and Pekko's uid of the member): a node started again at
 * the same address is another node to these figures, whose totals start from zero, not the old one's going down.
 *
 * <p>A rank served by several nodes in turn (its trainer reconnected elsewhere after its node died) adds up each node's
 * figures: each node counts only the steps its own connections reported. A node that is gone keeps its last figures.
 *
 * <p>Threading: thread-safe; every method takes this object's lock.
 */
public final class ClusterTimings {
    private static final System.Logger LOG = System.getLogger(ClusterTimings.class.getName());
    /** The largest total of nanoseconds a node may report for one rank (about 36 years). */
    public static final long MAX_NANOS = 1L << 60;
    /** The largest count of steps a node may report for one rank. */
    public static final long MAX_STEPS = 1L << 40;
    /** Nodes remembered per rank as having asked for its batches (a rank moves to another node only when its node dies). */
    static final int MAX_NODES_PER_RANK = 256;
    /**
     * How much more time than has passed since this object was made a rank's wait and compute together may add up to: a
     * rank's steps follow one another (one live connection per rank and node), so their sum is at most the time since its
     * trainer's first request, which may come before the coordinator finished opening the job on every node (at most its
     * start timeout, five minutes) and is measured on another clock. Beyond it a total is made up.
     */
    static final long CLOCK_SLACK_NANOS = java.util.concurrent.TimeUnit.MINUTES.toNanos(10);
    /** Characters kept of a refusal's reason. */
    private static final int MAX_REASON = 400;

    /** One rank's figures summed over the nodes that served it, or one node's over its ranks. */
    public record Figures(long steps, long waitNanos, long stepNanos, long steadyWaitNanos, long steadyStepNanos) {
        static final Figures NONE = new Figures(0, 0, 0, 0, 0);

        Figures plus(NodeProtocol.RankTiming t) {
            return new Figures(steps + t.steps(), waitNanos + t.waitNanos(), stepNanos + t.stepNanos(),
                    steadyWaitNanos + t.steadyWaitNanos(), steadyStepNanos + t.steadyStepNanos());
        }

        /** Σ wait / Σ (wait + compute); empty before any step. */
        public OptionalDouble waitRatio() { return steps == 0 ? OptionalDouble.empty() : ratio(waitNanos, stepNanos); }

        /** The same after each rank's first steps (the steady state); the whole run's when no step is past them. */
        public OptionalDouble steadyWaitRatio() {
            if (steps == 0) return OptionalDouble.empty();
            return steadyWaitNanos + steadyStepNanos == 0 ? waitRatio() : ratio(steadyWaitNanos, steadyStepNanos);
        }

        private static OptionalDouble ratio(long wait, long step) {
            return wait + step == 0 ? OptionalDouble.of(0) : OptionalDouble.of((double) wait / (wait + step));
        }
    }

    private final String job;
    private final int world;
    private final List<Set<String>> servedBy;
    /** Node address → rank → the node's last accepted totals for that rank. */
    private final Map<String, Map<Integer, NodeProtocol.RankTiming>> accepted = new TreeMap<>();
    private final Map<String, String> refusals = new TreeMap<>(); // node → its last refusal's reason
    private long refused;

    private final java.util.function.LongSupplier clock;
    private final long bornNanos;

    /** The figures of job {@code job}, whose world has {@code world} ranks (made when the job has opened). */
    public ClusterTimings(String job, int world) { this(job, world, System::nanoTime); }

    /** {@link #ClusterTimings(String, int)} on {@code clock} (tests). */
    ClusterTimings(String job, int world, java.util.function.LongSupplier clock) {
        if (world <= 0) throw new IllegalArgumentException("world must be positive, got " + world);
        this.clock = clock;
        this.bornNanos = clock.getAsLong();
        this.job = java.util.Objects.requireNonNull(job, "job");
        this.world = world;
        var s = new ArrayList<Set<String>>(world);
        for (int r = 0; r < world; r++) s.add(new HashSet<>());
        this.servedBy = List.copyOf(s);
    }

    /**
     * The key a node's figures are kept under: its address and its incarnation's uid ({@code UniqueAddress.longUid}), as
     * {@code address#uid}; {@code address} alone where the uid is not known (0).
     */
    public static String incarnation(String address, long uid) { return uid == 0 ? address : address + "#" + uid; }

    /** The uid of an {@link #incarnation} key; null where it holds none. */
    static Long uidOf(String node) {
        String address = addressOf(node);
        return address.length() == node.length() ? null : Long.valueOf(node.substring(address.length() + 1));
    }

    /** The address of an {@link #incarnation} key. */
    public static String addressOf(String node) {
        int i = node.lastIndexOf('#');
        if (i < 0) return node;
        String uid = node.substring(i + 1);
        return uid.matches("-?[0-9]{1,19}") ? node.substring(0, i) : node;
    }

    /** Node {@code node} asked the coordinator for rank {@code rank}'s batches: its trainers may report that rank. */
    public synchronized void served(int rank, String node) {
        if (rank < 0 || rank >= world || node == null) return; // the coordinator refuses such an ask anyway
        var nodes = servedBy.get(rank);
        if (nodes.size() < MAX_NODES_PER_RANK) nodes.add(node);
    }

    /**
     * Takes node {@code node}'s report (the answer to asking that node), or refuses it whole with the reason (returned;
     * null when taken): what a report must hold is in the class comment.
     */
    public synchronized String offer(String node, NodeProtocol.NodeTimings report) {
        String why = check(node, report);
        if (why == null) {
            if (report.ranks().isEmpty()) return null; // no trainer has reported to it (yet): not a node with figures
            var mine = accepted.computeIfAbsent(node, n -> new TreeMap<>());
            for (var t : report.ranks()) mine.put(t.rank(), t);
            return null;
        }
        if (why.length() > MAX_REASON) why = why.substring(0, MAX_REASON) + "…";
        refused++;
        if (refusals.put(node, why) == null)
            LOG.log(System.Logger.Level.WARNING, "job " + job + ": refused the trainer timings node " + node + " sent: " + why
                    + " (its figures before stay; later refusals are counted in the metrics)");
        return why;
    }

    private String check(String node, NodeProtocol.NodeTimings report) {
        if (report == null || report.ranks() == null) return "no report";
        if (!addressOf(node).equals(report.address())) return "node " + node + " answered as " + report.address();
        if (!job.equals(report.job())) return "a report of job " + report.job() + ", not " + job;
        if (report.ranks().size() > world) return report.ranks().size() + " ranks reported, the world has " + world;
        var before = accepted.getOrDefault(node, Map.of());
        var seen = new HashSet<Integer>();
        for (var t : report.ranks()) {
            if (t == null) return "an empty entry";
            int r = t.rank();
            if (r < 0 || r >= world) return "rank " + r + " is outside the world of " + world;
            if (!seen.add(r)) return "rank " + r + " reported twice";
            if (!servedBy.get(r).contains(node)) return "rank " + r + " reported, whose batches node " + node + " never asked for";
            if (t.steps() < 0 || t.steps() > MAX_STEPS) return "rank " + r + ": " + t.steps() + " steps";
            for (long v : new long[] {t.waitNanos(), t.stepNanos(), t.steadyWaitNanos(), t.steadyStepNanos()})
                if (v < 0 || v > MAX_NANOS) return "rank " + r + ": a total of " + v + " ns";
            if (t.waitNanos() + t.stepNanos() > clock.getAsLong() - bornNanos + CLOCK_SLACK_NANOS)
                return "rank " + r + ": " + (t.waitNanos() + t.stepNanos()) / 1_000_000 + " ms of steps, more than the job has run";
            if (t.steadyWaitNanos() > t.waitNanos() || t.steadyStepNanos() > t.stepNanos())
                return "rank " + r + ": steady totals above the whole run's";
            if (t.steps() == 0 && t.waitNanos() + t.stepNanos() > 0) return "rank " + r + ": time without a step";
            var b = before.get(r);
            if (b != null && (t.steps() < b.steps() || t.waitNanos() < b.waitNanos() || t.stepNanos() < b.stepNanos()
                    || t.steadyWaitNanos() < b.steadyWaitNanos() || t.steadyStepNanos() < b.steadyStepNanos()))
                return "rank " + r + ": totals went down (" + t + " after " + b + ")";
        }
        return null;
    }

    /** Each rank's figures summed over the nodes that reported it (ranks no node reported: absent). */
    public synchronized Map<Integer, Figures> ranks() {
        var out = new TreeMap<Integer, Figures>();
        for (var perNode : accepted.values())
            for (var t : perNode.values()) out.merge(t.rank(), Figures.NONE.plus(t), (a, b) -> new Figures(a.steps() + b.steps(),
                    a.waitNanos() + b.waitNanos(), a.stepNanos() + b.stepNanos(), a.steadyWaitNanos() + b.steadyWaitNanos(),
                    a.steadyStepNanos() + b.steadyStepNanos()));
        return out;
    }

    /** Each node's figures over the ranks it reported, by {@link #incarnation}. */
    public synchronized Map<String, Figures> nodes() {
        var out = new TreeMap<String, Figures>();
        accepted.forEach((node, perNode) -> {
            var f = Figures.NONE;
            for (var t : perNode.values()) f = f.plus(t);
            out.put(node, f);
        });
        return out;
    }

    /** Every rank's figures together: the job's wait ratio, the one the verdict and status line use. */
    public synchronized Figures all() {
        var f = Figures.NONE;
        for (var perNode : accepted.values()) for (var t : perNode.values()) f = f.plus(t);
        return f;
    }

    /**
     * The verdict from every rank's steady wait ratio together ({@link Bottleneck#fromTrainers}): the coordinator sees the
     * trainers, not its nodes' pipelines. Its evidence names the ranks and nodes measured and, over several nodes, the node
     * whose ranks wait most and the one whose wait least.
     */
    public synchronized BottleneckVerdict verdict() {
        var all = all();
        var evidence = new StringBuilder();
        if (all.steps() > 0) {
            var perNode = nodes();
            long measured = ranks().values().stream().filter(f -> f.steps() > 0).count();
            evidence.append(measured).append(" of ").append(world).append(" ranks measured on ").append(perNode.size())
                    .append(perNode.size() == 1 ? " node" : " nodes");
            String most = null, least = null;
            double hi = -1, lo = 2;
            for (var e : perNode.entrySet()) {
                var w = e.getValue().steadyWaitRatio();
                if (w.isEmpty()) continue;
                if (w.getAsDouble() > hi) {
                    hi = w.getAsDouble();
                    most = e.getKey();
                }
                if (w.getAsDouble() < lo) {
                    lo = w.getAsDouble();
                    least = e.getKey();
                }
            }
            if (most != null && !most.equals(least))
                evidence.append(String.format(java.util.Locale.ROOT, "; ranks on %s wait most (%.3f), on %s least (%.3f)", addressOf(most), hi,
                        addressOf(least), lo));
        }
        return Bottleneck.fromTrainers(all.steadyWaitRatio(), evidence.toString());
    }

    /**
     * The wait ratio of the steps reported between {@code before} and {@code now} (two readings of {@link #all()}): what
     * the trainers do lately, as a status line shows it; empty when no step was reported in between.
     */
    public static OptionalDouble waitRatioBetween(Figures before, Figures now) {
        long steps = now.steps() - before.steps(), wait = now.waitNanos() - before.waitNanos(), step = now.stepNanos() - before.stepNanos();
        if (steps <= 0 || wait < 0 || step < 0 || wait + step == 0) return OptionalDouble.empty();
        return OptionalDouble.of((double) wait / (wait + step));
    }

    /** Reports refused so far. */
    public synchronized long refused() { return refused; }

    /**
     * The coordinator's metrics {@code trainers} object (docs/run-data.md): per rank and per node the steps reported, wait
     * and compute, and the wait ratios (null before a step), the world's wait ratios, and the reports refused with each
     * node's last reason.
     */
    public synchronized Map<String, Object> toJson() {
        var m = new LinkedHashMap<String, Object>();
        var byRank = new HashMap<Integer, TreeSet<String>>();
        accepted.forEach((node, perNode) -> perNode.keySet().forEach(r -> byRank.computeIfAbsent(r, x -> new TreeSet<>()).add(addressOf(node))));
        var ranks = new ArrayList<Map<String, Object>>();
        ranks().forEach((r, f) -> {
            var x = new LinkedHashMap<String, Object>();
            x.put("rank", r);
            x.put("nodes", List.copyOf(byRank.getOrDefault(r, new TreeSet<>())));
            x.putAll(figures(f));
            ranks.add(x);
        });
        var nodes = new ArrayList<Map<String, Object>>();
        nodes().forEach((node, f) -> {
            var x = new LinkedHashMap<String, Object>();
            x.put("node", addressOf(node));
            x.put("incarnation", uidOf(node)); // a node started again at an address is another entry, with another uid
            x.put("ranks", List.copyOf(accepted.get(node).keySet()));
            x.putAll(figures(f));
            nodes.add(x);
        });
        m.put("world", world);
        m.put("ranks", ranks);
        m.put("nodes", nodes);
        var all = all();
        m.put("steps_reported", all.steps());
        m.put("wait_ratio", orNull(all.waitRatio()));
        m.put("steady_wait_ratio", orNull(all.steadyWaitRatio()));
        m.put("refused_reports", refused);
        m.put("refusals", new LinkedHashMap<>(refusals));
        return m;
    }

    private static LinkedHashMap<String, Object> figures(Figures f) {
        var x = new LinkedHashMap<String, Object>();
        x.put("steps_reported", f.steps());
        x.put("wait_ns", f.waitNanos());
        x.put("step_ns", f.stepNanos());
        x.put("wait_ratio", orNull(f.waitRatio()));
        x.put("steady_wait_ratio", orNull(f.steadyWaitRatio()));
        return x;
    }

    private static Double orNull(OptionalDouble d) { return d.isPresent() ? d.getAsDouble() : null; }
}
