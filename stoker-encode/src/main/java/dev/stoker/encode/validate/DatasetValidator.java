package dev.stoker.encode.validate;

import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.video.VideoPreprocessor;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.text.ChatSample;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.text.SampleParser;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * Reads every record of a source and the headers of its images, never their pixels, and says what a feed would make
 * of each: its token length ({@code input_ids}), or why it would skip it, an error or a filtered sample, with the
 * stage, kind, reason and wording the feed uses: the same parse and fetches as {@code SamplePipeline}, then
 * {@link SampleEncoder#shape}, the checks of {@link SampleEncoder#prepare} (limits, image headers, smart_resize
 * grids, template, tokenizer) without building labels or positions, which also gives each kept image's patch count. What it cannot see: an image whose header is
 * sound but whose pixel data is broken (a JPEG cut inside its scan) fails only when the feed decodes it.
 *
 * <p>Video (issue 29), when the options encode it ({@link EncodeOptions#video()} not null): video records are read
 * (else refused as media Stoker does not serve, as before), and each video is opened through
 * {@link FeedSource#openVideo} (ranged reads), or, when the record's source carries it (a WebDataset member, a Parquet
 * cell), from the record ({@link dev.stoker.encode.video.EmbeddedVideos}), indexed by demuxing its packets — never
 * decoded — and planned by the
 * sampling rules ({@link SampleEncoder#shape(ChatSample, java.util.Map, VideoPreprocessor.VideoSource)}), which gives its
 * grid, its tokens and its patch count. A missing video, a broken container, a video the sampler refuses, one over the
 * decode memory budget, a sample over {@code --max-seq-len}: that record's error (or filter) with its cause, naming the
 * video. What it cannot see: a video whose container is sound but whose frames do not decode.
 *
 * <p>Audio (issue 32), under an audio family ({@link EncodeOptions#audio()}): audio records are read (else refused as
 * before), each clip fetched and its duration read from its container header (decoded only when the header has none),
 * its tokens counted by the family's rule from the frames of that duration ({@link dev.stoker.encode.audio.OmniEncoder#shape}),
 * no features computed.
 *
 * <p>Threading: {@link #validate} runs the records on a pool of {@link Settings#threads()} threads, each with its own
 * {@link SampleEncoder}; fetches run on the source's threads; at most {@link Settings#inFlight()} records are between
 * their read and their verdict at once. The call blocks until every record has one.
 */
public final class DatasetValidator {
    /**
     * @param options          how samples are encoded (processor, pixel bounds, EXIF, limits): what decides lengths and filters
     * @param threads          CPU threads (parse, header, smart_resize, template, tokenizer)
     * @param inFlight         records read and not yet judged, at most
     * @param examplesPerCause examples kept per cause (the lowest record indices)
     * @param frameIndexes     where the videos' frame indexes are kept and found (e.g. a {@code frames} folder beside the
     *                         length index); null: none (each video indexed, nothing kept)
     */
    public record Settings(EncodeOptions options, int threads, int inFlight, int examplesPerCause,
                           dev.stoker.video.index.FrameIndexStore frameIndexes) {
        public Settings {
            if (threads < 1) throw new IllegalArgumentException("threads must be >= 1, got " + threads);
            if (inFlight < 1) throw new IllegalArgumentException("in-flight records must be >= 1, got " + inFlight);
            if (examplesPerCause < 0) throw new IllegalArgumentException("examples per cause must be >= 0, got " + examplesPerCause);
        }

        /** Settings that keep no frame index. */
        public Settings(EncodeOptions options, int threads, int inFlight, int examplesPerCause) {
            this(options, threads, inFlight, examplesPerCause, null);
        }

        /** These settings keeping the videos' frame indexes in {@code store} (null: none). */
        public Settings withFrameIndexes(dev.stoker.video.index.FrameIndexStore store) {
            return new Settings(options, threads, inFlight, examplesPerCause, store);
        }

        /** {@code threads} threads, 64 records in flight per thread, 3 examples per cause. */
        public static Settings of(EncodeOptions options, int threads) { return new Settings(options, threads, 64 * threads, 3); }
    }

    private final SampleRecords records;
    private final FeedSource source;
    private final QwenTokenizer tokenizer;
    private final Settings settings;
    private final SampleParser parser; // stateless and thread-safe, as the feed shares it

    private final int[] lengths;
    /** Per record kept: its kept images' patch counts (null for an error, a filtered record or one without images). */
    private final int[][] imagePatches;
    /** Per record kept: its kept videos' patch counts t·h·w and temporal groups t (null: an error, filtered, no video). */
    private final int[][] videoPatches, videoGroups;
    /** Per record, an audio family's clips' frames ({@link dev.stoker.plan.pack.SampleShape#clipFrames}); null without clips. */
    private final int[][] clipFrames;
    private final LongAdder images = new LongAdder();
    private final LongAdder videos = new LongAdder();
    private final LongAdder audios = new LongAdder();
    private final LongAdder[] imagesPerSample = new LongAdder[ValidationReport.IMAGE_COUNT_BUCKETS];
    private final ConcurrentHashMap<ValidationReport.CauseKey, ValidationReport.CauseCounter> causes = new ConcurrentHashMap<>();

    private DatasetValidator(SampleRecords records, FeedSource source, QwenTokenizer tokenizer, Settings settings) {
        this.records = records;
        this.source = source;
        this.tokenizer = tokenizer;
        this.settings = settings;
        this.lengths = new int[records.size()];
        this.imagePatches = new int[records.size()][];
        this.videoPatches = new int[records.size()][];
        this.videoGroups = new int[records.size()][];
        this.clipFrames = new int[records.size()][];
        this.parser = settings.options().sampleParser(); // without video, a refusal says why the job takes none (videoRefusal)
        for (int i = 0; i < imagesPerSample.length; i++) imagesPerSample[i] = new LongAdder();
    }

    /**
     * Judges every record of {@code records}, fetching the images they name through {@code source} (the one
     * {@code records} came from: {@link FeedSource#records()}).
     */
    public static ValidationReport validate(SampleRecords records, FeedSource source, QwenTokenizer tokenizer, Settings settings)
            throws InterruptedException {
        return new DatasetValidator(records, source, tokenizer, settings).run();
    }

    private ValidationReport run() throws InterruptedException {
        var threadEncoders = new ThreadLocal<SampleEncoder>();
        var counter = new AtomicInteger();
        var pool = new ThreadPoolExecutor(settings.threads(), settings.threads(), 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(),
                r -> Thread.ofPlatform().daemon().name("stoker-validate-" + counter.incrementAndGet()).unstarted(r));
        try {
            prestart(pool, threadEncoders);
            var permits = new Semaphore(settings.inFlight());
            var failure = new AtomicReference<Throwable>();
            long t0 = System.nanoTime();
            for (int i = 0; i < lengths.length && failure.get() == null; i++) {
                permits.acquire();
                int index = i;
                judge(index, pool, threadEncoders).whenComplete((ignored, err) -> {
                    if (err != null) failure.compareAndSet(null, err); // a bug of this class, not a bad record
                    permits.release();
                });
            }
            permits.acquire(settings.inFlight());
            long scanNanos = System.nanoTime() - t0;
            if (failure.get() != null) throw new IllegalStateException("validating " + records.name() + " failed: " + failure.get(), failure.get());
            long[] perSample = new long[imagesPerSample.length];
            for (int k = 0; k < perSample.length; k++) perSample[k] = imagesPerSample[k].sum();
            return ValidationReport.of(records.name(), records.digest(), lengths, imagePatches, videoPatches, videoGroups, images.sum(),
                    videos.sum(), audios.sum(), perSample, causes.values(), scanNanos).withClipFrames(clipFrames);
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * Starts every thread and builds its encoder (native decoder handle, template) before the scan's clock starts; an
     * encoder that cannot be built (bad options) fails the call.
     */
    private void prestart(ThreadPoolExecutor pool, ThreadLocal<SampleEncoder> encoders) throws InterruptedException {
        var ready = new CountDownLatch(settings.threads());
        var release = new CountDownLatch(1);
        var failed = new AtomicReference<RuntimeException>();
        for (int t = 0; t < settings.threads(); t++)
            pool.execute(() -> {
                try {
                    encoder(encoders);
                } catch (RuntimeException e) {
                    failed.compareAndSet(null, e);
                } finally {
                    ready.countDown();
                }
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
        ready.await();
        release.countDown();
        if (failed.get() != null) throw failed.get();
    }

    private SampleEncoder encoder(ThreadLocal<SampleEncoder> encoders) {
        var e = encoders.get();
        if (e == null) {
            encoders.set(e = new SampleEncoder(settings.options(), tokenizer)); // its options' video, if any
            if (settings.options().video() != null && settings.frameIndexes() != null) e.videoStats().useFrameIndexStore(settings.frameIndexes());
        }
        return e;
    }

    /** Reads record {@code i}, parses it, fetches its images and prepares it; completes when its verdict is recorded. */
    private CompletableFuture<Void> judge(int i, Executor cpu, ThreadLocal<SampleEncoder> encoders) {
        String recordId = records.id(i);
        CompletableFuture<SampleRecords.Record> read;
        try {
            read = records.record(i);
        } catch (RuntimeException e) {
            read = CompletableFuture.failedFuture(e);
        }
        return read.handleAsync((record, err) -> {
            if (err != null) {
                Throwable cause = unwrap(err);
                if (cause instanceof SampleException se) fail(i, recordId, se, se.getMessage());
                else fail(i, recordId, SampleException.Stage.MANIFEST, "cannot read the record: " + cause);
                return CompletableFuture.<Void>completedFuture(null);
            }
            return fetchAndPrepare(i, recordId, record, cpu, encoders);
        }, cpu).thenCompose(f -> f);
    }

    private CompletableFuture<Void> fetchAndPrepare(int i, String recordId, SampleRecords.Record record, Executor cpu,
                                                    ThreadLocal<SampleEncoder> encoders) {
        ChatSample sample;
        var embedded = record.images();
        try {
            if (!record.carriesMedia()) {
                sample = parser.parseLine(record.json(), recordId);
            } else { // the videos and clips a source carries (a tar's members, a Parquet column): placed, or refused
                sample = parser.parseRecord(record.json(), recordId, record.imageNames(), record.videoNames(), record.audioNames());
            }
        } catch (SampleException e) {
            fail(i, e.sampleId() != null ? e.sampleId() : recordId, e, e.getMessage());
            return CompletableFuture.completedFuture(null);
        } catch (RuntimeException e) {
            fail(i, recordId, SampleException.Stage.MANIFEST, e.toString());
            return CompletableFuture.completedFuture(null);
        }
        List<String> refs = sample.imagePaths();
        images.add(refs.size());
        videos.add(sample.videos().size());
        audios.add(sample.audios().size());
        imagesPerSample[Math.min(refs.size(), imagesPerSample.length - 1)].increment();
        var all = new ArrayList<String>(refs); // and the frames of its frame-list videos, fetched as images are
        all.addAll(dev.stoker.encode.SampleEncoder.frameReferences(sample));
        for (String clip : dev.stoker.encode.audio.OmniEncoder.audioReferences(sample)) // an audio family's clips: their headers are read
            if (!all.contains(clip)) all.add(clip);
        var carriedAudio = new HashMap<String, byte[]>(); // the clips the source carried, by the names the parser placed
        for (var a : record.audios()) carriedAudio.put(a.name(), a.bytes());
        var futures = new ArrayList<CompletableFuture<byte[]>>(all.size());
        for (int k = 0; k < all.size(); k++) {
            if (!embedded.isEmpty() && k < refs.size()) { // the source carried them, in the order the parser placed them
                futures.add(CompletableFuture.completedFuture(embedded.get(k).bytes()));
                continue;
            }
            byte[] clip = carriedAudio.get(all.get(k));
            if (clip != null) {
                futures.add(CompletableFuture.completedFuture(clip));
                continue;
            }
            try {
                futures.add(source.fetch(i, sample.id(), all.get(k)));
            } catch (RuntimeException e) {
                futures.add(CompletableFuture.failedFuture(e));
            }
        }
        return CompletableFuture.allOf(futures.toArray(CompletableFuture[]::new)).handleAsync((ignored, err) -> {
            if (err != null) {
                Throwable cause = unwrap(err);
                if (cause instanceof SampleException se) fail(i, sample.id(), se, causeOf(se, sample.id()));
                else fail(i, sample.id(), SampleException.Stage.FETCH, String.valueOf(cause));
                return null;
            }
            var bytes = new HashMap<String, byte[]>(all.size() * 2);
            for (int k = 0; k < all.size(); k++) bytes.put(all.get(k), futures.get(k).join());
            try {
                // the videos the record's source carries (tar members, Parquet cells), else by reference in ranges
                VideoPreprocessor.VideoSource videoSource = dev.stoker.encode.video.EmbeddedVideos.over(record.videos(),
                        (sampleId, reference) -> source.openVideo(i, sampleId, reference));
                var shape = encoder(encoders).shape(sample, bytes, videoSource);
                lengths[i] = shape.tokens();
                if (shape.hasImage()) imagePatches[i] = shape.imagePatches();
                if (shape.hasVideo()) {
                    videoPatches[i] = shape.videoPatches();
                    videoGroups[i] = shape.videoGroups();
                }
                if (shape.clips() > 0) clipFrames[i] = shape.clipFrames();
            } catch (SampleException e) {
                fail(i, sample.id(), e, causeOf(e, sample.id()));
            } catch (RuntimeException e) {
                fail(i, sample.id(), SampleException.Stage.DECODE, e.toString());
            }
            return null;
        }, cpu);
    }

    /** A record {@code e} refused: of its stage, kind and reason, {@code message} its one line (as the feed's). */
    private void fail(int i, String id, SampleException e, String message) {
        record(i, new ValidationReport.CauseKey(e.kind(), e.stage(), e.reason()), id, message);
    }

    /** A record refused by something other than a {@link SampleException}: an error, classed by its message. */
    private void fail(int i, String id, SampleException.Stage stage, String message) {
        record(i, new ValidationReport.CauseKey(SampleException.Kind.ERROR, stage, SampleException.reasonOf(message)), id, message);
    }

    private void record(int i, ValidationReport.CauseKey key, String id, String message) {
        lengths[i] = key.kind() == SampleException.Kind.FILTERED ? LengthIndex.FILTERED : LengthIndex.ERROR;
        causes.computeIfAbsent(key, k -> new ValidationReport.CauseCounter(k, settings.examplesPerCause())).add(i, id, message);
    }

    /** The message, prefixed with what the exception names when that is more than the sample (an image): the feed's wording. */
    static String causeOf(SampleException e, String sampleId) {
        return e.sampleId() == null || e.sampleId().equals(sampleId) ? e.getMessage() : e.sampleId() + ": " + e.getMessage();
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) t = t.getCause();
        return t;
    }
}
