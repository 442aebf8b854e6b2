package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.text.SampleParser;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Videos given as lists of frame images through the feed (issue 29, Build item 2), {@code --video-sampler
 * qwen-vl-utils}: the fetch stage reads the frames with the sample's images (concurrently, a frame that is also one of
 * its images once), and the batches' {@code pixel_values_videos}, {@code video_grid_thw} and
 * {@code second_per_grid_ts} are, sample by sample, what {@code stoker encode}'s encoder gives (bit for bit; that
 * encoder is held to qwen-vl-utils + transformers by stoker-encode's FrameListVideoTest), on the heap and written in
 * place alike. A missing frame is its sample's fetch error naming the frame; frames of different sizes their sample's
 * error; the feed goes on. Needs neither FFmpeg nor Python.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class FrameListFeedTest {
    static final int RANKS = 2, BATCH = 2, STEPS = 2;
    static final EncodeOptions OPTIONS = FeederTest.OPTIONS.withVideo(new VideoEncoding(VideoSampler.QWEN_VL_UTILS,
            VideoOptions.DEFAULTS, null, VideoContract.OFFICIAL, CpuCapability.AVX2, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS));

    @TempDir static Path dir;
    @TempDir Path shm;
    static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        Path media = Files.createDirectories(dir.resolve("media"));
        for (int k = 0; k < 5; k++) Files.write(media.resolve("f" + k + ".png"), png(80, 60, k));
        Files.write(media.resolve("wide.png"), png(200, 60, 9));
        String[] records = {
            record("s0", frames("f0", "f1", "f2"), null),
            record("s1", frames("f3", "f4"), "media/f4.png"), // an image that is also one of its frames
            "{\"id\": \"s2\", \"messages\": [{\"role\": \"user\", \"content\": \"Say hello.\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}",
            record("s3", frames("f4", "f3", "f2", "f1"), null),
            record("s4", frames("f0", "gone"), null),
            record("s5", frames("f1"), null),
            record("s6", frames("f0", "wide"), null),
            record("s7", frames("f2", "f0", "f1"), null),
        };
        manifest = Files.writeString(dir.resolve("train.jsonl"), String.join("\n", records) + "\n");
    }

    static List<String> frames(String... names) {
        var out = new ArrayList<String>();
        for (String n : names) out.add("media/" + n + ".png");
        return out;
    }

    static byte[] png(int w, int h, int seed) throws Exception {
        var img = new BufferedImage(w, h, BufferedImage.TYPE_INT_RGB);
        var rnd = new java.util.Random(seed);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) img.setRGB(x, y, ((x * 3 + seed * 40) & 0xFF) << 16 | ((y * 4) & 0xFF) << 8 | rnd.nextInt(256));
        var out = new ByteArrayOutputStream();
        ImageIO.write(img, "png", out);
        return out.toByteArray();
    }

    /** An HF messages record on one line: a frame-list video (small: min_pixels 784, total_pixels 4704), maybe an image. */
    static String record(String id, List<String> frames, String image) {
        var sb = new StringBuilder("{\"id\": \"").append(id).append("\", \"messages\": [{\"role\": \"user\", \"content\": [");
        if (image != null) sb.append("{\"type\": \"image\", \"image\": \"").append(image).append("\"}, ");
        sb.append("{\"type\": \"video\", \"video\": [\"").append(String.join("\", \"", frames))
                .append("\"], \"min_pixels\": 784, \"total_pixels\": 4704}, {\"type\": \"text\", \"text\": \"What happens?\"}]}, ")
                .append("{\"role\": \"assistant\", \"content\": \"Colours move.\"}]}");
        return sb.toString();
    }

    /** What {@code stoker encode}'s encoder makes of each sample that encodes, by id (frames read by blocking reads). */
    static Map<String, dev.stoker.encode.EncodedSample> expected() throws Exception {
        var out = new HashMap<String, dev.stoker.encode.EncodedSample>();
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        try (var objects = ObjectSources.open(manifest.toAbsolutePath().toString(), SourceConfig.defaults())) {
            var encoder = new SampleEncoder(OPTIONS, SharedTokenizer.get());
            for (String line : Files.readAllLines(manifest)) {
                var sample = parser.parseLine(line.getBytes(StandardCharsets.UTF_8), "?");
                try {
                    out.put(sample.id(), encoder.encode(sample, SampleEncoder.ImageSource.blocking(objects), (id, ref) -> {
                        throw new java.io.IOException("no video files here");
                    }));
                } catch (SampleException e) {
                    // s4, s6: the feed must skip them too (checked below)
                }
            }
        }
        return out;
    }

    @Test
    void frameListBatchesEqualTheEncodersSamplesOnTheHeapAndInPlace() throws Exception {
        var expected = expected();
        assertEquals(List.of("s0", "s1", "s2", "s3", "s5", "s7"), expected.keySet().stream().sorted().toList(), "the samples that encode");
        assertEquals(2, expected.get("s0").videos().videoGridThw()[0], "3 frames padded to 4: two temporal groups");
        try (var source = new LocalFeedSource(manifest, 2);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var heap = FeederTest.run(VideoFeedTest.config(FeedMode.PREFETCH, OPTIONS), source, STEPS);
            var inPlace = VideoFeedTest.zeroCopy(VideoFeedTest.config(FeedMode.ZERO_COPY, OPTIONS), source, store);
            FeederTest.assertSameBatches(heap, inPlace, "in place");
            int withVideo = 0;
            var skipped = new ArrayList<String>();
            for (Batch b : heap) {
                b.skippedSamples().forEach(s -> skipped.add(s.sampleId() + "@" + s.stage() + ": " + s.cause()));
                VideoFeedTest.assertVideosOf(b, expected);
                if (b.videos() != null) withVideo++;
            }
            assertTrue(withVideo >= 2, withVideo + " batches with videos");
            skipped.sort(null);
            assertEquals(2, skipped.size(), skipped.toString());
            assertTrue(skipped.get(0).startsWith("s4@FETCH") && skipped.get(0).contains("media/gone.png"), skipped.get(0));
            assertTrue(skipped.get(1).startsWith("s6@") && skipped.get(1).contains("different sizes"), skipped.get(1));
        }
    }
}
