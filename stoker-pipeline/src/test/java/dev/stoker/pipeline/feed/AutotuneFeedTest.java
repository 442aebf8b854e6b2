package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.tune.Autotuner;
import dev.stoker.tune.Knob;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The autotuner moving the knobs of a running feed: the CPU pool's threads, the fetch gates and the prefetch buffers
 * change between batches, and every batch is still delivered exactly once, the very batches of a pinned feed. The tuner
 * is ticked by hand with a made-up clock (one second per step taken), so its decisions do not depend on the machine's load.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class AutotuneFeedTest {
    private static final int STEPS = 12, RANKS = 2, BATCH = 2;
    /** Decides at every tick: windows of one tick, no warm-up, no settling; equal rates keep a lowering, roll back a raise. */
    private static final Autotuner.Policy EVERY_TICK = new Autotuner.Policy(0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1);

    @TempDir Path tmp;
    @TempDir Path shm;

    @Test
    void knobsMoveInARunningPrefetchFeedAndEveryBatchArrivesOnce() throws Exception {
        Path manifest = TestDatasets.write(tmp, RANKS * BATCH * STEPS, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            var pinned = wrongKnobs(FeedMode.PREFETCH).withAutotune(false);
            var expected = FeederTest.run(pinned, source, STEPS);
            try (var feeder = Feeder.start(pinned.withAutotune(true), source, SharedTokenizer.get())) {
                var tuning = feeder.autotune().orElseThrow();
                var actual = new ArrayList<Batch>();
                var seen = drive(tuning, () -> {
                    for (int r = 0; r < RANKS; r++) actual.add(feeder.next(r).get(30, TimeUnit.SECONDS));
                });
                FeederTest.assertSameBatches(expected, actual, "tuned vs pinned");
                assertExactlyOnce(actual);
                assertKnobsMoved(tuning, seen);
            }
        }
    }

    @Test
    void knobsMoveInARunningZeroCopyFeedAndEveryBatchArrivesOnce() throws Exception {
        Path manifest = TestDatasets.write(tmp, RANKS * BATCH * STEPS, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var pinned = wrongKnobs(FeedMode.PREFETCH).withAutotune(false);
            var expected = FeederTest.run(pinned, source, STEPS);
            try (var feeder = Feeder.start(wrongKnobs(FeedMode.ZERO_COPY).withAutotune(true), source, SharedTokenizer.get(), store)) {
                var tuning = feeder.autotune().orElseThrow();
                var actual = new ArrayList<Batch>();
                var seen = drive(tuning, () -> {
                    for (int r = 0; r < RANKS; r++) {
                        StoredBatch b = feeder.nextStored(r).get(30, TimeUnit.SECONDS);
                        actual.add(ZeroCopyFeederTest.toHeap(b));
                        b.release();
                    }
                });
                FeederTest.assertSameBatches(expected, actual, "tuned zero-copy vs pinned prefetch");
                assertExactlyOnce(actual);
                assertKnobsMoved(tuning, seen);
            }
            assertEquals(0, store.metrics().inUseBytes(), "every object released");
        }
    }

    /** SERIAL fetches one sample at a time and has no buffers: only its threads are the tuner's to move. */
    @Test
    void aSerialFeedTunesOnlyItsThreads() throws Exception {
        Path manifest = TestDatasets.write(tmp, RANKS * BATCH * STEPS, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var feeder = Feeder.start(wrongKnobs(FeedMode.SERIAL).withAutotune(true), source, SharedTokenizer.get())) {
            var tuning = feeder.autotune().orElseThrow();
            var actual = new ArrayList<Batch>();
            var seen = drive(tuning, () -> {
                for (int r = 0; r < RANKS; r++) actual.add(feeder.next(r).get(30, TimeUnit.SECONDS));
            });
            assertExactlyOnce(actual);
            assertFalse(tuning.decisions().isEmpty());
            assertTrue(tuning.decisions().stream().allMatch(d -> d.knob() == Knob.CPU_THREADS), tuning.decisions().toString());
            assertEquals(Set.of(1), seen.get(Knob.FETCH_CONCURRENCY));
            assertEquals(Set.of(1), seen.get(Knob.PREFETCH_BATCHES));
        }
    }

    @Test
    void aPinnedFeedHasNoTuner() throws Exception {
        Path manifest = TestDatasets.write(tmp, 8, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var feeder = Feeder.start(wrongKnobs(FeedMode.PREFETCH).withAutotune(false), source, SharedTokenizer.get())) {
            assertTrue(feeder.autotune().isEmpty());
            feeder.next(0).get(30, TimeUnit.SECONDS);
        }
    }

    /** The wrong knobs: one thread, one fetch, one batch of prefetch. */
    private static FeedConfig wrongKnobs(FeedMode mode) {
        return FeederTest.config(mode, RANKS, BATCH, 1).withFetchConcurrency(1).withPrefetch(1, FeedConfig.PREFETCH_BYTES_DEFAULT);
    }

    private interface Step {
        void take() throws Exception;
    }

    /** Takes {@link #STEPS} steps, ticking the tuner one made-up second after each; returns every knob value seen between steps. */
    private static Map<Knob, Set<Integer>> drive(FeedTuning tuning, Step step) throws Exception {
        tuning.tickByHand(EVERY_TICK);
        var seen = new EnumMap<Knob, Set<Integer>>(Knob.class);
        for (var k : Knob.values()) seen.put(k, new HashSet<>(List.of(tuning.knob(k))));
        long nanos = 0;
        tuning.tick(nanos);
        for (int s = 0; s < STEPS; s++) {
            step.take();
            nanos += TimeUnit.SECONDS.toNanos(1);
            tuning.tick(nanos);
            for (var k : Knob.values()) seen.get(k).add(tuning.knob(k));
        }
        return seen;
    }

    private static void assertExactlyOnce(List<Batch> batches) {
        var indices = new HashSet<Integer>();
        int n = 0;
        for (var b : batches)
            for (int i : b.datasetIndices()) {
                assertTrue(indices.add(i), "sample " + i + " delivered twice");
                n++;
            }
        assertEquals(RANKS * BATCH * STEPS, n, "every sample of the epoch delivered");
    }

    /** Knobs were set to other values while the feed ran, each decision recorded with its evidence and applied for real. */
    private static void assertKnobsMoved(FeedTuning tuning, Map<Knob, Set<Integer>> seen) {
        var decisions = tuning.decisions();
        assertTrue(decisions.size() >= 3, "a decision per window: " + decisions);
        assertTrue(seen.values().stream().anyMatch(v -> v.size() > 1), "some knob took another value mid-run: " + seen);
        for (var d : decisions) {
            assertTrue(seen.get(d.knob()).contains(d.to()), d.text());
            assertFalse(d.why().isBlank());
        }
        // equal rates window after window: no raise gains, so a raise is kept only for moving the bottleneck (the stage it
        // widened no longer saturated, the other one now: the real pool's and fetches' figures), the rest rolled back
        assertTrue(decisions.stream().filter(d -> d.to() > d.from() && d.kept()).allMatch(d -> d.why().contains("no longer")),
                decisions.toString());
        // one knob at a time: each decision starts from the value the decisions before it left, and at the end at most
        // one knob (the trial still open) is off what the decisions left
        var values = new EnumMap<Knob, Integer>(Knob.class);
        for (var k : Knob.values()) values.put(k, tuning.startValue(k));
        for (var d : decisions) {
            assertEquals(values.get(d.knob()), d.from(), "decided from the value left before it: " + d.text());
            if (d.kept()) values.put(d.knob(), d.to());
        }
        int open = 0;
        for (var k : Knob.values()) if (tuning.knob(k) != values.get(k)) open++;
        assertTrue(open <= 1, "one knob at a time (the trial still open at the end): " + decisions);
        assertEquals(tuning.decisions().size(), tuning.kept() + tuning.rolledBack());
    }
}
