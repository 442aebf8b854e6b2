package dev.stoker.pipeline.feed;

import dev.stoker.source.mix.FeedSource;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.batch.DummyImage;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.SampleSchedule;
import java.io.IOException;

/**
 * What a packed feed ({@code --pack-tokens N}) plans with, made from its configuration: the planner with its dummy
 * image's shape, the {@link PackedSchedule} over the job's global order, and how the step at a cursor is labelled.
 *
 * <p>Threading: static functions.
 */
public final class PackedFeed {
    private PackedFeed() {}

    /** Where a packed feed's shapes come from: the length index {@code stoker validate} wrote, or measured from image headers. */
    @FunctionalInterface
    public interface ShapeSource {
        /** The shapes of {@code records}, read through {@code source} (the feed's own) where they must be measured. */
        ShapeIndex shapes(dev.stoker.source.SampleRecords records, FeedSource source) throws IOException, InterruptedException;
    }

    /** The dummy image's segment as the planner reserves it: its tokens and its one image's patch rows. */
    public static SampleShape dummyShape(FeedConfig config) {
        var dummy = DummyImage.of(config.encode().vision());
        return SampleShape.of(dummy.tokenCount(), dummy.rows());
    }

    /** The packed schedule of {@code config} over {@code order} (the job's global order) and {@code shapes}. */
    public static PackedSchedule schedule(FeedConfig config, SampleSchedule order, ShapeIndex shapes) {
        return new PackedSchedule(planner(config, order, shapes));
    }

    /** The planner of {@code config} over {@code order} and {@code shapes}. */
    public static PackPlanner planner(FeedConfig config, SampleSchedule order, ShapeIndex shapes) {
        var p = config.packing();
        if (!p.on()) throw new IllegalArgumentException("not a packed feed");
        if (shapes.size() != order.datasetSize())
            throw new IllegalArgumentException("the shape index holds " + shapes.size() + " records, the data set " + order.datasetSize());
        return new PackPlanner(order, shapes, config.ranks(), p.tokens(), p.patches(), p.balance(), p.cost(), dummyShape(config));
    }
}
