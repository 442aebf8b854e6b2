package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.encode.validate.DatasetValidator;
import dev.stoker.encode.validate.ValidationReport;
import dev.stoker.pipeline.feed.BadSamples.Kind;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code stoker validate} skips what {@code serve} skips: over the data set with every kind of bad sample, the
 * validator's errors and filtered samples are the feed's, each with the same id, kind, stage, reason and message,
 * except the images whose header is sound and whose pixel data is not, which only a decode finds.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class ValidateMatchesFeedTest {
    /** Bad only in their pixel data: the header reads fine. */
    static final Set<Kind> PIXELS_ONLY = EnumSet.of(Kind.TRUNCATED_JPEG, Kind.CORRUPT_JPEG, Kind.CORRUPT_PNG);

    @TempDir Path tmp;

    @Test
    void validateSkipsWhatTheFeedSkips() throws Exception {
        var bad = BadInputFeedTest.everyKind(true);
        Path manifest = BadSamples.write(tmp.resolve("ds"), 48, bad, true);
        var fromFeed = new TreeMap<Integer, String>();
        var config = BadInputFeedTest.config(FeedMode.PREFETCH, 2, 4).withErrorPolicy(ErrorPolicy.SKIP, 1.0);
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults());
             var feeder = BadInputFeedTest.start(config, FeedSource.of(objects, null), null)) {
            for (FeedBatch b : BadInputFeedTest.take(feeder, 6))
                for (SkippedSample s : b.skippedSamples()) fromFeed.put(s.datasetIndex(), line(s.sampleId(), s.kind(), s.stage(), s.reason(), s.cause()));
        }
        var fromValidate = new TreeMap<Integer, String>();
        ValidationReport report;
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            report = DatasetValidator.validate(source.records(), source, SharedTokenizer.get(),
                    new DatasetValidator.Settings(BadInputFeedTest.OPTIONS, 2, 8, 100));
        }
        for (var c : report.causes())
            for (var e : c.examples()) fromValidate.put(e.index(), line(e.sampleId(), c.key().kind(), c.key().stage(), c.key().reason(), e.message()));

        var expected = new TreeMap<>(fromFeed);
        bad.forEach((i, kind) -> {
            if (PIXELS_ONLY.contains(kind)) expected.remove(i);
        });
        assertEquals(bad.size(), fromFeed.size(), "the feed skips every bad sample: " + fromFeed);
        assertEquals(expected, fromValidate);
        assertEquals(bad.size() - PIXELS_ONLY.size(), report.errors() + report.filtered());
        assertEquals(bad.values().stream().filter(Kind::filtered).count(), report.filtered());
    }

    private static String line(String id, Object kind, Object stage, String reason, String message) {
        return id + " | " + kind + " | " + stage + " | " + reason + " | " + message;
    }
}
