package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.batch.SkippedSample;
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
}
