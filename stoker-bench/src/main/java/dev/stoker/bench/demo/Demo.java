package dev.stoker.bench.demo;

import dev.stoker.bench.ladder.LadderBench;
import dev.stoker.bench.preprocess.PreprocessBench;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * {@code stoker demo}: the most complete job Stoker can run, on embedded defaults. Builds a data set
 * from the bundled photos ({@link DemoDatasetBuilder}), preprocesses it (decode, Qwen-VL transform,
 * tokenize) on every core, bit-exact and in fast mode, then runs the wait-time ladder (serial →
 * concurrent → prefetch → zero-copy) against simulated trainer processes with simulated
 * object-storage latency (the ladder runs without the cache of preprocessed samples, so that each rung decodes), plans
 * packs, and last serves one epoch twice through the cache: cold (an empty folder), then warm (a restart over it).
 */
public final class Demo {
    /**
     * @param home        the Stoker home: its {@code assets/photos} are the demo's photos
     * @param dir         where the demo data set goes (null: {@code home/.stoker/demo})
     * @param samples     samples in the demo data set
     * @param processor   model family
     * @param maxPixels   upper bound of the resized area
     * @param ladderSteps steps per rank and mode in the ladder, 0 to skip it
     */
    public record Settings(Path home, Path dir, int samples, String processor, long maxPixels, int ladderSteps) {}

    private Demo() {}

    public static void run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        Path photos = s.home().resolve("assets/photos");
        if (!Files.isDirectory(photos)) throw new ConfigException("bundled photos not found under " + photos);
        Path target = s.dir() != null ? s.dir() : s.home().resolve(".stoker/demo");
        ProcessorPreset preset = NodeConfig.PROCESSOR_KEY.parse(s.processor());
        int threads = Runtime.getRuntime().availableProcessors();

        out.printf("Stoker demo: %s, %d cores, JPEG via %s%n", preset, threads,
                ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo (FFM)" : "ImageIO (libturbojpeg0 not found)");
        long t0 = System.nanoTime();
        Path manifestFile = new DemoDatasetBuilder().build(photos, target, s.samples(), 42);
        out.printf("1. data set     %s: %d samples from %s (%.1f s)%n", manifestFile, s.samples(), photos, (System.nanoTime() - t0) / 1e9);

        var options = EncodeOptions.defaults(preset).withPixels(preset.vision().minPixels(), s.maxPixels());
        try (QwenTokenizer tok = QwenTokenizer.bundled();
             var sources = DataSources.open(List.of(new DataSources.Spec(manifestFile.toString())), SourceConfig.defaults(), null)) {
            var source = sources.feedSource();
            var records = source.records();
            EncodedSample e = PreprocessBench.encode(new SampleEncoder(options, tok), source, records, 0);
            out.printf("2. one sample   %s: input_ids (%d), labels (%d, %d supervised), position_ids (3, %d), "
                            + "pixel_values (%d, %d), image_grid_thw %s%n",
                    e.id(), e.length(), e.length(), supervised(e.labels()), e.length(), e.pixelRows(), e.pixelRowLength(),
                    Arrays.toString(e.imageGridThw()));
            int n = records.size(), warm = Math.min(100, n);
            PreprocessBench.measure(source, records, warm, threads, options, tok);
            var exact = PreprocessBench.measure(source, records, n, threads, options, tok);
            var fast = PreprocessBench.measure(source, records, n, threads, options.withDecodeScale(EncodeOptions.DecodeScale.AUTO),
                    tok);
            out.printf("3. preprocess   exact (bit-exact with HF): %7.1f samples/s  %6.1f source MP/s  (%d samples, %d errors, %.2f s)%n",
                    exact.samplesPerSecond(), exact.megapixelsPerSecond(), exact.samples(), exact.errors(), exact.seconds());
            out.printf("                fast (DCT-scaled decode):  %7.1f samples/s  %6.1f source MP/s  (%d samples, %d errors, %.2f s)%n",
                    fast.samplesPerSecond(), fast.megapixelsPerSecond(), fast.samples(), fast.errors(), fast.seconds());
        }
        if (s.ladderSteps() > 0) {
            out.printf("4. ladder       2 trainer processes, batch 4, step 250 ms, %d steps, 30 ms object-storage latency:%n", s.ladderSteps());
            out.flush();
            var config = NodeConfig.builder().data(manifestFile.toString()).ranks(2).batch(4).processor(preset)
                    .set(NodeConfig.FETCH_LATENCY_MS, 30L).set(NodeConfig.MAX_PIXELS, s.maxPixels()).build();
            LadderBench.run(new LadderBench.Settings(config, 250, s.ladderSteps(), LadderBench.MODES, "java", target.resolve("ladder")), out);
        }
        packing(manifestFile, preset, s.maxPixels(), out);
        cache(manifestFile, s.samples(), preset, s.maxPixels(), target.resolve("cache"), out);
        out.printf("Full-size runs: ./stoker bench preprocess|ladder|packing --data %s (see docs/benchmarks.md).%n", manifestFile);
        out.flush();
    }

