package dev.stoker.bench.preprocess;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.DataSources;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.NoSuchFileException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code stoker bench preprocess}: encodes a data set's samples on N threads (each with its own
 * encoder) and measures throughput: decode + transform + tokenize, the CPU half of what a trainer
 * waits for. The last line printed is JSON {@code {"samples_per_s", "mpix_per_s", "threads", …}}.
 *
 * <p>The data set is read as {@code serve} and {@code validate} read it ({@link DataSources}): a JSON Lines or JSON
 * manifest, WebDataset tar shards or Parquet, local or on S3, one source or a mix. Each timed pass reads its records
 * and images as it encodes them, as the feed does.
 */
public final class PreprocessBench {
    /**
     * @param config    the data set ({@code --data}, its image root and object store settings), the encoding, the
     *                  threads and the tokenizer, as the command was given them
     * @param limit     samples to time, 0 for all
     * @param warmup    samples encoded before timing starts, to let the JIT compile the hot paths
     */
    public record Settings(NodeConfig config, int limit, int warmup) {}

    /** What one timed pass did. {@code sourcePixels} counts pixels as stored, before any DCT scaling. */
    public record Result(int samples, int errors, long images, long sourcePixels, long tokens, double seconds, int threads,
                         List<SampleException> firstErrors) {
        public double samplesPerSecond() { return samples / seconds; }

        public double megapixelsPerSecond() { return sourcePixels / 1e6 / seconds; }
    }

    private PreprocessBench() {}

    /** Runs the benchmark, prints its figures and the JSON line; returns the JSON's content. */
    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        var config = s.config();
        var options = config.encodeOptions();
        int n = config.threads();
        try (var sources = open(config); QwenTokenizer tok = NodeFeeds.tokenizer(config.get(NodeConfig.TOKENIZER))) {
            var source = sources.feedSource();
            SampleRecords records;
            try {
                records = source.records();
            } catch (IOException | RuntimeException e) {
                throw new ConfigException("cannot read --data " + config.data() + ": " + describe(e));
            }
            int count = s.limit() > 0 ? Math.min(s.limit(), records.size()) : records.size();
            int warm = Math.min(s.warmup(), count);
            if (warm > 0) measure(source, records, warm, n, options, tok);
            var r = measure(source, records, count, n, options, tok);
            out.printf("data          %s (%d samples timed, %d warm-up)%n", config.data(), count, warm);
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

    private static String describe(Exception e) {
        if (e instanceof NoSuchFileException n) return "file not found: " + n.getFile();
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }

    private static DataSources open(NodeConfig config) {
        try {
            return DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--data " + config.data() + ": " + e.getMessage());
        }
    }

    /**
     * One timed pass over the first {@code count} records of {@code records} on {@code threads} threads: each record read,
     * its images taken from it or fetched from {@code source}, and encoded.
     */
    public static Result measure(FeedSource source, SampleRecords records, int count, int threads, EncodeOptions options,
                                 QwenTokenizer tokenizer) throws InterruptedException {
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
                for (int i; (i = next.getAndIncrement()) < count; ) {
                    try {
                        EncodedSample s = encode(encoder, source, records, i, buffers);
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
        for (Thread w : workers) w.join();
        double seconds = (System.nanoTime() - start) / 1e9;
        return new Result(ok.get(), errors.get(), images.get(), pixels.get(), tokens.get(), seconds, threads, List.copyOf(firstErrors));
    }

    /** Record {@code i} of {@code records} read, its images taken from it or fetched from {@code source}, and encoded. */
    public static EncodedSample encode(SampleEncoder encoder, FeedSource source, SampleRecords records, int i) {
        return encode(encoder, source, records, i, SampleEncoder.PixelBuffers.FRESH);
    }

    private static EncodedSample encode(SampleEncoder encoder, FeedSource source, SampleRecords records, int i,
                                        SampleEncoder.PixelBuffers buffers) {
        String id = records.id(i);
        return encoder.encodeRecord(read(records, i, id), id, images(source, i), buffers);
    }

    /** Record {@code i}, waited for; a failure to read it is that sample's error. */
    private static SampleRecords.Record read(SampleRecords records, int i, String id) {
        try {
            return records.record(i).join();
        } catch (CompletionException e) {
            throw sampleError(id, SampleException.Stage.MANIFEST, e.getCause());
        }
    }

    /** The images record {@code i} names by reference, each fetched from {@code source} and waited for (a mix: from its own source). */
    private static SampleEncoder.ImageSource images(FeedSource source, int i) {
        return (sampleId, reference) -> {
            try {
                return source.fetch(i, sampleId, reference).join();
            } catch (CompletionException e) {
                throw sampleError(sampleId, SampleException.Stage.FETCH, e.getCause());
            }
        };
    }

    private static SampleException sampleError(String id, SampleException.Stage stage, Throwable cause) {
        if (cause instanceof SampleException se) return se;
        return new SampleException(id, stage, String.valueOf(cause), cause);
    }

    static double round(double v) { return Math.round(v * 100) / 100.0; }
}
