package dev.stoker.plan.schedule;

import dev.stoker.core.ScheduleCursor;

/**
 * One rank's share of one global step: which dataset indices it gets, in order.
 *
 * @param cursor      where the global step starts (epoch, position in the epoch's permutation)
 * @param step        step within the epoch ({@code position / (ranks·batchSize)}; a packed job: the steps of its
 *                    origin walk that start in the epoch before this one, {@link dev.stoker.plan.pack.PackedSchedule})
 * @param globalStep  the step's label: steps since the schedule's origin (epoch 0, position 0), or since the cursor it
 *                    is labelled at ({@link SampleSchedule#labelled})
 * @param rank        the rank this share belongs to
 * @param indices     dataset indices (manifest line order, 0-based), {@code batchSize} of them (a packed job: its
 *                    pack's records, a number that varies by step and rank)
 * @param after       the state that resumes the job right after this step (the next step's cursor and label, each
 *                    source's cursor there); null where unknown
 * @param pack        a packed job's plan of the whole step (all ranks' packs; {@code indices} is this rank's
 *                    {@code pack.records()[rank]}); null for an unpacked job
 */
public record ScheduledBatch(ScheduleCursor cursor, long step, long globalStep, int rank, int[] indices,
                             dev.stoker.core.batch.BatchLayout.Resume after, dev.stoker.plan.pack.PackedStep pack) {
    public ScheduledBatch(ScheduleCursor cursor, long step, long globalStep, int rank, int[] indices) {
        this(cursor, step, globalStep, rank, indices, null, null);
    }

    /** An unpacked job's batch. */
    public ScheduledBatch(ScheduleCursor cursor, long step, long globalStep, int rank, int[] indices,
                          dev.stoker.core.batch.BatchLayout.Resume after) {
        this(cursor, step, globalStep, rank, indices, after, null);
    }

    public long epoch() { return cursor.epoch(); }

    public int size() { return indices.length; }

    /** Whether the step after this one starts in another epoch: this is its epoch's last (false where {@code after} is unknown). */
    public boolean lastOfEpoch() { return after != null && after.epoch() != cursor.epoch(); }
}