    /**
     * The demo data set planned into packs for 2 ranks of 4096 tokens, without decoding (shapes from image headers):
     * padding and imbalance balanced by predicted cost and by count, beside today's padded batches ({@code bench packing}).
     */
    private static void packing(Path manifestFile, ProcessorPreset preset, long maxPixels, PrintWriter out) throws IOException {
        out.printf("5. packing      2 ranks, packs of at most 4096 tokens (--pack-tokens 4096), planned from image headers:%n");
        out.flush();
        var config = NodeConfig.builder().data(manifestFile.toString()).ranks(2).processor(preset)
                .set(NodeConfig.PACK_TOKENS, 4096).set(NodeConfig.MAX_PIXELS, maxPixels).build();
        try {
            dev.stoker.bench.packing.PackingBench.run(config, null, 3, 1, out, line -> { });
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IOException("packing the demo data set: " + e, e);
        }
    }

    /**
     * The cache of preprocessed samples as a restart meets it: an embedded node serves one epoch (batch 4, one rank) to an
     * in-process trainer with an empty {@code --cache-dir} (cold), then a new node serves it again over the same folder
     * (warm); samples/s of each (from the trainer's first request to its last batch, the node's start not counted) and
     * the cache's counters.
     */
    private static void cache(Path manifestFile, int samples, ProcessorPreset preset, long maxPixels, Path dir, PrintWriter out)
            throws IOException, InterruptedException {
        out.printf("6. cache        one epoch served twice through --cache-dir %s: cold (empty), then warm (a restart over it):%n", dir);
        out.flush();
        if (Files.exists(dir)) try (var walk = Files.walk(dir)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) Files.delete(p);
        }
        double cold = 0;
        for (String run : List.of("cold", "warm")) {
            int steps = samples / 4;
            Path work = Files.createDirectories(dir.resolveSibling("cache-run"));
            var config = NodeConfig.builder().data(manifestFile.toString()).ranks(1).batch(4).steps(steps).processor(preset)
                    .set(NodeConfig.MAX_PIXELS, maxPixels).set(NodeConfig.CACHE, true).set(NodeConfig.CACHE_DIR, dir)
                    .socket(work.resolve("demo-cache.sock")).build();
            long taken = 0, t0;
            dev.stoker.cache.CacheStats stats;
            try (var node = dev.stoker.node.StokerNode.launch(config, line -> { });
                 var client = dev.stoker.transport.TrainerClient.connect(node.socket(), 0, 1, "default",
                         dev.stoker.transport.TrainerClient.Options.SHARED_MEMORY)) {
                t0 = System.nanoTime();
                for (int i = 0; i < steps; i++) try (var got = client.next()) {
                    taken += got.batch().meta().batchSize();
                }
                stats = node.ledger().feeder().config().cache().store().stats();
            }
            double perSecond = taken / ((System.nanoTime() - t0) / 1e9);
            if (run.equals("cold")) cold = perSecond;
            out.printf("                %-4s %7.1f samples/s%s  (%d hits, %d misses, %.1f MB on disk, %.0f KB per entry)%n", run, perSecond,
                    run.equals("warm") && cold > 0 ? String.format(java.util.Locale.ROOT, ", %.1fx cold", perSecond / cold) : "",
                    stats.hits(), stats.misses(), stats.storedBytes() / 1e6, stats.entries() == 0 ? 0.0 : stats.storedBytes() / 1e3 / stats.entries());
            out.flush();
        }
    }

    private static int supervised(long[] labels) {
        int n = 0;
        for (long l : labels) if (l != -100) n++;
        return n;
    }
}
