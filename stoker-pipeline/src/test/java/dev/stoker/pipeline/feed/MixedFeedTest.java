package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.source.mix.MixedSource;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** Two sources mixed by weight through the real feed: each fed its passes per epoch, its images from its own folder. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class MixedFeedTest {
    @TempDir Path tmp;

    /** 20 samples in a/ (images under a/images), 6 in b/ whose images are under b/pics only. */
    private List<Path> sources() throws Exception {
        Path a = TestDatasets.write(Files.createDirectories(tmp.resolve("a")), 20, Set.of());
        Path bDir = Files.createDirectories(tmp.resolve("b"));
        Path b = TestDatasets.write(bDir, 6, Set.of());
        Files.move(bDir.resolve("images"), bDir.resolve("pics"));
        Files.writeString(b, Files.readString(b).replace("images/", "pics/"));
        return List.of(a, b);
    }

    private List<Batch> run(List<Path> manifests, double[] weights, int steps, FeedMetrics.Snapshot[] last) throws Exception {
        var parts = new ArrayList<MixedSource.Part>();
        var locals = new ArrayList<LocalFeedSource>();
        for (int i = 0; i < manifests.size(); i++) {
            var s = new LocalFeedSource(manifests.get(i), 0);
            locals.add(s);
            parts.add(new MixedSource.Part(s, weights[i]));
        }
        var config = FeederTest.config(FeedMode.CONCURRENT, 2, 4, 2);
        try (var feeder = Feeder.start(config, new MixedSource(parts), SharedTokenizer.get())) {
            var out = new ArrayList<Batch>();
            for (int s = 0; s < steps; s++)
                for (int r = 0; r < 2; r++) out.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
            last[0] = feeder.metrics();
            return out;
        } finally {
            for (var l : locals) l.close();
        }
    }

    @Test
    void eachSourceIsFedItsPassesPerEpochFromItsOwnFolder() throws Exception {
        var manifests = sources();
        var snap = new FeedMetrics.Snapshot[1];
        // weight 1: a's 20 once an epoch; weight 2: b's 6 twice; 32 places, 4 steps of 2 ranks × 4 an epoch
        var batches = run(manifests, new double[] {1, 2}, 8, snap);
        for (int epoch = 0; epoch < 2; epoch++) {
            int[] count = new int[26];
            for (var b : batches) {
                if (b.epoch() != epoch) continue;
                assertTrue(b.skippedSamples().isEmpty(), "nothing skipped: b's images are found in b's folder " + b.skippedSamples());
                for (int index : b.datasetIndices()) count[index]++;
            }
            for (int i = 0; i < 20; i++) assertEquals(1, count[i], "epoch " + epoch + ": a's record " + i + " once");
            for (int i = 20; i < 26; i++) assertEquals(2, count[i], "epoch " + epoch + ": b's record " + (i - 20) + " twice");
        }
        var sources = snap[0].sources();
        assertEquals(2, sources.size());
        assertEquals(40, sources.get(0).delivered());
        assertEquals(24, sources.get(1).delivered());
        assertEquals(20, sources.get(0).places());
        assertEquals(12, sources.get(1).places());
        assertEquals(24.0 / 64, sources.get(1).share(), 1e-9);
        assertEquals(sources.get(0).delivered() + sources.get(0).skipped(), sources.get(0).scheduled());

        var again = run(manifests, new double[] {1, 2}, 8, snap);
        for (int i = 0; i < batches.size(); i++) assertArrayEquals(batches.get(i).datasetIndices(), again.get(i).datasetIndices(), "same order");
        var other = run(manifests, new double[] {1, 1}, 4, snap); // the concatenation: 26 places, 3 whole steps of 8 an epoch
        var firstEpoch = new java.util.HashSet<Integer>();
        for (var b : other) if (b.epoch() == 0) for (int index : b.datasetIndices()) assertTrue(firstEpoch.add(index), "once an epoch: " + index);
        assertEquals(24, firstEpoch.size());
        assertEquals(1, other.get(other.size() - 1).epoch(), "the fourth step opens the next epoch");
    }

    /** A source whose images are all missing is stopped on its own first samples, named, though the mix's rate would hide it longer. */
    @Test
    void aSourceWhoseFirstSamplesAllFailStopsTheMixNamingIt() throws Exception {
        Path a = TestDatasets.write(Files.createDirectories(tmp.resolve("good")), 40, Set.of());
        Path bDir = Files.createDirectories(tmp.resolve("broken"));
        Path b = TestDatasets.write(bDir, 8, Set.of());
        Files.writeString(b, Files.readString(b).replace("\"images/", "\"gone/").replace("\"image\": \"", "\"image\": \"").replaceAll("\\{\"id\": \"(s\\d+)\", \"conversations", "{\"id\": \"$1\", \"image\": \"gone/x.jpg\", \"conversations")
                .replace("\"value\": \"What", "\"value\": \"<image>\\nWhat"));
        var parts = List.of(new MixedSource.Part(new LocalFeedSource(a, 0), 1), new MixedSource.Part(new LocalFeedSource(b, 0), 4));
        var failure = org.junit.jupiter.api.Assertions.assertThrows(java.util.concurrent.ExecutionException.class, () -> {
            var config = FeederTest.config(FeedMode.CONCURRENT, 2, 4, 2);
            try (var feeder = Feeder.start(config, new MixedSource(parts), SharedTokenizer.get())) {
                for (int s = 0; s < 40; s++) for (int r = 0; r < 2; r++) feeder.rank(r).next().get(60, TimeUnit.SECONDS);
            }
        });
        String message = failure.getCause().getMessage();
        assertTrue(message.contains("the first 32 samples of source 1 (train.jsonl) all failed"), message);
        assertTrue(message.contains("gone/"), message);
    }
}
