package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.plan.schedule.SampleSchedule;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The errors file on its own: created with its folders, appended one JSON line per sample, read back on the next open so
 * that a sample of an epoch is listed once across runs, and counted for the error rate of the job before a start.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ErrorsFileTest {
    @TempDir Path tmp;

    static FeedError error(long epoch, int index) {
        return new FeedError("s" + index, index, epoch, 0, 0, SampleException.Stage.DECODE, "truncated JPEG", SampleException.Kind.ERROR,
                "truncated JPEG");
    }

    static FeedError filtered(long epoch, int index) {
        return new FeedError("s" + index, index, epoch, 0, 0, SampleException.Stage.TOKENIZE, "9000 tokens", SampleException.Kind.FILTERED,
                "over --max-seq-len");
    }

    @Test
    void aSampleOfAnEpochIsListedOnceAcrossRuns() throws Exception {
        Path file = tmp.resolve("run/errors.jsonl");
        try (var f = ErrorsFile.open(file)) {
            f.append(error(0, 5));
            f.append(error(0, 5));
            f.append(error(1, 5)); // another epoch: listed anew
            f.flush();
        }
        assertEquals(2, Files.readAllLines(file).size(), "the folders made, each (epoch, sample) once");
        try (var f = ErrorsFile.open(file)) {
            f.append(error(0, 5)); // listed by the run before
            f.append(filtered(0, 6));
        }
        var lines = Files.readAllLines(file);
        assertEquals(3, lines.size(), String.join("\n", lines));
        assertTrue(lines.getLast().contains("\"kind\":\"filtered\"") && lines.getLast().contains("\"stage\":\"tokenize\""),
                lines.getLast());
        assertTrue(lines.getFirst().startsWith("{\"id\":\"s5\",\"index\":5,\"epoch\":0,\"step\":0,\"rank\":0,\"kind\":\"error\""),
                lines.getFirst());
    }

    /** The errors listed before a start: earlier epochs', and those at an earlier position of its own; not filtered ones. */
    @Test
    void theErrorsBeforeAStartAreThoseListedBeforeItsPosition() throws Exception {
        var order = new SampleSchedule(1234, 100, 1, 2);
        int[] perm = order.permutationCopy(2);
        Path file = tmp.resolve("errors.jsonl");
        try (var f = ErrorsFile.open(file)) {
            f.append(error(0, 7));
            f.append(error(1, 8));
            f.append(filtered(1, 9));
            f.append(error(2, perm[10])); // before position 50 of epoch 2
            f.append(error(2, perm[60])); // after it
            f.append(error(3, 1));        // a later epoch
        }
        Files.writeString(file, "not json, cut short by a kill\n", java.nio.file.StandardOpenOption.APPEND); // skipped when read
        try (var f = ErrorsFile.open(file)) {
            assertEquals(3, f.errorsBefore(order, new ScheduleCursor(2, 50)));
            assertEquals(1, f.errorsBefore(order, new ScheduleCursor(1, 0)));
        }
    }
}
