package dev.stoker.observe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalDouble;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The verdict rules on constructed timelines. */
@Timeout(60)
class BottleneckTest {
    static final long MS = 1_000_000;

    /** {@code n} ticks after the first delivery; each tick's figures from the given shares of ticks. */
    static FeedSampler.Timeline timeline(int ranks, int threads, int fetchLimit, boolean buffered, int n,
                                         double fullShare, double emptyShare, double busyThreads, double pinnedShare) {
        var ticks = new ArrayList<FeedSampler.Tick>();
        for (int i = 0; i < n; i++) {
            long[] batches = new long[ranks], bytes = new long[ranks];
            boolean[] full = new boolean[ranks];
            boolean isFull = i < Math.round(fullShare * n), isEmpty = i >= n - Math.round(emptyShare * n);
            for (int r = 0; r < ranks; r++) {
                full[r] = buffered && isFull;
                batches[r] = !buffered || isEmpty ? 0 : isFull ? 4 : 2;
                bytes[r] = batches[r] * 1000;
            }
            long inFlight = i < Math.round(pinnedShare * n) ? fetchLimit : fetchLimit / 4;
            ticks.add(new FeedSampler.Tick(100L * (i + 1), i * 10L, i * 10L, 8 + i * 8L, inFlight, Math.round(busyThreads), 0, 0,
                    batches, bytes, full));
        }
        return new FeedSampler.Timeline(100, ranks, threads, fetchLimit, 4, buffered, List.copyOf(ticks));
    }

    static BottleneckVerdict classify(FeedSampler.Timeline tl, long fetchP50, long encodeP50, OptionalDouble wait, OptionalDouble transfer) {
        return Bottleneck.classify(new Bottleneck.Inputs(tl, fetchP50, true, encodeP50, wait, transfer, false));
    }

