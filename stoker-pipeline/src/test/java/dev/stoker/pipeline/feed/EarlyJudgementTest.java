package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.Shapes;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.testkit.FakeTicker;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.IntPredicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The early judgement on its own: placed once over a schedule's walk (batches or packs alike), it stops a source whose
 * first 32 samples all fail, ends with a good one, judges each source of a mix apart, and lets an empty batch wait for it
 * exactly as long as its ticker says, never by the real clock.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class EarlyJudgementTest {
    static final List<String> ONE = List.of("the manifest");

    static FeedError failed(ScheduledBatch b, int position) {
        int record = b.indices()[position];
        return FeedError.of(b.epoch(), b.step(), b.rank(), new SkippedSample("s" + record, record, SampleException.Stage.FETCH,
                "file not found: /x/" + record + ".jpg"));
    }

    /**
     * Judges the walk of {@code local} from {@code start}, step by step and rank by rank, each sample failing unless
     * {@code good} says otherwise (by its ordinal in the walk); returns the samples judged when the feed failed, −1 when the
     * judgement ended without failing it, −2 when it was still open after {@code limit} samples.
     */
    static int judgeWalk(StepSchedule s, ScheduleCursor start, RankRange local, IntPredicate good, int limit) {
        var j = EarlyJudgement.of(s, start, local, ONE, 0.5, new FakeTicker());
        var walks = new ArrayList<Iterator<ScheduledBatch>>();
        for (int r = local.first(); r <= local.last(); r++) walks.add(s.iterator(start, r));
        int n = 0;
        while (n < limit) {
            for (var it : walks) {
                var b = it.next();
                for (int p = 0; p < b.size(); p++, n++) {
                    var stop = j.judge(b.epoch(), b.step(), b.rank(), p, good.test(n) ? null : failed(b, p));
                    if (stop != null) {
                        assertTrue(stop.getMessage().contains("the first 32 samples of the manifest all failed"), stop.getMessage());
                        assertEquals(FeedErrors.EARLY_SAMPLES, stop.samples().size());
                        return n + 1;
                    }
                }
            }
        }
        return j.isOver() ? -1 : -2;
    }

    @Test
    void theThirtySecondFailureInTheWalkStopsTheFeedWhateverTheSchedule() {
        var batches = new SampleSchedule(3, 200, 4, 3);
        var packs = new PackedSchedule(new PackPlanner(new SampleSchedule(3, 300, 1, 1), Shapes.referenceLike(300, 1, 5), 4, 4096, 0,
                PackPlanner.Balance.COST, PackCost.QWEN2_VL_2B, Shapes.DUMMY));
        for (StepSchedule s : List.of(batches, packs)) {
            assertEquals(32, judgeWalk(s, ScheduleCursor.START, RankRange.all(4), n -> false, 500), s.name());
            assertEquals(-1, judgeWalk(s, ScheduleCursor.START, RankRange.all(4), n -> n == 31, 500), s.name() + ": the 32nd is good");
            var labelled = s.labelled(s.cursorAt(5), 5);
            assertEquals(32, judgeWalk(labelled, s.cursorAt(5), new RankRange(1, 2), n -> false, 500), s.name() + ": two ranks, mid-epoch");
        }
    }

    /** A sample seen twice, as it fails and again in its batch, counts once: the feed stops at the 32nd distinct one. */
    @Test
    void aSampleSeenTwiceCountsOnce() {
        var s = new SampleSchedule(3, 200, 1, 4);
        var j = EarlyJudgement.of(s, ScheduleCursor.START, RankRange.all(1), ONE, 0.5, new FakeTicker());
        var it = s.iterator(ScheduleCursor.START, 0);
        int distinct = 0;
        BadInputException stop = null;
        while (stop == null) {
            var b = it.next();
            for (int p = 0; p < b.size() && stop == null; p++) {
                distinct++;
                stop = j.judge(b.epoch(), b.step(), 0, p, failed(b, p));
                if (stop == null) assertNull(j.judge(b.epoch(), b.step(), 0, p, failed(b, p)), "again: not a new failure");
            }
        }
        assertEquals(FeedErrors.EARLY_SAMPLES, distinct);
        var later = it.next();
        var skipped = new ArrayList<SkippedSample>();
        for (int rec : later.indices()) skipped.add(new SkippedSample("s" + rec, rec, SampleException.Stage.DECODE, "truncated"));
        assertNull(j.judge(later.epoch(), later.step(), 0, skipped), "judged: nothing more to say");
    }

    /** Over a mix, each source is judged on its own first samples: one broken source stops the feed, naming it. */
    @Test
    void eachSourceOfAMixIsJudgedApart() {
        var mix = new SourceMix(9, new int[] {100, 100}, new double[] {1, 1});
        var s = new SampleSchedule(9, mix, 2, 4);
        var j = EarlyJudgement.of(s, ScheduleCursor.START, RankRange.all(2), List.of("good.jsonl", "broken.jsonl"), 0.5, new FakeTicker());
        BadInputException stop = null;
        var walks = List.of(s.iterator(ScheduleCursor.START, 0), s.iterator(ScheduleCursor.START, 1));
        for (int k = 0; k < 40 && stop == null; k++) {
            for (var it : walks) {
                var b = it.next();
                for (int p = 0; p < b.size() && stop == null; p++) {
                    boolean broken = mix.sourceOfRecord(b.indices()[p]) == 1;
                    stop = j.judge(b.epoch(), b.step(), b.rank(), p, broken ? failed(b, p) : null);
                }
                if (stop != null) break;
            }
        }
        assertNotNull(stop, "the broken source's first 32 failed");
        assertTrue(stop.getMessage().contains("source 1 (broken.jsonl)"), stop.getMessage());
    }

    /** An empty batch made while the judgement is open waits for it, at most the wait by the ticker. */
    @Test
    void anEmptyBatchWaitsForTheJudgementAsLongAsTheTickerSays() throws Exception {
        var ticker = new FakeTicker();
        var s = new SampleSchedule(3, 200, 1, 4);
        var j = EarlyJudgement.of(s, ScheduleCursor.START, RankRange.all(1), ONE, 0.5, ticker);
        var empty = new Empty();
        var waiting = j.after(empty);
        assertFalse(waiting.isDone(), "an empty batch waits while the judgement is open");
        assertTrue(j.after(new Empty() { @Override public int scheduled() { return 0; } }).isDone(), "a batch of nothing never waits");
        ticker.advanceMillis(EarlyJudgement.WAIT_MILLIS - 1);
        assertEquals(1, j.expireWaits(), "one millisecond before the wait is over it still waits");
        assertFalse(waiting.isDone());
        ticker.advanceMillis(1);
        assertEquals(0, j.expireWaits());
        assertSame(empty, waiting.getNow(null), "handed out once the wait is over by the ticker");

        var second = j.after(new Empty());
        assertFalse(second.isDone());
        var b = s.iterator(ScheduleCursor.START, 0).next();
        assertNull(j.judge(b.epoch(), b.step(), 0, 0, null), "a good first sample ends the judgement");
        assertTrue(j.isOver());
        assertTrue(second.isDone(), "the judgement over, the waiting batch goes at once");
        assertTrue(j.after(new Empty()).isDone(), "and no batch waits any more");
    }

    /** Off (FAIL, or a rate limit of 1): over from the start, nothing waits. */
    @Test
    void anOffJudgementIsOverAndNothingWaits() {
        var j = EarlyJudgement.off(ONE);
        assertTrue(j.isOver());
        assertTrue(j.after(new Empty()).isDone());
    }

    /** A batch of one scheduled sample, none delivered. */
    static class Empty implements FeedBatch {
        @Override public long epoch() { return 0; }

        @Override public long step() { return 0; }

        @Override public long globalStep() { return 0; }

        @Override public int rank() { return 0; }

        @Override public int scheduled() { return 1; }

        @Override public List<String> sampleIds() { return List.of(); }

        @Override public int[] datasetIndices() { return new int[0]; }

        @Override public List<SkippedSample> skippedSamples() { return List.of(); }

        @Override public int samples() { return 0; }

        @Override public long sizeBytes() { return 0; }
    }
}
