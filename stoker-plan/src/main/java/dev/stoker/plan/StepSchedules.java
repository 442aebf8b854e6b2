package dev.stoker.plan;

import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.plan.schedule.StepSchedule;
import java.io.IOException;

/**
 * The one place that decides which {@link StepSchedule} a job has: batches of its order, or packs planned from it. Every
 * caller after this gets the schedule and walks it; none asks which kind it holds.
 *
 * <p>Threading: static functions.
 */
public final class StepSchedules {
    private StepSchedules() {}

    /** Where a packed schedule's shapes come from, asked only when steps are packed: measuring them reads every sample's header. */
    @FunctionalInterface
    public interface Shapes {
        ShapeIndex get() throws IOException, InterruptedException;
    }

    /**
     * The global order of a job over {@code mix} (null: one source of {@code size} records, each once an epoch):
     * {@code ranks} × {@code batchSize} positions a step, or one position a rank when steps are packed (the planner cuts
     * them, and the batch size plays no part).
     */
    public static SampleSchedule order(long seed, SourceMix mix, int size, int ranks, int batchSize, Packing packing) {
        int batch = packing.on() ? 1 : batchSize;
        return mix != null ? new SampleSchedule(seed, mix, ranks, batch) : new SampleSchedule(seed, size, ranks, batch);
    }

    /**
     * The steps of {@code order} as {@code packing} says: the order itself (batches of its batch size), or {@link PackedSchedule
     * packs} planned over it for {@code order.ranks()} ranks, from the shapes {@code shapes} gives, a pack without an image
     * in a step with one getting the dummy image {@code dummy}.
     *
     * @throws IllegalArgumentException when the shapes are not the order's records', or the budgets cannot be planned
     */
    public static StepSchedule of(SampleSchedule order, Packing packing, Shapes shapes, SampleShape dummy)
            throws IOException, InterruptedException {
        if (!packing.on()) return order;
        return new PackedSchedule(planner(order, packing, shapes.get(), dummy));
    }

    /** The planner of {@code packing} over {@code order} and {@code shapes}: what a packed schedule and the packing benchmark plan with. */
    public static PackPlanner planner(SampleSchedule order, Packing packing, ShapeIndex shapes, SampleShape dummy) {
        if (!packing.on()) throw new IllegalArgumentException("not a packed job: --pack-tokens N is needed for a packed plan");
        if (shapes.size() != order.datasetSize())
            throw new IllegalArgumentException("the shape index holds " + shapes.size() + " records, the data set " + order.datasetSize());
        return new PackPlanner(order, shapes, order.ranks(), packing.tokens(), packing.patches(), packing.balance(), packing.cost(), dummy);
    }
}
