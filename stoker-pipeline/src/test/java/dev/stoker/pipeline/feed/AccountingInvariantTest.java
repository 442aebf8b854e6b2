package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.pipeline.feed.BadSamples.Kind;
import dev.stoker.plan.schedule.SampleSchedule;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The accounting invariant of the bad-input policy on a data set with 5% broken samples of mixed
 * kinds, 2 ranks, three epochs, in PREFETCH and ZERO_COPY: per epoch and rank, delivered + skipped =
 * scheduled, the delivered and skipped dataset indices are exactly the schedule's (nothing lost,
 * nothing repeated), and the errors file holds exactly the skipped samples.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class AccountingInvariantTest {
    static final int SIZE = 240, RANKS = 2, BATCH = 6, EPOCHS = 3;
    /** Failing at every stage, three of them only when pixels are decoded (in ZERO_COPY: while written into shared memory). */
    static final List<Kind> KINDS = List.of(Kind.MISSING, Kind.TRUNCATED_JPEG, Kind.CORRUPT_JPEG, Kind.CORRUPT_PNG, Kind.TEXT_NAMED_JPG,
            Kind.DECOMPRESSION_BOMB, Kind.TOO_ELONGATED, Kind.BAD_JSON, Kind.INVALID_UTF8, Kind.TOO_MANY_TOKENS,
            Kind.SYMLINK_ESCAPE, Kind.PATH_ESCAPE);

    @TempDir Path tmp;
    @TempDir Path shm;

    /** One line of the errors file, or one skipped sample of a delivered batch, as the same tuple. */
    record Skip(String id, int index, long epoch, long step, int rank, String stage) implements Comparable<Skip> {
        @Override
        public int compareTo(Skip o) {
            return java.util.Comparator.comparingLong(Skip::epoch).thenComparingLong(Skip::step).thenComparingInt(Skip::rank)
                    .thenComparingInt(Skip::index).compare(this, o);
        }
    }

    @Test
    void deliveredPlusSkippedIsScheduledPerEpochAndRankWithEveryIndexOnce() throws Exception {
        var bad = new HashMap<Integer, Kind>();
        var random = new Random(20240607);
        while (bad.size() < SIZE / 20) {
            int i = random.nextInt(SIZE);
            if (!bad.containsKey(i)) bad.put(i, KINDS.get(bad.size()));
        }
        Path manifest = BadSamples.write(tmp.resolve("ds"), SIZE, bad, true);
        var schedule = new SampleSchedule(FeederTest.SEED, SIZE, RANKS, BATCH);
        assertEquals(0, schedule.droppedPerEpoch(), "every sample is scheduled once an epoch");
        int steps = EPOCHS * (int) schedule.stepsPerEpoch();
        var options = BadInputFeedTest.OPTIONS.withPixels(3136, 12544);
        try (var source = new LocalFeedSource(manifest, 1); var store = BadInputFeedTest.store(shm)) {
            for (var mode : new FeedMode[] {FeedMode.PREFETCH, FeedMode.ZERO_COPY}) {
                Path errorsFile = tmp.resolve(mode + "-errors.jsonl");
                var cfg = FeedConfig.of(mode, options, RANKS, BATCH).withSeed(FeederTest.SEED).withCpuThreads(2).withFetchConcurrency(8).withWarmUp(0)
                        .withErrorsFile(errorsFile);
                List<FeedBatch> batches;
                try (var feeder = BadInputFeedTest.start(cfg, source, store)) {
                    batches = BadInputFeedTest.take(feeder, steps);
                    var m = feeder.metrics();
                    assertEquals((long) steps * RANKS * BATCH, m.deliveredSamples() + m.skippedSamples(), mode.name());
                    assertEquals((long) EPOCHS * bad.size(), m.skippedSamples(), mode.name());
                    assertEquals((long) steps * RANKS * BATCH, feeder.errors().scheduled(), mode.name());
                    assertEquals((long) EPOCHS * bad.size(), feeder.errors().total(), mode.name());
                    assertNull(feeder.errors().failure());
                }
                assertInvariant(batches, schedule, bad, mode.name());
                assertErrorsFileHoldsExactlyTheSkipped(batches, errorsFile, mode.name());
                assertEquals(0, store.metrics().inUseBytes(), mode + ": every object released");
            }
        }
    }

    private static void assertInvariant(List<FeedBatch> batches, SampleSchedule schedule, Map<Integer, Kind> bad, String mode) {
        // (epoch, rank) → the dataset indices delivered or skipped, and those scheduled
        var seen = new TreeMap<String, List<Integer>>();
        var scheduled = new TreeMap<String, List<Integer>>();
        var counts = new TreeMap<String, int[]>();
        for (var b : batches) {
            String key = "epoch " + b.epoch() + " rank " + b.rank();
            assertEquals(b.scheduled(), b.samples() + b.skipped(), mode + " " + key + " step " + b.step());
            var got = seen.computeIfAbsent(key, k -> new ArrayList<>());
            for (int idx : b.datasetIndices()) {
                got.add(idx);
                assertNull(bad.get(idx), mode + ": bad sample " + idx + " delivered");
            }
            for (var s : b.skippedSamples()) {
                got.add(s.datasetIndex());
                assertEquals(bad.get(s.datasetIndex()).stage, s.stage(), mode + ": " + s);
            }
            for (int idx : schedule.batchFor(b.epoch(), b.step(), b.rank())) scheduled.computeIfAbsent(key, k -> new ArrayList<>()).add(idx);
            var c = counts.computeIfAbsent(key, k -> new int[3]);
            c[0] += b.samples();
            c[1] += b.skipped();
            c[2] += b.scheduled();
        }
        assertEquals(EPOCHS * RANKS, seen.size(), mode + ": " + seen.keySet());
        int skippedInAll = 0;
        for (var key : seen.keySet()) {
            int[] c = counts.get(key);
            assertEquals(schedule.stepsPerEpoch() * BATCH, c[2], mode + " " + key);
            assertEquals(c[2], c[0] + c[1], mode + " " + key + ": delivered + skipped = scheduled");
            var got = seen.get(key).stream().sorted().toList();
            var want = scheduled.get(key).stream().sorted().toList();
            assertEquals(want, got, mode + " " + key + ": every scheduled index exactly once, delivered or skipped");
            assertEquals(want.stream().filter(bad::containsKey).count(), c[1], mode + " " + key + ": the bad ones and only they skipped");
            skippedInAll += c[1];
        }
        assertEquals(EPOCHS * bad.size(), skippedInAll, mode + ": each bad sample skipped once an epoch");
    }

    private static void assertErrorsFileHoldsExactlyTheSkipped(List<FeedBatch> batches, Path errorsFile, String mode) throws Exception {
        var expected = new ArrayList<Skip>();
        for (var b : batches)
            for (var s : b.skippedSamples())
                expected.add(new Skip(s.sampleId(), s.datasetIndex(), b.epoch(), b.step(), b.rank(), s.stage().name().toLowerCase(java.util.Locale.ROOT)));
        var written = new ArrayList<Skip>();
        for (var line : BadInputFeedTest.readErrorsFile(errorsFile))
            written.add(new Skip(line.get("id").asText(), line.get("index").asInt(), line.get("epoch").asLong(), line.get("step").asLong(),
                    line.get("rank").asInt(), line.get("stage").asText()));
        expected.sort(null);
        written.sort(null);
        assertEquals(expected, written, mode + ": the errors file lists exactly the skipped samples of the delivered batches");
    }
}
