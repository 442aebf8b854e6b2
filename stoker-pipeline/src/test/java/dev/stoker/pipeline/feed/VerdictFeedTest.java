package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.observe.BottleneckVerdict;
import dev.stoker.source.mix.FeedSource;
import java.awt.image.BufferedImage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** Constructed slow-fetch, slow-CPU and slow-trainer runs must each get their verdict. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
@Tag("slow")
@ExtendWith(SharedTokenizer.class)
class VerdictFeedTest {
    static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176);
    static final EncodeOptions BIG = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 1_003_520);

    @TempDir Path tmp;

    /** Every object arrives {@code delayMillis} late. */
    record SlowSource(LocalFeedSource inner, long delayMillis) implements FeedSource {
        @Override
        public CompletableFuture<byte[]> fetchManifest() { return inner.fetchManifest(); }

        @Override
        public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
            var delayed = CompletableFuture.delayedExecutor(delayMillis, TimeUnit.MILLISECONDS);
            return CompletableFuture.supplyAsync(() -> null, delayed).thenCompose(v -> inner.fetch(sampleId, reference));
        }

        @Override
        public String manifestName() { return inner.manifestName(); }
    }

    /** Takes rank 0's batches for {@code millis}, sleeping {@code trainerMillis} after each; returns the verdict. */
    static BottleneckVerdict run(FeedConfig config, FeedSource source, long millis, long trainerMillis) throws Exception {
        try (var feeder = Feeder.start(config, source, SharedTokenizer.get())) {
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
            int batches = 0;
            while (System.nanoTime() < end) {
                feeder.rank(0).next().get(30, TimeUnit.SECONDS);
                batches++;
                if (trainerMillis > 0) Thread.sleep(trainerMillis);
            }
            var v = feeder.verdict();
            var m = feeder.metrics();
            System.out.println(config.mode() + " batches=" + batches + " ticks=" + feeder.timeline().ticks().size() + " stages="
                    + m.stages() + "\n  verdict: " + v.text() + " " + v.figures());
            assertTrue(feeder.timeline().ticks().size() >= millis / 100 - 5, "sampled every 100 ms");
            assertTrue(m.stages().containsKey("fetch") && m.stages().containsKey("encode") && m.stages().containsKey("deliver"),
                    "stages: " + m.stages().keySet());
            return v;
        }
    }

    @Test
    void slowFetchIsIoBound() throws Exception {
        Path manifest = TestDatasets.write(tmp, 40, Set.of());
        var config = FeedConfig.of(FeedMode.PREFETCH, OPTIONS, 1, 4).withCpuThreads(2).withFetchConcurrency(1).withWarmUp(0);
        try (var source = new LocalFeedSource(manifest, 0)) {
            var v = run(config, new SlowSource(source, 200), 4000, 0);
            assertEquals(BottleneckVerdict.Kind.IO_BOUND, v.kind(), v.text());
            assertTrue(v.text().startsWith("I/O-bound: fetch in-flight pinned at 1"), v.text());
        }
    }

    /**
     * A slow CPU stage, constructed: every sample one 2,400 × 1,800 noise JPEG (decoded and resized to at most 1 MP, tens
     * of milliseconds on the one CPU thread) against a local read of a few milliseconds. With the test data set's small
     * images (a few milliseconds of CPU, one sample in seven none) the pool waited for its input 30% of the time on a
     * loaded machine, where the stream's and the fetch's threads queue for a core as long as an encode takes, and the
     * run read as balanced.
     */
    static Path bigImages(Path dir, int samples) throws Exception {
        Path images = Files.createDirectories(dir.resolve("images"));
        var image = new BufferedImage(2400, 1800, BufferedImage.TYPE_INT_RGB);
        var random = new Random(7);
        for (int y = 0; y < image.getHeight(); y++)
            for (int x = 0; x < image.getWidth(); x++)
                image.setRGB(x, y, (x * 255 / image.getWidth()) << 16 | (y * 255 / image.getHeight()) << 8 | random.nextInt(256));
        ImageIO.write(image, "jpg", images.resolve("big.jpg").toFile());
        var sb = new StringBuilder();
        for (int i = 0; i < samples; i++)
            sb.append("{\"id\": \"s").append(i).append("\", \"image\": \"images/big.jpg\", \"conversations\": [")
                    .append("{\"from\": \"human\", \"value\": \"<image>\\nWhat is shown here?\"}, ")
                    .append("{\"from\": \"gpt\", \"value\": \"Noise over a gradient.\"}]}\n");
        return Files.writeString(dir.resolve("train.jsonl"), sb.toString());
    }

    @Test
    void slowCpuIsCpuBound() throws Exception {
        Path manifest = bigImages(tmp, 40);
        var config = FeedConfig.of(FeedMode.PREFETCH, BIG, 1, 4).withCpuThreads(1).withFetchConcurrency(8).withWarmUp(0);
        try (var source = new LocalFeedSource(manifest, 0)) {
            var v = run(config, source, 3000, 0);
            assertEquals(BottleneckVerdict.Kind.CPU_BOUND, v.kind(), v.text());
            assertTrue(v.text().startsWith("CPU-bound: decode pool busy"), v.text());
        }
    }

    @Test
    void slowTrainerIsTrainerBound() throws Exception {
        Path manifest = TestDatasets.write(tmp, 40, Set.of());
        var config = FeedConfig.of(FeedMode.PREFETCH, OPTIONS, 1, 4).withCpuThreads(2).withFetchConcurrency(4).withPrefetch(2, 1L << 30).withWarmUp(0);
        try (var source = new LocalFeedSource(manifest, 0)) {
            var v = run(config, source, 3500, 300);
            assertEquals(BottleneckVerdict.Kind.TRAINER_BOUND, v.kind(), v.text());
            assertTrue(v.text().contains("data is not the bottleneck"), v.text());
        }
    }
}
