package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.pipeline.JsonlManifest;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** {@code stoker bench …}: whole-pipeline benchmarks (kernels are JMH: {@code ./stoker jmh}). */
@Command(name = "bench", mixinStandardHelpOptions = true, description = "Benchmarks of whole pipelines.",
        subcommands = {BenchCommand.Preprocess.class, BenchCommand.Decode.class, LadderCommand.class, HandoffBench.class, FlightBench.class,
                SoakCommand.class, ClusterBench.class, WireBench.class})
final class BenchCommand {

    /** {@code stoker bench preprocess}: decode + transform + tokenize over a data set. */
    @Command(name = "preprocess", mixinStandardHelpOptions = true,
            description = {"Decode + transform + tokenize every sample of a data set on N threads.",
                    "The last stdout line is JSON {\"samples_per_s\":…, \"mpix_per_s\":…, \"threads\":…}; mpix_per_s counts "
                            + "source pixels as stored (before any DCT scaling)."})
    static final class Preprocess implements Callable<Integer> {
        @Spec CommandSpec spec;
        @Mixin ProcessorOptions processor;

        @Option(names = "--data", required = true, description = "The data set's train.jsonl (images relative to its folder).")
        Path data;

        @Option(names = "--threads", description = "CPU threads (default: the number of cores).")
        Integer threads;

        @Option(names = "--limit", defaultValue = "0", description = "Samples to time, 0 for all (default: ${DEFAULT-VALUE}).")
        int limit;

        @Option(names = "--warmup", defaultValue = "200",
                description = "Samples encoded before timing starts, to let the JIT compile the hot paths (default: ${DEFAULT-VALUE}).")
        int warmup;

        @Option(names = "--tokenizer", description = "tokenizer.json (or .json.gz); default: the bundled Qwen2 tokenizer.")
        Path tokenizer;

        @Override
        public Integer call() throws IOException, InterruptedException {
            PrintWriter out = spec.commandLine().getOut();
            var options = processor.toEncodeOptions();
            if (!Files.isRegularFile(data)) throw new Main.InvalidInputException(data + ": no such manifest");
            var manifest = JsonlManifest.read(data);
            var lines = manifest.lines();
            if (limit > 0 && limit < lines.size()) lines = lines.subList(0, limit);
            int n = threads == null ? Runtime.getRuntime().availableProcessors() : threads;
            if (n < 1) throw new Main.InvalidInputException("--threads must be at least 1");
            try (QwenTokenizer tok = Tokenizers.open(tokenizer)) {
                if (warmup > 0) PreprocessBench.run(manifest, lines.subList(0, Math.min(warmup, lines.size())), n, options, tok);
                var r = PreprocessBench.run(manifest, lines, n, options, tok);
                out.printf("data          %s (%d samples timed, %d warm-up)%n", data, lines.size(), Math.min(warmup, lines.size()));
                out.printf("processor     %s, pixels %d..%d, exif %s, decode-scale %s, jpeg %s%n", options.preset(),
                        options.vision().minPixels(), options.vision().maxPixels(), options.exif().name().toLowerCase(),
                        options.decodeScale().name().toLowerCase(), ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo (FFM)" : "ImageIO");
                out.printf("threads       %d%n", n);
                out.printf("samples       %d ok, %d errors, %d images, %d tokens%n", r.samples(), r.errors(), r.images(), r.tokens());
                out.printf("time          %.3f s%n", r.seconds());
                out.printf("throughput    %.1f samples/s, %.1f source MP/s, %.1f images/s%n", r.samplesPerSecond(),
                        r.megapixelsPerSecond(), r.images() / r.seconds());
                for (var e : r.firstErrors()) out.println("error         " + e.describe());
                var json = new LinkedHashMap<String, Object>();
                json.put("samples_per_s", round(r.samplesPerSecond()));
                json.put("mpix_per_s", round(r.megapixelsPerSecond()));
                json.put("threads", n);
                json.put("samples", r.samples());
                json.put("errors", r.errors());
                json.put("images", r.images());
                json.put("seconds", round(r.seconds()));
                json.put("decode_scale", options.decodeScale().name().toLowerCase());
                json.put("processor", options.preset().cliName());
                json.put("max_pixels", options.vision().maxPixels());
                out.println(new ObjectMapper().writeValueAsString(json));
                return 0;
            }
        }

        private static double round(double v) { return Math.round(v * 100) / 100.0; }
    }

    /** {@code stoker bench decode}: single-image decode rate, to compare with libjpeg-turbo's tjbench. */
    @Command(name = "decode", mixinStandardHelpOptions = true,
            description = {"Decode images to RGB at full size, over and over, on N threads, and report megapixels/s.",
                    "The last stdout line is JSON {\"mpix_per_s\":…, \"images_per_s\":…, \"threads\":…, \"decoder\":…}."})
    static final class Decode implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(arity = "1..*", description = "Image files.")
        java.util.List<Path> images;

        @Option(names = "--threads", defaultValue = "1", description = "Threads (default: ${DEFAULT-VALUE}).")
        int threads;

        @Option(names = "--seconds", defaultValue = "5", description = "Timed seconds after a warm-up of the same length (default: ${DEFAULT-VALUE}).")
        double seconds;

        @Option(names = "--decoder", defaultValue = "auto", description = "auto (libjpeg-turbo when present) or imageio (default: ${DEFAULT-VALUE}).")
        String decoder;

        @Override
        public Integer call() throws Exception {
            PrintWriter out = spec.commandLine().getOut();
            var data = new java.util.ArrayList<byte[]>();
            for (Path p : images) data.add(PreprocessCommand.readInput(p));
            boolean imageIo = decoder.equalsIgnoreCase("imageio");
            var opts = dev.stoker.image.decode.DecodeOptions.defaults();
            runFor(data, opts, imageIo, seconds);
            long[] counts = runFor(data, opts, imageIo, seconds);
            double mpix = counts[1] / 1e6 / seconds;
            String name = imageIo || !ImageDecoders.turboJpegAvailable() ? "imageio" : "libjpeg-turbo";
            out.printf("decoder %s, %d threads, %d images: %.1f MP/s, %.1f images/s%n", name, threads, data.size(), mpix, counts[0] / seconds);
            var json = new LinkedHashMap<String, Object>();
            json.put("mpix_per_s", round(mpix));
            json.put("images_per_s", round(counts[0] / seconds));
            json.put("threads", threads);
            json.put("decoder", name);
            out.println(new ObjectMapper().writeValueAsString(json));
            return 0;
        }

        private long[] runFor(java.util.List<byte[]> data, dev.stoker.image.decode.DecodeOptions opts, boolean imageIo, double secs)
                throws InterruptedException {
            var decoded = new java.util.concurrent.atomic.AtomicLong();
            var pixels = new java.util.concurrent.atomic.AtomicLong();
            long deadline = System.nanoTime() + (long) (secs * 1e9);
            var workers = new java.util.ArrayList<Thread>();
            for (int t = 0; t < threads; t++) {
                int first = t;
                workers.add(Thread.ofPlatform().start(() -> {
                    var dec = imageIo ? ImageDecoders.imageIo() : ImageDecoders.forCurrentThread();
                    for (int i = first; System.nanoTime() < deadline; i++) {
                        var img = dec.decode(data.get(i % data.size()), "image", opts);
                        decoded.incrementAndGet();
                        pixels.addAndGet(img.pixelCount());
                    }
                }));
            }
            for (Thread w : workers) w.join();
            return new long[] {decoded.get(), pixels.get()};
        }

        private static double round(double v) { return Math.round(v * 100) / 100.0; }
    }
}
