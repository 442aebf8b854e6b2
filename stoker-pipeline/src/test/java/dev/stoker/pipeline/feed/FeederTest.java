package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.observe.StallWatchdog;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.text.QwenTokenizer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

@Timeout(value = 120, unit = TimeUnit.SECONDS)
@Tag("slow")
@ExtendWith(SharedTokenizer.class)
class FeederTest {
    static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176);
    static final long SEED = 1234;
    /** The modes that yield heap batches (ZERO_COPY has its own tests). */
    static final FeedMode[] HEAP_MODES = {FeedMode.SERIAL, FeedMode.CONCURRENT, FeedMode.PREFETCH};
    /** ModelInputRowsTest's tokenizer (a byte oracle, kept as it is): the run's shared one, set by {@link #loadTokenizer()}. */
    static QwenTokenizer tokenizer;

    @TempDir Path tmp;

    /** For ModelInputRowsTest: {@link #tokenizer} is the run's shared tokenizer. */
    static void loadTokenizer() { tokenizer = SharedTokenizer.get(); }

    /** For ModelInputRowsTest: nothing to do, the run closes the shared tokenizer at its end. */
    static void closeTokenizer() {}

    static FeedConfig config(FeedMode mode, int ranks, int batch, int threads) {
        return FeedConfig.of(mode, OPTIONS, ranks, batch).withSeed(SEED).withCpuThreads(threads).withFetchConcurrency(4).withWarmUp(0);
    }

    /** Batches [step][rank] flattened, asking the ranks in turn. */
    static List<Batch> run(FeedConfig config, FeedSource source, int steps) throws Exception {
        try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
            var out = new ArrayList<Batch>();
            for (int s = 0; s < steps; s++)
                for (int r = 0; r < config.ranks(); r++) out.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
            var m = feeder.metrics();
            for (var rank : m.ranks()) {
                assertTrue(rank.firstBatchReadyNanos() >= 0, "time to first batch recorded: " + rank);
                assertTrue(rank.firstRequestNanos() >= 0, "first request time recorded: " + rank);
                assertEquals(steps, rank.deliveredBatches());
            }
            return out;
        }
    }

    static void assertSameBatches(List<Batch> expected, List<Batch> actual, String what) {
        assertEquals(expected.size(), actual.size(), what);
        for (int i = 0; i < expected.size(); i++) {
            Batch e = expected.get(i), a = actual.get(i);
            String at = what + ", batch " + i + " (step " + e.globalStep() + " rank " + e.rank() + ")";
            assertEquals(e.epoch(), a.epoch(), at);
            assertEquals(e.step(), a.step(), at);
            assertEquals(e.globalStep(), a.globalStep(), at);
            assertEquals(e.rank(), a.rank(), at);
            assertEquals(e.scheduled(), a.scheduled(), at);
            assertEquals(e.sampleIds(), a.sampleIds(), at);
            assertArrayEquals(e.datasetIndices(), a.datasetIndices(), at);
            assertEquals(withoutCause(e), withoutCause(a), at);
            assertEquals(e.shape(), a.shape(), at);
            assertArrayEquals(e.inputIds(), a.inputIds(), at);
            assertArrayEquals(e.labels(), a.labels(), at);
            assertArrayEquals(e.attentionMask(), a.attentionMask(), at);
            assertArrayEquals(e.positionIds(), a.positionIds(), at);
            assertArrayEquals(e.imageGridThw(), a.imageGridThw(), at);
            assertEquals(e.pixelValues().length, a.pixelValues().length, at);
            for (int k = 0; k < e.pixelValues().length; k++)
                if (Float.floatToRawIntBits(e.pixelValues()[k]) != Float.floatToRawIntBits(a.pixelValues()[k]))
                    throw new AssertionError(at + ": pixel_values differ at " + k);
            assertEquals(e.videos() == null, a.videos() == null, at + ": video tensors");
            if (e.videos() != null) {
                assertArrayEquals(e.videos().videoGridThw(), a.videos().videoGridThw(), at + ": video_grid_thw");
                assertArrayEquals(e.videos().secondPerGridTs(), a.videos().secondPerGridTs(), at + ": second_per_grid_ts");
                float[] ev = e.videos().pixelValuesVideos(), av = a.videos().pixelValuesVideos();
                assertEquals(ev.length, av.length, at + ": pixel_values_videos");
                for (int k = 0; k < ev.length; k++)
                    if (Float.floatToRawIntBits(ev[k]) != Float.floatToRawIntBits(av[k]))
                        throw new AssertionError(at + ": pixel_values_videos differ at " + k);
            }
        }
    }

    /** Which samples were skipped and at what stage; the wording of the cause depends on the source. */
    private static List<String> withoutCause(Batch b) {
        return b.skippedSamples().stream().map(s -> s.sampleId() + "#" + s.datasetIndex() + "@" + s.stage()).toList();
    }

    @Test
    void sameBatchesAcrossModesThreadCountsAndRuns() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        int ranks = 2, batch = 3, steps = 4;
        try (var source = new LocalFeedSource(manifest, 3)) {
            var reference = run(config(FeedMode.SERIAL, ranks, batch, 1), source, steps);
            var schedule = new SampleSchedule(SEED, 13, ranks, batch);
            assertEquals(2, schedule.stepsPerEpoch(), "the run crosses an epoch boundary");
            for (var b : reference) {
                assertArrayEquals(schedule.batchFor(b.epoch(), b.step(), b.rank()), b.datasetIndices());
                assertEquals(batch, b.samples());
                assertTrue(b.pixelValues().length > 0);
            }
            assertTrue(reference.stream().mapToInt(Batch::length).distinct().count() > 1, "padding lengths vary");
            assertSameBatches(reference, run(config(FeedMode.SERIAL, ranks, batch, 2), source, steps), "serial, 2 threads");
            assertSameBatches(reference, run(config(FeedMode.CONCURRENT, ranks, batch, 1), source, steps), "concurrent, 1 thread");
            assertSameBatches(reference, run(config(FeedMode.CONCURRENT, ranks, batch, 4), source, steps), "concurrent, 4 threads");
            for (int threads : new int[] {1, 2, 4})
                assertSameBatches(reference, run(config(FeedMode.PREFETCH, ranks, batch, threads), source, steps), "prefetch, " + threads + " threads");
            assertSameBatches(reference, run(config(FeedMode.PREFETCH, ranks, batch, 2), source, steps), "prefetch, 2 threads, second run");
        }
    }

    /**
     * The same records as a JSON array (the qwen-vl-finetune and LLaVA layout; pretty-printed over many lines) give the
     * same batches as JSON Lines, read by the index: each record where it lies, the file never read whole.
     */
    @Test
    void aJsonArrayManifestGivesTheBatchesOfTheSameJsonLines() throws Exception {
        Path jsonl = TestDatasets.write(tmp, 11, Set.of(4));
        var records = Files.readAllLines(jsonl).stream().filter(l -> !l.isBlank()).toList();
        Path array = Files.writeString(tmp.resolve("train.json"), "[\n  " + String.join(",\n  ", records).replace("\"conversations\": ",
                "\n    \"conversations\":\n      ") + "\n]\n");
        int ranks = 2, batch = 2, steps = 3;
        List<Batch> reference;
        try (var source = new LocalFeedSource(jsonl, 0)) {
            reference = run(config(FeedMode.PREFETCH, ranks, batch, 2), source, steps);
        }
        try (var objects = dev.stoker.source.ObjectSources.open(array.toString(), dev.stoker.source.SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            assertEquals(11, source.records().size());
            assertEquals("train.json[3]", source.records().id(3));
            assertSameBatches(reference, run(config(FeedMode.PREFETCH, ranks, batch, 2), source, steps), "JSON array vs JSON Lines");
        }
    }

    @Test
    void resumingFromAGlobalStepContinuesTheSameBatches() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            var full = run(config(FeedMode.PREFETCH, 2, 3, 2), source, 4);
            var schedule = new SampleSchedule(SEED, 13, 2, 3);
            var resumed = run(config(FeedMode.PREFETCH, 2, 3, 2).withStart(schedule.cursorAt(3)), source, 1);
            assertSameBatches(full.subList(6, 8), resumed, "resumed at global step 3");
        }
    }

    @Test
    void prefetchStopsWorkingWhenNobodyAsks() throws Exception {
        Path manifest = TestDatasets.write(tmp, 80, Set.of());
        int batch = 2, threads = 2, fetch = 4;
        var cfg = config(FeedMode.PREFETCH, 1, batch, threads).withFetchConcurrency(fetch).withPrefetch(2, Long.MAX_VALUE);
        try (var source = new LocalFeedSource(manifest, 0); var feeder = Feeder.start(cfg, source, SharedTokenizer.get())) {
            await(() -> feeder.metrics().bufferedBatches() == 2 && feeder.metrics().ranks().getFirst().producerWaits() > 0, "buffer full");
            awaitUnchanged(() -> feeder.metrics().encodeStarted() * 1_000_000 + feeder.metrics().fetchStarted(), 500, "work settles");
            var settled = feeder.metrics();
            Thread.sleep(500);
            var later = feeder.metrics();
            assertEquals(settled.encodeStarted(), later.encodeStarted(), "encoding went on with a full buffer");
            assertEquals(settled.fetchStarted(), later.fetchStarted(), "fetching went on with a full buffer");
            assertEquals(2, later.bufferedBatches());
            // buffered 2 + parked 1 + assembled 1 + one full group, then T encodes and F fetches in flight
            long maxEncoded = 5L * batch + threads;
            assertTrue(later.encodeStarted() <= maxEncoded, "encoded " + later.encodeStarted() + " > " + maxEncoded);
            assertTrue(later.fetchStarted() <= maxEncoded + fetch, "fetched " + later.fetchStarted());
            feeder.rank(0).next().get(30, TimeUnit.SECONDS);
            await(() -> feeder.metrics().encodeStarted() > later.encodeStarted(), "work resumes after a take");
        }
    }

    @Test
    void stallWatchdogWarnsOnceForARankThatStopsReadingAndNothingElse() throws Exception {
        Path manifest = TestDatasets.write(tmp, 80, Set.of());
        var cfg = config(FeedMode.PREFETCH, 1, 2, 2).withFetchConcurrency(4).withPrefetch(2, Long.MAX_VALUE);
        try (var source = new LocalFeedSource(manifest, 0); var feeder = Feeder.start(cfg, source, SharedTokenizer.get())) {
            assertEquals(java.time.Duration.ofSeconds(StallWatchdog.STALL_SECONDS_DEFAULT), feeder.stallTimeout());
            feeder.stallTimeout(java.time.Duration.ofMillis(1500));
            feeder.rank(0).next().get(30, TimeUnit.SECONDS); // the trainer read once, then stops
            await(() -> feeder.stallWatchdog().warningsLogged() > 0, "a stall warning");
            Thread.sleep(2500); // the same episode: no second warning, and idle stages stay quiet
            assertEquals(List.of("stall: rank 0 has taken no batch for 1.5 s, its buffer is full (the trainer stopped reading)"),
                    feeder.stallWatchdog().recentWarnings());
        }
        assertTrue(awaitNoWatchdogThread(), "watchdog thread still running after close");
    }

    private static boolean awaitNoWatchdogThread() throws InterruptedException {
        for (int i = 0; i < 200; i++) {
            if (Thread.getAllStackTraces().keySet().stream().noneMatch(t -> t.getName().equals("stoker-stall-watchdog") && t.isAlive()))
                return true;
            Thread.sleep(10);
        }
        return false;
    }

    @Test
    void byteLimitBelowOneBatchStillAdmitsOneAtATime() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        var cfg = config(FeedMode.PREFETCH, 2, 3, 2).withPrefetch(4, 1);
        try (var source = new LocalFeedSource(manifest, 0)) {
            var reference = run(config(FeedMode.CONCURRENT, 2, 3, 2), source, 4);
            try (var feeder = Feeder.start(cfg, source, SharedTokenizer.get())) {
                await(() -> feeder.metrics().ranks().stream().allMatch(r -> r.producerWaits() > 0), "both buffers full");
                for (var r : feeder.metrics().ranks()) {
                    assertEquals(1, r.bufferedBatches(), "rank " + r.rank());
                    assertTrue(r.bufferedBytes() > 1);
                }
                var got = new ArrayList<Batch>();
                for (int s = 0; s < 4; s++) for (int r = 0; r < 2; r++) got.add(feeder.rank(r).next().get(30, TimeUnit.SECONDS));
                assertSameBatches(reference, got, "byte-limited prefetch");
                long largest = got.stream().mapToLong(Batch::sizeBytes).max().orElseThrow();
                for (var r : feeder.metrics().ranks()) assertTrue(r.peakBufferedBytes() <= largest, "one batch at a time: " + r);
            }
        }
    }

    @Test
    void aSampleWithAMissingImageIsSkippedAndRecorded() throws Exception {
        var schedule = new SampleSchedule(SEED, 13, 2, 3);
        int missing = schedule.batchFor(0, 0, 1)[1];
        Path manifest = TestDatasets.write(tmp, 13, Set.of(missing));
        try (var source = new LocalFeedSource(manifest, 2)) {
            List<Batch> first = null;
            for (var mode : HEAP_MODES) {
                List<Batch> got;
                FeedErrors errors;
                try (var feeder = Feeder.start(config(mode, 2, 3, 2), source, SharedTokenizer.get())) {
                    got = new ArrayList<>();
                    for (int s = 0; s < 2; s++) for (int r = 0; r < 2; r++) got.add(feeder.rank(r).next().get(30, TimeUnit.SECONDS));
                    errors = feeder.errors();
                    assertEquals(1, feeder.metrics().skippedSamples(), mode.name());
                }
                for (var b : got) {
                    assertEquals(b.scheduled(), b.samples() + b.skipped());
                    boolean hit = b.epoch() == 0 && b.step() == 0 && b.rank() == 1;
                    assertEquals(hit ? 2 : 3, b.samples(), mode + " " + b.globalStep() + "/" + b.rank());
                    if (hit) {
                        int[] scheduled = schedule.batchFor(0, 0, 1);
                        assertArrayEquals(new int[] {scheduled[0], scheduled[2]}, b.datasetIndices());
                    }
                }
                assertEquals(1, errors.total(), mode.name() + ": " + errors.records());
                var e = errors.records().getFirst();
                assertEquals("s" + missing, e.sampleId());
                assertEquals(missing, e.datasetIndex());
                assertEquals(SampleException.Stage.FETCH, e.stage());
                assertTrue(e.cause().contains("not found"), e.cause());
                assertEquals(1, e.rank());
                if (first == null) first = got;
                else assertSameBatches(first, got, mode.name());
            }
        }
    }

    @Test
    void aBatchWhoseSamplesAllFailIsDeliveredEmpty() throws Exception {
        Path manifest = TestDatasets.write(tmp, 1, Set.of(0));
        Files.writeString(manifest, "{\"id\": \"broken\", \"conversations\": [\n", java.nio.file.StandardOpenOption.APPEND);
        try (var source = new LocalFeedSource(manifest, 0)) {
            for (var mode : HEAP_MODES) {
                // every sample is bad by design: no error-rate limit (its early judgement would stop the feed), the test is the empty batch
                var cfg = config(mode, 1, 2, 1).withErrorPolicy(ErrorPolicy.SKIP, 1.0);
                try (var feeder = Feeder.start(cfg, source, SharedTokenizer.get())) {
                    for (int s = 0; s < 2; s++) {
                        var b = feeder.rank(0).next().get(30, TimeUnit.SECONDS);
                        assertEquals(0, b.samples(), mode.name());
                        assertEquals(2, b.skipped());
                        assertEquals(0, b.inputIds().length);
                        assertEquals(s, b.epoch());
                    }
                    assertEquals(4, feeder.errors().total());
                    var stages = feeder.errors().byStage();
                    assertEquals(2L, stages.get(SampleException.Stage.FETCH), stages.toString());
                    assertEquals(2L, stages.get(SampleException.Stage.MANIFEST), stages.toString());
                    assertTrue(feeder.errors().records().stream().anyMatch(e -> e.sampleId().equals("train.jsonl:2")),
                            "a line that does not parse is named by manifest line: " + feeder.errors().records());
                }
            }
        }
    }

    @Test
    void nextAfterCloseFails() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        try (var source = new LocalFeedSource(manifest, 0)) {
            for (var mode : HEAP_MODES) {
                var feeder = Feeder.start(config(mode, 2, 3, 1), source, SharedTokenizer.get());
                feeder.rank(0).next().get(30, TimeUnit.SECONDS);
                feeder.rank(0).close();
                assertThrows(CancellationException.class, () -> feeder.rank(0).next().get(30, TimeUnit.SECONDS), mode.name());
                feeder.rank(1).next().get(30, TimeUnit.SECONDS);
                feeder.close();
            }
        }
    }

    /** Waits until {@code value} has not changed for {@code quietMillis}; fails after 30 s. */
    static void awaitUnchanged(LongSupplier value, long quietMillis, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        long last = value.getAsLong(), since = System.nanoTime();
        while (System.nanoTime() - since < TimeUnit.MILLISECONDS.toNanos(quietMillis)) {
            if (System.nanoTime() > deadline) throw new AssertionError("still changing after 30 s: " + what);
            Thread.sleep(20);
            long now = value.getAsLong();
            if (now != last) {
                last = now;
                since = System.nanoTime();
            }
        }
    }

    static void await(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("timed out waiting for: " + what);
            Thread.sleep(10);
        }
    }
}
