package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException.Stage;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.pipeline.feed.BadSamples.Kind;
import dev.stoker.plan.schedule.SampleSchedule;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 19's repro (audit #22) through the feed: a manifest whose images include a real FIFO (made with mkfifo), a
 * symlink to it, a directory and a socket stalled the feed (a trainer got 0 of 12 batches in 120 s). Now every other
 * sample of the epoch is delivered in its batch, each hostile one is skipped once with a cause that names its path and
 * what it is, in the batches, the counts and the errors file, in a copy mode and in ZERO_COPY; every batch is asked for
 * with a bound, so a stall fails the test instead of hanging it.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class HostileFilesFeedTest {
    @TempDir Path tmp;
    @TempDir Path shm;

    @Test
    void aFifoADirectoryAndASocketInAManifestAreSkippedOnceAndEveryOtherSampleIsDelivered() throws Exception {
        var schedule = new SampleSchedule(FeederTest.SEED, 48, 2, 4);
        // the hostile samples first name missing files; those paths then become a FIFO, a link to it, a folder, a socket
        int[] at = {schedule.batchFor(0, 0, 0)[0], schedule.batchFor(0, 1, 1)[2], schedule.batchFor(0, 3, 0)[1], schedule.batchFor(0, 5, 1)[3]};
        var bad = new HashMap<Integer, Kind>();
        for (int i : at) bad.put(i, Kind.MISSING);
        Path ds = tmp.resolve("ds");
        Path manifest = BadSamples.write(ds, 48, bad, false);
        Path images = ds.resolve("images");
        Map<Integer, String> causes = new HashMap<>();
        Path fifo = images.resolve("missing_" + at[0] + ".jpg");
        var mkfifo = new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start();
        assertEquals(0, mkfifo.waitFor(), "mkfifo");
        causes.put(at[0], "a FIFO (named pipe), not a regular file: " + fifo);
        Path link = Files.createSymbolicLink(images.resolve("missing_" + at[1] + ".jpg"), fifo);
        causes.put(at[1], "a FIFO (named pipe), not a regular file: " + link + " (a link to " + fifo + ")");
        Path folder = Files.createDirectory(images.resolve("missing_" + at[2] + ".jpg"));
        causes.put(at[2], "a directory, not a regular file: " + folder);
        Path socket = images.resolve("missing_" + at[3] + ".jpg");
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            server.bind(UnixDomainSocketAddress.of(socket));
        }
        causes.put(at[3], "a socket, not a regular file: " + socket);

        try (var source = new LocalFeedSource(manifest, 0); var store = BadInputFeedTest.store(shm)) {
            for (var mode : new FeedMode[] {FeedMode.PREFETCH, FeedMode.ZERO_COPY}) {
                Path errorsFile = tmp.resolve(mode + "-errors.jsonl");
                var batches = new ArrayList<FeedBatch>();
                try (var feeder = BadInputFeedTest.start(BadInputFeedTest.config(mode, 2, 4).withErrorsFile(errorsFile), source, store)) {
                    batches.addAll(BadInputFeedTest.take(feeder, (int) schedule.stepsPerEpoch()));
                    var skipped = new HashMap<Integer, SkippedSample>();
                    for (var b : batches) {
                        String where = mode + " step " + b.step() + " rank " + b.rank();
                        var expected = new ArrayList<Integer>();
                        for (int idx : schedule.batchFor(b.epoch(), b.step(), b.rank())) if (!causes.containsKey(idx)) expected.add(idx);
                        assertEquals(expected, Arrays.stream(b.datasetIndices()).boxed().toList(), where + ": every other sample delivered");
                        for (var s : b.skippedSamples()) assertNull(skipped.put(s.datasetIndex(), s), where + ": skipped twice: " + s);
                    }
                    assertEquals(causes.keySet(), skipped.keySet(), mode + ": the skipped samples are the hostile ones");
                    for (var e : causes.entrySet()) {
                        var s = skipped.get(e.getKey());
                        assertEquals("s" + e.getKey(), s.sampleId(), mode.name());
                        assertEquals(Stage.FETCH, s.stage(), mode.name());
                        assertTrue(s.cause().startsWith(e.getValue()), mode + ": " + s.cause() + "\nexpected: " + e.getValue());
                    }
                    assertEquals(4, feeder.errors().errors(), mode.name());
                    assertNull(feeder.errors().failure(), mode.name());
                    assertEquals(48 - 4, batches.stream().mapToInt(FeedBatch::samples).sum(), mode + ": nothing else lost");
                }
                List<String> lines = Files.readAllLines(errorsFile);
                assertEquals(4, lines.size(), mode + ": each hostile sample once in the errors file: " + lines);
                for (var line : BadInputFeedTest.readErrorsFile(errorsFile)) {
                    String expected = causes.get(line.get("index").asInt());
                    assertTrue(line.get("cause").asText().startsWith(expected), mode + ": " + line);
                }
                assertEquals(0, store.metrics().inUseBytes(), mode + ": every object released");
            }
        }
    }
}
