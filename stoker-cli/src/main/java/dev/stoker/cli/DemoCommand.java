package dev.stoker.cli;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.EncodedSample;
import dev.stoker.pipeline.JsonlManifest;
import dev.stoker.pipeline.SampleEncoder;
import dev.stoker.text.QwenTokenizer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker demo}: the most complete job Stoker can run, on embedded defaults. Today: build a
 * data set from the bundled photos, preprocess it (decode, Qwen-VL transform, tokenize) on every
 * core, bit-exact and in fast mode, then run the wait-time ladder (serial → concurrent → prefetch → zero-copy)
 * against simulated trainer processes with simulated object-storage latency.
 */
@Command(name = "demo", mixinStandardHelpOptions = true,
        description = "Build a small data set from real photos and preprocess it, printing throughput.")
final class DemoCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--dir", description = "Where the demo data set goes (default: <stoker home>/.stoker/demo).")
    Path dir;

    @Option(names = "--samples", defaultValue = "300", description = "Samples in the demo data set (default: ${DEFAULT-VALUE}).")
    int samples;

    @Option(names = "--processor", defaultValue = "qwen2.5-vl", description = "Model family (default: ${DEFAULT-VALUE}).")
    String processor;

    @Option(names = "--max-pixels", defaultValue = "451584",
            description = "Upper bound of the resized area, as the official SFT default 28²·576 (default: ${DEFAULT-VALUE}).")
    long maxPixels;

    @Option(names = "--ladder-steps", defaultValue = "20", description = "Steps per rank and mode in the ladder, 0 to skip it (default: ${DEFAULT-VALUE}).")
    int ladderSteps;

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        Path home = Path.of(System.getProperty("stoker.home", ".")).toAbsolutePath().normalize();
        Path photos = home.resolve("assets/photos");
        if (!Files.isDirectory(photos)) throw new Main.InvalidInputException("bundled photos not found under " + photos);
        Path target = dir != null ? dir : home.resolve(".stoker/demo");
        var preset = ProcessorPreset.fromName(processor);
        int threads = Runtime.getRuntime().availableProcessors();

        out.printf("Stoker demo: %s, %d cores, JPEG via %s%n", preset, threads,
                ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo (FFM)" : "ImageIO (libturbojpeg0 not found)");
        long t0 = System.nanoTime();
        Path manifestFile = new DemoDatasetBuilder().build(photos, target, samples, 42);
        out.printf("1. data set     %s: %d samples from %s (%.1f s)%n", manifestFile, samples, photos,
                (System.nanoTime() - t0) / 1e9);

        var manifest = JsonlManifest.read(manifestFile);
        var options = EncodeOptions.defaults(preset).withPixels(preset.vision().minPixels(), maxPixels);
        try (QwenTokenizer tok = QwenTokenizer.bundled()) {
            var first = manifest.lines().get(0);
            EncodedSample s;
            try (var images = dev.stoker.source.ObjectSources.open(manifestFile.toAbsolutePath().toString(), dev.stoker.source.SourceConfig.defaults())) {
                s = new SampleEncoder(options, tok).encodeLine(first.bytes(), first.id(), SampleEncoder.ImageSource.blocking(images));
            }
            out.printf("2. one sample   %s: input_ids (%d), labels (%d, %d supervised), position_ids (3, %d), "
                            + "pixel_values (%d, %d), image_grid_thw %s%n",
                    s.id(), s.length(), s.length(), supervised(s.labels()), s.length(), s.pixelRows(), s.pixelRowLength(),
                    java.util.Arrays.toString(s.imageGridThw()));
            int warm = Math.min(100, manifest.size());
            PreprocessBench.run(manifest, manifest.lines().subList(0, warm), threads, options, tok);
            var exact = PreprocessBench.run(manifest, manifest.lines(), threads, options, tok);
            var fast = PreprocessBench.run(manifest, manifest.lines(), threads, options.withDecodeScale(EncodeOptions.DecodeScale.AUTO), tok);
            out.printf("3. preprocess   exact (bit-exact with HF): %7.1f samples/s  %6.1f source MP/s  (%d samples, %d errors, %.2f s)%n",
                    exact.samplesPerSecond(), exact.megapixelsPerSecond(), exact.samples(), exact.errors(), exact.seconds());
            out.printf("                fast (DCT-scaled decode):  %7.1f samples/s  %6.1f source MP/s  (%d samples, %d errors, %.2f s)%n",
                    fast.samplesPerSecond(), fast.megapixelsPerSecond(), fast.samples(), fast.errors(), fast.seconds());
        }
        if (ladderSteps > 0) {
            out.printf("4. ladder       2 trainer processes, batch 4, step 250 ms, %d steps, 30 ms object-storage latency:%n", ladderSteps);
            out.flush();
            var args = new String[] {"bench", "ladder", "--data", manifestFile.toString(), "--ranks", "2", "--batch", "4",
                    "--step-ms", "250", "--steps", Integer.toString(ladderSteps), "--fetch-latency-ms", "30",
                    "--processor", processor, "--max-pixels", Long.toString(maxPixels),
                    "--work-dir", target.resolve("ladder").toString()};
            int status = Main.run(args, out, spec.commandLine().getErr());
            if (status != 0) return status;
        }
        out.printf("Full-size runs: ./stoker bench preprocess|ladder --data %s (see docs/benchmarks.md).%n", manifestFile);
        return 0;
    }

    private static int supervised(long[] labels) {
        int n = 0;
        for (long l : labels) if (l != -100) n++;
        return n;
    }
}
