package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** The same data set read from S3 (S3Mock on a loopback port) and from local disk gives the same batches. */
@ExtendWith(S3MockExtension.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class FeederS3Test {
    static final String BUCKET = "feeder-test";

    @TempDir Path tmp;

    static List<Batch> run(DatasetLocation location, SourceConfig source, FeedConfig config, int steps) throws Exception {
        try (var feeder = Feeder.open(location, source, config, SharedTokenizer.get())) {
            var out = new ArrayList<Batch>();
            for (int s = 0; s < steps; s++)
                for (int r = 0; r < config.ranks(); r++) out.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
            assertEquals(1, feeder.errors().total(), feeder.errors().records().toString());
            var e = feeder.errors().records().getFirst();
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertTrue(feeder.sourceMetrics().orElseThrow().bytesFetched() > 0);
            return out;
        }
    }

    @Test
    void batchesFromS3EqualBatchesFromLocalDisk(S3MockServer s3) throws Exception {
        var schedule = new SampleSchedule(FeederTest.SEED, 13, 2, 3);
        int missing = schedule.batchFor(0, 1, 0)[2];
        Path manifest = TestDatasets.write(tmp, 13, Set.of(missing));
        s3.createBucket(BUCKET);
        s3.putDirectory(BUCKET, "ds", tmp);
        var s3Config = SourceConfig.builder().endpointOverride(s3.endpoint()).pathStyle(true).credentials("test-key", "test-secret").build();
        var config = FeederTest.config(FeedMode.PREFETCH, 2, 3, 2);
        var local = run(DatasetLocation.parse(manifest.toString()), SourceConfig.defaults(), config, 2);
        var remote = run(DatasetLocation.parse("s3://" + BUCKET + "/ds/train.jsonl"), s3Config, config, 2);
        FeederTest.assertSameBatches(local, remote, "s3 vs local");
        assertEquals(2, local.get(2).samples(), "the missing sample's batch");
    }
}
