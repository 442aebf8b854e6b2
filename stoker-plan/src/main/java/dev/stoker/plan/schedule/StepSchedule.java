package dev.stoker.plan.schedule;

import dev.stoker.core.ScheduleCursor;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * What each rank trains on at each global step, from a cursor: batches of B samples ({@link SampleSchedule}), or the
 * packs a planner cuts from the same order ({@code dev.stoker.plan.pack.PackedSchedule}). Everything after the plan —
 * the feed, the early error judgement, the ledger's audit, {@code stoker plan}, the cluster's coordinator — walks the
 * steps through this face, so that none of them needs to know which kind of schedule it holds.
 *
 * <p>Cursors and labels: a step starts at a cursor of the global order (epoch, position in the epoch's permutation)
 * and carries a label, its global step. A schedule {@link #labelled labelled} at a cursor gives the step there the label
 * it was told (a trainer's own count, kept across a change of rank count) and counts on from it; an unlabelled one
 * counts steps from the origin (epoch 0, position 0). A walk ({@link #iterator}) yields each rank's share of one step
 * after another, epoch after epoch, each with its cursor, its step within the epoch, its label and the state that
 * resumes the job after it.
 *
 * <p>Threading: implementations are safe to share; their walks are not (one per rank).
 */
public interface StepSchedule {
    /** Ranks each step feeds: the world size. */
    int ranks();

    /** The global order the steps are cut from: seed, sources and their mix, epochs. */
    SampleSchedule order();

    /** Places in each epoch of the order (records of one source, or the mix's places). */
    default int datasetSize() { return order().datasetSize(); }

    /**
     * The cursor itself when a step may start there, else where the next one does: what a cursor saved with another
     * rank count, or after an epoch's last step, resumes at.
     */
    ScheduleCursor aligned(ScheduleCursor c);

    /** The cursor of the step {@code globalStep} steps from the origin (epoch 0, position 0), labels aside. */
    ScheduleCursor cursorAt(long globalStep);

    /**
     * This schedule with the step at {@code at} labelled {@code label} and the steps after it counted on from there: where a
     * trainer resumed with another rank count continues its labels. A negative {@code label} counts from the origin.
     */
    StepSchedule labelled(ScheduleCursor at, long label);

    /** The cursor this schedule's labels count from ({@link #labelled}); null: the origin. */
    ScheduleCursor labelAt();

    /** The label of the step at {@link #labelAt()}; −1 when labels count from the origin. */
    long labelStep();

    /** The label of the step at {@code c} (aligned): counted from {@link #labelAt()} when {@code c} is not before it. */
    long globalStep(ScheduleCursor c);

    /** Rank {@code rank}'s shares of the steps from {@code start} (aligned) on, endlessly, labelled as this schedule labels them. */
    Iterator<ScheduledBatch> iterator(ScheduleCursor start, int rank);

    /**
     * Rank {@code rank}'s share of the step at {@code at}, labelled {@code label}: one step, for a caller that places
     * steps one at a time (the cluster's workers). A walk is cheaper for a run of steps.
     */
    ScheduledBatch step(ScheduleCursor at, long label, int rank);

    /** Steps from {@code from} (aligned) that start before {@code to}, at most {@code max}: how far a move back goes. */
    long stepsBetween(ScheduleCursor from, ScheduleCursor to, long max);

    /** Whole steps in an epoch that starts at position 0; 0 when steps take a varying number of positions. */
    long stepsPerEpoch();

    /** Positions one step takes; 0 when it varies (a client then follows each batch's resume state). */
    int positionsPerStep();

    /**
     * Positions of each epoch's order that steps take, all ranks: for counting the samples a job had before a cursor. A
     * schedule whose steps vary counts the whole epoch (the few it leaves at the end are not known without planning it).
     */
    long positionsPerEpoch();

    /**
     * Positions a caller may walk ahead cheaply to find something in the order (the early judgement's first samples of
     * each source): arithmetic for batches, planning for packs, which allows fewer.
     */
    long scanLimit();

    /**
     * The samples the step of {@code b} (any rank's share) took from the order but gave no rank: none for batches; a
     * packed step's records over a budget alone, or marked by the shape index. Each with the cause and reason the errors
     * file and the counts name it by.
     *
     * @throws IllegalArgumentException when {@code b} is not a step of this kind of schedule
     */
    List<LeftOut> leftOut(ScheduledBatch b);

    /** A sample a step took from the order and gave no rank, and why ({@link #leftOut}). */
    record LeftOut(int record, String cause, String reason) { }

    /** The schedule in messages: "the schedule", "the packed schedule". */
    String name();

    /** What one rank's share of a step is called in messages: "batch", "pack". */
    String unit();

    /**
     * What {@code stoker plan} prints of {@code b}, one rank's share of a step: one object per sample (or segment), in
     * order, keys in print order; each names the sample by its source and its place in it.
     */
    List<Map<String, Object>> describe(ScheduledBatch b);

    /** What {@code stoker plan} prints of the whole step of {@code b} after every rank's share: none for batches. */
    List<Map<String, Object>> describeStep(ScheduledBatch b);
}
