package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchAssembler;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** ZERO_COPY writes the very batches PREFETCH assembles on the heap, in place, into the shared-memory store. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class ZeroCopyFeederTest {
    @TempDir Path tmp;
    @TempDir Path shm;

    /** The heap form of a stored batch, read back from its shared-memory object. */
    static Batch toHeap(StoredBatch s) {
        var b = BatchLayout.read(s.object().segment());
        assertEquals(s.sizeBytes(), b.totalBytes());
        assertEquals(s.samples(), b.meta().batchSize());
        assertEquals(s.scheduled(), b.meta().scheduled());
        assertEquals(s.globalStep(), b.meta().globalStep());
        var pixels = b.tensor("pixel_values");
        long rows = pixels.shape()[0];
        var layout = new dev.stoker.encode.batch.BatchShape(s.samples(), (int) b.tensor("input_ids").shape()[1], rows,
                rows == 0 ? 0 : (int) pixels.shape()[1], (int) b.tensor("image_grid_thw").shape()[0], PixelFormat.FLOAT32, 0, contractOf(b));
        var videos = videosOf(b);
        if (videos != null) layout = layout.withVideos(new dev.stoker.encode.batch.BatchShape.Videos(videos.rows(), videos.videos(),
                videos.secondPerGridTs().length > 0));
        return new Batch(s.epoch(), s.step(), s.globalStep(), s.rank(), s.scheduled(), s.sampleIds(), s.datasetIndices(),
                s.skippedSamples(), layout, b.tensor("input_ids").toLongs(), b.tensor("labels").toLongs(),
                b.tensor("attention_mask").toLongs(), b.tensor("position_ids").toLongs(), pixels.toFloats(),
                b.tensor("image_grid_thw").toLongs(), null, null, null, videos);
    }

    /** A batch's video tensors read back (frame indices are not carried: empty), or null when it has none. */
    static dev.stoker.encode.video.VideoTensors videosOf(BatchLayout.Batch b) {
        if (b.tensors().stream().noneMatch(t -> t.name().equals("pixel_values_videos"))) return null;
        var pixels = b.tensor("pixel_values_videos");
        float[] seconds = b.tensors().stream().anyMatch(t -> t.name().equals("second_per_grid_ts"))
                ? b.tensor("second_per_grid_ts").toFloats() : new float[0];
        return new dev.stoker.encode.video.VideoTensors(pixels.toFloats(), (int) pixels.shape()[1], b.tensor("video_grid_thw").toLongs(),
                seconds, new long[0]);
    }

    /**
     * The input contract a batch read back was written under: the one that carries {@code mm_token_type_ids} when it has
     * them, which must then be what {@link dev.stoker.encode.batch.BatchAssembler#mmTokenTypeIds} makes of its input_ids.
     */
    static InputContract contractOf(BatchLayout.Batch b) {
        if (b.tensors().stream().noneMatch(t -> t.name().equals("mm_token_type_ids"))) return InputContract.QWEN_VL_FINETUNE;
        assertArrayEquals(BatchAssembler.mmTokenTypeIds(b.tensor("input_ids").toLongs()), b.tensor("mm_token_type_ids").toLongs(),
                "mm_token_type_ids written in place");
        return InputContract.TRANSFORMERS_5_3;
    }

    static List<Batch> runZeroCopy(FeedConfig config, FeedSource source, ShmObjectStore store, int steps) throws Exception {
        try (var feeder = Feeder.start(config.withMode(FeedMode.ZERO_COPY), source, SharedTokenizer.get(), store)) {
            var out = new ArrayList<Batch>();
            for (int s = 0; s < steps; s++)
                for (int r = 0; r < config.ranks(); r++) {
                    StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                    out.add(toHeap(b));
                    b.release();
                }
            for (var rank : feeder.metrics().ranks()) assertEquals(steps, rank.deliveredBatches());
            return out;
        }
    }

    @Test
    void zeroCopyYieldsThePrefetchBatchesWithNothingCopied() throws Exception {
        Path manifest = TestDatasets.write(tmp, 29, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var cfg = FeederTest.config(FeedMode.PREFETCH, 2, 3, 2);
            var expected = FeederTest.run(cfg, source, 4);
            FeedMetrics.Snapshot metrics;
            try (var feeder = Feeder.start(cfg.withMode(FeedMode.ZERO_COPY), source, SharedTokenizer.get(), store)) {
                var actual = new ArrayList<Batch>();
                for (int s = 0; s < 4; s++)
                    for (int r = 0; r < 2; r++) {
                        StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                        assertEquals(0, b.bytesCopied());
                        assertTrue(b.object().file().startsWith(store.arenaDir()), "object lives in the store's arena");
                        actual.add(toHeap(b));
                        b.release();
                    }
                FeederTest.assertSameBatches(expected, actual, "zero-copy vs prefetch");
                metrics = feeder.metrics();
            }
            assertEquals(0, metrics.copiedBytes(), "no byte copied after the transform");
            assertTrue(metrics.assembledBytes() > 0);
            assertEquals(0, store.metrics().inUseBytes(), "every object released, delivered or dropped with the feed");
        }
    }

    @Test
    void samplesFailingBeforeOrDuringPixelsAreSkippedAndTheRestCompacted() throws Exception {
        Path manifest = TestDatasets.write(tmp, 24, Set.of(2, 9), Set.of(4, 5, 12));
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var cfg = FeederTest.config(FeedMode.PREFETCH, 2, 3, 2);
            var expected = FeederTest.run(cfg, source, 4);
            var actual = runZeroCopy(cfg, source, store, 4);
            FeederTest.assertSameBatches(expected, actual, "zero-copy vs prefetch with bad samples");
            long decodeSkips = actual.stream().flatMap(b -> b.skippedSamples().stream())
                    .filter(s -> s.stage() == SampleException.Stage.DECODE).count();
            assertTrue(decodeSkips > 0, "a truncated image fails while its pixels are written");
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    @Test
    void aBudgetBelowOneBatchFailsTheRankClearly() throws Exception {
        Path manifest = TestDatasets.write(tmp, 12, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 1L << 20, "stoker_test"));
             var feeder = Feeder.start(FeederTest.config(FeedMode.ZERO_COPY, 1, 4, 1), source, SharedTokenizer.get(), store)) {
            var e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> feeder.storedRank(0).next().get(60, TimeUnit.SECONDS));
            assertTrue(String.valueOf(e.getCause().getMessage()).contains("exceeds the store budget"), String.valueOf(e.getCause()));
        }
    }

    @Test
    void prefetchedBatchesAreBoundedByTheBudgetAndReturnedOnClose() throws Exception {
        Path manifest = TestDatasets.write(tmp, 40, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 24L << 20, "stoker_test"))) {
            try (var feeder = Feeder.start(FeederTest.config(FeedMode.ZERO_COPY, 2, 2, 2).withPrefetch(64, 1L << 40),
                    source, SharedTokenizer.get(), store)) {
                StoredBatch held = feeder.storedRank(0).next().get(60, TimeUnit.SECONDS);
                FeederTest.awaitUnchanged(() -> store.metrics().allocations(), 300, "producers stop at the budget");
                assertTrue(store.metrics().mappedBytes() <= 24L << 20, "budget never exceeded: " + store.metrics());
                assertTrue(store.metrics().allocationWaits() > 0, "producers waited for budget: " + store.metrics());
                var lease = held.object().lease();
                held.release();
                lease.close();
            }
            assertEquals(0, store.metrics().inUseBytes(), "buffered batches released on close: " + store.metrics());
        }
    }

    @Test
    void aFullSharedMemoryFileSystemFailsTheRankClearlyAndDeliversNoPartialBatch() throws Exception {
        Path manifest = TestDatasets.write(tmp, 16, Set.of());
        Path mount = java.nio.file.Files.createDirectory(tmp.resolve("small-tmpfs"));
        org.junit.jupiter.api.Assumptions.assumeTrue(run("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mount.toString()) == 0,
                "needs root and permission to mount a 2 MiB tmpfs");
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(mount, 64L << 20, "stoker_test"));
             var feeder = Feeder.start(FeederTest.config(FeedMode.ZERO_COPY, 1, 6, 1), source, SharedTokenizer.get(), store)) {
            var e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> feeder.storedRank(0).next().get(60, TimeUnit.SECONDS));
            String message = String.valueOf(e.getCause().getMessage());
            assertTrue(message.contains("No space left") && message.contains(mount.toString()), message);
            assertEquals(0, feeder.metrics().deliveredBatches(), "nothing delivered");
        } finally {
            run("umount", mount.toString());
        }
    }

    private static int run(String... command) throws Exception {
        Process p;
        try {
            p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        } catch (java.io.IOException e) {
            return -1;
        }
        if (!p.waitFor(10, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return -1;
        }
        return p.exitValue();
    }
}
