package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.pipeline.feed.FeedErrors;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.OptionalDouble;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The status line's text, and its silence off a terminal. */
@Timeout(60)
class StatusLineTest {
    static final long S = 1_000_000_000L;

    static StatusLine.Sample sample(long t, long samples, long batches, long buffered, OptionalDouble wait, String verdict, long total) {
        return new StatusLine.Sample(t, samples, batches, buffered, wait, verdict, total, 0, 0, java.util.List.of());
    }

    @Test
    void aMixShowsEachSourcesShareOfWhatWasDelivered() {
        var sources = java.util.List.of(new dev.stoker.pipeline.feed.FeedMetrics.Source("a.jsonl", 1, 20, 40, 40, 0, 0.625),
                new dev.stoker.pipeline.feed.FeedMetrics.Source("b.tar", 2, 12, 24, 24, 0, 0.375));
        var now = new StatusLine.Sample(S, 64, 8, 0, OptionalDouble.empty(), null, -1, 0, 0, java.util.List.of(), sources);
        assertTrue(StatusLine.format(null, now).contains(" | mix a.jsonl 63% b.tar 38%"), StatusLine.format(null, now));
        var one = new StatusLine.Sample(S, 64, 8, 0, OptionalDouble.empty(), null, -1, 0, 0, java.util.List.of(), sources.subList(0, 1));
        assertFalse(StatusLine.format(null, one).contains("mix"), "one source: no mix");
    }

