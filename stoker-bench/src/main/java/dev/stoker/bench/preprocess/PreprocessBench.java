package dev.stoker.bench.preprocess;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeFeeds;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.bench.preprocess.JsonlManifest;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code stoker bench preprocess}: encodes a data set's samples on N threads (each with its own
 * encoder) and measures throughput: decode + transform + tokenize, the CPU half of what a trainer
 * waits for. The last line printed is JSON {@code {"samples_per_s", "mpix_per_s", "threads", …}}.
 */
public final class PreprocessBench {
    /**
     * @param data      the data set's train.jsonl (images relative to its folder)
     * @param limit     samples to time, 0 for all
     * @param warmup    samples encoded before timing starts, to let the JIT compile the hot paths
     * @param tokenizer tokenizer.json, or null for the bundled one
     */
    public record Settings(Path data, EncodeOptions options, int threads, int limit, int warmup, Path tokenizer) {}

    /** What one timed pass did. {@code sourcePixels} counts pixels as stored, before any DCT scaling. */
    public record Result(int samples, int errors, long images, long sourcePixels, long tokens, double seconds, int threads,
                         List<SampleException> firstErrors) {
        public double samplesPerSecond() { return samples / seconds; }

        public double megapixelsPerSecond() { return sourcePixels / 1e6 / seconds; }
    }

    private PreprocessBench() {}

    /** Runs the benchmark, prints its figures and the JSON line; returns the JSON's content. */
    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        var options = s.options();
        if (!Files.isRegularFile(s.data())) throw new ConfigException(s.data() + ": no such manifest");
        var manifest = JsonlManifest.read(s.data());
        var lines = manifest.lines();
        if (s.limit() > 0 && s.limit() < lines.size()) lines = lines.subList(0, s.limit());
        int n = s.threads();
        try (QwenTokenizer tok = NodeFeeds.tokenizer(s.tokenizer())) {
            int warm = Math.min(s.warmup(), lines.size());
            if (warm > 0) measure(manifest, lines.subList(0, warm), n, options, tok);
            var r = measure(manifest, lines, n, options, tok);
            out.printf("data          %s (%d samples timed, %d warm-up)%n", s.data(), lines.size(), warm);
            out.printf("processor     %s, pixels %d..%d, exif %s, decode-scale %s, jpeg %s%n", options.preset(),
                    options.vision().minPixels(), options.vision().maxPixels(), options.exif().name().toLowerCase(Locale.ROOT),
                    options.decodeScale().name().toLowerCase(Locale.ROOT), ImageDecoders.turboJpegAvailable() ? "libjpeg-turbo (FFM)" : "ImageIO");
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
            json.put("decode_scale", options.decodeScale().name().toLowerCase(Locale.ROOT));
            json.put("processor", options.preset().cliName());
            json.put("max_pixels", options.vision().maxPixels());
            out.println(new ObjectMapper().writeValueAsString(json));
            out.flush();
            return json;
        }
    }

    /** One timed pass over {@code lines} of {@code manifest} on {@code threads} threads. */
    public static Result measure(JsonlManifest manifest, List<JsonlManifest.Line> lines, int threads, EncodeOptions options,
                                 QwenTokenizer tokenizer) throws InterruptedException {
        var source = ObjectSources.open(manifest.file().toAbsolutePath().toString(), SourceConfig.defaults());
        var imageSource = SampleEncoder.ImageSource.blocking(source);
        var next = new AtomicInteger();
        var ok = new AtomicInteger();
        var errors = new AtomicInteger();
        var images = new AtomicLong();
        var pixels = new AtomicLong();
        var tokens = new AtomicLong();
        var firstErrors = new ConcurrentLinkedQueue<SampleException>();
        var workers = new ArrayList<Thread>();
        long start = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            workers.add(Thread.ofPlatform().name("stoker-cpu-" + t).start(() -> {
                var encoder = new SampleEncoder(options, tokenizer);
                // The pipeline writes each sample's rows into a reused batch segment; so does the benchmark.
                float[][] reused = {new float[0]};
                SampleEncoder.PixelBuffers buffers = n -> reused[0].length >= n ? reused[0] : (reused[0] = new float[n + n / 4]);
                for (int i; (i = next.getAndIncrement()) < lines.size(); ) {
                    var line = lines.get(i);
                    try {
                        EncodedSample s = encoder.encodeLine(line.bytes(), line.id(), imageSource, buffers);
                        ok.incrementAndGet();
                        images.addAndGet(s.images());
                        pixels.addAndGet(s.sourcePixels());
                        tokens.addAndGet(s.length());
                    } catch (SampleException e) {
                        errors.incrementAndGet();
                        if (firstErrors.size() < 5) firstErrors.add(e);
                    }
                }
            }));
        }
        try {
            for (Thread w : workers) w.join();
        } finally {
            source.close();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        return new Result(ok.get(), errors.get(), images.get(), pixels.get(), tokens.get(), seconds, threads, List.copyOf(firstErrors));
    }

    static double round(double v) { return Math.round(v * 100) / 100.0; }
}
