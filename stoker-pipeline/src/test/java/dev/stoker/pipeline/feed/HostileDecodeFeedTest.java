package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.pipeline.feed.BadSamples.Kind;
import dev.stoker.plan.schedule.SampleSchedule;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Inputs made to hurt the CPU stage (audit #10), through the real feed with real files: decompression bombs under the
 * pixel limit, and an OutOfMemoryError thrown inside one sample's decode. Each is that sample's error, named in its
 * batch, FeedErrors, the metrics and the errors file; every other sample of the epoch is delivered, in the copy modes
 * (the encode task on the CPU pool) and in ZERO_COPY (the pixel tasks writing into shared memory), and the store is
 * left empty.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class HostileDecodeFeedTest {
    @TempDir Path tmp;
    @TempDir Path shm;

    @Test
    void decompressionBombsUnderThePixelLimitAreTheirSamplesErrorsAndEveryOtherSampleIsDelivered() throws Exception {
        // four bombs among 48 samples, two of them in one batch so that two CPU threads meet them at once
        var schedule = new SampleSchedule(FeederTest.SEED, 48, 2, 4);
        int[] step1 = schedule.batchFor(0, 1, 0);
        var bad = Map.of(step1[0], Kind.MEMORY_BOMB, step1[1], Kind.MEMORY_BOMB, schedule.batchFor(0, 3, 1)[2], Kind.MEMORY_BOMB,
                schedule.batchFor(0, 5, 0)[3], Kind.MEMORY_BOMB);
        feedOneEpoch(bad, schedule, List.of(FeedMode.CONCURRENT, FeedMode.PREFETCH, FeedMode.ZERO_COPY));
    }

    @Test
    void anOutOfMemoryErrorInOneSamplesDecodeFailsOnlyThatSample() throws Exception {
        var schedule = new SampleSchedule(FeederTest.SEED, 48, 2, 4);
        var bad = Map.of(schedule.batchFor(0, 0, 1)[0], Kind.OUT_OF_MEMORY, schedule.batchFor(0, 2, 0)[3], Kind.OUT_OF_MEMORY,
                schedule.batchFor(0, 4, 1)[1], Kind.OUT_OF_MEMORY);
        try (var injected = OutOfMemoryBmpReader.install()) {
            feedOneEpoch(bad, schedule, List.of(FeedMode.SERIAL, FeedMode.CONCURRENT, FeedMode.PREFETCH, FeedMode.ZERO_COPY));
        }
    }

    private void feedOneEpoch(Map<Integer, Kind> bad, SampleSchedule schedule, List<FeedMode> modes) throws Exception {
        Path manifest = BadSamples.write(tmp.resolve("ds"), 48, bad, false);
        try (var source = new LocalFeedSource(manifest, 2); var store = BadInputFeedTest.store(shm)) {
            for (var mode : modes) {
                Path errorsFile = tmp.resolve(mode + "-errors.jsonl");
                List<FeedBatch> batches;
                try (var feeder = BadInputFeedTest.start(BadInputFeedTest.config(mode, 2, 4).withErrorsFile(errorsFile), source, store)) {
                    batches = BadInputFeedTest.take(feeder, (int) schedule.stepsPerEpoch());
                    BadInputFeedTest.assertEveryBadSampleSkipped(batches, schedule, bad, feeder, errorsFile, mode.name());
                    // the feed goes on: the next epoch's first batches come, whole but for the bad samples
                    for (int r = 0; r < 2; r++) {
                        var b = BadInputFeedTest.next(feeder, r);
                        assertEquals(1, b.epoch(), mode.name());
                        assertEquals(b.scheduled(), b.samples() + b.skipped(), mode.name());
                    }
                }
                assertEquals(0, store.metrics().inUseBytes(), mode + ": every object released");
            }
        }
    }
}