    /** With autotune on, the tuner's knobs and last decision follow the verdict; off (null), nothing is added. */
    @Test
    void theAutotunersKnobsAndLastDecisionFollowTheVerdict() {
        var prev = sample(0, 0, 0, 0, OptionalDouble.empty(), null, -1);
        var now = sample(S, 50, 5, 2, OptionalDouble.empty(), "CPU-bound", -1);
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | CPU-bound | autotune 2T/8F/4P, 3 kept 1 rolled back",
                StatusLine.format(prev, now.withAutotune("autotune 2T/8F/4P, 3 kept 1 rolled back")));
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | CPU-bound", StatusLine.format(prev, now.withAutotune((String) null)));
    }

    /** A packed job shows its recent imbalance and padding; an unpacked one shows nothing new. */
    @Test
    void aPackedJobShowsItsImbalanceAndPadding() {
        var prev = sample(0, 0, 0, 0, OptionalDouble.empty(), null, -1);
        var packed = new StatusLine.Sample(S, 50, 5, 2, OptionalDouble.of(0.02), "trainer-bound", -1, 0, 0, java.util.List.of(),
                java.util.List.of(), new StatusLine.Packing(1.0213, 0.0314));
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | imbalance 1.02 pad 3.1% | wait 2% | trainer-bound",
                StatusLine.format(prev, packed));
        var unpacked = new StatusLine.Sample(S, 50, 5, 2, OptionalDouble.of(0.02), "trainer-bound", -1, 0, 0, java.util.List.of(),
                java.util.List.of());
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | wait 2% | trainer-bound", StatusLine.format(prev, unpacked));
    }

    /** The figures come from the feed's pack record, its recent window. */
    @Test
    void theSampleOfAPackedFeedCarriesItsRecentFigures() {
        var stats = new dev.stoker.observe.PackStats();
        stats.record(new dev.stoker.plan.pack.PackedStep(new dev.stoker.core.ScheduleCursor(0, 0), new dev.stoker.core.ScheduleCursor(0, 4), 0,
                new int[][] {{0, 1}, {2, 3}}, new double[] {3, 1}, new int[] {90, 60}, new int[2], new boolean[2], new int[0], new int[0]), 100);
        var packed = StatusLine.Sample.of(snapshot(stats.summary()), null, -1);
        assertEquals(1.5, packed.pack().imbalance(), 1e-12);
        assertEquals(0.25, packed.pack().paddingFraction(), 1e-12);
        assertTrue(StatusLine.format(null, packed).contains(" | imbalance 1.50 pad 25.0%"), StatusLine.format(null, packed));
        assertEquals(null, StatusLine.Sample.of(snapshot(null), null, -1).pack(), "an unpacked feed");
    }

    /** A feed's counters, all 0 but 6 samples in 2 batches, with {@code pack}. */
    static dev.stoker.pipeline.feed.FeedMetrics.Snapshot snapshot(dev.stoker.observe.PackStats.Summary pack) {
        return new dev.stoker.pipeline.feed.FeedMetrics.Snapshot(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 6, 0, java.util.Map.of(), 0, 0,
                java.util.List.of(), 0, java.util.List.of(), java.util.Map.of(), java.util.List.of(), pack);
    }

    @Test
    void showsErrorsAndFilteredSamplesWithTheirMostCommonCausesWhenThereAreAny() {
        var causes = java.util.List.of(new FeedErrors.Cause("error", "fetch", "file not found", 10, "s3"),
                new FeedErrors.Cause("filtered", "tokenize", "over --max-seq-len", 4, "s9"),
                new FeedErrors.Cause("error", "decode", "Premature end of JPEG file", 2, "s1"),
                new FeedErrors.Cause("error", "manifest", "malformed JSON", 1, "train.jsonl:4"));
        var prev = sample(0, 0, 0, 0, OptionalDouble.empty(), null, -1);
        var now = new StatusLine.Sample(S, 50, 5, 2, OptionalDouble.empty(), "I/O-bound", -1, 13, 4, causes);
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | 13 errors (fetch: file not found 10, decode: Premature end "
                + "of JPEG file 2, …) | 4 filtered (tokenize: over --max-seq-len 4) | I/O-bound", StatusLine.format(prev, now));
        var onlyFiltered = new StatusLine.Sample(S, 50, 5, 2, OptionalDouble.empty(), null, -1, 0, 4, causes.subList(1, 2));
        assertEquals("stoker: 50.0 samples/s | 5 batches delivered | 2 buffered | 4 filtered (tokenize: over --max-seq-len 4)",
                StatusLine.format(prev, onlyFiltered));
    }

    @Test
    void formatsRateDeliveredBuffersWaitVerdictAndEta() {
        var prev = sample(0, 1000, 100, 8, OptionalDouble.empty(), null, 1100);
        var now = sample(2 * S, 1640, 110, 7, OptionalDouble.of(0.123), "I/O-bound", 1100);
        // 640 samples in 2 s; 10 batches in 2 s = 5/s; 990 left: 198 s
        assertEquals("stoker: 320 samples/s | 110/1100 batches delivered | 7 buffered | wait 12% | I/O-bound | ETA 3m18s",
                StatusLine.format(prev, now));
    }

    @Test
    void formatsWithoutTotalOrWaitAndOnTheFirstSample() {
        var first = sample(0, 0, 0, 0, OptionalDouble.empty(), "balanced", -1);
        assertEquals("stoker: - samples/s | 0 batches delivered | 0 buffered | balanced", StatusLine.format(null, first));
        var next = sample(S, 25, 3, 4, OptionalDouble.empty(), "trainer-bound", -1);
        assertEquals("stoker: 25.0 samples/s | 3 batches delivered | 4 buffered | trainer-bound", StatusLine.format(first, next));
    }

    @Test
    void etaUnknownWhileNothingMovesAndZeroWhenDone() {
        var a = sample(0, 10, 1, 0, OptionalDouble.empty(), null, 10);
        var b = sample(S, 10, 1, 0, OptionalDouble.empty(), null, 10);
        assertTrue(StatusLine.format(a, b).endsWith("| ETA -"), StatusLine.format(a, b));
        var done = sample(2 * S, 100, 10, 0, OptionalDouble.empty(), null, 10);
        assertTrue(StatusLine.format(b, done).endsWith("| ETA 0s"), StatusLine.format(b, done));
        assertEquals("1h05m", StatusLine.duration(3900));
    }

    @Test
    void enabledOnlyOnATerminalWithoutCi() {
        assertTrue(StatusLine.enabled(true, null));
        assertFalse(StatusLine.enabled(false, null));
        assertFalse(StatusLine.enabled(true, "true"));
        assertFalse(StatusLine.enabled(true, ""));
    }

    @Test
    void quietWhenNotATerminal() throws Exception {
        // surefire's forked JVM has no terminal: the real check must say no, and nothing is ever written
        assertFalse(StatusLine.enabled());
        var text = new StringWriter();
        var probes = new AtomicLong();
        try (var line = StatusLine.start(new PrintWriter(text), () -> {
            probes.incrementAndGet();
            return sample(System.nanoTime(), 1, 1, 0, OptionalDouble.empty(), null, -1);
        })) {
            assertFalse(line.active());
            Thread.sleep(1300);
        }
        assertEquals("", text.toString());
        assertEquals(0, probes.get());
    }

    @Test
    void activeLineRewritesInPlaceAndErasesOnClose() throws Exception {
        var text = new StringWriter();
        var n = new AtomicLong();
        try (var line = StatusLine.start(new PrintWriter(text), () -> {
            long i = n.incrementAndGet();
            return sample(i * S, i * 10, i, 2, OptionalDouble.empty(), "CPU-bound", -1);
        }, true, 20)) {
            assertTrue(line.active());
            long deadline = System.nanoTime() + 5 * S;
            while (n.get() < 4 && System.nanoTime() < deadline) Thread.sleep(10);
        }
        String out = text.toString();
        assertTrue(out.startsWith(StatusLine.REWRITE + "stoker: 10.0 samples/s | 2 batches delivered | 2 buffered | CPU-bound"), out);
        assertFalse(out.contains("\n"), "a status line never adds lines");
        assertTrue(out.endsWith(StatusLine.REWRITE), "the line is erased on close");
    }
}
