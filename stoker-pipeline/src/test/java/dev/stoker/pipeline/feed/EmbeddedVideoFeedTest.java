package dev.stoker.pipeline.feed;

import static dev.stoker.parquet.HfParquet.image;
import static dev.stoker.parquet.HfParquet.map;
import static dev.stoker.testkit.WebDatasetShards.put;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.parquet.HfParquet;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.RangedObjectBytes;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.WebDatasetRecords;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.SampleParser;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.index.FrameIndexer;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Videos carried by the data set's own files (issue 29, Build item 2): the same samples as a JSON Lines manifest naming
 * clip files, as a WebDataset shard whose {@code .mp4}/{@code .avi} members are the clips, and as a Parquet file whose
 * {@code videos} column holds their bytes, give the same batches through the feed — {@code pixel_values_videos},
 * {@code video_grid_thw} and {@code second_per_grid_ts} bit for bit what {@code SampleEncoder.encode} makes of the
 * manifest's sample, on the heap and written in place (decoded in this process, and in worker processes that read the
 * members through their protocol). Without video the samples carrying one are refused (stage
 * MANIFEST, "video is not supported") and the others served, as before. A tar member is read by range: decoding frames
 * near the end of a larger clip fetches a fraction of the member.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class EmbeddedVideoFeedTest {
    static final int RANKS = 2, BATCH = 3, STEPS = 1;
    static final EncodeOptions OPTIONS = FeederTest.OPTIONS.withVideo(VideoEncoding.defaults());
    /** The samples that hold a video, by id. */
    static final List<String> WITH_VIDEO = List.of("s0", "s1", "s4", "s5");

    @TempDir static Path dir;
    @TempDir Path shm;
    static Path manifest, shard, parquet;

    /** One sample: its id, prompt, answer, videos and images (files of the media folder). */
    record Sample(String id, String prompt, String answer, List<String> videos, List<String> images) {}

    static final List<Sample> SAMPLES = List.of(
            new Sample("s0", "<video>What happens?", "It moves.", List.of("a.mp4"), List.of()),
            new Sample("s1", "<image><video>Same colours?", "Yes.", List.of("b.avi"), List.of("photo.jpg")),
            new Sample("s2", "Say hello.", "Hello.", List.of(), List.of()),
            new Sample("s3", "<image>Who is this?", "A scientist.", List.of(), List.of("photo.jpg")),
            new Sample("s4", "<video>And this?<video>And that?", "Two clips.", List.of("b.avi", "a.mp4"), List.of()),
            new Sample("s5", "<video>Again?", "Again.", List.of("a.mp4"), List.of()));

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path media = Files.createDirectories(dir.resolve("media"));
        FfmpegClips.h264(media.resolve("a.mp4"), "320x240", "25", 2);
        FfmpegClips.make(media.resolve("b.avi"), "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=359/12:duration=1.5", "-c:v",
                "mpeg4", "-q:v", "5");
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), media.resolve("photo.jpg"));
        var lines = new ArrayList<String>();
        for (var s : SAMPLES) lines.add(json(s, true));
        manifest = Files.writeString(dir.resolve("train.jsonl"), String.join("\n", lines) + "\n");
        // the shard: s4 keeps its lists (the members take their places in order), the others name nothing
        shard = dir.resolve("train.tar");
        try (OutputStream out = Files.newOutputStream(shard); var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            for (var s : SAMPLES) {
                put(tar, s.id() + ".json", json(s, s.id().equals("s4")).getBytes(StandardCharsets.UTF_8));
                for (int k = s.videos().size() - 1; k >= 0; k--) { // in reverse: taken by number
                    String v = s.videos().get(k), ext = v.substring(v.indexOf('.') + 1);
                    put(tar, s.id() + (s.videos().size() == 1 ? "" : "." + k) + "." + ext, Files.readAllBytes(media.resolve(v)));
                }
                for (String im : s.images()) put(tar, s.id() + ".jpg", Files.readAllBytes(media.resolve(im)));
            }
        }
        var rows = new ArrayList<Map<String, Object>>();
        for (var s : SAMPLES) {
            var videos = new ArrayList<Object>();
            for (String v : s.videos()) videos.add(image(Files.readAllBytes(media.resolve(v)), null)); // unnamed cells: row#vK
            var images = new ArrayList<Object>();
            for (String im : s.images()) images.add(image(Files.readAllBytes(media.resolve(im)), null));
            rows.add(map("id", s.id(), "messages", List.of(map("role", "user", "content", s.prompt()), map("role", "assistant", "content", s.answer())),
                    "images", images, "videos", videos));
        }
        parquet = HfParquet.write(dir.resolve("train.parquet"), HfParquet.STRING_MESSAGES_VIDEOS, rows, 4);
    }

    /** The sample as a LLaMA-Factory-layout record; {@code lists}: naming its media files. */
    static String json(Sample s, boolean lists) {
        var sb = new StringBuilder("{\"id\": \"").append(s.id()).append("\", \"messages\": [{\"role\": \"user\", \"content\": \"")
                .append(s.prompt()).append("\"}, {\"role\": \"assistant\", \"content\": \"").append(s.answer()).append("\"}]");
        if (lists && !s.videos().isEmpty())
            sb.append(", \"videos\": [\"media/").append(String.join("\", \"media/", s.videos())).append("\"]");
        if (lists && !s.images().isEmpty())
            sb.append(", \"images\": [\"media/").append(String.join("\", \"media/", s.images())).append("\"]");
        return sb.append('}').toString();
    }

    static FeedConfig config(FeedMode mode, EncodeOptions options) { return VideoFeedTest.config(mode, options, RANKS, BATCH); }

    /** What {@code SampleEncoder.encode} makes of each manifest sample, its clips read as files. */
    static Map<String, EncodedSample> expected() throws Exception {
        var out = new HashMap<String, EncodedSample>();
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        try (var objects = ObjectSources.open(manifest.toAbsolutePath().toString(), SourceConfig.defaults())) {
            var encoder = new SampleEncoder(OPTIONS, SharedTokenizer.get());
            for (String line : Files.readAllLines(manifest)) {
                var sample = parser.parseLine(line.getBytes(StandardCharsets.UTF_8), "?");
                out.put(sample.id(), encoder.encode(sample, SampleEncoder.ImageSource.blocking(objects),
                        (id, ref) -> RangedObjectBytes.of(objects, ref, FeedSource.VIDEO_READ_TIMEOUT_NANOS)));
            }
        }
        return out;
    }

    @Test
    void tarMembersAndParquetCellsGiveTheBatchesOfTheManifestsClipFiles() throws Exception {
        var expected = expected();
        List<Batch> reference;
        try (var source = new LocalFeedSource(manifest, 2)) {
            reference = FeederTest.run(config(FeedMode.PREFETCH, OPTIONS), source, STEPS);
        }
        var seen = new TreeSet<String>();
        for (var b : reference) {
            VideoFeedTest.assertVideosOf(b, expected);
            seen.addAll(b.sampleIds());
        }
        assertEquals(new TreeSet<>(expected.keySet()), seen, "every sample once");
        try (var tarObjects = ObjectSources.open(shard.toString(), SourceConfig.defaults());
             var parquetObjects = ObjectSources.open(parquet.toString(), SourceConfig.defaults());
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var tar = FeedSource.of(tarObjects, null);
            assertInstanceOf(WebDatasetRecords.class, tar.records());
            var fromTar = FeederTest.run(config(FeedMode.PREFETCH, OPTIONS), tar, STEPS);
            FeederTest.assertSameBatches(reference, fromTar, "tar members vs clip files");
            for (var b : fromTar) VideoFeedTest.assertVideosOf(b, expected);
            FeederTest.assertSameBatches(reference, zeroCopy(tar, store, OPTIONS), "tar members written in place");
            FeederTest.assertSameBatches(reference, zeroCopy(tar, store, OPTIONS.withVideo(VideoEncoding.defaults()
                    .withDecode(VideoEncoding.Decode.WORKERS))), "tar members decoded in worker processes (read through their protocol)");
            var encoder = new SampleEncoder(OPTIONS, SharedTokenizer.get());
            var records = tar.records();
            for (int i = 0; i < records.size(); i++) { // the one-off path (bench video) reads carried videos the same way
                var e = encoder.encodeRecord(records.record(i).get(30, TimeUnit.SECONDS), records.id(i), (id, ref) -> {
                    throw new AssertionError("no image is fetched by reference: " + ref);
                }, null, SampleEncoder.PixelBuffers.FRESH);
                var want = expected.get(e.id());
                org.junit.jupiter.api.Assertions.assertArrayEquals(want.inputIds(), e.inputIds(), e.id());
                org.junit.jupiter.api.Assertions.assertArrayEquals(want.videos().videoGridThw(), e.videos().videoGridThw(), e.id());
                org.junit.jupiter.api.Assertions.assertArrayEquals(want.videos().pixelValuesVideos(), e.videos().pixelValuesVideos(), e.id());
            }
            var fromParquet = FeederTest.run(config(FeedMode.PREFETCH, OPTIONS), FeedSource.of(parquetObjects, null), STEPS);
            FeederTest.assertSameBatches(reference, fromParquet, "Parquet cells vs clip files");
            for (var b : fromParquet) VideoFeedTest.assertVideosOf(b, expected);
        }
    }

    /**
     * {@code stoker validate} over the shard and the Parquet file: with video every record kept, each length the
     * encoder's input_ids length for the manifest's sample and each video's t·h·w its grid's (the carried videos are
     * indexed, never decoded); without video the samples carrying one are errors, "video is not supported".
     */
    @Test
    void validateReadsTheCarriedVideos() throws Exception {
        var expected = expected();
        for (Path data : List.of(shard, parquet)) {
            try (var objects = ObjectSources.open(data.toString(), SourceConfig.defaults())) {
                var source = FeedSource.of(objects, null);
                var records = source.records();
                var report = dev.stoker.encode.validate.DatasetValidator.validate(records, source, SharedTokenizer.get(),
                        new dev.stoker.encode.validate.DatasetValidator.Settings(OPTIONS, 2, 4, 3));
                assertEquals(0, report.errors(), data + ": " + report.causes());
                assertEquals(5, report.videos(), data + ": videos");
                for (int i = 0; i < records.size(); i++) {
                    var want = expected.get(SAMPLES.get(i).id());
                    assertEquals(want.inputIds().length, report.lengths()[i], data + " record " + i);
                    long[] grid = want.videos().videoGridThw();
                    int[] patches = report.videoPatches()[i] == null ? new int[0] : report.videoPatches()[i];
                    assertEquals(grid.length / 3, patches.length, data + " record " + i);
                    for (int k = 0; k < patches.length; k++) assertEquals(grid[3 * k] * grid[3 * k + 1] * grid[3 * k + 2], patches[k]);
                }
                var without = dev.stoker.encode.validate.DatasetValidator.validate(records, source, SharedTokenizer.get(),
                        new dev.stoker.encode.validate.DatasetValidator.Settings(FeederTest.OPTIONS, 2, 4, 3));
                assertEquals(WITH_VIDEO.size(), without.errors(), data + ": " + without.causes());
                assertEquals(java.util.Set.of("video is not supported"),
                        without.causes().stream().map(c -> c.key().reason()).collect(java.util.stream.Collectors.toSet()), data.toString());
            }
        }
    }

    /** The zero-copy batches of {@code source}, read back from their objects. */
    private List<Batch> zeroCopy(FeedSource source, ShmObjectStore store, EncodeOptions options) throws Exception {
        var out = new ArrayList<Batch>();
        try (var feeder = Feeder.start(config(FeedMode.ZERO_COPY, options), source, SharedTokenizer.get(), store)) {
            for (int s = 0; s < STEPS; s++)
                for (int r = 0; r < RANKS; r++) {
                    StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                    out.add(ZeroCopyFeederTest.toHeap(b));
                    b.release();
                }
        }
        assertEquals(0, store.metrics().inUseBytes());
        return out;
    }

    @Test
    void withoutVideoTheSamplesCarryingOneAreRefusedAsBeforeAndTheOthersServed() throws Exception {
        for (Path data : List.of(shard, parquet)) {
            try (var objects = ObjectSources.open(data.toString(), SourceConfig.defaults())) {
                var batches = FeederTest.run(config(FeedMode.PREFETCH, FeederTest.OPTIONS), FeedSource.of(objects, null), STEPS);
                var served = new TreeSet<String>();
                var refused = new TreeSet<String>();
                for (var b : batches) {
                    assertEquals(null, b.videos(), "no video tensor without video");
                    served.addAll(b.sampleIds());
                    for (var s : b.skippedSamples()) {
                        assertEquals(SampleException.Stage.MANIFEST, s.stage(), s.toString());
                        assertTrue(s.cause().startsWith("video is not supported: the record's source carries video "), s.toString());
                        refused.add(s.sampleId());
                    }
                }
                assertEquals(new TreeSet<>(WITH_VIDEO), refused, data.toString());
                assertEquals(new TreeSet<>(List.of("s2", "s3")), served, data.toString());
            }
        }
    }

    /**
     * A tar member is read in ranges of its shard: the frames near the end of a ~10 MB clip (a keyframe a second) decode
     * from the blocks after the keyframe before them, a fraction of the member; indexing reads the packets, streamed
     * through the same bounded blocks.
     */
    @Test
    void decodingNearTheEndOfAMemberFetchesAFractionOfIt() throws Exception {
        Path big = FfmpegClips.make(dir.resolve("big.mp4"), "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25:duration=20", "-c:v",
                "libx264", "-preset", "ultrafast", "-g", "25", "-b:v", "4M", "-pix_fmt", "yuv420p");
        Path tarFile = dir.resolve("big.tar");
        try (OutputStream out = Files.newOutputStream(tarFile); var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            put(tar, "big.json", json(new Sample("big", "<video>?", ".", List.of("big.mp4"), List.of()), false).getBytes(StandardCharsets.UTF_8));
            put(tar, "big.mp4", Files.readAllBytes(big));
        }
        try (var objects = ObjectSources.open(tarFile.toString(), SourceConfig.defaults())) {
            SampleRecords.Record record = FeedSource.of(objects, null).records().record(0).get(30, TimeUnit.SECONDS);
            var video = record.videos().getFirst();
            long member = Files.size(big);
            assertEquals(member, video.sizeBytes());
            assertTrue(member > 6 * RangedObjectBytes.BLOCK_BYTES, member + " bytes");
            dev.stoker.video.index.FrameIndex index;
            try (var s = (RangedObjectBytes) video.open()) {
                index = new FrameIndexer().index(s);
                assertTrue(s.bytesFetched() >= member - RangedObjectBytes.BLOCK_BYTES, "indexing demuxes every packet: " + s.bytesFetched());
            }
            int n = index.frameCount();
            assertEquals(500, n);
            int[] last = {n - 3, n - 2, n - 1};
            try (var s = (RangedObjectBytes) video.open()) {
                var result = VideoDecoder.decode(s, index, last, System.nanoTime() + TimeUnit.SECONDS.toNanos(30), (f, w, h, rgb) -> {});
                assertEquals(3, result.framesKept());
                assertTrue(result.framesDecoded() <= 25, "from the keyframe before them: " + result.framesDecoded());
                assertTrue(s.bytesFetched() * 4 < member, s.bytesFetched() + " bytes fetched of a member of " + member);
                System.out.printf("decoding 3 frames at the end of a %d-byte member fetched %d bytes in %d blocks%n", member,
                        s.bytesFetched(), s.fetches());
            }
        }
    }
}
