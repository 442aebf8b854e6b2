package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The compact wire format ({@link PixelFormat#UINT8}) in every feed mode: a batch carries each image's
 * resized u8 pixels instead of pixel_values, and those decode ({@link CompactPixels}) to exactly the
 * pixel_values the float32 feed delivers for the same step; everything else is the same batch.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class CompactFeedTest {
    static final EncodeOptions U8 = FeederTest.OPTIONS.withPixelFormat(PixelFormat.UINT8);

    @TempDir Path tmp;
    @TempDir Path shm;

    static FeedConfig compact(FeedMode mode, int ranks, int batch, int threads) {
        return FeedConfig.of(mode, U8, ranks, batch).withSeed(FeederTest.SEED).withCpuThreads(threads).withFetchConcurrency(4).withWarmUp(0);
    }

    /** {@code actual} (compact) is {@code expected} (float32) with its pixels as resized u8 that decode to the same floats. */
    static void assertCompactOf(List<Batch> expected, List<Batch> actual, String what) {
        assertEquals(expected.size(), actual.size(), what);
        var cfg = U8.vision();
        int oneImage = 0, twoImages = 0;
        for (int i = 0; i < expected.size(); i++) {
            Batch e = expected.get(i), a = actual.get(i);
            String at = what + ", batch " + i + " (step " + e.globalStep() + " rank " + e.rank() + ")";
            assertNull(e.pixelsU8(), at);
            assertEquals(PixelFormat.UINT8, a.shape().pixelFormat(), at);
            assertEquals(0, a.pixelValues().length, at + ": no float pixels on the wire");
            assertEquals(e.sampleIds(), a.sampleIds(), at);
            assertArrayEquals(e.datasetIndices(), a.datasetIndices(), at);
            assertEquals(e.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(),
                    a.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(), at);
            assertEquals(e.globalStep(), a.globalStep(), at);
            assertEquals(e.rank(), a.rank(), at);
            assertEquals(e.shape().pixelRows(), a.shape().pixelRows(), at);
            assertArrayEquals(e.inputIds(), a.inputIds(), at);
            assertArrayEquals(e.labels(), a.labels(), at);
            assertArrayEquals(e.attentionMask(), a.attentionMask(), at);
            assertArrayEquals(e.positionIds(), a.positionIds(), at);
            assertArrayEquals(e.imageGridThw(), a.imageGridThw(), at);
            long p = cfg.patchSize();
            assertEquals(e.shape().pixelRows() * p * p * 3, a.pixelsU8().length, at + ": H·W·3 bytes per image");
            assertEquals(4L * e.shape().pixelFloats(), 8L * a.pixelsU8().length, at + ": an eighth of the float32 bytes");
            float[] decoded = CompactPixels.toPixelValues(MemorySegment.ofArray(a.pixelsU8()), a.imageGridThw(), cfg);
            assertBitEqual(e.pixelValues(), decoded, at);
            if (e.shape().pixelRows() > 0) assertTrue(a.sizeBytes() < e.sizeBytes() / 4, at + ": " + a.sizeBytes() + " vs " + e.sizeBytes());
            int images = e.shape().images(), samples = e.samples();
            if (images > 0) oneImage++;
            if (images > samples) twoImages++; // some sample has two images
        }
        assertTrue(oneImage > 0 && twoImages > 0, what + ": batches with one- and two-image samples (" + oneImage + ", " + twoImages + ")");
    }

    static void assertBitEqual(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what + ": pixel_values length");
        for (int k = 0; k < expected.length; k++)
            if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(actual[k]))
                throw new AssertionError(what + ": pixel_values differ at float " + k + ": " + expected[k] + " vs " + actual[k]);
    }

    /** The heap form of a compact stored batch, read back from its shared-memory object, its metadata tensors checked. */
    static Batch toHeapCompact(StoredBatch s) {
        var b = BatchLayout.read(s.object().segment());
        assertEquals(s.sizeBytes(), b.totalBytes());
        assertTrue(b.tensors().stream().noneMatch(t -> t.name().equals("pixel_values")), "no pixel_values in a compact batch");
        Tensor u8 = b.tensor("pixel_values_u8");
        assertEquals(Tensor.DType.UINT8, u8.dtype());
        assertEquals(3, u8.shape()[1]);
        assertArrayEquals(CompactPixels.norm(U8.vision()), b.tensor("pixel_norm").toFloats());
        assertArrayEquals(new long[] {2, 3}, b.tensor("pixel_norm").shape());
        assertArrayEquals(new long[] {14, 2, 2}, b.tensor("pixel_patch").toLongs());
        long[] grid = b.tensor("image_grid_thw").toLongs();
        // the conversion a trainer does from the batch alone
        var cfg = CompactPixels.config(b.tensor("pixel_norm").toFloats(), b.tensor("pixel_patch").toLongs());
        long rows = 0;
        for (int i = 0; i < grid.length; i += 3) rows += grid[i] * grid[i + 1] * grid[i + 2];
        var layout = new dev.stoker.encode.batch.BatchShape(s.samples(), (int) b.tensor("input_ids").shape()[1], rows,
                rows == 0 ? 0 : cfg.rowLength(), grid.length / 3, PixelFormat.UINT8, u8.data().byteSize(), ZeroCopyFeederTest.contractOf(b));
        var heap = new Batch(s.epoch(), s.step(), s.globalStep(), s.rank(), s.scheduled(), s.sampleIds(), s.datasetIndices(),
                s.skippedSamples(), layout, b.tensor("input_ids").toLongs(), b.tensor("labels").toLongs(),
                b.tensor("attention_mask").toLongs(), b.tensor("position_ids").toLongs(), new float[0], grid, u8.toBytes());
        assertEquals(layout.sizeBytes(), b.totalBytes(), "the shape's size is the stored batch's, header and alignment included");
        assertTrue(expectedPayload(b) < b.totalBytes());
        return heap;
    }

    private static long expectedPayload(BatchLayout.Batch b) {
        long n = 0;
        for (var t : b.tensors()) n += t.data().byteSize();
        return n;
    }

    @Test
    void everyHeapModeCarriesResizedPixelsThatDecodeToTheFloat32Batches() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        int ranks = 2, batch = 3, steps = 4;
        try (var source = new LocalFeedSource(manifest, 2)) {
            var expected = FeederTest.run(FeederTest.config(FeedMode.PREFETCH, ranks, batch, 2), source, steps);
            for (var mode : FeederTest.HEAP_MODES)
                assertCompactOf(expected, FeederTest.run(compact(mode, ranks, batch, 2), source, steps), mode + " uint8");
        }
    }

    @Test
    void zeroCopyWritesTheResizedPixelsInPlaceAlsoWhenSamplesFail() throws Exception {
        // missing images fail before the batch is planned; truncated JPEGs only while their pixels are written (compaction)
        Path manifest = TestDatasets.write(tmp, 24, Set.of(2, 9), Set.of(4, 5, 12));
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 64L << 20, "stoker_test"))) {
            var expected = FeederTest.run(FeederTest.config(FeedMode.PREFETCH, 2, 3, 2), source, 4);
            var cfg = compact(FeedMode.ZERO_COPY, 2, 3, 2);
            var actual = new ArrayList<Batch>();
            long copied = 0;
            try (var feeder = Feeder.start(cfg, source, SharedTokenizer.get(), store)) {
                for (int s = 0; s < 4; s++)
                    for (int r = 0; r < 2; r++) {
                        StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                        copied += b.bytesCopied();
                        actual.add(toHeapCompact(b));
                        b.release();
                    }
            }
            assertCompactOf(expected, actual, "zero-copy uint8");
            assertTrue(actual.stream().flatMap(b -> b.skippedSamples().stream()).anyMatch(s -> s.stage() == SampleException.Stage.DECODE),
                    "a truncated image failed while its pixels were written");
            assertTrue(copied > 0, "the rows behind a failed sample were moved down");
            assertEquals(0, store.metrics().inUseBytes());
            // and the same batches as the heap path of the same format
            var heap = FeederTest.run(compact(FeedMode.PREFETCH, 2, 3, 2), source, 4);
            for (int i = 0; i < heap.size(); i++) assertArrayEquals(heap.get(i).pixelsU8(), actual.get(i).pixelsU8(), "batch " + i);
        }
    }

    @Test
    void theFingerprintTellsTheFormatsApartAndFloat32KeepsItsEarlierValue() throws Exception {
        var allow = EncodeOptions.TextOnlyPolicy.ALLOW;
        String f32 = Feeder.encodingText(FeederTest.OPTIONS.withTextOnly(allow));
        assertFalse(f32.contains("pixelFormat"), f32);
        assertTrue(f32.endsWith(", truncation=REJECT]"), "the text a FLOAT32 job hashed before the format existed: " + f32);
        assertTrue(Feeder.encodingText(U8.withTextOnly(allow)).endsWith(", truncation=REJECT, pixelFormat=UINT8]"), Feeder.encodingText(U8));
        // the dummy image of text-only batches (the default) changes those batches: it is part of the text, after the rest
        assertTrue(Feeder.encodingText(FeederTest.OPTIONS).endsWith(", truncation=REJECT, textOnly=DUMMY_IMAGE]"), Feeder.encodingText(FeederTest.OPTIONS));
        assertTrue(Feeder.encodingText(U8).endsWith(", truncation=REJECT, pixelFormat=UINT8, textOnly=DUMMY_IMAGE]"), Feeder.encodingText(U8));
        // an image limit kept its format in the text, as the record printed both before the text-only policy existed
        String limited = Feeder.encodingText(FeederTest.OPTIONS.withTextOnly(allow).withMaxImages(3));
        assertTrue(limited.endsWith(", truncation=REJECT, pixelFormat=FLOAT32, maxImages=3]"), limited);
        assertTrue(limited.startsWith("EncodeOptions[preset=" + FeederTest.OPTIONS.preset() + ", vision=" + FeederTest.OPTIONS.vision()
                + ", exif="), limited);
        String contract = Feeder.encodingText(FeederTest.OPTIONS.withInputContract(EncodeOptions.InputContract.TRANSFORMERS_5_3).withModel("m"));
        assertTrue(contract.endsWith(", textOnly=DUMMY_IMAGE, inputContract=TRANSFORMERS_5_3];model=m"), contract);
        String template = Feeder.encodingText(FeederTest.OPTIONS.withModel("m").withChatTemplate("{{ messages }}"));
        assertTrue(template.endsWith("];model=m;template:" + EncodeOptions.sha256("{{ messages }}")), template);
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var a = Feeder.start(FeederTest.config(FeedMode.CONCURRENT, 1, 2, 1), source, SharedTokenizer.get());
             var b = Feeder.start(compact(FeedMode.CONCURRENT, 1, 2, 1), source, SharedTokenizer.get());
             var c = Feeder.start(FeederTest.config(FeedMode.PREFETCH, 1, 2, 1), source, SharedTokenizer.get())) {
            assertNotEquals(a.fingerprint(), b.fingerprint(), "a state never resumes across pixel formats");
            assertEquals(a.fingerprint(), c.fingerprint(), "the mode is not part of it");
        }
    }
}
