package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The stream closes each scheduled batch's group at its own size: packs of a packed job hold different numbers of samples. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ByBatchTest {
    @Test
    void groupsCloseAtEachBatchsOwnSize() throws Exception {
        int[] sizes = {3, 1, 5, 2};
        var batches = new ArrayList<ScheduledBatch>();
        var outcomes = new ArrayList<SamplePipeline.Outcome>();
        int next = 0;
        for (int step = 0; step < sizes.length; step++) {
            int[] indices = new int[sizes[step]];
            for (int i = 0; i < indices.length; i++) indices[i] = next++;
            var b = new ScheduledBatch(new ScheduleCursor(0, next), step, step, 0, indices);
            batches.add(b);
            for (int i = 0; i < indices.length; i++)
                outcomes.add(new SamplePipeline.Failed(new SamplePipeline.Slot(b, i), "s" + indices[i], SampleException.Stage.FETCH,
                        "test", SampleException.Kind.ERROR, "test"));
        }
        var system = ActorSystem.create("by-batch");
        try {
            List<List<SamplePipeline.Outcome>> groups = Source.from(outcomes).via(SamplePipeline.byBatch()).runWith(Sink.seq(), system)
                    .toCompletableFuture().get(30, TimeUnit.SECONDS);
            assertEquals(sizes.length, groups.size());
            for (int step = 0; step < sizes.length; step++) {
                assertEquals(sizes[step], groups.get(step).size(), "step " + step);
                assertSame(batches.get(step), SamplePipeline.checkedBatch(groups.get(step)), "step " + step + " is its batch's slots in order");
            }
        } finally {
            system.terminate();
        }
    }
}
