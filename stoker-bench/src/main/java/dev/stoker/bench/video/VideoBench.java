package dev.stoker.bench.video;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.DataSources;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code stoker bench video}: encodes the video samples of a data set on N threads (each with its own encoder:
 * index, sample, decode only the sampled frames, resize, normalize, patchify, tokenize) and reports videos/s, frames
 * decoded per frame kept and decode megapixels/s; the last line is JSON.
 *
 * <p>Records are read as {@code serve} reads them ({@link DataSources}); a video a record names is fetched whole and
 * demuxed from memory (the feed reads it through ranged fetches instead); one its source carries (a WebDataset member,
 * a Parquet cell) is read as the feed reads it ({@link SampleEncoder#encodeRecord}: a member in ranges of its shard).
 */
public final class VideoBench {
    /**
     * @param config the data set, the encoding (the video encoding among it: {@link NodeConfig#videoEncoding()}), the
     *               threads and the tokenizer
     * @param limit  samples to time, 0 for all
     * @param warmup samples encoded before timing starts
     */
    public record Settings(NodeConfig config, int limit, int warmup) {
        /**
         * The video encoding ({@code --video-*}, {@code --transformers}, {@code --model}).
         *
         * @throws ConfigException where the configuration takes no video, saying why
         */
        public VideoEncoding video() {
            var video = config.videoEncoding();
            if (video != null) return video;
            throw new ConfigException(config.videoRefusal() != null ? config.videoRefusal()
                    : "--video off: stoker bench video encodes videos; leave --video on");
        }
    }

    private VideoBench() {}

    private record Pass(int samples, int errors, long videos, long framesDecoded, long framesKept, long decodeNanos,
                        long decodedPixels, double seconds, List<SampleException> firstErrors) {}

    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        var config = s.config();
        var video = s.video(); // refused here, before any source is opened, where the job takes no video
        int threads = config.threads();
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
             QwenTokenizer tok = NodeFeeds.tokenizer(config.get(NodeConfig.TOKENIZER))) {
            var source = sources.feedSource();
            SampleRecords records;
            try {
                records = source.records();
            } catch (IOException | RuntimeException e) {
                throw new ConfigException("cannot read --data " + config.data() + ": " + e.getMessage());
            }
            int count = s.limit() > 0 ? Math.min(s.limit(), records.size()) : records.size();
            int warm = Math.min(s.warmup(), count);
            if (warm > 0) pass(s, source, records, warm, threads, tok);
            Pass r = pass(s, source, records, count, threads, tok);
            double videosPerSecond = r.videos() / r.seconds();
            out.printf("data          %s (%d samples timed, %d warm-up)%n", config.data(), count, warm);
            out.printf("processor     %s, video sampler %s, %s, threads %d%n", config.encodeOptions().preset(),
                    video.sampler(), video.contract(), threads);
            out.printf("samples       %d ok, %d errors, %d videos%n", r.samples(), r.errors(), r.videos());
            out.printf("throughput    %.2f samples/s, %.2f videos/s in %.2f s%n", r.samples() / r.seconds(), videosPerSecond,
                    r.seconds());
            out.printf("frames        %d decoded for %d kept (%.2f decoded per kept)%n", r.framesDecoded(), r.framesKept(),
                    r.framesKept() == 0 ? 0.0 : (double) r.framesDecoded() / r.framesKept());
            out.printf("decode        %.1f MP/s per thread (decode, rgb24 and resize of each frame as it arrives)%n",
                    r.decodeNanos() == 0 ? 0.0 : r.decodedPixels() / 1e6 / (r.decodeNanos() / 1e9 / threads) / threads);
            for (var e : r.firstErrors()) out.println("error         " + e.describe());
            var json = new LinkedHashMap<String, Object>();
            json.put("samples_per_s", round(r.samples() / r.seconds()));
            json.put("videos_per_s", round(videosPerSecond));
            json.put("frames_decoded_per_kept", round(r.framesKept() == 0 ? 0 : (double) r.framesDecoded() / r.framesKept()));
            json.put("decode_mpix_per_s", round(r.decodeNanos() == 0 ? 0 : r.decodedPixels() / 1e6 / (r.decodeNanos() / 1e9)));
            json.put("threads", threads);
            json.put("samples", r.samples());
            json.put("errors", r.errors());
            json.put("videos", r.videos());
            json.put("seconds", round(r.seconds()));
            json.put("sampler", video.sampler().cliName());
            json.put("processor", config.encodeOptions().preset().cliName());
            out.println(new ObjectMapper().writeValueAsString(json));
            out.flush();
            return json;
        }
    }

    private static Pass pass(Settings s, FeedSource source, SampleRecords records, int count, int threads,
                             QwenTokenizer tok) throws InterruptedException {
        var next = new AtomicInteger();
        var ok = new AtomicInteger();
        var errors = new AtomicInteger();
        var videos = new AtomicLong();
        var decoded = new AtomicLong();
        var kept = new AtomicLong();
        var nanos = new AtomicLong();
        var pixels = new AtomicLong();
        var firstErrors = new ConcurrentLinkedQueue<SampleException>();
        var workers = new ArrayList<Thread>();
        long start = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            workers.add(Thread.ofPlatform().name("stoker-cpu-" + t).start(() -> {
                var encoder = new SampleEncoder(s.config().encodeOptions(), tok); // decodes in process
                for (int i; (i = next.getAndIncrement()) < count; ) {
                    try {
                        encode(encoder, source, records, i);
                        ok.incrementAndGet();
                    } catch (SampleException e) {
                        errors.incrementAndGet();
                        if (firstErrors.size() < 5) firstErrors.add(e);
                    }
                }
                var v = encoder.videoStats();
                videos.addAndGet(v.videosDecoded());
                decoded.addAndGet(v.framesDecoded());
                kept.addAndGet(v.framesKept());
                nanos.addAndGet(v.decodeNanos());
                pixels.addAndGet(v.decodedPixels());
            }));
        }
        for (Thread w : workers) w.join();
        double seconds = (System.nanoTime() - start) / 1e9;
        return new Pass(ok.get(), errors.get(), videos.get(), decoded.get(), kept.get(), nanos.get(), pixels.get(), seconds,
                List.copyOf(firstErrors));
    }

    private static EncodedSample encode(SampleEncoder encoder, FeedSource source, SampleRecords records, int i) {
        String id = records.id(i);
        SampleRecords.Record record;
        try {
            record = records.record(i).join();
        } catch (CompletionException e) {
            throw error(id, SampleException.Stage.MANIFEST, e.getCause());
        }
        // the images and videos a tar or Parquet source carries, else fetched by reference (a video read whole into memory)
        return encoder.encodeRecord(record, id, (sampleId, ref) -> fetch(source, i, sampleId, ref),
                (sampleId, ref) -> SeekableByteSource.of(ref, fetch(source, i, sampleId, ref)), SampleEncoder.PixelBuffers.FRESH);
    }

    private static byte[] fetch(FeedSource source, int i, String sampleId, String ref) {
        try {
            return source.fetch(i, sampleId, ref).join();
        } catch (CompletionException e) {
            throw error(sampleId, SampleException.Stage.FETCH, e.getCause());
        }
    }

    private static SampleException error(String id, SampleException.Stage stage, Throwable cause) {
        if (cause instanceof SampleException se) return se;
        return new SampleException(id, stage, String.valueOf(cause), cause);
    }

    private static double round(double v) { return Math.round(v * 100) / 100.0; }
}
