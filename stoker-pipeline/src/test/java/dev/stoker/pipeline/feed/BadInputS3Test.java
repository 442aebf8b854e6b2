package dev.stoker.pipeline.feed;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every kind of bad sample an object store can hold (a symlink it cannot), read from S3 (S3Mock on a
 * loopback port): a missing object is a 404, an escaping path never leaves the data set's prefix.
 */
@ExtendWith(S3MockExtension.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@Tag("slow")
@ExtendWith(SharedTokenizer.class)
class BadInputS3Test {
    @TempDir Path tmp;

    @Test
    void everyKindOfBadSampleOnS3IsSkippedNamedAndCounted(S3MockServer s3) throws Exception {
        var bad = BadInputFeedTest.everyKind(false);
        BadSamples.write(tmp.resolve("ds"), 48, bad, false);
        s3.createBucket("bad-input");
        s3.putDirectory("bad-input", "ds", tmp.resolve("ds"));
        var s3Config = SourceConfig.builder().endpointOverride(s3.endpoint()).pathStyle(true).credentials("test-key", "test-secret").build();
        var schedule = new SampleSchedule(FeederTest.SEED, 48, 2, 4);
        Path errorsFile = tmp.resolve("errors.jsonl");
        var cfg = BadInputFeedTest.config(FeedMode.PREFETCH, 2, 4).withErrorsFile(errorsFile);
        try (var feeder = Feeder.open(DatasetLocation.parse("s3://bad-input/ds/train.jsonl"), s3Config, cfg, SharedTokenizer.get())) {
            var batches = BadInputFeedTest.take(feeder, (int) schedule.stepsPerEpoch());
            BadInputFeedTest.assertEveryBadSampleSkipped(batches, schedule, bad, feeder, errorsFile, "s3");
            var missing = feeder.errors().records().stream().filter(e -> e.stage() == dev.stoker.core.SampleException.Stage.FETCH
                    && e.cause().contains("object not found: s3://bad-input/ds/images/missing_")).count();
            org.junit.jupiter.api.Assertions.assertEquals(1, missing, "a 404 names the object: " + feeder.errors().records());
        }
    }
}
