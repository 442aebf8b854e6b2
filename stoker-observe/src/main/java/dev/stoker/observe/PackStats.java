package dev.stoker.observe;

import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.HashSet;
import java.util.Set;

/**
 * What packing did, step by step, for a packed job ({@code --pack-tokens}): per global step the predicted cost of each
 * rank's pack, its imbalance (max / mean of those costs), the loss to imbalance ({@code 1 − mean / max}: the share of a
 * step the average rank waits for the slowest at the all-reduce, as predicted) and the padding fraction
 * ({@code 1 − Σ real tokens / (R·N)}, the dummy image's tokens counted as real, as the planner counts them; a tail pad
 * is padding). Kept as run totals and as a bounded window of the last {@link #WINDOW_DEFAULT} steps (the series the
 * report plots and the figures the verdict and the status line read).
 *
 * <p>Design: the plan of a step is shared by all its ranks ({@link PackedStep} holds every rank's costs, those another
 * node serves too), so one call per step is enough; the feed calls {@link #record} whenever one of its ranks takes a
 * packed batch, and the first call for a step label wins: the others are ignored. The first call for each step comes in
 * step order (each rank takes its steps in order, so the earliest taker of step s+1 took step s before), so a label
 * older than every label still in the window has been recorded already, or is so late that it no longer matters;
 * either way it is ignored, and memory stays bounded by the window.
 *
 * <p>Threading: every method is synchronized; {@link #record} is called once per rank and step, far from the per-sample
 * path.
 */
public final class PackStats {
    /** Steps kept in the window. */
    public static final int WINDOW_DEFAULT = 4096;

    private final int window;
    private final long[] labels;
    private final double[][] costs;
    private final double[] imbalance;
    private final double[] padding;
    private final long[] tokens;
    private final int[] samples;
    private final Set<Long> inWindow = new HashSet<>();
    private int next; // ring slot written next
    private int size;
    private long evictedMax = Long.MIN_VALUE;

    private long steps, totalSamples, totalTokens, filtered, skipped;
    private double sumImbalance, sumPadding, sumLoss;
    private int packTokens;
    private PackPlanner.Balance balance; // null: not told

    /** A record with a window of {@link #WINDOW_DEFAULT} steps. */
    public PackStats() { this(WINDOW_DEFAULT); }

    /** A record keeping the last {@code window} steps (at least 1). */
    public PackStats(int window) {
        if (window < 1 || window > 1 << 20) throw new IllegalArgumentException("pack stats window must be in [1, 2^20], got " + window);
        this.window = window;
        labels = new long[window];
        costs = new double[window][];
        imbalance = new double[window];
        padding = new double[window];
        tokens = new long[window];
        samples = new int[window];
    }

    /**
     * Records the plan of the step {@code b} is a rank's share of, planned as {@code packing} says; a step no planner cut (a
     * batch of the order: {@link ScheduledBatch#pack()} null) has no packing to record. Returns whether it was recorded now.
     */
    public boolean record(ScheduledBatch b, Packing packing) {
        return b.pack() != null && record(b.pack(), packing.tokens(), packing.balance());
    }

    /** {@link #record(PackedStep, int, PackPlanner.Balance)} when the feed does not say how it balances. */
    public boolean record(PackedStep step, int packTokens) { return record(step, packTokens, null); }

    /**
     * Records {@code step}, planned with the token budget {@code packTokens} (N) and {@code balance} (null: unknown), unless
     * its label was recorded already; returns whether it was recorded now.
     *
     * @throws IllegalArgumentException when {@code packTokens} is not positive or a cost is negative or not finite
     */
    public synchronized boolean record(PackedStep step, int packTokens, PackPlanner.Balance balance) {
        if (packTokens <= 0) throw new IllegalArgumentException("pack token budget must be > 0, got " + packTokens + " (step " + step.globalStep() + ")");
        long label = step.globalStep();
        if (inWindow.contains(label) || (size == window && label <= evictedMax)) return false;
        double[] c = step.costs().clone();
        double max = 0, sum = 0;
        for (int r = 0; r < c.length; r++) {
            if (!(c[r] >= 0) || Double.isInfinite(c[r]))
                throw new IllegalArgumentException("step " + label + ": rank " + r + "'s predicted cost is " + c[r]);
            max = Math.max(max, c[r]);
            sum += c[r];
        }
        double imb = step.imbalance();
        double loss = max <= 0 ? 0 : 1 - sum / c.length / max;
        long tok = step.totalTokens();
        // never negative: a pack's tokens are within N by the planner's rules; if one were not, there is no padding to show
        double pad = Math.max(0, 1 - (double) tok / ((long) c.length * packTokens));
        if (size == window) {
            inWindow.remove(labels[next]);
            evictedMax = Math.max(evictedMax, labels[next]);
        } else {
            size++;
        }
        labels[next] = label;
        costs[next] = c;
        imbalance[next] = imb;
        padding[next] = pad;
        tokens[next] = tok;
        samples[next] = step.samples();
        inWindow.add(label);
        next = (next + 1) % window;
        steps++;
        totalSamples += step.samples();
        totalTokens += tok;
        filtered += step.filtered().length;
        skipped += step.skipped().length;
        sumImbalance += imb;
        sumPadding += pad;
        sumLoss += loss;
        this.packTokens = packTokens;
        if (balance != null) this.balance = balance;
        return true;
    }

