package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The ledger's accounting of a packed job: each rank's batch is its pack of the step, whose size varies by step and rank,
 * so a batch is checked against the packed schedule's step for its rank (not the order's batch size), and each epoch's
 * totals against the packs of the steps the rank took. A stream that follows the packs passes every check; one that
 * drops a sample silently, or hands out another step's pack, fails the job.
 */
@Timeout(60)
class PackedLedgerTest {
    static final int RANKS = 3;

    /** 240 samples like a VQA set's: 100 … 1400 tokens, most with an image of 64 … 1060 patches, every 10th text only. */
    static ShapeIndex shapes() {
        var list = new ArrayList<SampleShape>();
        for (int i = 0; i < 240; i++) {
            int tokens = 100 + (i * 389) % 1301;
            list.add(i % 10 == 0 ? SampleShape.of(tokens) : SampleShape.of(tokens, 64 + 4 * ((i * 97) % 250)));
        }
        return ShapeIndex.of(list);
    }

    static PackedSchedule packed() {
        var shapes = shapes();
        return new PackedSchedule(new PackPlanner(new SampleSchedule(17, shapes.size(), 1, 1), shapes, RANKS, 4096, 0,
                PackPlanner.Balance.COST, PackCost.QWEN2_VL_2B, SampleShape.of(6, 16)));
    }

    /** What a stream makes of a rank's scheduled pack: its batch's sample indices and its scheduled count (as the feed sets them). */
    record Shaped(long[] delivered, int scheduled, long step, long globalStep) { }

    /** A packed job's stream of heap batches: each rank's packs from its iterator, as {@code make} turns them into batches. */
    static final class PackedStream implements BatchStream {
        private final PackedSchedule packed = PackedLedgerTest.packed();
        private final java.util.function.Function<ScheduledBatch, Shaped> make;
        private final List<Iterator<ScheduledBatch>> ranks = new ArrayList<>();
        private ScheduleCursor start = ScheduleCursor.START;
        private PackedSchedule labelled = packed;

        PackedStream(java.util.function.Function<ScheduledBatch, Shaped> make) {
            this.make = make;
            moveTo(ScheduleCursor.START, 0);
        }

        @Override public int ranks() { return RANKS; }

        @Override public PackedSchedule schedule() { return labelled; }

        @Override public long fingerprint() { return 42; }

        @Override public ScheduleCursor start() { return start; }

        @Override public boolean sharedMemory() { return false; }

        @Override
        public CompletableFuture<BatchStream.Made> next(int rank) {
            var b = ranks.get(rank).next();
            var m = make.apply(b);
            var meta = new BatchLayout.Meta(b.epoch(), m.step(), rank, RANKS, m.delivered().length, m.scheduled(), m.globalStep());
            return CompletableFuture.completedFuture(new Heap(new BatchProvider.Prepared(meta,
                    List.of(Tensor.of("sample_index", m.delivered(), m.delivered().length).asMetadata()))));
        }

        @Override
        public void moveTo(ScheduleCursor at, long step) {
            start = packed.planner().aligned(at);
            ranks.clear();
            long label = packed.labelAt(start, step);
            labelled = packed.labelled(start, label);
            for (int r = 0; r < RANKS; r++) ranks.add(packed.iterator(start, label, r));
        }

        @Override public void close() {}
    }

    /** The pack as the feed makes it: every sample delivered but every 7th record, skipped (an error), scheduled the pack's size. */
    static Shaped honest(ScheduledBatch b) {
        long[] delivered = Arrays.stream(b.indices()).filter(i -> i % 7 != 0).asLongStream().toArray();
        return new Shaped(delivered, b.indices().length, b.step(), b.globalStep());
    }