    /** Where no feed is sampled (a cluster job's coordinator): the trainers' wait alone, at the same 0.05 threshold as classify. */
    @Test
    void fromTrainersAloneIsTrainerBoundUpToTheLowWaitAndDataBoundAbove() {
        assertEquals(BottleneckVerdict.Kind.BALANCED, Bottleneck.fromTrainers(OptionalDouble.empty(), "").kind(), "nothing reported yet");
        var low = Bottleneck.fromTrainers(OptionalDouble.of(Bottleneck.LOW_WAIT), "4 of 4 ranks measured on 2 nodes");
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, low.kind());
        assertEquals("trainer wait ratio 0.050, 4 of 4 ranks measured on 2 nodes", low.evidence());
        var high = Bottleneck.fromTrainers(OptionalDouble.of(Bottleneck.LOW_WAIT + 0.001), "");
        assertEquals(BottleneckVerdict.Kind.DATA_BOUND, high.kind());
        assertEquals("data", high.stage());
        assertEquals(0.051, high.figures().get("trainer_wait_ratio"), 1e-12);
        assertEquals("DATA_BOUND", high.toJson().get("kind"));
    }

    @Test
    void trainerBoundWhenBuffersFullAndTrainersDoNotWait() {
        var v = classify(timeline(2, 2, 64, true, 100, 0.99, 0, 1, 0), 5 * MS, 30 * MS, OptionalDouble.of(0.01), OptionalDouble.empty());
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, v.kind(), v.text());
        assertEquals("trainer", v.stage());
        assertTrue(v.text().startsWith("trainer-bound: prefetch buffers full 99% of the time"), v.text());
        assertTrue(v.text().contains("data is not the bottleneck"), v.text());
        // trainer figures unknown: buffers alone decide
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND,
                classify(timeline(1, 2, 64, true, 50, 0.95, 0, 1, 0), 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
    }

    @Test
    void transportBoundWhenBuffersFullButTrainersWait() {
        var v = classify(timeline(2, 2, 64, true, 100, 0.97, 0, 1, 0), 5 * MS, 30 * MS, OptionalDouble.of(0.25), OptionalDouble.of(0.8));
        assertEquals(BottleneckVerdict.Kind.TRANSPORT_BOUND, v.kind(), v.text());
        assertEquals("transport", v.stage());
        assertTrue(v.evidence().contains("trainers still wait"), v.text());
        assertTrue(v.advice().contains("zero-copy"), v.text());
    }

    /** A zero-copy job is not told to use zero-copy: the advice names what is left, the hand-over itself. */
    @Test
    void aTransportBoundZeroCopyJobIsNotAdvisedToUseZeroCopy() {
        var tl = timeline(2, 2, 64, true, 100, 0.97, 0, 1, 0);
        var v = Bottleneck.classify(new Bottleneck.Inputs(tl, 5 * MS, true, 30 * MS, OptionalDouble.of(0.25), OptionalDouble.empty(), true));
        assertEquals(BottleneckVerdict.Kind.TRANSPORT_BOUND, v.kind(), v.text());
        assertFalse(v.advice().contains("--mode zero-copy"), v.text());
        assertTrue(v.advice().contains("already go by reference"), v.text());
    }

    static Bottleneck.Inputs packed(FeedSampler.Timeline tl, OptionalDouble wait, double loss, dev.stoker.plan.pack.PackPlanner.Balance balance) {
        return new Bottleneck.Inputs(tl, 5 * MS, true, 30 * MS, wait, OptionalDouble.empty(), true,
                new Bottleneck.Packing(120, 1 / (1 - loss), loss, balance));
    }

    /** A packed job whose ranks lose 12% of each step to the slowest, and wait 2% for data: the imbalance is what costs. */
    @Test
    void stragglerBoundWhenImbalanceCostsMoreThanTheWaitForData() {
        var tl = timeline(2, 2, 64, true, 100, 0.99, 0, 1, 0);
        var v = Bottleneck.classify(packed(tl, OptionalDouble.of(0.02), 0.12, dev.stoker.plan.pack.PackPlanner.Balance.COUNT));
        assertEquals(BottleneckVerdict.Kind.STRAGGLER_BOUND, v.kind(), v.text());
        assertEquals("balance", v.stage());
        assertTrue(v.text().startsWith("straggler-bound: predicted step cost imbalance 1.136 (max/mean rank cost over the last 120 packed "
                + "steps): ranks lose 12.0% of each step waiting for the slowest, more than the trainers' wait ratio 0.020"), v.text());
        assertTrue(v.advice().contains("--balance cost"), v.text());
        assertEquals(0.12, v.figures().get("imbalance_loss"));
        assertEquals(1.136, v.figures().get("pack_imbalance"));
        // balancing cost already: the advice is the budgets
        var c = Bottleneck.classify(packed(tl, OptionalDouble.of(0.02), 0.12, dev.stoker.plan.pack.PackPlanner.Balance.COST));
        assertEquals(BottleneckVerdict.Kind.STRAGGLER_BOUND, c.kind(), c.text());
        assertFalse(c.advice().contains("--balance"), c.text());
        assertTrue(c.advice().contains("--pack-tokens") && c.advice().contains("--pack-patches"), c.text());
        // trainers' wait unknown: full buffers say data is not what they wait for
        var u = Bottleneck.classify(packed(tl, OptionalDouble.empty(), 0.08, null));
        assertEquals(BottleneckVerdict.Kind.STRAGGLER_BOUND, u.kind(), u.text());
        assertTrue(u.evidence().contains("prefetch buffers are full 99% of the time"), u.text());
        // the same figures after withTrainer (RankLedger's path) keep the packing
        var w = Bottleneck.classify(packed(tl, OptionalDouble.empty(), 0.12, null).withTrainer(0.03, OptionalDouble.empty()));
        assertEquals(BottleneckVerdict.Kind.STRAGGLER_BOUND, w.kind(), w.text());
    }

    /** Not straggler-bound: a small loss, data waits larger than the loss, buffers not full with no wait known, or no packing. */
    @Test
    void notStragglerBoundWhenDataCostsMoreOrTheImbalanceIsSmall() {
        var full = timeline(2, 2, 64, true, 100, 0.99, 0, 1, 0);
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND,
                Bottleneck.classify(packed(full, OptionalDouble.of(0.01), 0.04, null)).kind(), "a loss under 5%");
        var starved = timeline(2, 2, 64, true, 100, 0, 0.8, 2, 0);
        var v = Bottleneck.classify(packed(starved, OptionalDouble.of(0.30), 0.12, null));
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND, v.kind(), "the trainers wait 30% for data, more than the 12% imbalance: " + v.text());
        assertEquals(0.12, v.figures().get("imbalance_loss"), "the figure is there all the same");
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND, Bottleneck.classify(packed(starved, OptionalDouble.empty(), 0.12, null)).kind(),
                "no wait known and buffers empty: data may be what they wait for");
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, Bottleneck.classify(new Bottleneck.Inputs(full, 5 * MS, true, 30 * MS,
                OptionalDouble.of(0.01), OptionalDouble.empty(), true, null)).kind(), "an unpacked job");
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, Bottleneck.classify(new Bottleneck.Inputs(full, 5 * MS, true, 30 * MS,
                OptionalDouble.of(0.01), OptionalDouble.empty(), true, new Bottleneck.Packing(0, 1.5, 0.33, null))).kind(), "no steps yet");
    }

    @Test
    void cpuBoundWhenPoolBusyAndBuffersEmpty() {
        var v = classify(timeline(2, 2, 64, true, 100, 0, 0.8, 2, 0), 5 * MS, 30 * MS, OptionalDouble.of(0.3), OptionalDouble.of(0.1));
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND, v.kind(), v.text());
        assertEquals("encode", v.stage());
        assertTrue(v.text().startsWith("CPU-bound: decode pool busy 100% on 2 threads"), v.text());
        assertEquals(1.0, v.figures().get("cpu_busy_fraction"));
    }

    /** A CPU-bound job whose CPU time is mostly video decoding is named so, with advice about frames; a little video is not. */
    @Test
    void videoDecodingIsNamedWhenItHoldsMostOfTheCpuStage() {
        var tl = timeline(2, 2, 64, true, 100, 0, 0.8, 2, 0);
        var in = new Bottleneck.Inputs(tl, 5 * MS, true, 30 * MS, OptionalDouble.of(0.3), OptionalDouble.empty(), false);
        var v = Bottleneck.classify(in.withVideo(new Bottleneck.Video(0.77, 6.48)));
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND, v.kind(), v.text());
        assertEquals("video_decode", v.stage());
        assertTrue(v.text().contains("video decoding 77% of it (6.48 frames decoded per frame kept)") && v.text().contains("--video-fps"),
                v.text());
        assertEquals(0.77, v.figures().get("video_decode_share"));
        var little = Bottleneck.classify(in.withVideo(new Bottleneck.Video(0.2, 3)));
        assertEquals("encode", little.stage(), little.text());
        assertEquals(0.2, little.figures().get("video_decode_share"));
        var leaning = Bottleneck.classify(new Bottleneck.Inputs(timeline(2, 2, 64, true, 100, 0, 0.8, 1.6, 0), 5 * MS, true, 30 * MS,
                OptionalDouble.of(0.3), OptionalDouble.empty(), false).withVideo(new Bottleneck.Video(0.6, 2)));
        assertEquals("video_decode", leaning.stage(), "busy 80%, video 60% of it: " + leaning.text());
        var unsampled = Bottleneck.classify(new Bottleneck.Inputs(new FeedSampler.Timeline(100, 2, 2, 64, 4, true, List.of()), 0, false, 0,
                OptionalDouble.empty(), OptionalDouble.empty(), false).withVideo(new Bottleneck.Video(0.5, 2)));
        assertEquals(0.5, unsampled.figures().get("video_decode_share"), "the figures before the feed's first sample: " + unsampled);
    }

    @Test
    void ioBoundWhenFetchesPinnedAndPoolIdle() {
        var v = classify(timeline(2, 2, 64, true, 100, 0, 0.9, 0, 0.95), 31 * MS, 30 * MS, OptionalDouble.empty(), OptionalDouble.empty());
        assertEquals(BottleneckVerdict.Kind.IO_BOUND, v.kind(), v.text());
        assertEquals("fetch", v.stage());
        assertTrue(v.text().startsWith("I/O-bound: fetch in-flight pinned at 64"), v.text());
        assertTrue(v.text().contains("first byte p50 31 ms"), v.text());
        assertTrue(v.text().endsWith("raise --fetch-concurrency or add nodes"), v.text());
    }

    @Test
    void ioBoundWhenFetchLatencyDominatesWithoutPinning() {
        // 4 slots at 400 ms = 10 samples/s; 2 threads at 5 ms = 400 samples/s
        var v = classify(timeline(1, 2, 4, true, 100, 0, 0.9, 0, 0.1), 400 * MS, 5 * MS, OptionalDouble.empty(), OptionalDouble.empty());
        assertEquals(BottleneckVerdict.Kind.IO_BOUND, v.kind(), v.text());
    }

    @Test
    void balancedWhenNothingSaturated() {
        var v = classify(timeline(2, 2, 64, true, 100, 0.3, 0.2, 1, 0.1), 5 * MS, 30 * MS, OptionalDouble.empty(), OptionalDouble.empty());
        assertEquals(BottleneckVerdict.Kind.BALANCED, v.kind(), v.text());
        assertEquals("none", v.stage());
    }

    @Test
    void unbufferedModes() {
        // serial/concurrent have no buffers: the pipeline counts as starved
        assertEquals(BottleneckVerdict.Kind.CPU_BOUND,
                classify(timeline(1, 1, 1, false, 40, 0, 0, 1, 0), 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
        assertEquals(BottleneckVerdict.Kind.IO_BOUND,
                classify(timeline(1, 2, 1, false, 40, 0, 0, 0, 0.9), 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND,
                classify(timeline(1, 2, 4, false, 40, 0, 0, 0, 0), 0, 0, OptionalDouble.of(0.01), OptionalDouble.empty()).kind());
        assertEquals(BottleneckVerdict.Kind.BALANCED,
                classify(timeline(1, 2, 4, false, 40, 0, 0, 0, 0), 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
    }

    @Test
    void startUpTicksBeforeTheFirstDeliveryAreIgnored() {
        var steady = timeline(1, 2, 8, true, 50, 1.0, 0, 0, 0);
        var ticks = new ArrayList<FeedSampler.Tick>();
        for (int i = 0; i < 50; i++) // filling: nothing delivered yet, buffers empty, CPU busy
            ticks.add(new FeedSampler.Tick(i, i, i, 0, 8, 2, 0, 0, new long[] {0}, new long[] {0}, new boolean[] {false}));
        ticks.addAll(steady.ticks());
        var tl = new FeedSampler.Timeline(100, 1, 2, 8, 4, true, ticks);
        assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND,
                classify(tl, 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
    }

    @Test
    void noTicksIsBalanced() {
        var tl = new FeedSampler.Timeline(100, 1, 2, 8, 4, true, List.of());
        assertEquals(BottleneckVerdict.Kind.BALANCED, classify(tl, 0, 0, OptionalDouble.empty(), OptionalDouble.empty()).kind());
    }

    @Test
    void samplerKeepsTheLastTicksInOrder() throws Exception {
        var shape = new FeedSampler.Timeline(5, 1, 1, 1, 1, false, List.of());
        var counter = new java.util.concurrent.atomic.AtomicLong();
        try (var s = new FeedSampler(5, 4, System.nanoTime(), shape, t -> new FeedSampler.Tick(t, counter.incrementAndGet(), 0, 0, 0, 0, 0, 0,
                new long[1], new long[1], new boolean[1]))) {
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (counter.get() < 10 && System.nanoTime() < deadline) Thread.sleep(5);
            var ticks = s.timeline().ticks();
            assertEquals(4, ticks.size());
            for (int i = 1; i < ticks.size(); i++) assertEquals(ticks.get(i - 1).fetched() + 1, ticks.get(i).fetched());
            assertTrue(ticks.getFirst().fetched() >= 7);
            var json = s.timeline().toJson();
            assertEquals(FeedSampler.Timeline.COLUMNS, json.get("columns"));
        }
    }
}
