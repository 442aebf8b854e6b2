package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.RangedObjectBytes;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.SampleParser;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Video through the feed (issue 29): a job whose samples hold videos — alone, beside an image, two in one sample, beside
 * text-only and image-only samples, a missing file and one cut short — gives batches whose {@code pixel_values_videos},
 * {@code video_grid_thw} and {@code second_per_grid_ts} are, sample by sample, what {@code stoker encode}'s encoder gives
 * (bit for bit), on the heap and written in place into shared memory alike, decoded in this process or in worker
 * processes alike. A batch without a video carries no video tensor; one with videos and no image gets no dummy image and
 * flags its empty image tensors as metadata. The broken videos are their samples' errors, named; the feed goes on.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class VideoFeedTest {
    static final int RANKS = 2, BATCH = 2, STEPS = 2;
    static final EncodeOptions OPTIONS = FeederTest.OPTIONS.withVideo(VideoEncoding.defaults());

    @TempDir static Path dir;
    @TempDir Path shm;
    static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path media = Files.createDirectories(dir.resolve("media"));
        FfmpegClips.h264(media.resolve("a.mp4"), "320x240", "25", 2);
        FfmpegClips.make(media.resolve("b.avi"), "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=359/12:duration=1.5", "-c:v",
                "mpeg4", "-q:v", "5");
        byte[] whole = Files.readAllBytes(media.resolve("a.mp4"));
        Files.write(media.resolve("cut.mp4"), Arrays.copyOf(whole, whole.length * 4 / 10)); // its index (moov) is at the end
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), media.resolve("photo.jpg"));
        String[] records = {
            record("s0", "<video>What happens?", "It moves.", List.of("media/a.mp4"), List.of()),
            record("s1", "<image><video>Same colours?", "Yes.", List.of("media/b.avi"), List.of("media/photo.jpg")),
            record("s2", "Say hello.", "Hello.", List.of(), List.of()),
            record("s3", "<image>Who is this?", "A scientist.", List.of(), List.of("media/photo.jpg")),
            record("s4", "<video>And this?<video>And that?", "Two clips.", List.of("media/b.avi", "media/a.mp4"), List.of()),
            record("s5", "<video>Where is it?", "Gone.", List.of("media/missing.mp4"), List.of()),
            record("s6", "<video>Cut?", "Cut.", List.of("media/cut.mp4"), List.of()),
            record("s7", "<video>Again?", "Again.", List.of("media/a.mp4"), List.of()),
        };
        manifest = Files.writeString(dir.resolve("train.jsonl"), String.join("\n", records) + "\n");
    }

    /** One LLaMA-Factory-layout record on one line (the video feed tests' data). */
    static String record(String id, String prompt, String answer, List<String> videos, List<String> images) {
        var sb = new StringBuilder("{\"id\": \"").append(id).append("\", \"messages\": [{\"role\": \"user\", \"content\": \"")
                .append(prompt).append("\"}, {\"role\": \"assistant\", \"content\": \"").append(answer).append("\"}]");
        if (!videos.isEmpty()) sb.append(", \"videos\": [\"").append(String.join("\", \"", videos)).append("\"]");
        if (!images.isEmpty()) sb.append(", \"images\": [\"").append(String.join("\", \"", images)).append("\"]");
        return sb.append('}').toString();
    }

    static FeedConfig config(FeedMode mode, EncodeOptions options) { return config(mode, options, RANKS, BATCH); }

    /** The video feed tests' feed: the tests' seed, 2 CPU threads, 4 fetches, no warm-up. */
    static FeedConfig config(FeedMode mode, EncodeOptions options, int ranks, int batch) {
        return FeedConfig.of(mode, options, ranks, batch).withSeed(FeederTest.SEED).withCpuThreads(2).withFetchConcurrency(4).withWarmUp(0);
    }

    /** What {@code stoker encode}'s encoder makes of each sample that encodes, by id. */
    static Map<String, dev.stoker.encode.EncodedSample> expected() throws Exception {
        var out = new HashMap<String, dev.stoker.encode.EncodedSample>();
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        try (var objects = ObjectSources.open(manifest.toAbsolutePath().toString(), SourceConfig.defaults())) {
            var encoder = new SampleEncoder(OPTIONS, SharedTokenizer.get());
            for (String line : Files.readAllLines(manifest)) {
                var sample = parser.parseLine(line.getBytes(StandardCharsets.UTF_8), "?");
                try {
                    out.put(sample.id(), encoder.encode(sample, SampleEncoder.ImageSource.blocking(objects),
                            (id, ref) -> RangedObjectBytes.of(objects, ref, FeedSource.VIDEO_READ_TIMEOUT_NANOS)));
                } catch (SampleException e) {
                    // s5, s6: the feed must skip them too (checked below)
                }
            }
        }
        return out;
    }

    @Test
    void videoBatchesEqualTheEncodersSamplesOnTheHeapInPlaceAndInWorkers() throws Exception {
        var expected = expected();
        assertEquals(List.of("s0", "s1", "s2", "s3", "s4", "s7"), expected.keySet().stream().sorted().toList(), "the samples that encode");
        try (var source = new LocalFeedSource(manifest, 2);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var heap = FeederTest.run(config(FeedMode.PREFETCH, OPTIONS), source, STEPS);
            var inPlace = zeroCopy(config(FeedMode.ZERO_COPY, OPTIONS), source, store);
            var workers = zeroCopy(config(FeedMode.ZERO_COPY, OPTIONS.withVideo(VideoEncoding.defaults()
                    .withDecode(VideoEncoding.Decode.WORKERS))), source, store);
            FeederTest.assertSameBatches(heap, inPlace, "in place");
            FeederTest.assertSameBatches(heap, workers, "decoded in worker processes");
            int withVideo = 0, videoWithoutImage = 0;
            var skipped = new ArrayList<String>();
            for (Batch b : heap) {
                b.skippedSamples().forEach(s -> skipped.add(s.sampleId() + "@" + s.stage() + ": " + s.cause()));
                assertVideosOf(b, expected);
                if (b.videos() != null) withVideo++;
                if (b.videos() != null && b.shape().images() == 0) {
                    videoWithoutImage++;
                    assertEquals(0, b.imageGridThw().length, "no dummy image beside a video");
                }
            }
            assertTrue(withVideo >= 2, withVideo + " batches with videos");
            assertTrue(videoWithoutImage >= 1, "a batch with videos and no image");
            skipped.sort(null);
            assertEquals(2, skipped.size(), skipped.toString());
            assertTrue(skipped.get(0).startsWith("s5@FETCH") && skipped.get(0).contains("media/missing.mp4"), skipped.get(0));
            assertTrue(skipped.get(1).startsWith("s6@") && skipped.get(1).contains("media/cut.mp4"), skipped.get(1));
        }
    }

    /**
     * A packed job over the same data: its packs, planned from the videos' shapes (indexed, never decoded), carry their
     * segments' videos in segment order, bit for bit the encoder's, on the heap and written in place alike; the broken
     * videos are their samples' errors as above.
     */
    @Test
    void packsCarryTheirSegmentsVideosOnTheHeapAndInPlace() throws Exception {
        var expected = expected();
        try (var source = new LocalFeedSource(manifest, 2);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var shapes = dev.stoker.encode.validate.ShapeIndexes.measure(source.records(), source, SharedTokenizer.get(), OPTIONS, 2);
            int longest = 0;
            for (int i = 0; i < shapes.size(); i++) longest = Math.max(longest, shapes.shape(i).tokens());
            assertTrue(shapes.shape(0).hasVideo() && shapes.shape(0).videoRows() > 0, "s0's video in its shape: " + shapes.shape(0));
            var packing = new dev.stoker.plan.pack.Packing(2 * longest, 0, dev.stoker.plan.pack.PackPlanner.Balance.COST, 1,
                    dev.stoker.plan.pack.PackCost.QWEN2_5_VL_3B);
            var heap = FeederTest.run(config(FeedMode.PREFETCH, OPTIONS).withPacking(packing), source, 2);
            try (var feeder = Feeder.start(config(FeedMode.ZERO_COPY, OPTIONS).withPacking(packing), source, SharedTokenizer.get(), store)) {
                int i = 0;
                for (int s = 0; s < 2; s++)
                    for (int r = 0; r < RANKS; r++, i++) {
                        StoredBatch stored = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                        var b = BatchLayout.read(stored.object().segment());
                        Batch h = heap.get(i);
                        String at = "pack " + i;
                        assertEquals(h.sampleIds(), stored.sampleIds(), at);
                        assertArrayEquals(h.inputIds(), b.tensor("input_ids").toLongs(), at);
                        assertArrayEquals(h.positionIds(), b.tensor("position_ids").toLongs(), at);
                        assertArrayEquals(h.cuSeqlens(), b.tensor("cu_seqlens").toInts(), at);
                        assertArrayEquals(h.pixelValues(), b.tensor("pixel_values").toFloats(), at);
                        var v = ZeroCopyFeederTest.videosOf(b);
                        assertEquals(h.videos() == null, v == null, at + ": video tensors");
                        if (v != null) {
                            assertArrayEquals(h.videos().videoGridThw(), v.videoGridThw(), at);
                            assertArrayEquals(h.videos().secondPerGridTs(), v.secondPerGridTs(), at);
                            assertArrayEquals(h.videos().pixelValuesVideos(), v.pixelValuesVideos(), at);
                        }
                        stored.release();
                    }
            }
            assertEquals(0, store.metrics().inUseBytes());
            int withVideo = 0;
            for (Batch b : heap) {
                assertTrue(b.shape().packed());
                assertVideosOf(b, expected);
                if (b.videos() != null) withVideo++;
            }
            assertTrue(withVideo >= 2, withVideo + " packs with videos");
        }
    }

    /** A batch's video tensors are its samples' in order (none when none has a video), bit for bit the encoder's. */
    static void assertVideosOf(Batch b, Map<String, dev.stoker.encode.EncodedSample> expected) {
        var grids = new ArrayList<Long>();
        var seconds = new ArrayList<Float>();
        var pixels = new java.io.ByteArrayOutputStream();
        for (String id : b.sampleIds()) {
            var v = expected.get(id).videos();
            for (long g : v.videoGridThw()) grids.add(g);
            for (float s : v.secondPerGridTs()) seconds.add(s);
            var bytes = java.nio.ByteBuffer.allocate(v.pixelValuesVideos().length * 4);
            for (float f : v.pixelValuesVideos()) bytes.putInt(Float.floatToRawIntBits(f));
            pixels.writeBytes(bytes.array());
        }
        String at = "step " + b.globalStep() + " rank " + b.rank() + " " + b.sampleIds();
        if (grids.isEmpty()) {
            assertEquals(null, b.videos(), at + ": no video tensor");
            return;
        }
        assertArrayEquals(grids.stream().mapToLong(Long::longValue).toArray(), b.videos().videoGridThw(), at);
        float[] s = new float[seconds.size()];
        for (int i = 0; i < s.length; i++) s[i] = seconds.get(i);
        assertArrayEquals(s, b.videos().secondPerGridTs(), at + ": Qwen2.5's second_per_grid_ts");
        var got = java.nio.ByteBuffer.allocate(b.videos().pixelValuesVideos().length * 4);
        for (float f : b.videos().pixelValuesVideos()) got.putInt(Float.floatToRawIntBits(f));
        assertArrayEquals(pixels.toByteArray(), got.array(), at + ": pixel_values_videos");
    }

    /** The zero-copy batches [step][rank], read back from their objects; the model inputs of each checked. */
    static List<Batch> zeroCopy(FeedConfig config, FeedSource source, ShmObjectStore store) throws Exception {
        var out = new ArrayList<Batch>();
        try (var feeder = Feeder.start(config, source, SharedTokenizer.get(), store)) {
            for (int s = 0; s < STEPS; s++)
                for (int r = 0; r < RANKS; r++) {
                    StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                    var laid = BatchLayout.read(b.object().segment());
                    var inputs = laid.inputs().stream().map(Tensor::name).toList();
                    boolean videos = laid.tensors().stream().anyMatch(t -> t.name().equals(BatchSchema.PIXEL_VALUES_VIDEOS));
                    assertEquals(videos, inputs.containsAll(List.of(BatchSchema.PIXEL_VALUES_VIDEOS, BatchSchema.VIDEO_GRID_THW,
                            BatchSchema.SECOND_PER_GRID_TS)), "video tensors are model inputs: " + inputs);
                    boolean images = laid.tensor(BatchSchema.IMAGE_GRID_THW).shape()[0] > 0;
                    assertEquals(images, inputs.contains(BatchSchema.PIXEL_VALUES), "pixel_values an input only with images: " + inputs);
                    out.add(ZeroCopyFeederTest.toHeap(b));
                    b.release();
                }
            assertTrue(feeder.metrics().stages().containsKey("video_decode"), "the video decode stage's latency: " + feeder.metrics().stages().keySet());
            var figures = feeder.verdict().figures();
            assertTrue(figures.get("video_decode_share") > 0 && figures.get("video_frames_decoded_per_kept") >= 1, figures.toString());
        }
        assertEquals(0, store.metrics().inUseBytes());
        return out;
    }
}