    /** Takes {@code steps} batches of every rank (rank r's trainer on connection r + 1), rank by rank; returns the first failure's message, or null. */
    static String take(RankLedger ledger, int steps) throws Exception {
        for (int k = 0; k < steps; k++) {
            for (int r = 0; r < RANKS; r++) {
                try {
                    ledger.next(r, r + 1).get(5, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    return e.getCause().getMessage();
                }
            }
        }
        return null;
    }

    static int stepsInEpochs(int epochs) {
        var it = packed().iterator(ScheduleCursor.START, 0, 0);
        int n = 0;
        while (it.next().epoch() < epochs) n++;
        return n;
    }

    @Test
    void aStreamThatFollowsThePacksIsCheckedAtEveryEpochEnd() throws Exception {
        int steps = stepsInEpochs(2) + 1; // into the third epoch: two epoch ends per rank
        try (var ledger = new RankLedger(new PackedStream(PackedLedgerTest::honest), null, 0, 0)) {
            for (int r = 0; r < RANKS; r++) assertEquals(0, ledger.join(r, r + 1, null, 0).nextStep());
            assertNull(take(ledger, steps));
            assertEquals(2L * RANKS, ledger.epochsChecked());
            assertNull(ledger.ledgerMetrics().get("violation"));
            assertTrue(!ledger.failure().isDone());
        }
    }

    @Test
    void aSampleDroppedWithoutBeingCountedFailsTheJob() throws Exception {
        // step 4's pack of rank 1 loses its first sample, scheduled one fewer: delivered + skipped no longer add up to the pack
        var stream = new PackedStream(b -> {
            var m = honest(b);
            if (b.globalStep() != 4 || b.rank() != 1) return m;
            long[] fewer = Arrays.stream(b.indices()).skip(1).filter(i -> i % 7 != 0).asLongStream().toArray();
            return new Shaped(fewer, b.indices().length - 1, m.step(), m.globalStep());
        });
        try (var ledger = new RankLedger(stream, null, 0, 0)) {
            for (int r = 0; r < RANKS; r++) ledger.join(r, r + 1, null, 0);
            String failed = take(ledger, 10);
            assertTrue(failed != null && failed.contains("delivery accounting broken: rank 1 epoch 0 step 4")
                    && failed.contains("the packed schedule gives this rank's pack"), failed);
            assertTrue(ledger.failure().isDone());
        }
    }

    @Test
    void anotherStepsPackFailsTheJob() throws Exception {
        // step 6 hands out step 5's packs again (the same samples twice, step 6's never), labelled as step 6
        var fifth = new ArrayList<ScheduledBatch>();
        var stream = new PackedStream(b -> {
            if (b.globalStep() == 5) fifth.add(b);
            if (b.globalStep() != 6) return honest(b);
            var again = fifth.stream().filter(x -> x.rank() == b.rank()).findFirst().orElseThrow();
            long[] ids = Arrays.stream(again.indices()).asLongStream().toArray();
            return new Shaped(ids, b.indices().length, b.step(), b.globalStep());
        });
        try (var ledger = new RankLedger(stream, null, 0, 0)) {
            for (int r = 0; r < RANKS; r++) ledger.join(r, r + 1, null, 0);
            String failed = take(ledger, 10);
            assertTrue(failed != null && failed.contains("step 6") && (failed.contains("is not one of this pack's")
                    || failed.contains("the packed schedule gives this rank's pack")), failed);
        }
    }

    @Test
    void aTrainerResumingMidEpochIsFedAndCheckedFromItsStep() throws Exception {
        var ps = packed();
        var at = ps.cursorAt(9);
        int steps = stepsInEpochs(1) - 9 + 2; // past the first epoch's end
        try (var ledger = new RankLedger(new PackedStream(PackedLedgerTest::honest), null, 0, 0)) {
            var joined = ledger.join(0, 1, at, 9, 42);
            assertEquals(9, joined.nextStep(), "the packed step's label");
            assertEquals(at, joined.cursor());
            assertEquals(0, joined.positionsPerStep(), "a packed step's positions vary: the client follows each batch's resume state");
            for (int r = 1; r < RANKS; r++) assertEquals(9, ledger.join(r, r + 1, at, 9, 42).nextStep());
            assertNull(take(ledger, steps));
            assertEquals(RANKS, ledger.epochsChecked(), "the first epoch checked from step 9 on");
            assertEquals(1, ledger.repositions());
        }
    }

    /** The unpacked check would refuse every pack: it compares each batch's scheduled count with the order's batch size. */
    @Test
    void thePacksSizesVary() {
        var it = packed().iterator(ScheduleCursor.START, 0, 0);
        var sizes = new java.util.TreeSet<Integer>();
        for (int k = 0; k < 20; k++) sizes.add(it.next().indices().length);
        assertTrue(sizes.size() > 1 && sizes.last() > 1, "packs of several sizes: " + sizes);
    }
}
