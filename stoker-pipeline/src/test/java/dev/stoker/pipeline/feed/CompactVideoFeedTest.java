package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.batch.BatchShape;
import dev.stoker.encode.batch.PythonPixels;
import dev.stoker.encode.video.VideoTensors;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.Vectors;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The compact wire format for video through the feed (issue 29), Qwen2.5-VL: a {@code --pixel-format uint8} job whose
 * samples hold videos gives, on the heap and written in place into shared memory, the FLOAT32 job's batches with
 * {@code pixel_values_videos_u8} (each video's resized frames) and {@code video_frame_counts} in the place of
 * {@code pixel_values_videos}, and the trainer's conversion of them — Java's {@link CompactPixels} and the Python
 * client's {@code batch_to_pixel_values} (NumPy, and torch where installed) on the batches as laid out — gives that
 * job's {@code pixel_values_videos} and {@code pixel_values} bit for bit. Two samples fail while their pixels are
 * written in place (a truncated JPEG beside a video): the videos behind them are moved down to close the gap.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class CompactVideoFeedTest {
    static final int RANKS = 1, BATCH = 3, STEPS = 3;
    static final EncodeOptions F32 = VideoFeedTest.OPTIONS;
    static final EncodeOptions U8 = F32.withPixelFormat(PixelFormat.UINT8);
    /** The records whose truncated JPEG fails while its pixels are written (after the batch was planned). */
    static final Set<Integer> FAIL_IN_WRITE = Set.of(5, 8);
    static final Set<Integer> WITH_VIDEO = Set.of(0, 1, 4, 5, 7, 8);

    @TempDir static Path dir;
    @TempDir Path shm;
    @TempDir Path work;
    static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path media = Files.createDirectories(dir.resolve("media"));
        FfmpegClips.h264(media.resolve("a.mp4"), "320x240", "25", 2);
        FfmpegClips.make(media.resolve("b.avi"), "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=359/12:duration=1.5", "-c:v",
                "mpeg4", "-q:v", "5");
        byte[] photo = Files.readAllBytes(Vectors.get().inputImage("p01_photo_grace_hopper"));
        Files.write(media.resolve("photo.jpg"), photo);
        Files.write(media.resolve("cut.jpg"), Arrays.copyOf(photo, photo.length * 6 / 10)); // its header reads; its pixels do not
        String[] records = {
            VideoFeedTest.record("s0", "<video>What happens?", "It moves.", List.of("media/a.mp4"), List.of()),
            VideoFeedTest.record("s1", "<image><video>Same colours?", "Yes.", List.of("media/b.avi"), List.of("media/photo.jpg")),
            VideoFeedTest.record("s2", "Say hello.", "Hello.", List.of(), List.of()),
            VideoFeedTest.record("s3", "<image>Who is this?", "A scientist.", List.of(), List.of("media/photo.jpg")),
            VideoFeedTest.record("s4", "<video>And this?<video>And that?", "Two clips.", List.of("media/b.avi", "media/a.mp4"), List.of()),
            VideoFeedTest.record("s5", "<image><video>Cut?", "Cut.", List.of("media/a.mp4"), List.of("media/cut.jpg")),
            VideoFeedTest.record("s6", "<video>Where is it?", "Gone.", List.of("media/missing.mp4"), List.of()),
            VideoFeedTest.record("s7", "<video>Again?", "Again.", List.of("media/a.mp4"), List.of()),
            VideoFeedTest.record("s8", "<image><video>Cut again?", "Cut.", List.of("media/b.avi"), List.of("media/cut.jpg")),
        };
        manifest = Files.writeString(dir.resolve("train.jsonl"), String.join("\n", records) + "\n");
    }

    static FeedConfig config(FeedMode mode, EncodeOptions options) { return VideoFeedTest.config(mode, options, RANKS, BATCH); }

    @Test
    void compactVideoBatchesConvertToTheFloat32BatchesOnTheHeapAndInPlace() throws Exception {
        // the schedule puts a sample that fails in its pixel write before a kept video sample in one batch: its gap is closed
        var schedule = new SampleSchedule(FeederTest.SEED, 9, RANKS, BATCH);
        boolean gapBeforeVideo = false;
        for (int s = 0; s < STEPS; s++) {
            int[] order = schedule.batchFor(0, s, 0);
            for (int i = 0; i < order.length; i++)
                for (int j = i + 1; j < order.length; j++)
                    gapBeforeVideo |= FAIL_IN_WRITE.contains(order[i]) && WITH_VIDEO.contains(order[j]) && !FAIL_IN_WRITE.contains(order[j]);
        }
        assertTrue(gapBeforeVideo, "the seed must put a failing sample before a kept video in some batch");

        var trainerTensors = new ArrayList<List<Tensor>>();
        List<Batch> expected, heap;
        var inPlace = new ArrayList<Batch>();
        long copied = 0;
        try (var source = new LocalFeedSource(manifest, 2);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            expected = FeederTest.run(config(FeedMode.PREFETCH, F32), source, STEPS);
            heap = FeederTest.run(config(FeedMode.PREFETCH, U8), source, STEPS);
            for (Batch b : heap) trainerTensors.add(BatchSchema.tensors(b, RANKS, U8.vision()).tensors());
            try (var feeder = Feeder.start(config(FeedMode.ZERO_COPY, U8), source, SharedTokenizer.get(), store)) {
                for (int s = 0; s < STEPS; s++) {
                    StoredBatch b = feeder.storedRank(0).next().get(60, TimeUnit.SECONDS);
                    copied += b.bytesCopied();
                    var laid = BatchLayout.read(b.object().segment());
                    trainerTensors.add(laid.tensors().stream().map(CompactVideoFeedTest::copy).toList());
                    inPlace.add(toHeap(b, laid));
                    b.release();
                }
            }
            assertEquals(0, store.metrics().inUseBytes());
        }
        assertTrue(copied > 0, "rows moved down behind the samples that failed in place");
        assertCompactOf(expected, heap, "heap");
        assertCompactOf(expected, inPlace, "in place");
        var skipped = new ArrayList<String>();
        for (Batch b : inPlace) b.skippedSamples().forEach(x -> skipped.add(x.sampleId() + "@" + x.stage()));
        skipped.sort(null);
        assertEquals(List.of("s5@DECODE", "s6@FETCH", "s8@DECODE"), skipped);

        assumeTrue(PythonPixels.available(), PythonPixels.PYTHON + " with NumPy is missing: the Python conversion is not checked");
        var converted = PythonPixels.convert(work, trainerTensors);
        for (int i = 0; i < converted.size(); i++) {
            Batch e = expected.get(i % STEPS);
            String at = (i < STEPS ? "heap" : "in place") + ", step " + e.globalStep() + " " + e.sampleIds();
            var c = converted.get(i);
            var inputs = BatchSchema.tensors(e, RANKS, F32.vision()).tensors().stream().filter(t -> !t.metadata()).map(Tensor::name).toList();
            assertEquals(inputs, c.keys(), at + ": the float32 batch's model inputs, in order");
            if (e.videos() != null) assertBitEqual(e.videos().pixelValuesVideos(), c.floats().get(BatchSchema.PIXEL_VALUES_VIDEOS), at + ": Python");
            if (e.shape().images() > 0) assertBitEqual(e.pixelValues(), c.floats().get(BatchSchema.PIXEL_VALUES), at + ": Python pixel_values");
        }
    }

    /** {@code actual} (compact) is {@code expected} (float32) with its images and videos as resized u8 that convert to its floats. */
    static void assertCompactOf(List<Batch> expected, List<Batch> actual, String what) {
        assertEquals(expected.size(), actual.size(), what);
        var cfg = U8.vision();
        int withVideo = 0;
        for (int i = 0; i < expected.size(); i++) {
            Batch e = expected.get(i), a = actual.get(i);
            String at = what + ", step " + e.globalStep() + " " + e.sampleIds();
            assertEquals(e.sampleIds(), a.sampleIds(), at);
            assertEquals(e.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(),
                    a.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(), at);
            assertArrayEquals(e.inputIds(), a.inputIds(), at);
            assertArrayEquals(e.labels(), a.labels(), at);
            assertArrayEquals(e.attentionMask(), a.attentionMask(), at);
            assertArrayEquals(e.positionIds(), a.positionIds(), at);
            assertArrayEquals(e.imageGridThw(), a.imageGridThw(), at);
            assertBitEqual(e.pixelValues(), CompactPixels.toPixelValues(MemorySegment.ofArray(a.pixelsU8()), a.imageGridThw(), cfg), at + ": pixel_values");
            if (e.videos() == null) {
                assertNull(a.videos(), at);
                continue;
            }
            withVideo++;
            VideoTensors ev = e.videos(), av = a.videos();
            assertTrue(av.compact(), at);
            assertArrayEquals(ev.videoGridThw(), av.videoGridThw(), at);
            assertArrayEquals(ev.secondPerGridTs(), av.secondPerGridTs(), at + ": Qwen2.5's second_per_grid_ts");
            assertBitEqual(ev.pixelValuesVideos(), CompactPixels.toPixelValuesVideos(MemorySegment.ofArray(av.pixelsU8()), av.videoGridThw(),
                    av.frameCounts(), cfg), at + ": Java's conversion of pixel_values_videos_u8");
            // a row is temporal-patch frames of one patch: 2·p²·3 u8 bytes for 2·p²·3 floats, a quarter of their bytes (less
            // where T is odd: its last frame is not sent twice)
            assertTrue(av.pixelsU8().length <= ev.pixelValuesVideos().length, at + ": at most 1/4 of the float32 bytes");
        }
        assertTrue(withVideo >= 2, what + ": " + withVideo + " batches with videos");
    }

    /** The heap form of a compact stored batch read back from its object ({@code laid}), the video tensors included. */
    static Batch toHeap(StoredBatch s, BatchLayout.Batch laid) {
        var names = laid.tensors().stream().map(Tensor::name).toList();
        assertTrue(names.stream().noneMatch(n -> n.equals(BatchSchema.PIXEL_VALUES) || n.equals(BatchSchema.PIXEL_VALUES_VIDEOS)), names.toString());
        VideoTensors videos = null;
        var shapeVideos = BatchShape.Videos.NONE;
        if (names.contains(BatchSchema.VIDEO_GRID_THW)) {
            assertEquals(BatchSchema.VIDEO_FRAME_COUNTS, names.getLast(), "video_frame_counts last");
            assertTrue(laid.metadata().stream().anyMatch(t -> t.name().equals(BatchSchema.VIDEO_FRAME_COUNTS)), "video_frame_counts is metadata");
            assertTrue(laid.inputs().stream().anyMatch(t -> t.name().equals(BatchSchema.PIXEL_VALUES_VIDEOS_U8)), "the u8 frames are an input");
            Tensor u8 = laid.tensor(BatchSchema.PIXEL_VALUES_VIDEOS_U8);
            assertEquals(Tensor.DType.UINT8, u8.dtype());
            long[] grid = laid.tensor(BatchSchema.VIDEO_GRID_THW).toLongs();
            float[] seconds = names.contains(BatchSchema.SECOND_PER_GRID_TS) ? laid.tensor(BatchSchema.SECOND_PER_GRID_TS).toFloats() : new float[0];
            videos = new VideoTensors(new float[0], U8.vision().rowLength(), grid, seconds, new long[0], u8.toBytes(),
                    laid.tensor(BatchSchema.VIDEO_FRAME_COUNTS).toLongs());
            shapeVideos = new BatchShape.Videos(videos.rows(), videos.videos(), seconds.length > 0, u8.data().byteSize());
        }
        Tensor pixels = laid.tensor(BatchSchema.PIXEL_VALUES_U8);
        long[] imageGrid = laid.tensor(BatchSchema.IMAGE_GRID_THW).toLongs();
        long rows = 0;
        for (int i = 0; i < imageGrid.length; i += 3) rows += imageGrid[i] * imageGrid[i + 1] * imageGrid[i + 2];
        var shape = new BatchShape(s.samples(), (int) laid.tensor(BatchSchema.INPUT_IDS).shape()[1], rows,
                rows == 0 ? 0 : U8.vision().rowLength(), imageGrid.length / 3, PixelFormat.UINT8, pixels.data().byteSize(),
                ZeroCopyFeederTest.contractOf(laid)).withVideos(shapeVideos);
        assertEquals(shape.sizeBytes(), laid.totalBytes(), "the shape's size is the stored batch's");
        return new Batch(s.epoch(), s.step(), s.globalStep(), s.rank(), s.scheduled(), s.sampleIds(), s.datasetIndices(), s.skippedSamples(),
                shape, laid.tensor(BatchSchema.INPUT_IDS).toLongs(), laid.tensor(BatchSchema.LABELS).toLongs(),
                laid.tensor(BatchSchema.ATTENTION_MASK).toLongs(), laid.tensor(BatchSchema.POSITION_IDS).toLongs(), new float[0], imageGrid,
                pixels.toBytes(), null, null, videos);
    }

    /** A tensor whose bytes are copied out of the batch's shared memory (released right after). */
    private static Tensor copy(Tensor t) {
        return new Tensor(t.name(), t.dtype(), t.shape(), MemorySegment.ofArray(t.data().toArray(ValueLayout.JAVA_BYTE)), t.metadata());
    }

    static void assertBitEqual(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what + ": length");
        for (int k = 0; k < expected.length; k++)
            if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(actual[k]))
                throw new AssertionError(what + ": differ at float " + k + ": " + expected[k] + " vs " + actual[k]);
    }
}
