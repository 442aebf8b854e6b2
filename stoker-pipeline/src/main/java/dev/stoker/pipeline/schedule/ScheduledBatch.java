package dev.stoker.pipeline.schedule;

import dev.stoker.core.ScheduleCursor;

/**
 * One rank's share of one global step: which dataset indices it gets, in order.
 *
 * @param cursor      where the global step starts (epoch, position in the epoch's permutation)
 * @param step        step within the epoch ({@code position / (ranks·batchSize)})
 * @param globalStep  the step's label: steps since the schedule's origin (epoch 0, position 0), or since the cursor it
 *                    is labelled at ({@link SampleSchedule#labelled})
 * @param rank        the rank this share belongs to
 * @param indices     dataset indices (manifest line order, 0-based), {@code batchSize} of them
 * @param after       the state that resumes the job right after this step (the next step's cursor and label, each
 *                    source's cursor there); null where unknown
 */
public record ScheduledBatch(ScheduleCursor cursor, long step, long globalStep, int rank, int[] indices,
                             dev.stoker.core.batch.BatchLayout.Resume after) {
    public ScheduledBatch(ScheduleCursor cursor, long step, long globalStep, int rank, int[] indices) {
        this(cursor, step, globalStep, rank, indices, null);
    }

    public long epoch() { return cursor.epoch(); }

    public int size() { return indices.length; }
}
