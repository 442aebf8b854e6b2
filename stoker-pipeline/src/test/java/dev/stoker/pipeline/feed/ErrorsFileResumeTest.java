package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.batch.SkippedSample;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A job resumed from an older checkpoint skips the same bad samples again; its errors file lists
 * each (epoch, sample) once (audit #13), while the run's counts still see every skip.
 */
@Timeout(30)
class ErrorsFileResumeTest {
    @TempDir Path tmp;

    @Test
    void aResumedRunDoesNotListASkippedSampleTwice() throws Exception {
        Path file = tmp.resolve("errors.jsonl");
        var config = FeedConfig.of(FeedMode.PREFETCH, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), 1, 2).withErrorsFile(file);
        var bad5 = new SkippedSample("s5", 5, SampleException.Stage.DECODE, "truncated JPEG");
        var bad6 = new SkippedSample("s6", 6, SampleException.Stage.FETCH, "404");
        try (var first = FeedErrors.open(config)) {
            first.recordAll(0, 2, 0, List.of(bad5));
        }
        try (var resumed = FeedErrors.open(config)) { // from a checkpoint before step 2: sample 5 fails again
            resumed.recordAll(0, 2, 0, List.of(bad5));
            resumed.recordAll(0, 3, 0, List.of(bad6));
            resumed.recordAll(1, 0, 0, List.of(bad5)); // the next epoch lists it anew
            assertEquals(3, resumed.total(), "this run counts every skip it made");
        }
        var lines = Files.readAllLines(file);
        assertEquals(3, lines.size(), String.join("\n", lines));
    }

    /**
     * Audit #13, the rate window: a job skipped 6 of its first 100 samples, then its service was restarted at position 100.
     * The restarted service judges its rate over the job so far: one more skip in its first batch is 7 of 104 (6.7%), over a
     * 5% limit, while counted from its own start (1 of 4, under the 100 samples the rate waits for) it would go on.
     */
    @Test
    void aRestartedServiceJudgesItsErrorRateOverTheJobSoFar() throws Exception {
        Path file = tmp.resolve("rate.jsonl");
        var schedule = new dev.stoker.plan.schedule.SampleSchedule(1234, 400, 2, 2);
        var config = FeedConfig.of(FeedMode.PREFETCH, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), 2, 2).withErrorsFile(file)
                .withErrorPolicy(ErrorPolicy.SKIP, 0.05);
        int[] order = schedule.permutationCopy(0);
        try (var first = FeedErrors.open(config, schedule, List.of("the manifest"))) {
            for (int p = 0; p < 6; p++) first.recordAll(0, p / 4, 0, List.of(bad(order[p * 10])));        // positions 0..50: before
            first.recordAll(0, 30, 0, List.of(bad(order[120])));                                        // position 120: after
        }
        var restarted = config.withStart(new dev.stoker.core.ScheduleCursor(0, 100));
        try (var errors = FeedErrors.open(restarted, schedule, List.of("the manifest"))) {
            assertEquals(100, errors.priorScheduled());
            assertEquals(6, errors.priorErrors(), "the entry after the restart point is not one of the job's so far");
            var failed = errors.delivered(0, 25, 0, 4, List.of(bad(order[101])));
            assertNotNull(failed, "7 of 104 is over 5%");
            assertTrue(failed.getMessage().contains("7 of 104 scheduled samples failed"), failed.getMessage());
            assertTrue(failed.getMessage().contains("6 of 100 of them before this service started"), failed.getMessage());
        }
        // without the file: its own start
        try (var fromZero = FeedErrors.open(restarted.withErrorsFile(null), schedule, List.of("the manifest"))) {
            assertNull(fromZero.delivered(0, 25, 0, 4, List.of(bad(order[101]))));
        }
    }

    /**
     * The file's filtered entries are not errors: a restarted service counts only the errors before its start (and lines of
     * files written before entries had a kind as errors), so samples a limit dropped never fail a job's rate.
     */
    @Test
    void aRestartedServiceCountsOnlyTheErrorsOfTheFileNotItsFilteredSamples() throws Exception {
        Path file = tmp.resolve("kinds.jsonl");
        var schedule = new dev.stoker.plan.schedule.SampleSchedule(1234, 400, 2, 2);
        var config = FeedConfig.of(FeedMode.PREFETCH, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), 2, 2).withErrorsFile(file)
                .withErrorPolicy(ErrorPolicy.SKIP, 0.05);
        int[] order = schedule.permutationCopy(0);
        try (var first = FeedErrors.open(config, schedule, List.of("the manifest"))) {
            for (int p = 0; p < 20; p++) first.recordAll(0, p / 4, 0, List.of(filtered(order[p])));   // 20 filtered before position 100
            first.recordAll(0, 10, 0, List.of(bad(order[40])));
        }
        // a line of an older file, with no kind: an error
        Files.writeString(file, "{\"id\":\"s" + order[50] + "\",\"index\":" + order[50] + ",\"epoch\":0,\"step\":12,\"rank\":0,"
                + "\"stage\":\"decode\",\"cause\":\"truncated JPEG\"}\n", java.nio.file.StandardOpenOption.APPEND);
        var kinds = Files.readAllLines(file).stream().map(l -> l.contains("\"kind\":\"filtered\"") ? "filtered" : l.contains("\"kind\":\"error\"")
                ? "error" : "none").toList();
        assertEquals(20, kinds.stream().filter("filtered"::equals).count(), kinds.toString());
        assertEquals(1, kinds.stream().filter("error"::equals).count(), kinds.toString());
        var restarted = config.withStart(new dev.stoker.core.ScheduleCursor(0, 100));
        try (var errors = FeedErrors.open(restarted, schedule, List.of("the manifest"))) {
            assertEquals(100, errors.priorScheduled());
            assertEquals(2, errors.priorErrors(), "the error and the older line, not the 20 filtered samples");
            assertNull(errors.delivered(0, 25, 0, 4, List.of(filtered(order[101]), filtered(order[102]))), "filtered: not counted");
            assertEquals(2, errors.filtered());
            assertEquals(0, errors.errors());
        }
    }

    private static SkippedSample filtered(int index) {
        return new SkippedSample("s" + index, index, SampleException.Stage.TOKENIZE, "sequence has 9000 tokens, over the limit of 8192",
                SampleException.Kind.FILTERED, "over --max-seq-len");
    }

    private static SkippedSample bad(int index) {
        return new SkippedSample("s" + index, index, SampleException.Stage.DECODE, "truncated JPEG");
    }
}
