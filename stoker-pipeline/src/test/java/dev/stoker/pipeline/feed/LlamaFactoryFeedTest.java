package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.RangedObjectBytes;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.text.SampleParser;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
 * {@code --video-sampler llamafactory} through the feed (issue 29, Build item 5): batches whose
 * {@code pixel_values_videos}, {@code video_grid_thw} and {@code second_per_grid_ts} are, sample by sample, what
 * {@code stoker encode}'s encoder gives (bit for bit; that encoder is held to LLaMA-Factory + transformers by
 * stoker-encode's LlamaFactoryVideoTest), decoded in this process and in worker processes alike: the Pillow pre-resize
 * runs on the frames the workers hand back. Clips made by {@link FfmpegClips}, over video_max_pixels (pre-resized) and
 * under it.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class LlamaFactoryFeedTest {
    static final int STEPS = 2;
    static final VideoEncoding LF = new VideoEncoding(VideoSampler.LLAMAFACTORY, VideoOptions.DEFAULTS, null, VideoContract.OFFICIAL,
            CpuCapability.AVX2, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
    static final EncodeOptions OPTIONS = FeederTest.OPTIONS.withVideo(LF);

    @TempDir static Path dir;
    @TempDir Path shm;
    static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path media = Files.createDirectories(dir.resolve("media"));
        FfmpegClips.h264(media.resolve("big.mp4"), "400x300", "6", 1.5);
        FfmpegClips.h264(media.resolve("small.mp4"), "160x120", "5", 1.0);
        String[] records = new String[8];
        for (int i = 0; i < records.length; i++)
            records[i] = "{\"id\": \"s" + i + "\", \"messages\": [{\"role\": \"user\", \"content\": \"<video>What moves?\"}, "
                    + "{\"role\": \"assistant\", \"content\": \"Colours.\"}], \"videos\": [\"media/" + (i % 2 == 0 ? "big" : "small") + ".mp4\"]}";
        manifest = Files.writeString(dir.resolve("train.jsonl"), String.join("\n", records) + "\n");
    }

    static Map<String, dev.stoker.encode.EncodedSample> expected() throws Exception {
        var out = new HashMap<String, dev.stoker.encode.EncodedSample>();
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
    void batchesEqualTheEncodersSamplesInProcessAndInWorkers() throws Exception {
        var expected = expected();
        // 400x300 → Pillow 295x221 → Qwen2.5's smart_resize 224x308: 3 picks padded to 4, grid 2x16x22
        assertEquals(List.of(2L, 16L, 22L), java.util.Arrays.stream(expected.get("s0").videos().videoGridThw()).boxed().toList());
        try (var source = new LocalFeedSource(manifest, 2);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var heap = FeederTest.run(VideoFeedTest.config(FeedMode.PREFETCH, OPTIONS.withVideo(LF.withDecode(VideoEncoding.Decode.IN_PROCESS))),
                    source, STEPS);
            var workers = VideoFeedTest.zeroCopy(VideoFeedTest.config(FeedMode.ZERO_COPY, OPTIONS.withVideo(LF.withDecode(VideoEncoding.Decode.WORKERS))),
                    source, store);
            FeederTest.assertSameBatches(heap, workers, "decoded in worker processes");
            int withVideo = 0;
            for (Batch b : heap) {
                assertTrue(b.skippedSamples().isEmpty(), b.skippedSamples().toString());
                VideoFeedTest.assertVideosOf(b, expected);
                if (b.videos() != null) withVideo++;
            }
            assertEquals(heap.size(), withVideo, "every batch holds videos");
        }
    }
}
