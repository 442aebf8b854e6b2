package dev.stoker.plan.pack;

import java.util.List;

/**
 * Every record's {@link SampleShape}, by record number (numbered across sources, as the batches of
 * {@link dev.stoker.plan.schedule.SampleSchedule} hold them): what the pack planner reads to plan a step
 * without decoding anything.
 */
public interface ShapeIndex {
    /** Records indexed: record numbers run over {@code [0, size())}. */
    int size();

    /** The shape of record {@code record}. */
    SampleShape shape(int record);

    /** An index over a list of shapes, record {@code i} the list's element {@code i} (the list is copied). */
    static ShapeIndex of(List<SampleShape> shapes) {
        var copy = List.copyOf(shapes);
        return new ShapeIndex() {
            @Override
            public int size() { return copy.size(); }

            @Override
            public SampleShape shape(int record) {
                if (record < 0 || record >= copy.size())
                    throw new IllegalArgumentException("record " + record + " outside the shape index [0, " + copy.size() + ")");
                return copy.get(record);
            }
        };
    }
}