    /** Steps recorded since the feed started. */
    public synchronized long steps() { return steps; }

    /** The window's capacity in steps. */
    public int window() { return window; }

    /** Mean over all recorded steps of max / mean predicted rank cost; 1 before any step. */
    public synchronized double meanImbalance() { return steps == 0 ? 1 : sumImbalance / steps; }

    /** Mean over all recorded steps of {@code 1 − real tokens / (R·N)}; 0 before any step. */
    public synchronized double meanPaddingFraction() { return steps == 0 ? 0 : sumPadding / steps; }

    /** Mean over all recorded steps of {@code 1 − mean / max} predicted rank cost; 0 before any step. */
    public synchronized double meanImbalanceLoss() { return steps == 0 ? 0 : sumLoss / steps; }

    /** The predicted cost of each rank's pack in the step recorded last (a copy); empty before any step. */
    public synchronized double[] lastCosts() {
        return size == 0 ? new double[0] : costs[Math.floorMod(next - 1, window)].clone();
    }

    /**
     * The window's balance as the verdict reads it (no series copied: cheap enough to call per verdict); null before the
     * first step.
     */
    public synchronized Bottleneck.Packing packing() {
        if (size == 0) return null;
        double sumImb = 0, sumLossW = 0;
        for (int k = 0; k < size; k++) {
            sumImb += imbalance[k];
            sumLossW += 1 - 1 / imbalance[k];
        }
        return new Bottleneck.Packing(size, sumImb / size, sumLossW / size, balance);
    }

    /** The figures now, with the window's series; null before the first step (an unpacked job never has one). */
    public synchronized Summary summary() {
        if (steps == 0) return null;
        int first = size == window ? next : 0;
        long[] step = new long[size];
        double[] imb = new double[size], pad = new double[size];
        long[] tok = new long[size];
        int[] smp = new int[size];
        double[][] cst = new double[size][];
        double sumImb = 0, sumPad = 0, sumLossW = 0;
        for (int i = 0; i < size; i++) {
            int k = (first + i) % window;
            step[i] = labels[k];
            imb[i] = imbalance[k];
            pad[i] = padding[k];
            tok[i] = tokens[k];
            smp[i] = samples[k];
            cst[i] = costs[k].clone();
            sumImb += imbalance[k];
            sumPad += padding[k];
            sumLossW += 1 - 1 / imbalance[k]; // 1 − mean/max = 1 − 1/(max/mean)
        }
        int last = Math.floorMod(next - 1, window);
        return new Summary(costs[last].length, packTokens, balance == null ? null : balance.name().toLowerCase(java.util.Locale.ROOT),
                steps, totalSamples, totalTokens, filtered, skipped,
                sumImbalance / steps, sumPadding / steps, sumLoss / steps,
                size, sumImb / size, sumPad / size, sumLossW / size,
                labels[last], costs[last].clone(), new Series(step, imb, pad, tok, smp, cst));
    }

    /**
     * A packed job's figures at one moment ({@code docs/run-data.md}, {@code pipeline.pack}).
     *
     * @param ranks                       R of the last step
     * @param packTokens                  N, the token budget of each pack
     * @param balance                     {@code cost} or {@code count}; null when the feed did not say
     * @param steps                       steps recorded since the feed started
     * @param samples                     samples in their packs (dummy segments not counted)
     * @param tokens                      real tokens in their packs (dummy segments counted)
     * @param filtered                    records of their windows over a budget alone
     * @param skipped                     records of their windows the shape index marks as errors or filtered
     * @param meanImbalance               all steps: mean of max / mean predicted rank cost
     * @param meanPaddingFraction         all steps: mean of 1 − real tokens / (R·N)
     * @param meanImbalanceLoss           all steps: mean of 1 − mean / max predicted rank cost
     * @param recentSteps                 steps in the window (at most {@link #WINDOW_DEFAULT})
     * @param recentImbalance             the window's mean imbalance
     * @param recentPaddingFraction       the window's mean padding fraction
     * @param recentImbalanceLoss         the window's mean loss to imbalance (what the verdict reads)
     * @param lastStep                    the label of the step recorded last
     * @param lastCosts                   its predicted cost per rank (training FLOPs of {@code PackCost})
     * @param series                      the window, one entry per step in the order recorded
     */
    public record Summary(int ranks, int packTokens, String balance, long steps, long samples, long tokens, long filtered, long skipped,
                          double meanImbalance, double meanPaddingFraction, double meanImbalanceLoss,
                          int recentSteps, double recentImbalance, double recentPaddingFraction, double recentImbalanceLoss,
                          long lastStep, double[] lastCosts, Series series) {}

    /**
     * The window's steps as columns (each array one entry per step, in the order recorded).
     *
     * @param step            the step's label
     * @param imbalance       max / mean predicted rank cost
     * @param paddingFraction 1 − real tokens / (R·N)
     * @param tokens          real tokens of all packs
     * @param samples         samples of all packs
     * @param costs           per step, the predicted cost of each rank's pack
     */
    public record Series(long[] step, double[] imbalance, double[] paddingFraction, long[] tokens, int[] samples, double[][] costs) {}
}
