package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.SampleException;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The counting of skipped samples: by kind, by stage, by cause (capped, the rest as "other"), the last errors, the records kept. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SkipCountsTest {
    static FeedError skipped(int i, Kind kind, SampleException.Stage stage, String reason) {
        return new FeedError("s" + i, i, 0, 0, 0, stage, reason + " of " + i, kind, reason);
    }

    @Test
    void samplesAreCountedByKindStageAndCause() {
        var c = new SkipCounts();
        for (int i = 0; i < 5; i++) c.add(skipped(i, Kind.ERROR, SampleException.Stage.FETCH, "file not found"));
        for (int i = 5; i < 7; i++) c.add(skipped(i, Kind.ERROR, SampleException.Stage.DECODE, "truncated"));
        c.add(skipped(7, Kind.FILTERED, SampleException.Stage.TOKENIZE, "over --max-seq-len"));
        assertEquals(8, c.total());
        assertEquals(7, c.errors());
        assertEquals(1, c.filtered());
        assertEquals(Map.of(SampleException.Stage.FETCH, 5L, SampleException.Stage.DECODE, 2L, SampleException.Stage.TOKENIZE, 1L),
                c.byStage());
        var counts = c.counts();
        assertEquals(new FeedErrors.Cause("error", "fetch", "file not found", 5, "s0"), counts.causes().getFirst(),
                "the most common first");
        assertEquals(1, counts.top(Kind.FILTERED, 3).size());
        assertEquals(3, c.lastErrors().size());
        assertEquals("s6", c.lastErrors().getLast().sampleId(), "the last errors, not the filtered one");
        assertEquals("most common causes: fetch: file not found, 5 of 7 (e.g. s0); then decode: truncated, 2 of 7 (e.g. s5)",
                c.mostCommonErrors(3));
    }

    @Test
    void causesBeyondTheCapAreCountedAsOtherAndRecordsAreKeptUpToTheirLimit() {
        var c = new SkipCounts();
        for (int i = 0; i < FeedErrors.MAX_CAUSES + 5; i++) c.add(skipped(i, Kind.ERROR, SampleException.Stage.TEXT, "cause " + i));
        var causes = c.counts().causes();
        assertEquals(FeedErrors.MAX_CAUSES + 1, causes.size());
        var other = causes.stream().filter(x -> x.reason().equals(FeedErrors.OTHER_REASON)).findFirst().orElseThrow();
        assertEquals(5, other.count());
        for (int i = 0; i < FeedErrors.MAX_RECORDS; i++) c.add(skipped(i, Kind.FILTERED, SampleException.Stage.TEXT, "cause 0"));
        assertEquals(FeedErrors.MAX_RECORDS, c.records().size());
        assertEquals(FeedErrors.MAX_CAUSES + 5 + FeedErrors.MAX_RECORDS, c.total());
        assertTrue(c.records().getFirst().sampleId().equals("s0"), "the first are kept");
    }
}
