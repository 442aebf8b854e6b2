package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

/**
 * The samples a feed skipped: every one counted by stage, the first {@link #MAX_RECORDS} kept in
 * full (the errors file of a later issue drains them).
 *
 * <p>Threading: thread-safe; writers are pipeline threads, readers anyone.
 */
public final class FeedErrors {
    public static final int MAX_RECORDS = 10_000;

    private final List<FeedError> records = new ArrayList<>();
    private final EnumMap<SampleException.Stage, Long> byStage = new EnumMap<>(SampleException.Stage.class);
    private long total;

    synchronized void record(FeedError e) {
        total++;
        byStage.merge(e.stage(), 1L, Long::sum);
        if (records.size() < MAX_RECORDS) records.add(e);
    }

    public synchronized long total() { return total; }

    public synchronized Map<SampleException.Stage, Long> byStage() { return Map.copyOf(byStage); }

    /** The kept records, in the order they were recorded (which is not the schedule order across ranks). */
    public synchronized List<FeedError> records() { return List.copyOf(records); }
}
