package dev.stoker.bench.packing;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.Stats;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.SampleSchedule;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code stoker bench packing}: what packing and balance give on a data set, without decoding anything. The global
 * order is planned into packed steps of R packs of at most N tokens (and P patches), once balanced by predicted cost
 * and once by sample count, and compared with the same samples batched the unpacked way.
 *
 * <p>What is measured: the steps that start in the first {@link Settings#epochs} epochs, walked from the origin. Steps
 * run across epoch ends, so the last of them ends in epoch E's head, and each epoch end is inside one step (the step
 * across it holds the epoch's tail and the next epoch's head, up to its budget or to the first record it already holds
 * from the tail): the figures are what a job running for E epochs gets, every sample of those epochs packed once
 * (and a few of epoch E's).
 *
 * <p>Figures, over those steps:
 * <ul>
 *   <li>{@code padding_fraction}: 1 − real tokens / (steps·R·N), balanced by cost: the share of the ranks' rows the
 *       GPU would compute with nothing in it. Real tokens are the samples' own; the dummy image's segment (a pack
 *       without an image in a step with one) counts as padding here, as it trains nothing.</li>
 *   <li>{@code padded_padding_fraction}: the same samples in the same global order batched as without packing, B the
 *       mean samples per pack (rounded, at least 1): per step each rank takes the next B samples, padded to the longest
 *       of them, so 1 − real / Σ B·maxLen (a last short group is padded to its own size).</li>
 *   <li>{@code imbalance}: the mean over steps of max / mean predicted rank cost ({@link PackedStep#imbalance}), for
 *       {@code count} and {@code cost}: what the straggler costs the others at each all-reduce.</li>
 *   <li>{@code planner_us_per_sample}: the planner's own cost, with the balance asked for: the median of
 *       {@link Settings#rounds} timed plannings of those steps, after {@value #WARM_UP_ROUNDS} untimed ones (the
 *       JIT), divided by the samples packed.</li>
 * </ul>
 * The last stdout line is JSON {@code {"padding_fraction", "padded_padding_fraction", "imbalance": {"count", "cost"},
 * "planner_us_per_sample", "samples", "packs"}} ({@code samples} and {@code packs} of the cost-balanced steps).
 */
public final class PackingBench {
    /** Untimed plannings of the steps before the timed ones. */
    static final int WARM_UP_ROUNDS = 2;

    /**
     * @param order   the global sample order (seed, sources, mix)
     * @param shapes  every record's shape
     * @param ranks   R
     * @param tokens  N
     * @param patches P, or 0 for no limit
     * @param balance the balance whose planner is timed
     * @param cost    the cost model
     * @param dummy   the dummy image's segment
     * @param rounds  timed plannings of the steps (at least 1; the figure is their median)
     * @param epochs  E: the steps that start in epochs 0 … E−1 are measured (1 … {@value #MAX_EPOCHS})
     */
    public record Settings(SampleSchedule order, ShapeIndex shapes, int ranks, int tokens, int patches, PackPlanner.Balance balance,
                           PackCost cost, SampleShape dummy, int rounds, int epochs) {
        public Settings {
            if (rounds < 1) throw new IllegalArgumentException("--rounds must be >= 1, got " + rounds);
            if (epochs < 1 || epochs > MAX_EPOCHS) throw new IllegalArgumentException("--epochs must be in [1, " + MAX_EPOCHS + "], got " + epochs);
        }
    }

    /** Most epochs measured. */
    public static final int MAX_EPOCHS = 1000;

    /** What the steps that start in the first epochs, planned with one balance, gave. */
    record Epoch(List<PackedStep> steps, long realTokens, long dummyTokens, int samples, double imbalance, int skipped, int filtered) {
        int packs() { return steps.isEmpty() ? 0 : steps.size() * steps.getFirst().ranks(); }
    }

    private PackingBench() {}

    /**
     * The benchmark of a job's configuration ({@code --data}, {@code --ranks}, {@code --pack-tokens}, the processor): its
     * sources opened, the shapes read from {@code stoker validate}'s length index in {@code lengthsDir} (null: the index
     * cache) or measured from image headers ({@code say} is told which), then {@link #run(Settings, PrintWriter)}.
     */
    public static Map<String, Object> run(dev.stoker.node.NodeConfig config, java.nio.file.Path lengthsDir, int rounds, int epochs,
                                          PrintWriter out, java.util.function.Consumer<String> say) throws Exception {
        try (var sources = dev.stoker.source.mix.DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
             var tokenizer = dev.stoker.node.NodeFeeds.tokenizer(config.get(dev.stoker.node.NodeConfig.TOKENIZER))) {
            var source = sources.feedSource();
            var records = source.records();
            if (records.size() == 0) throw new dev.stoker.node.ConfigException("--data " + config.data() + " holds no samples");
            var shapes = dev.stoker.node.NodeFeeds.shapes(config, source, records, tokenizer, lengthsDir, say);
            var planner = dev.stoker.node.NodeFeeds.packPlanner(config, records, shapes);
            return run(new Settings(planner.order(), shapes, config.ranks(), planner.tokenBudget(), planner.patchBudget(),
                    planner.balance(), planner.cost(), planner.dummy(), rounds, epochs), out);
        }
    }

    /** Runs the benchmark, printing to {@code out}; returns the last line's figures. */
    public static Map<String, Object> run(Settings s, PrintWriter out) throws Exception {
        var cost = epochs(planner(s, PackPlanner.Balance.COST), s.dummy(), s.epochs());
        var count = epochs(planner(s, PackPlanner.Balance.COUNT), s.dummy(), s.epochs());
        if (cost.steps().isEmpty()) throw new IllegalStateException("the epochs gave no packed step");
        double capacity = (double) cost.steps().size() * s.ranks() * s.tokens();
        double padding = 1 - cost.realTokens() / capacity;
        double countPadding = 1 - count.realTokens() / ((double) count.steps().size() * s.ranks() * s.tokens());
        int batch = Math.max(1, (int) Math.round(cost.samples() / (double) cost.packs()));
        double padded = paddedFraction(s, cost, batch);
        double usPerSample = time(s);

        int ofLast = 0; // samples of epoch E's head in the last step
        var lastStep = cost.steps().getLast();
        if (lastStep.next().position() > 0) ofLast = (int) Math.min(lastStep.next().position(), lastStep.positions());
        out.printf(Locale.ROOT, "the steps that start in epoch%s: %d samples (%d positions of epoch %d's head among them) in %d steps of "
                        + "%d packs (N = %d tokens%s), %d skipped (errors, filtered by a limit), %d over a budget%n",
                s.epochs() == 1 ? " 0" : "s 0-" + (s.epochs() - 1), cost.samples(), ofLast, s.epochs(), cost.steps().size(), s.ranks(),
                s.tokens(), s.patches() > 0 ? ", P = " + s.patches() + " patches" : "", cost.skipped(), cost.filtered());
        out.printf(Locale.ROOT, "%-8s %10s %14s %12s %12s %14s%n", "balance", "padding", "tokens/step", "samples/pack", "imbalance",
                "dummy tokens");
        for (var e : List.of(Map.entry("count", count), Map.entry("cost", cost))) {
            var ep = e.getValue();
            double cap = (double) ep.steps().size() * s.ranks() * s.tokens();
            out.printf(Locale.ROOT, "%-8s %9.2f%% %14.0f %12.2f %12.4f %13.2f%%%n", e.getKey(), 100 * (1 - ep.realTokens() / cap),
                    ep.realTokens() / (double) ep.steps().size(), ep.samples() / (double) ep.packs(), ep.imbalance(),
                    100 * ep.dummyTokens() / cap);
        }
        // the steps across an epoch's end: how full each is, and what ended it
        double stepCapacity = (double) s.ranks() * s.tokens();
        long acrossTokens = 0;
        int across = 0;
        for (var step : cost.steps()) {
            if (step.next().epoch() == step.cursor().epoch()) continue;
            long real = realTokens(step, s.dummy());
            acrossTokens += real;
            across++;
            int repeat = repeatAt(s.order(), step);
            out.printf(Locale.ROOT, "step %d runs across the end of epoch %d: %d positions of its tail, %d of epoch %d's head, %.0f%% full; "
                            + "ended by %s%n", step.globalStep(), step.cursor().epoch(), s.order().datasetSize() - step.cursor().position(),
                    step.next().position(), step.next().epoch(), 100 * real / stepCapacity,
                    repeat == step.next().position() ? "a record it held from the tail, again at epoch " + step.next().epoch()
                            + "'s position " + repeat : repeat < 0 ? "its budget" : "its budget (the first repeat is at position " + repeat + ")");
        }
        if (across > 0 && cost.steps().size() > across)
            out.printf(Locale.ROOT, "padding of the steps inside an epoch: %.2f%%; of the %d step(s) across an end: %.2f%%%n",
                    100 * (1 - (cost.realTokens() - acrossTokens) / ((cost.steps().size() - across) * stepCapacity)), across,
                    100 * (1 - acrossTokens / (across * stepCapacity)));
        out.printf(Locale.ROOT, "unpacked, B = %d samples per rank padded to the longest: padding %.2f%%%n", batch, 100 * padded);
        out.printf(Locale.ROOT, "planner (%s): %.2f µs per sample (median of %d plannings of the steps)%n",
                s.balance().name().toLowerCase(Locale.ROOT), usPerSample, s.rounds());

        var result = new LinkedHashMap<String, Object>();
        result.put("padding_fraction", round(padding));
        result.put("padded_padding_fraction", round(padded));
        var imbalance = new LinkedHashMap<String, Object>();
        imbalance.put("count", round(count.imbalance()));
        imbalance.put("cost", round(cost.imbalance()));
        result.put("imbalance", imbalance);
        result.put("planner_us_per_sample", round(usPerSample));
        result.put("samples", cost.samples());
        result.put("packs", cost.packs());
        if (!(countPadding >= 0)) throw new IllegalStateException("count-balanced packs hold more tokens than N: " + countPadding);
        out.println(new ObjectMapper().writeValueAsString(result));
        out.flush();
        return result;
    }

    /** The samples' own tokens in {@code step} (its dummy images' left out). */
    private static long realTokens(PackedStep step, SampleShape dummy) {
        long n = 0;
        for (int r = 0; r < step.ranks(); r++) n += step.tokens()[r] - (step.dummyImage()[r] ? dummy.tokens() : 0);
        return n;
    }

    /**
     * For a step across an epoch's end: the first position of the next epoch whose record the step holds from its
     * epoch's tail (where the planner ends such a step at the latest), or −1 when there is none in that epoch.
     */
    private static int repeatAt(SampleSchedule order, PackedStep step) {
        var tail = new java.util.HashSet<Integer>();
        int from = (int) step.cursor().position(), size = order.datasetSize();
        int[] records = new int[size - from];
        order.recordsAt(step.cursor().epoch(), from, records.length, records);
        for (int r : records) tail.add(r);
        for (int q = 0; q < size; q++) if (tail.contains(order.recordAt(step.next().epoch(), q))) return q;
        return -1;
    }

    private static PackPlanner planner(Settings s, PackPlanner.Balance balance) {
        return new PackPlanner(s.order(), s.shapes(), s.ranks(), s.tokens(), s.patches(), balance, s.cost(), s.dummy());
    }

    /** The steps that start in epochs 0 … {@code epochs}−1, planned one by one from the origin, and what they hold. */
    static Epoch epochs(PackPlanner planner, SampleShape dummy, int epochs) {
        var steps = new ArrayList<PackedStep>();
        long real = 0, dummies = 0, label = 0;
        int samples = 0, skipped = 0, filtered = 0;
        double imbalance = 0;
        var c = ScheduleCursor.START;
        while (c.epoch() < epochs) {
            var step = planner.plan(c, label++);
            steps.add(step);
            for (int r = 0; r < step.ranks(); r++) {
                int d = step.dummyImage()[r] ? dummy.tokens() : 0;
                real += step.tokens()[r] - d;
                dummies += d;
            }
            samples += step.samples();
            skipped += step.skipped().length;
            filtered += step.filtered().length;
            imbalance += step.imbalance();
            c = step.next();
        }
        return new Epoch(steps, real, dummies, samples, steps.isEmpty() ? 1 : imbalance / steps.size(), skipped, filtered);
    }

    /**
     * The padding of the samples {@code e} packed, in their global order, batched the unpacked way: per step of the
     * unpacked job each rank takes the next {@code batch} samples, padded to the longest of them (a last short group is
     * padded to its own size).
     */
    static double paddedFraction(Settings s, Epoch e, int batch) {
        long real = 0, padded = 0;
        int[] order = inOrder(s.order(), e);
        for (int from = 0; from < order.length; from += batch) {
            int to = Math.min(order.length, from + batch);
            int longest = 0;
            for (int i = from; i < to; i++) {
                int t = s.shapes().shape(order[i]).tokens();
                real += t;
                longest = Math.max(longest, t);
            }
            padded += (long) longest * (to - from);
        }
        return padded == 0 ? 0 : 1 - real / (double) padded;
    }

    /**
     * The samples the steps' packs hold, in the global order: each step's window is the run of positions from its
     * cursor to its {@code next} (across an epoch's end for the step that runs across it), and of those positions the
     * ones whose record went into a pack (not skipped, not over a budget).
     */
    static int[] inOrder(SampleSchedule order, Epoch e) {
        var out = new int[e.samples()];
        int k = 0;
        for (var step : e.steps()) {
            var inPacks = new java.util.HashMap<Integer, Integer>();
            for (int[] pack : step.records()) for (int record : pack) inPacks.merge(record, 1, Integer::sum);
            int from = (int) step.cursor().position();
            int[] window = new int[step.positions()];
            int inFirst = (int) Math.min(window.length, order.datasetSize() - from);
            order.recordsAt(step.cursor().epoch(), from, inFirst, window);
            if (inFirst < window.length) { // the head of the next epoch
                int[] head = new int[window.length - inFirst];
                order.recordsAt(step.cursor().epoch() + 1, 0, head.length, head);
                System.arraycopy(head, 0, window, inFirst, head.length);
            }
            for (int record : window) {
                Integer left = inPacks.get(record);
                if (left == null) continue;
                out[k++] = record;
                if (left == 1) inPacks.remove(record);
                else inPacks.put(record, left - 1);
            }
            if (!inPacks.isEmpty())
                throw new IllegalStateException("step " + step.globalStep() + ": packed records " + inPacks.keySet() + " are not in its window");
        }
        if (k != out.length) throw new IllegalStateException("the steps' windows hold " + k + " packed samples, their packs " + out.length);
        return out;
    }

    /** Median µs per packed sample of planning the measured steps with the balance asked for. */
    private static double time(Settings s) {
        var planner = planner(s, s.balance());
        for (int i = 0; i < WARM_UP_ROUNDS; i++) epochs(planner, s.dummy(), s.epochs());
        double[] us = new double[s.rounds()];
        for (int i = 0; i < us.length; i++) {
            long t0 = System.nanoTime();
            var e = epochs(planner, s.dummy(), s.epochs());
            us[i] = (System.nanoTime() - t0) / 1e3 / Math.max(1, e.samples());
        }
        return Stats.median(us);
    }

    private static double round(double v) { return Math.round(v * 1e4) / 1e4; }
}
