package dev.stoker.cli;

import dev.stoker.core.SampleException;
import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.EncodedSample;
import dev.stoker.pipeline.JsonlManifest;
import dev.stoker.pipeline.SampleEncoder;
import dev.stoker.text.QwenTokenizer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Encodes a data set's samples on N threads (each with its own encoder) and measures throughput:
 * decode + transform + tokenize, the CPU half of what a trainer waits for.
 */
final class PreprocessBench {
    /** What one timed pass did. {@code sourcePixels} counts pixels as stored, before any DCT scaling. */
    record Result(int samples, int errors, long images, long sourcePixels, long tokens, double seconds, int threads,
                  List<SampleException> firstErrors) {
        double samplesPerSecond() { return samples / seconds; }
        double megapixelsPerSecond() { return sourcePixels / 1e6 / seconds; }
    }

    private PreprocessBench() {}

    static Result run(JsonlManifest manifest, List<JsonlManifest.Line> lines, int threads, EncodeOptions options,
                      QwenTokenizer tokenizer) throws InterruptedException {
        var source = dev.stoker.source.ObjectSources.open(manifest.file().toAbsolutePath().toString(), dev.stoker.source.SourceConfig.defaults());
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
}
