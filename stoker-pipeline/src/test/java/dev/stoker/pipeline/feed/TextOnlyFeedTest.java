package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.batch.TextOnlyBatches;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The text-only policy through the feed: under DUMMY_IMAGE a step whose batch has samples and no image carries the
 * dummy image, on the heap and written in place into shared memory alike, in both pixel formats; every other batch,
 * and every sample, accounting and error, is what ALLOW gives. A zero-copy batch whose only images fail while their
 * pixels are written is left with its text-only samples, and gets the dummy in the object it was allocated.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class TextOnlyFeedTest {
    static final int RANKS = 2, BATCH = 2, STEPS = 6;

    @TempDir static Path tmp;
    @TempDir Path shm;
    static Path manifest;

    @BeforeAll
    static void setUp() throws Exception {
        manifest = write(tmp);
    }

    /**
     * 24 samples: every third has one image, the others none; samples 3 and 15 name a JPEG cut after 60% of its bytes
     * (its header reads fine: on the zero-copy path it fails only while its pixels are written, after the batch was planned).
     */
    static Path write(Path dir) throws Exception {
        Path images = Files.createDirectories(dir.resolve("images"));
        Path photo = Vectors.get().inputImage("p01_photo_grace_hopper");
        Files.copy(photo, images.resolve("photo.jpg"));
        byte[] whole = Files.readAllBytes(photo);
        Files.write(images.resolve("truncated.jpg"), Arrays.copyOf(whole, whole.length * 6 / 10));
        var sb = new StringBuilder();
        for (int i = 0; i < 24; i++) {
            String image = i % 3 != 0 ? "" : i == 3 || i == 15 ? "\"image\": \"images/truncated.jpg\", " : "\"image\": \"images/photo.jpg\", ";
            String prompt = i % 3 != 0 ? "" : "<image>\\n";
            sb.append("{\"id\": \"s").append(i).append("\", ").append(image).append("\"conversations\": [{\"from\": \"human\", \"value\": \"")
                    .append(prompt).append("Question ").append(i).append(" is".repeat(i % 5)).append("?\"}, {\"from\": \"gpt\", \"value\": \"Answer ")
                    .append(i).append(".\"}]}\n");
        }
        return Files.writeString(dir.resolve("train.jsonl"), sb.toString());
    }

    static FeedConfig config(FeedMode mode, PixelFormat format, TextOnlyPolicy policy) {
        EncodeOptions options = FeederTest.OPTIONS.withPixelFormat(format).withTextOnly(policy);
        return FeedConfig.of(mode, options, RANKS, BATCH).withSeed(FeederTest.SEED).withCpuThreads(2).withFetchConcurrency(4).withWarmUp(0);
    }

    /** The zero-copy batches [step][rank] flattened, read back from their objects, the layout's metadata checked. */
    static List<Batch> zeroCopy(FeedConfig config, FeedSource source, ShmObjectStore store) throws Exception {
        var format = config.encode().pixelFormat();
        var out = new ArrayList<Batch>();
        try (var feeder = Feeder.start(config.withMode(FeedMode.ZERO_COPY), source, SharedTokenizer.get(), store)) {
            for (int s = 0; s < STEPS; s++)
                for (int r = 0; r < RANKS; r++) {
                    StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                    var laid = BatchLayout.read(b.object().segment());
                    int images = (int) laid.tensor(BatchSchema.IMAGE_GRID_THW).shape()[0];
                    assertEquals(BatchSchema.inputNames(format, config.encode().inputContract(), images),
                            laid.inputs().stream().map(Tensor::name).toList(), "the model inputs");
                    assertArrayEquals(Arrays.stream(b.datasetIndices()).asLongStream().toArray(), laid.sampleIndex(), "sample_index, metadata");
                    out.add(format == PixelFormat.UINT8 ? CompactFeedTest.toHeapCompact(b) : ZeroCopyFeederTest.toHeap(b));
                    b.release();
                }
        }
        assertEquals(0, store.metrics().inUseBytes());
        return out;
    }

    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void textOnlyBatchesCarryTheDummyImageOnTheHeapAndInPlace(PixelFormat format) throws Exception {
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 64L << 20, "stoker_test"))) {
            var allow = FeederTest.run(config(FeedMode.PREFETCH, format, TextOnlyPolicy.ALLOW), source, STEPS);
            var heap = FeederTest.run(config(FeedMode.PREFETCH, format, TextOnlyPolicy.DUMMY_IMAGE), source, STEPS);
            var inPlace = zeroCopy(config(FeedMode.PREFETCH, format, TextOnlyPolicy.DUMMY_IMAGE), source, store);
            int dummies = 0, withImages = 0, leftByAFailure = 0;
            for (int i = 0; i < allow.size(); i++) {
                String at = format + " batch " + i;
                boolean got = TextOnlyBatches.assertDummyOf(allow.get(i), heap.get(i), FeederTest.OPTIONS.vision(), TextOnlyBatches.GRID_64_AT_3136, at);
                assertSame(heap.get(i), inPlace.get(i), at + " zero-copy");
                if (got) dummies++;
                if (allow.get(i).shape().images() > 0) withImages++;
                if (got && allow.get(i).skippedSamples().stream().anyMatch(s -> s.stage() == SampleException.Stage.DECODE)) leftByAFailure++;
            }
            assertTrue(dummies > 0 && withImages > 0, "text-only batches (" + dummies + ") and batches with images (" + withImages + ")");
            assertTrue(leftByAFailure > 0, "a batch whose only image failed got the dummy");
        }
    }

    /**
     * One step of eight samples: seven text-only ones of one length, and one whose only image — a small square PNG, 16 rows
     * like the dummy's — is cut short, so that it fails only while its pixels are written. Left without it, the batch is
     * seven samples with the dummy's six tokens after the first: longer than the eight it was planned for, so its object
     * must have been allocated for that outcome too. It equals the heap batch, where the sample failed before assembly.
     */
    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void aBatchLeftTextOnlyByAFailedImageGrowsByTheDummyInItsObject(PixelFormat format, @TempDir Path dir) throws Exception {
        var square = new java.awt.image.BufferedImage(50, 50, java.awt.image.BufferedImage.TYPE_INT_RGB);
        var random = new java.util.Random(7);
        for (int y = 0; y < 50; y++) for (int x = 0; x < 50; x++) square.setRGB(x, y, random.nextInt(1 << 24));
        var png = new java.io.ByteArrayOutputStream();
        javax.imageio.ImageIO.write(square, "png", png);
        Files.createDirectories(dir.resolve("images"));
        Files.write(dir.resolve("images/cut.png"), Arrays.copyOf(png.toByteArray(), png.size() * 6 / 10));
        var sb = new StringBuilder();
        for (int i = 0; i < 8; i++)
            sb.append("{\"id\": \"s").append(i).append("\", ").append(i == 5 ? "\"image\": \"images/cut.png\", " : "")
                    .append("\"conversations\": [{\"from\": \"human\", \"value\": \"").append(i == 5 ? "<image>\\nQ" : "Question one two three four five six seven")
                    .append("\"}, {\"from\": \"gpt\", \"value\": \"A.\"}]}\n");
        Path small = Files.writeString(dir.resolve("train.jsonl"), sb.toString());
        EncodeOptions options = FeederTest.OPTIONS.withPixelFormat(format);
        var config = FeedConfig.of(FeedMode.PREFETCH, options, 1, 8).withSeed(FeederTest.SEED).withCpuThreads(2).withWarmUp(0);
        try (var source = new LocalFeedSource(small, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 64L << 20, "stoker_test"))) {
            var heap = FeederTest.run(config, source, 1).get(0);
            var allow = FeederTest.run(FeedConfig.of(FeedMode.PREFETCH, options.withTextOnly(TextOnlyPolicy.ALLOW), 1, 8)
                    .withSeed(FeederTest.SEED).withCpuThreads(2).withWarmUp(0), source, 1).get(0);
            assertEquals(List.of("s5@DECODE"), heap.skippedSamples().stream().map(k -> k.sampleId() + "@" + k.stage()).toList());
            assertTrue(TextOnlyBatches.assertDummyOf(allow, heap, options.vision(), TextOnlyBatches.GRID_64_AT_3136, "heap"));
            assertTrue(heap.length() > allow.length(), "the dummy's tokens make the batch longer");
            try (var feeder = Feeder.start(config.withMode(FeedMode.ZERO_COPY), source, SharedTokenizer.get(), store)) {
                StoredBatch b = feeder.storedRank(0).next().get(60, TimeUnit.SECONDS);
                assertSame(heap, format == PixelFormat.UINT8 ? CompactFeedTest.toHeapCompact(b) : ZeroCopyFeederTest.toHeap(b), "zero-copy");
                b.release();
            }
        }
    }

    /** The same batch, whichever path made it. */
    static void assertSame(Batch e, Batch a, String at) {
        FeederTest.assertSameBatches(List.of(e), List.of(a), at);
        assertArrayEquals(e.pixelsU8(), a.pixelsU8(), at + ": pixel_values_u8");
    }

    @Test
    void thePolicyIsPartOfTheFingerprintAndAllowKeepsTheEarlierOne() throws Exception {
        try (var source = new LocalFeedSource(manifest, 0);
             var allow = Feeder.start(config(FeedMode.CONCURRENT, PixelFormat.FLOAT32, TextOnlyPolicy.ALLOW), source,
                     SharedTokenizer.get());
             var dummy = Feeder.start(config(FeedMode.CONCURRENT, PixelFormat.FLOAT32, TextOnlyPolicy.DUMMY_IMAGE), source,
                     SharedTokenizer.get())) {
            assertNotEquals(allow.fingerprint(), dummy.fingerprint(), "a state never resumes across text-only policies");
        }
        assertTrue(!Feeder.encodingText(FeederTest.OPTIONS.withTextOnly(TextOnlyPolicy.ALLOW)).contains("textOnly"));
    }
}
