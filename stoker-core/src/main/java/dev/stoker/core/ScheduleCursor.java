package dev.stoker.core;

/**
 * A point in the global sample order: the epoch and the position in that epoch's permutation where
 * the next global step starts. Resuming is constructing a cursor, not replaying the steps before it.
 * It does not depend on the rank count (every rank of a step takes a contiguous block of the same
 * global order), so a state saved with R ranks resumes with R' ranks.
 *
 * @param epoch     0-based epoch
 * @param position  samples of this epoch's permutation consumed by all ranks together
 */
public record ScheduleCursor(long epoch, long position) {
    public static final ScheduleCursor START = new ScheduleCursor(0, 0);

    public ScheduleCursor {
        if (epoch < 0) throw new IllegalArgumentException("epoch must be >= 0, got " + epoch);
        if (position < 0) throw new IllegalArgumentException("position must be >= 0, got " + position);
    }

    @Override
    public String toString() { return "epoch " + epoch + " position " + position; }
}
