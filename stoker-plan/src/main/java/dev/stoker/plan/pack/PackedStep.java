package dev.stoker.plan.pack;

import dev.stoker.core.ScheduleCursor;

/**
 * What the pack planner decided for one global step, shared by all ranks of the step: which records go into each
 * rank's pack (one row of whole samples within the token and patch budgets), what each pack is predicted to cost,
 * and which records of the step's window were skipped. A step consumes the positions {@code [cursor, next)} of the
 * global order (epoch after epoch: a step can run from the end of its epoch into the next one's head); each of them
 * is in exactly one pack, in {@code filtered} or in {@code skipped}.
 *
 * @param cursor     where the step starts in the global order (its epoch is the step's epoch)
 * @param next       where the step after it starts: in the same epoch, or in the next one when the step ran across
 *                   the epoch's end (its position there the positions it took of that epoch)
 * @param globalStep the step's label
 * @param records    per rank: the pack's records (numbered across sources), in segment order (ascending global
 *                   position)
 * @param costs      per rank: predicted cost of its pack ({@link PackCost}), the dummy segment included
 * @param tokens     per rank: real tokens (the dummy image's included, a tail pad not)
 * @param patches    per rank: vision patches (the dummy image's included)
 * @param dummyImage per rank: whether the pack gets the dummy-image segment appended (some other pack of the step
 *                   holds an image and this one none)
 * @param filtered   records of the window over a budget alone (tokens > N or patches > P): skipped, counted
 * @param skipped    records the shape index marks ERROR or FILTERED: skipped (the feed reports them)
 */
public record PackedStep(ScheduleCursor cursor, ScheduleCursor next, long globalStep,
                         int[][] records,
                         double[] costs,
                         int[] tokens,
                         int[] patches,
                         boolean[] dummyImage,
                         int[] filtered,
                         int[] skipped) {
    public PackedStep {
        int r = records.length;
        if (r == 0) throw new IllegalArgumentException("a packed step needs at least one rank");
        if (costs.length != r || tokens.length != r || patches.length != r || dummyImage.length != r)
            throw new IllegalArgumentException("a packed step needs one cost, token count, patch count and dummy flag per rank");
    }

    /** Ranks the step was planned for. */
    public int ranks() { return records.length; }

    /** Samples in all packs together (dummy segments not counted). */
    public int samples() {
        int n = 0;
        for (int[] pack : records) n += pack.length;
        return n;
    }

    /** Positions of the global order the step consumed: its samples, filtered and skipped records. */
    public int positions() { return samples() + filtered.length + skipped.length; }

    /** Real tokens of all packs together (dummy segments included). */
    public long totalTokens() {
        long n = 0;
        for (int t : tokens) n += t;
        return n;
    }

    /** Predicted step cost balance: max / mean of {@link #costs}; 1 when even (or when all costs are 0). */
    public double imbalance() {
        double max = 0, sum = 0;
        for (double c : costs) {
            max = Math.max(max, c);
            sum += c;
        }
        return sum <= 0 ? 1.0 : max * costs.length / sum;
    }
}
