package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.pipeline.feed.BadInputException;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audit #2, the regression: a node fed a manifest whose images are all missing (the wrong image folder) with the default
 * error policy. It used to hand out empty batches forever and log nothing; it stops within seconds, before any trainer
 * asks, with a message naming the source and the most common cause (its count and an example sample), and a trainer that
 * asks gets that message as the protocol's ERROR.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class WrongImageFolderTest {
    static final Pattern STOPPED = Pattern.compile("bad input: the first 32 samples of train\\.jsonl all failed, none delivered \\(a source is "
            + "judged on its first 32 samples under max error rate 0\\.1\\); most common cause: fetch: file not found, 32 of 32 \\(e\\.g\\. "
            + "s(\\d+) \\(index \\1, epoch 0 step \\d+ rank \\d\\): fetch: file not found: .*/photos/s\\1\\.jpg\\)");

    @TempDir Path tmp;

    @Test
    void aManifestWhoseImagesAreAllMissingStopsTheJobWithinSecondsNamingTheSourceAndTheCause() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        var lines = new StringBuilder();
        for (int i = 0; i < 200; i++) // the images are in another folder: none of these paths exists
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"photos/s%d.jpg\",\"conversations\":[{\"from\":\"human\",\"value\":"
                    + "\"<image>\\nWhat is %d?\"},{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i, i));
        Files.writeString(ds.resolve("train.jsonl"), lines);
        var config = NodeConfig.builder().data(ds.resolve("train.jsonl").toString()).ranks(2).batch(4).set(NodeConfig.MAX_PIXELS, 50176L)
                .socket(tmp.resolve("s.sock")).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(64L << 20)
                .set(NodeConfig.MAX_IMAGES, 1).threads(1).warmUpMillis(0).build();
        assertEquals(FeedConfig.MAX_ERROR_RATE_DEFAULT, config.get(NodeConfig.MAX_ERROR_RATE), "the default policy");
        long t0 = System.nanoTime();
        try (var node = StokerNode.launch(config)) {
            var failure = assertInstanceOf(BadInputException.class, node.failure().get(30, TimeUnit.SECONDS),
                    "the node stops by itself, no trainer connected");
            double seconds = (System.nanoTime() - t0) / 1e9;
            assertTrue(seconds < 30, "within seconds of the start: " + seconds);
            var m = STOPPED.matcher(failure.getMessage());
            assertTrue(m.matches(), failure.getMessage());
            assertTrue(node.ledger().feeder().errors().scheduled() < 100, "not after the 100 samples the rate waits for");

            for (int rank = 0; rank < 2; rank++) {
                try (var client = TrainerClient.connect(node.socket(), rank, 2, "test", TrainerClient.Options.SHARED_MEMORY)) {
                    var e = assertThrows(IOException.class, client::next, "rank " + rank + " gets the error, not an empty batch");
                    assertTrue(e.getMessage().contains(failure.getMessage()), e.getMessage());
                }
            }
        }
    }
}
