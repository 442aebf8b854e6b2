package dev.stoker.plan.pack;

import java.util.Objects;

/**
 * Packing and balance ({@code --pack-tokens N}, {@code --pack-patches P}, {@code --balance}, {@code --pack-pad-to M}) and
 * the cost model the planner balances ({@code --cost-*}; docs/packing.md): per global step the planner
 * ({@link PackPlanner}) takes the next samples of the global order and forms one pack per rank, a row of whole samples of
 * at most {@code tokens} tokens and {@code patches} vision patches, choosing which sample goes to which rank so that the
 * predicted cost per rank is even ({@code COST}) or only the sample counts are ({@code COUNT}). {@link #OFF}: batches of a
 * fixed number of samples per rank, padded to the longest.
 *
 * <p>These are the plan's inputs: {@code dev.stoker.plan.StepSchedules#of} makes the schedule they describe, so that the
 * callers after it never ask which kind they hold.
 *
 * @param tokens  N, tokens per pack (input_ids of a rank's row, a tail pad included); 0: packing off
 * @param patches P, vision patches (pixel_values rows) per pack; 0: no limit but what N implies
 * @param balance what the planner evens out across ranks
 * @param padTo   M, the row padded at its tail to a multiple of M (1: no pad); N is a multiple of M
 * @param cost    the cost model (the model folder's, else the family's smallest published model, each constant
 *                replaced where {@code --cost-*} gives it); null when packing is off
 */
public record Packing(int tokens, int patches, PackPlanner.Balance balance, int padTo, PackCost cost) {
    /** Not packed: batches of a fixed number of samples per rank, padded to the longest. */
    public static final Packing OFF = new Packing(0, 0, PackPlanner.Balance.COST, 1, null);

    public Packing {
        Objects.requireNonNull(balance, "balance");
        if (tokens < 0) throw new IllegalArgumentException("pack tokens must be >= 0 (0: off), got " + tokens);
        if (patches < 0) throw new IllegalArgumentException("pack patches must be >= 0 (0: no limit), got " + patches);
        if (padTo < 1) throw new IllegalArgumentException("pack pad-to must be >= 1, got " + padTo);
        if (tokens > 0 && tokens % padTo != 0)
            throw new IllegalArgumentException("pack tokens " + tokens + " must be a multiple of pad-to " + padTo
                    + ", so that a row padded at its tail stays within it");
        if (tokens > 0 && cost == null) throw new IllegalArgumentException("a packed job needs its cost model");
    }

    /** Packs of at most {@code tokens} tokens balanced by {@code cost}, no patch limit, no tail pad. */
    public static Packing of(int tokens, PackCost cost) {
        return new Packing(tokens, 0, PackPlanner.Balance.COST, 1, cost);
    }

    /** Whether steps are packed. */
    public boolean on() { return tokens > 0; }

    /**
     * The most samples one rank's share of a step can hold, for sizing the queues that carry them: {@code batchSize}, or
     * a pack's {@code tokens} (a sample has one token at least).
     */
    public int samplesPerRankAtMost(int batchSize) { return on() ? tokens : batchSize; }

    /** The pad multiple a pack's row is written with; 0 when steps are not packed (rows are padded batches then). */
    public int packPadTo() { return on() ? padTo : 0; }

    /**
     * How the steps are decided, as a job's fingerprint hashes it: a padded job's by its batch size, a packed job's by its
     * budgets, balance, pad and cost model. The text is part of saved states: it never changes.
     */
    public String stepsText(int batchSize) {
        return !on() ? "batch=" + batchSize : "pack=" + tokens + "," + patches + "," + balance + "," + padTo + "," + cost;
    }
}
