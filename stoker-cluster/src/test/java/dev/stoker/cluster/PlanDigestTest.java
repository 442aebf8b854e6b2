package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import dev.stoker.plan.StepSchedules;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What a node tells the coordinator its packs were planned from ({@link NodeRuntime#planDigest}): equal for the same
 * shapes, whichever node planned them; different when one record's shape differs (a stale length index on one node would
 * cut other packs from the same step, and the coordinator refuses the job); 0 for batches, which need no shapes.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PlanDigestTest {
    static final Packing PACKS = Packing.of(1024, PackCost.QWEN2_VL_2B);
    static final SampleShape DUMMY = SampleShape.of(6, 16);

    static List<SampleShape> shapes() {
        var out = new ArrayList<SampleShape>();
        for (int i = 0; i < 30; i++) out.add(i % 4 == 0 ? SampleShape.of(120 + i) : SampleShape.of(80 + 3 * i, 64 + 4 * i));
        return out;
    }

    static StepSchedule packs(List<SampleShape> shapes) throws Exception {
        var order = StepSchedules.order(7, null, shapes.size(), 2, 4, PACKS);
        return StepSchedules.of(order, PACKS, () -> ShapeIndex.of(shapes), DUMMY);
    }

    @Test
    void theDigestFollowsTheShapesThePacksWerePlannedFrom() throws Exception {
        long one = NodeRuntime.planDigest(packs(shapes()));
        assertNotEquals(0, one);
        assertEquals(one, NodeRuntime.planDigest(packs(shapes())), "the same shapes planned on another node");
        var tokens = new ArrayList<>(shapes());
        tokens.set(17, SampleShape.of(tokens.get(17).tokens() + 1, tokens.get(17).patches()));
        assertNotEquals(one, NodeRuntime.planDigest(packs(tokens)), "one sample's tokens");
        var patches = new ArrayList<>(shapes());
        patches.set(5, SampleShape.of(patches.get(5).tokens(), patches.get(5).patches() + 4));
        assertNotEquals(one, NodeRuntime.planDigest(packs(patches)), "one image's patches");
        var order = StepSchedules.order(7, null, 30, 2, 4, Packing.OFF);
        assertEquals(0, NodeRuntime.planDigest(StepSchedules.of(order, Packing.OFF, () -> {
            throw new AssertionError("batches need no shapes");
        }, DUMMY)), "batches: the fingerprint alone decides them");
    }
}
