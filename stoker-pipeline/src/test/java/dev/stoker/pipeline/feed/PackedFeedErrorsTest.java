package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.pack.Shapes;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A packed job's bad-input accounting, over a real {@link PackedSchedule} of synthetic shapes: the early judgement counts
 * the first samples by the packs' positions (whose count varies by step and rank), not by batch size; the samples the
 * planner leaves out of every pack are recorded as filtered, each once, with the budget they are over.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PackedFeedErrorsTest {
    static final int RANKS = 4, TOKENS = 4096, PATCHES = 4096;
    @TempDir Path tmp;

    static PackedSchedule packed(ShapeIndex shapes, long seed) {
        return new PackedSchedule(new PackPlanner(new SampleSchedule(seed, shapes.size(), 1, 1), shapes, RANKS, TOKENS, PATCHES,
                PackPlanner.Balance.COST, PackCost.QWEN2_VL_2B, Shapes.DUMMY));
    }

    static FeedConfig config() {
        return FeedConfig.of(FeedMode.PREFETCH, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), RANKS, 1)
                .withErrorPolicy(ErrorPolicy.SKIP, 0.5);
    }

    static List<SkippedSample> allFailed(int[] records) {
        var out = new ArrayList<SkippedSample>();
        for (int r : records) out.add(new SkippedSample("s" + r, r, SampleException.Stage.FETCH, "file not found: /x/" + r + ".jpg"));
        return out;
    }

    /** Every local rank's iterator from {@code start}, labelled {@code label}. */
    static List<Iterator<ScheduledBatch>> iterators(PackedSchedule ps, ScheduleCursor start, long label, RankRange local) {
        var out = new ArrayList<Iterator<ScheduledBatch>>();
        for (int r = local.first(); r <= local.last(); r++) out.add(ps.iterator(start, label, r));
        return out;
    }

    /**
     * Delivers the packs of {@code local} from {@code start}, step by step, every sample failing but the one at ordinal
     * {@code good} (−1: none), until the feed fails or {@code limit} samples went; returns the samples delivered before and
     * with the batch that failed it (or −(samples delivered) − 1 when it never failed).
     */
    static int deliverUntilFailed(FeedErrors errors, PackedSchedule ps, ScheduleCursor start, long label, RankRange local, int good,
                                  int limit) {
        var its = iterators(ps, start, label, local);
        int seen = 0;
        while (seen < limit) {
            for (var it : its) {
                var b = it.next();
                var failed = new ArrayList<>(allFailed(b.indices()));
                if (good >= seen && good < seen + b.size()) failed.remove(good - seen);
                seen += b.size();
                var stop = errors.delivered(b.epoch(), b.step(), b.rank(), b.size(), failed);
                if (stop != null) {
                    assertTrue(stop.getMessage().contains("the first 32 samples of the manifest all failed"), stop.getMessage());
                    assertEquals(FeedErrors.EARLY_SAMPLES, stop.samples().size());
                    return seen;
                }
            }
        }
        return -seen - 1;
    }

    /** The samples delivered up to and with the batch holding the {@code n}-th sample (1-based) of {@code local}'s packs. */
    static int throughBatchHolding(PackedSchedule ps, ScheduleCursor start, long label, RankRange local, int n) {
        var its = iterators(ps, start, label, local);
        int seen = 0;
        while (true) {
            for (var it : its) {
                seen += it.next().size();
                if (seen >= n) return seen;
            }
        }
    }

    @Test
    void theEarlyJudgementCountsTheFirstSamplesByThePacksPositions() throws Exception {
        var ps = packed(Shapes.referenceLike(600, 1, 5), 11);
        var all = RankRange.all(RANKS);
        int expected = throughBatchHolding(ps, ScheduleCursor.START, 0, all, FeedErrors.EARLY_SAMPLES);
        try (var errors = FeedErrors.open(config(), ps, List.of("the manifest"))) {
            assertEquals(expected, deliverUntilFailed(errors, ps, ScheduleCursor.START, 0, all, -1, 200),
                    "the feed fails with the batch that holds the 32nd sample from its start");
            assertTrue(errors.scheduled() < FeedErrors.MIN_SCHEDULED_FOR_RATE, "before the rate could judge: " + errors.scheduled());
        }
        // packs vary in size, so the batch-size arithmetic would not find the 32nd sample where the packs put it
        assertTrue(expected != FeedErrors.EARLY_SAMPLES, "a test of packs whose sizes do not add up to 32 exactly: " + expected);
    }

    @Test
    void aGoodSampleAmongTheFirstEndsTheJudgement() throws Exception {
        var ps = packed(Shapes.referenceLike(600, 1, 5), 11);
        try (var errors = FeedErrors.open(config(), ps, List.of("the manifest"))) {
            int went = deliverUntilFailed(errors, ps, ScheduleCursor.START, 0, RankRange.all(RANKS), 20, 60);
            assertTrue(went < 0, "not failed early: the 21st sample was delivered");
        }
    }

    @Test
    void aNodeOfSomeRanksJudgesTheFirstSamplesOfItsOwnPacksFromAMidEpochStart() throws Exception {
        var ps = packed(Shapes.referenceLike(900, 2, 5), 5);
        var start = ps.cursorAt(7); // mid-epoch, labelled as the uninterrupted job labels it
        var local = new RankRange(2, 3);
        int expected = throughBatchHolding(ps, start, 7, local, FeedErrors.EARLY_SAMPLES);
        try (var errors = FeedErrors.open(config().withStart(start, 7).withLocalRanks(local), ps, List.of("the manifest"))) {
            assertEquals(expected, deliverUntilFailed(errors, ps, start, 7, local, -1, 200));
        }
        try (var errors = FeedErrors.open(config().withStart(start, 7).withLocalRanks(local), ps, List.of("the manifest"))) {
            int went = deliverUntilFailed(errors, ps, start, 7, local, FeedErrors.EARLY_SAMPLES - 1, 60); // the 32nd delivered
            assertTrue(went < 0, "the judgement ended with a good sample among the first: " + went);
        }
    }

    /** Shapes like the reference data set's, with one record of each kind the planner leaves out. */
    static final Map<Integer, String> LEFT_OUT = Map.of(
            3, "5000 tokens > --pack-tokens 4096",
            7, "5000 patches > --pack-patches 4096",
            11, "4093 tokens + the dummy image's 6 > --pack-tokens 4096 (text only: in a step with images its pack gets the dummy image beside it)",
            13, "marked an error by the shape index",
            17, "marked filtered by the shape index");

    static ShapeIndex withLeftOut(int n) {
        var base = Shapes.referenceLike(n, 3, 5);
        var list = new ArrayList<SampleShape>();
        for (int i = 0; i < n; i++) list.add(base.shape(i));
        list.set(3, SampleShape.of(5000, 64));
        list.set(7, SampleShape.of(1000, 5000));
        list.set(11, SampleShape.of(4093));
        list.set(13, new SampleShape(SampleShape.Kind.ERROR, 0, null));
        list.set(17, new SampleShape(SampleShape.Kind.FILTERED, 900, new int[] {64}));
        return ShapeIndex.of(list);
    }

    @Test
    void thePlannersSkipsAreRecordedOnceEachAsFilteredWithTheBudgetTheyAreOver() throws Exception {
        var ps = packed(withLeftOut(300), 8);
        Path file = tmp.resolve("errors.jsonl");
        var seenAt = new HashMap<Integer, List<ScheduledBatch>>(); // each left-out record's steps, one per epoch
        long positions = 0;
        try (var errors = FeedErrors.open(config().withErrorsFile(file), ps, List.of("the manifest"))) {
            var its = iterators(ps, ScheduleCursor.START, 0, RankRange.all(RANKS));
            int recorded = 0;
            while (true) {
                var batches = new ArrayList<ScheduledBatch>();
                for (var it : its) batches.add(it.next());
                if (batches.getFirst().epoch() == 2) break;
                var step = batches.getFirst().pack();
                positions += step.positions();
                for (int r : step.filtered()) seenAt.computeIfAbsent(r, k -> new ArrayList<>()).add(batches.getFirst());
                for (int r : step.skipped()) seenAt.computeIfAbsent(r, k -> new ArrayList<>()).add(batches.getFirst());
                int before = recorded;
                for (int i = batches.size() - 1; i >= 0; i--) recorded += errors.leftOut(batches.get(i), r -> "s" + r); // every rank calls
                assertEquals(step.filtered().length + step.skipped().length, recorded - before, "each of the step's once");
            }
            assertEquals(LEFT_OUT.keySet(), seenAt.keySet(), "the planner left out exactly the records made to be left out");
            for (var e : seenAt.entrySet()) assertEquals(2, e.getValue().size(), "record " + e.getKey() + ": once per epoch");
            assertEquals(2L * LEFT_OUT.size(), errors.filtered());
            assertEquals(0, errors.errors(), "left out by the planner: filtered, never errors");
            assertEquals(2L * LEFT_OUT.size(), errors.scheduled(), "positions of the job: in the rate's denominator");
            var counts = errors.counts();
            assertEquals(2L * 2, counts.causes().stream().filter(c -> c.reason().equals("over --pack-tokens")).mapToLong(FeedErrors.Cause::count).sum());
            assertEquals(2L, counts.causes().stream().filter(c -> c.reason().equals("over --pack-patches")).mapToLong(FeedErrors.Cause::count).sum());
            assertEquals(2L * 2, counts.causes().stream().filter(c -> c.reason().equals("marked by the shape index")).mapToLong(FeedErrors.Cause::count).sum());
            for (var e : errors.records()) {
                var at = seenAt.get(e.datasetIndex()).get((int) e.epoch());
                assertEquals(LEFT_OUT.get(e.datasetIndex()), e.cause());
                assertEquals("s" + e.datasetIndex(), e.sampleId());
                assertEquals(SampleException.Kind.FILTERED, e.kind());
                assertEquals(SampleException.Stage.MANIFEST, e.stage());
                assertEquals(at.step(), e.step(), "the step within the epoch that left it out");
                assertEquals(-1, e.rank(), "no rank got it");
            }
            // the steps again, as a late rank's iterator would call for them: nothing new
            var late = iterators(ps, ScheduleCursor.START, 0, new RankRange(3, 3)).getFirst();
            for (int k = 0; k < 20; k++) assertEquals(0, errors.leftOut(late.next(), r -> "s" + r));
            assertEquals(2L * LEFT_OUT.size(), errors.filtered());
        }
        var lines = Files.readAllLines(file);
        assertEquals(2 * LEFT_OUT.size(), lines.size(), String.join("\n", lines));
        var json = new ObjectMapper();
        for (var line : lines) {
            var node = json.readTree(line);
            assertEquals("filtered", node.get("kind").asText());
            assertEquals("manifest", node.get("stage").asText());
            assertEquals(LEFT_OUT.get(node.get("index").asInt()), node.get("cause").asText());
        }
        assertTrue(positions > 0);
    }

    @Test
    void stepsCalledOutOfOrderAreEachRecorded() throws Exception {
        var ps = packed(withLeftOut(300), 8);
        var its = iterators(ps, ScheduleCursor.START, 0, new RankRange(0, 0));
        var steps = new ArrayList<ScheduledBatch>();
        for (int k = 0; k < 40; k++) steps.add(its.getFirst().next());
        int total = steps.stream().filter(b -> b.epoch() == 0).mapToInt(b -> b.pack().filtered().length + b.pack().skipped().length).sum();
        assertEquals(LEFT_OUT.size(), total);
        try (var errors = FeedErrors.open(config(), ps, List.of("the manifest"))) {
            int recorded = 0;
            for (int k = steps.size() - 1; k >= 0; k--) if (steps.get(k).epoch() == 0) recorded += errors.leftOut(steps.get(k), r -> null);
            assertEquals(LEFT_OUT.size(), recorded);
            assertTrue(errors.records().stream().allMatch(e -> e.sampleId().equals("record " + e.datasetIndex())), "named by record without an id");
        }
    }

    @Test
    void onlyAPackedJobsFeedTakesThePlannersSkips() throws Exception {
        var ps = packed(withLeftOut(300), 8);
        var b = ps.iterator(ScheduleCursor.START, 0, 0).next();
        try (var unpacked = FeedErrors.open(config(), new SampleSchedule(1, 300, RANKS, 2), List.of("the manifest"))) {
            var e = assertThrows(IllegalArgumentException.class, () -> unpacked.leftOut(b, r -> "s" + r));
            assertTrue(e.getMessage().contains("PackedSchedule"), e.getMessage());
        }
        try (var errors = FeedErrors.open(config(), ps, List.of("the manifest"))) {
            var plain = new ScheduledBatch(b.cursor(), b.step(), b.globalStep(), 0, b.indices());
            var e = assertThrows(IllegalArgumentException.class, () -> errors.leftOut(plain, r -> "s" + r));
            assertTrue(e.getMessage().contains("no pack plan"), e.getMessage());
            assertNull(errors.failure());
            assertNotNull(errors.counts());
        }
    }
}
