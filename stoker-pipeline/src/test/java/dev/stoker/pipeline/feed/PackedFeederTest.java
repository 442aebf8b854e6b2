package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.validate.ShapeIndexes;
import dev.stoker.plan.StepSchedules;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * A packed feed ({@code --pack-tokens N}) hands each rank, per step, the pack the planner gave it: one row of its samples, in
 * segment order, on the heap and written in place into shared memory alike; the steps that start in an epoch hold every sample
 * of it in exactly one pack (or filtered), the last of them running into the next epoch's head; a feed started at a step's
 * cursor continues with the same packs.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class PackedFeederTest {
    static final int RANKS = 3, SAMPLES = 30;
    @TempDir Path tmp;
    @TempDir Path shm;

    /** N = three of the data set's longest samples: packs of a few samples each. */
    static FeedConfig packed(FeedMode mode, ShapeIndex shapes, int padTo) {
        int longest = 0;
        for (int i = 0; i < shapes.size(); i++) longest = Math.max(longest, shapes.shape(i).tokens());
        int n = (3 * longest + padTo - 1) / padTo * padTo;
        return FeederTest.config(mode, RANKS, 1, 2).withPacking(new Packing(n, 0, dev.stoker.plan.pack.PackPlanner.Balance.COST, padTo,
                dev.stoker.plan.pack.PackCost.QWEN2_5_VL_3B));
    }

    static ShapeIndex shapes(FeedSource source) throws Exception {
        return ShapeIndexes.measure(source.records(), source, SharedTokenizer.get(), FeederTest.OPTIONS, 2);
    }

    /** The planner's steps that start in epoch 0 (the last runs into epoch 1), walked on a schedule of its own. */
    static List<PackedStep> epoch0(FeedConfig config, FeedSource source, ShapeIndex shapes) throws Exception {
        var schedule = (PackedSchedule) StepSchedules.of(Feeder.schedule(config, source.records()), config.packing(), () -> shapes,
                Feeder.dummyShape(config));
        var steps = new ArrayList<PackedStep>();
        for (ScheduleCursor c = ScheduleCursor.START; c.epoch() == 0; ) {
            var s = schedule.step(c, steps.size());
            steps.add(s);
            c = s.next();
        }
        return steps;
    }

    /** The records at positions {@code [from, to)} of {@code config}'s global order, epoch after epoch, sorted. */
    static List<Integer> recordsBetween(FeedConfig config, FeedSource source, ScheduleCursor from, ScheduleCursor to) throws Exception {
        var order = Feeder.schedule(config, source.records());
        var out = new ArrayList<Integer>();
        for (long e = from.epoch(), pos = from.position(); e < to.epoch() || (e == to.epoch() && pos < to.position()); ) {
            out.add(order.recordAt(e, (int) pos));
            if (++pos == order.datasetSize()) {
                e++;
                pos = 0;
            }
        }
        out.sort(null);
        return out;
    }

    /** The records of {@code steps} (their packs', filtered and skipped ones), sorted. */
    static List<Integer> stepRecords(List<PackedStep> steps) {
        var out = new ArrayList<Integer>();
        for (var step : steps) {
            for (int[] pack : step.records()) for (int rec : pack) out.add(rec);
            for (int rec : step.filtered()) out.add(rec);
            for (int rec : step.skipped()) out.add(rec);
        }
        out.sort(null);
        return out;
    }

    @Test
    void eachRankGetsItsPlannedPackAndAnEpochHoldsEverySampleOnce() throws Exception {
        Path manifest = TestDatasets.write(tmp, SAMPLES, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            var shapes = shapes(source);
            var config = packed(FeedMode.PREFETCH, shapes, 1);
            var plan = epoch0(config, source, shapes);
            assertTrue(plan.size() >= 2, "the epoch takes several steps: " + plan.size());
            var last = plan.getLast();
            assertEquals(1, last.next().epoch(), "the epoch's last step runs into epoch 1: " + last.next());
            try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
                assertTrue(feeder.schedule() instanceof PackedSchedule, "a packed feed walks a packed schedule");
                for (int s = 0; s < plan.size(); s++) {
                    var step = plan.get(s);
                    for (int r = 0; r < RANKS; r++) {
                        Batch b = feeder.rank(r).next().get(60, TimeUnit.SECONDS);
                        String at = "step " + s + " rank " + r;
                        assertEquals(s, b.globalStep(), at);
                        assertNull(b.attentionMask(), at + ": a pack has no attention_mask");
                        int[] want = step.records()[r];
                        assertArrayEquals(want, b.datasetIndices(), at + ": the planner's pack, in segment order");
                        int tokens = 0;
                        for (int rec : want) tokens += shapes.shape(rec).tokens();
                        int[] cu = b.cuSeqlens();
                        int real = want.length + (step.dummyImage()[r] ? 1 : 0);
                        assertEquals(real + 1, cu.length, at);
                        int dummyTokens = step.dummyImage()[r] ? Feeder.dummyShape(config).tokens() : 0;
                        assertEquals(tokens + dummyTokens, cu[cu.length - 1], at + ": the shapes' tokens are the pack's");
                        assertEquals(step.tokens()[r], cu[cu.length - 1], at + ": the planner's tokens are the pack's");
                        assertEquals(cu[cu.length - 1], b.inputIds().length, at + ": one row, no pad");
                        assertNotNull(b.after(), at);
                        assertEquals(step.next().epoch(), b.after().epoch(), at);
                        assertEquals(step.next().position(), b.after().position(), at);
                        assertEquals(s + 1, b.after().step(), at);
                    }
                }
                // the feed's packing figures: every step planned so far (the streams plan ahead of delivery), each once
                var pack = feeder.metrics().pack();
                assertNotNull(pack, "a packed feed's metrics hold its packing");
                assertTrue(pack.steps() >= plan.size(), pack.steps() + " steps recorded");
                double sum = 0;
                for (var step : plan) sum += step.imbalance();
                assertTrue(pack.meanImbalance() >= 1.0, "imbalance " + pack.meanImbalance());
                assertEquals(RANKS, pack.lastCosts().length);
                if (pack.steps() == plan.size()) assertEquals(sum / plan.size(), pack.meanImbalance(), 1e-9);
            }
            // the steps hold exactly the records of their positions: every sample of epoch 0 once (packed, filtered or
            // skipped), nothing dropped, and the head of epoch 1 the last step took
            assertEquals(recordsBetween(config, source, ScheduleCursor.START, last.next()), stepRecords(plan));
            var inLast = stepRecords(List.of(last));
            for (int i = 1; i < inLast.size(); i++) assertTrue(!inLast.get(i).equals(inLast.get(i - 1)), "sample " + inLast.get(i) + " twice in a step");
        }
    }

    /** Zero-copy writes, in place into shared memory, the very packs the heap path assembles (tail pad to 8 here). */
    @Test
    void zeroCopyWritesTheHeapPacksInPlace() throws Exception {
        Path manifest = TestDatasets.write(tmp, SAMPLES, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var shapes = shapes(source);
            var config = packed(FeedMode.PREFETCH, shapes, 8);
            int steps = epoch0(config, source, shapes).size();
            var heap = new ArrayList<Batch>();
            try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
                for (int s = 0; s < steps; s++) for (int r = 0; r < RANKS; r++) heap.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
            }
            try (var feeder = Feeder.start(config.withMode(FeedMode.ZERO_COPY), source, SharedTokenizer.get(), store)) {
                int i = 0;
                for (int s = 0; s < steps; s++)
                    for (int r = 0; r < RANKS; r++, i++) {
                        StoredBatch stored = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                        var b = BatchLayout.read(stored.object().segment());
                        Batch h = heap.get(i);
                        String at = "step " + s + " rank " + r;
                        assertEquals(0, stored.bytesCopied(), at);
                        assertEquals(0, h.inputIds().length % 8, at + ": the row padded to a multiple of 8");
                        assertArrayEquals(h.inputIds(), b.tensor("input_ids").toLongs(), at);
                        assertArrayEquals(h.labels(), b.tensor("labels").toLongs(), at);
                        assertArrayEquals(h.positionIds(), b.tensor("position_ids").toLongs(), at);
                        assertArrayEquals(h.sampleIndex(), b.tensor("sample_index").toLongs(), at);
                        assertArrayEquals(h.cuSeqlens(), b.tensor("cu_seqlens").toInts(), at);
                        assertArrayEquals(h.pixelValues(), b.tensor("pixel_values").toFloats(), at);
                        assertEquals(4, b.tensor("position_ids").shape()[0], at + ": four position rows");
                        stored.release();
                    }
            }
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    /** A feed started at a step's cursor (a resume, also at another rank count) plans from there as the whole run did. */
    @Test
    void aFeedStartedAtAStepsCursorContinuesWithTheSamePacks() throws Exception {
        Path manifest = TestDatasets.write(tmp, SAMPLES, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            var shapes = shapes(source);
            var config = packed(FeedMode.PREFETCH, shapes, 1);
            var plan = epoch0(config, source, shapes);
            var resumeAt = plan.get(1).cursor();
            try (var feeder = Feeder.start(config.withStart(resumeAt, 1), source, SharedTokenizer.get())) {
                for (int s = 1; s < plan.size(); s++)
                    for (int r = 0; r < RANKS; r++) {
                        Batch b = feeder.rank(r).next().get(60, TimeUnit.SECONDS);
                        assertEquals(s, b.globalStep());
                        assertArrayEquals(plan.get(s).records()[r], b.datasetIndices(), "step " + s + " rank " + r);
                    }
            }
            // the same cursor without a label: the label is counted from the origin
            try (var feeder = Feeder.start(config.withStart(resumeAt), source, SharedTokenizer.get())) {
                assertEquals(1, feeder.rank(0).next().get(60, TimeUnit.SECONDS).globalStep());
            }
            // two ranks from the same cursor: the rest of the order, each sample once
            var two = FeedConfig.of(FeedMode.PREFETCH, FeederTest.OPTIONS, 2, 1).withSeed(FeederTest.SEED).withCpuThreads(2)
                    .withFetchConcurrency(4).withWarmUp(0).withPacking(config.packing()).withStart(resumeAt, 1);
            var resized = new ArrayList<PackedStep>();
            ScheduleCursor c = resumeAt;
            try (var feeder = Feeder.start(two, source, SharedTokenizer.get())) {
                var packed2 = (PackedSchedule) feeder.schedule();
                for (c = packed2.planner().aligned(resumeAt); c.epoch() == 0; ) {
                    var step = packed2.step(c, 0);
                    for (int r = 0; r < 2; r++) {
                        Batch b = feeder.rank(r).next().get(60, TimeUnit.SECONDS);
                        assertArrayEquals(step.records()[r], b.datasetIndices(), "two ranks, step at " + c + " rank " + r);
                    }
                    resized.add(step);
                    c = step.next();
                }
            }
            assertTrue(resized.size() > 0);
            // the two-rank steps hold the records of the positions from the resume cursor on, across the epoch's end: the
            // rest of epoch 0 once, nothing trained before the resize (the positions before the cursor), nothing dropped
            assertEquals(recordsBetween(config, source, resumeAt, c), stepRecords(resized));
        }
    }

    /** A sample longer than N is filtered, named in the errors file with its cause, counted once, and never delivered. */
    @Test
    void aSampleOverTheTokenBudgetIsFilteredNamedAndCountedOnce() throws Exception {
        Path manifest = TestDatasets.write(tmp, SAMPLES, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            var shapes = shapes(source);
            int longest = 0, longCount = 0;
            for (int i = 0; i < shapes.size(); i++) longest = Math.max(longest, shapes.shape(i).tokens());
            int n = longest - 1;
            var over = new HashSet<Long>();
            for (int i = 0; i < shapes.size(); i++) if (shapes.shape(i).tokens() > n) over.add((long) i);
            longCount = over.size();
            assertTrue(longCount > 0 && longCount < SAMPLES);
            Path errorsFile = tmp.resolve("errors.jsonl");
            var config = FeederTest.config(FeedMode.PREFETCH, RANKS, 1, 2).withErrorsFile(errorsFile).withPacking(
                    new Packing(n, 0, dev.stoker.plan.pack.PackPlanner.Balance.COST, 1, dev.stoker.plan.pack.PackCost.QWEN2_5_VL_3B));
            var plan = epoch0(config, source, shapes);
            try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
                for (int s = 0; s < plan.size(); s++)
                    for (int r = 0; r < RANKS; r++)
                        for (long rec : feeder.rank(r).next().get(60, TimeUnit.SECONDS).sampleIndex())
                            assertTrue(!over.contains(rec), "sample " + rec + " over the budget was delivered");
            }
            var lines = java.nio.file.Files.readAllLines(errorsFile).stream()
                    .filter(l -> l.contains("--pack-tokens " + n) && l.contains("\"epoch\":0,")).toList(); // the streams run ahead into epoch 1
            assertEquals(longCount, lines.size(), "each sample over the budget recorded once in epoch 0: " + lines);
            for (String l : lines) assertTrue(l.contains("tokens > --pack-tokens " + n), l);
        }
    }
}
