package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.DummyImage;
import dev.stoker.encode.validate.ShapeIndexes;
import dev.stoker.observe.Bottleneck;
import dev.stoker.observe.BottleneckVerdict;
import dev.stoker.observe.FeedSampler;
import dev.stoker.observe.StallWatchdog;
import dev.stoker.plan.StepSchedules;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.SourceMetrics;
import dev.stoker.source.mix.DataSources;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.source.mix.MixedSource;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.pekko.actor.ClassicActorSystemProvider;

/**
 * One feeding job: reads the manifest once, fixes the schedule, and hands each trainer rank a
 * {@link RankFeed} that yields that rank's batches in the mode of {@link FeedConfig#mode()}.
 *
 * <p>Design: the three modes differ only in how far work may run ahead; they share one
 * {@link SamplePipeline} (parse + fetch, encode, assemble) and one Pekko stream shape, so that they
 * yield identical batches. What each rank takes at each step comes from the job's {@link StepSchedule} (batches of
 * its order, or packs planned from it: {@link StepSchedules#of} decides, the feed only walks it), and each
 * stream preserves order (mapAsync, never mapAsyncUnordered), so thread timing never changes a batch.
 * PREFETCH runs one stream per rank rather than one shared graph fanned out: with a fan-out, one
 * rank that stops reading would back-pressure the shared upstream and stall every other rank; with
 * a stream per rank, a stalled rank holds only its own buffer. The ranks share the CPU pool and
 * the source's bounded connections.
 *
 * <p>Threading: {@link #start} blocks until the manifest is read and the streams are up; the
 * feeder is then safe to use from any thread. It owns the source only when it opened it ({@link #open}).
 */
public final class Feeder implements AutoCloseable {
    /**
     * Zero-copy batches of one rank whose objects are allocated and being filled at once ({@link StoredBatchWriter}): with its
     * buffered batches and its trainer's leases, what a rank holds in the store at most.
     */
    public static final int BATCHES_FILLING = StoredBatchWriter.BATCHES_FILLING;

    public static final long MANIFEST_TIMEOUT_SECONDS = FeedSource.MANIFEST_TIMEOUT_SECONDS;
    public static final long CLOSE_TIMEOUT_SECONDS = 10;

    private final FeedConfig config;
    /** The steps the ranks walk, labelled at the feed's start. */
    private final StepSchedule schedule;
    private final FeedEngine engine;
    private final FeedMetrics metrics;
    private final FeedErrors errors;
    private final List<RankFeed<?>> ranks;
    private final DataSources ownedSource;
    private final StoredBatchWriter writer;
    private final long fingerprint;
    private final FeedSampler sampler;
    private final StallWatchdog watchdog;
    /** The autotuner's knobs and thread ({@code --autotune on}); null when the knobs are pinned. */
    private final FeedTuning tuning;

    private Feeder(FeedConfig config, StepSchedule schedule, FeedEngine engine, FeedErrors errors, List<RankFeed<?>> ranks,
                   DataSources ownedSource, StoredBatchWriter writer, ShmObjectStore store, long startNanos, FeedTuning tuning) {
        this.tuning = tuning;
        var metrics = engine.metrics();
        var cpu = engine.cpu();
        this.sampler = new FeedSampler(FeedSampler.INTERVAL_MILLIS_DEFAULT, FeedSampler.CAPACITY_DEFAULT, startNanos,
                new FeedSampler.Timeline(FeedSampler.INTERVAL_MILLIS_DEFAULT, config.localRanks().count(), config.cpuThreads(),
                        config.localRanks().count() * (config.mode() == FeedMode.SERIAL ? 1 : config.fetchConcurrency()), config.prefetchBatches(),
                        config.mode() == FeedMode.PREFETCH || config.mode() == FeedMode.ZERO_COPY, List.of()),
                t -> probe(t, metrics, cpu, ranks, store));
        this.watchdog = new StallWatchdog(TimeUnit.SECONDS.toMillis(StallWatchdog.STALL_SECONDS_DEFAULT),
                t -> stallProbe(t, metrics, cpu, ranks, store));
        this.fingerprint = engine.fingerprint();
        this.engine = engine;
        this.writer = writer;
        this.ownedSource = ownedSource;
        this.config = config;
        this.schedule = schedule;
        this.metrics = metrics;
        this.errors = errors;
        this.ranks = ranks;
    }

    /**
     * Opens the data set at {@code location} (local or S3) with {@code sourceConfig} and starts a
     * feed over it; the feeder owns that source and closes it on {@link #close()}.
     */
    public static Feeder open(DatasetLocation location, SourceConfig sourceConfig, FeedConfig config, QwenTokenizer tokenizer)
            throws IOException {
        return open(location, sourceConfig, config, tokenizer, null);
    }

    /**
     * {@link #open(DatasetLocation, SourceConfig, FeedConfig, QwenTokenizer)} with the shared-memory
     * store that ZERO_COPY writes batches into (required in that mode, ignored in the others; the
     * caller owns it and closes it after the feeder).
     */
    public static Feeder open(DatasetLocation location, SourceConfig sourceConfig, FeedConfig config, QwenTokenizer tokenizer,
                              ShmObjectStore store) throws IOException {
        return open(location, sourceConfig, config, tokenizer, store, -1);
    }

    /**
     * {@link #open(DatasetLocation, SourceConfig, FeedConfig, QwenTokenizer, ShmObjectStore)} starting
     * at global step {@code startStep} (its cursor depends on the data set's size, so it is resolved
     * once the manifest is read); −1 starts at {@link FeedConfig#start()}.
     */
    public static Feeder open(DatasetLocation location, SourceConfig sourceConfig, FeedConfig config, QwenTokenizer tokenizer,
                              ShmObjectStore store, long startStep) throws IOException {
        return open(DataSources.open(location, sourceConfig), config, tokenizer, store, startStep);
    }

    /**
     * A feed over {@code sources} (one, or several mixed by weight), which the feeder owns from now on (closed on
     * {@link #close()}, or here if the feed does not start), starting at global step {@code startStep} (−1: at
     * {@link FeedConfig#start()}).
     */
    public static Feeder open(DataSources sources, FeedConfig config, QwenTokenizer tokenizer, ShmObjectStore store, long startStep)
            throws IOException {
        return open(sources, config, tokenizer, store, startStep, null);
    }

    /**
     * {@link #open(DataSources, FeedConfig, QwenTokenizer, ShmObjectStore, long)} with where a packed job's shapes come
     * from ({@code shapes}; null: measured from image headers at start).
     */
    public static Feeder open(DataSources sources, FeedConfig config, QwenTokenizer tokenizer, ShmObjectStore store, long startStep,
                              ShapeSource shapes) throws IOException {
        return open(sources, config, tokenizer, store, startStep, shapes, null);
    }

    /**
     * {@link #open(DataSources, FeedConfig, QwenTokenizer, ShmObjectStore, long, ShapeSource)} whose streams run on
     * {@code system}, the process's one actor system (a node's: {@link FeedEngine}); null: on a system of the feed's own.
     */
    public static Feeder open(DataSources sources, FeedConfig config, QwenTokenizer tokenizer, ShmObjectStore store, long startStep,
                              ShapeSource shapes, ClassicActorSystemProvider system) throws IOException {
        try {
            return start(config, sources.feedSource(), tokenizer, store, sources, startStep, shapes, system);
        } catch (IOException | RuntimeException e) {
            sources.close();
            throw e;
        }
    }

    /** Reads the manifest through {@code source}, builds the schedule and starts the pipeline (PREFETCH streams run at once). */
    public static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer) throws IOException {
        return start(config, source, tokenizer, null, null, -1);
    }

    /** {@link #start(FeedConfig, FeedSource, QwenTokenizer)} with the store ZERO_COPY writes into. */
    public static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store) throws IOException {
        return start(config, source, tokenizer, store, null, -1);
    }

    /** {@link #start(FeedConfig, FeedSource, QwenTokenizer, ShmObjectStore)} whose streams run on {@code system} (a node's). */
    static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store,
                        ClassicActorSystemProvider system) throws IOException {
        return start(config, source, tokenizer, store, null, -1, null, system);
    }

    private static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store,
                                DataSources owned, long startStep) throws IOException {
        return start(config, source, tokenizer, store, owned, startStep, null);
    }

    /**
     * {@link #start(FeedConfig, FeedSource, QwenTokenizer, ShmObjectStore, DataSources, long)} with where a packed job's
     * shapes come from ({@code shapes}; null: measured here from image headers, on the feed's CPU threads).
     */
    private static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store,
                                DataSources owned, long startStep, ShapeSource shapes) throws IOException {
        return start(config, source, tokenizer, store, owned, startStep, shapes, null);
    }

    /**
     * The one assembly every entry point comes to: the engine (records, CPU pool, materializer on {@code system}, or on a
     * system of the feed's own when it is null), the schedule labelled where the feed starts, the error policy, then
     * each local rank's stream in the configured mode.
     */
    private static Feeder start(FeedConfig config, FeedSource source, QwenTokenizer tokenizer, ShmObjectStore store,
                                DataSources owned, long startStep, ShapeSource shapes, ClassicActorSystemProvider system)
            throws IOException {
        boolean zeroCopy = config.mode() == FeedMode.ZERO_COPY;
        if (zeroCopy && store == null) throw new IllegalArgumentException("ZERO_COPY needs a shared-memory object store");
        int threads = config.cpuThreads();
        // the streams' CPU stages are as wide as the most threads the autotuner may set (the threads given when it is off)
        int width = config.cpuThreadsMax();
        // every submitter is a mapAsync of known width: per rank T encodes (or prepares) and one assembly,
        // or in ZERO_COPY up to BATCHES_FILLING batches of B pixel tasks and their final writes
        // (a pack holds at most N samples of one token each: its bound, whatever the shapes)
        int samplesPerBatch = config.packing().samplesPerRankAtMost(config.batchSize());
        int perRank = width + 1 + (zeroCopy ? StoredBatchWriter.BATCHES_FILLING * (samplesPerBatch + 1) : 0);
        var local = config.localRanks(); // the ranks this feed serves; the schedule is the world's
        var engine = FeedEngine.start(config, source, tokenizer, local.count() * perRank + width, zeroCopy, system,
                config.packed() || config.encode().audio() != null ? null : new FeedEngine.Rehearse(zeroCopy ? store : null));
        var records = engine.records();
        var metrics = engine.metrics();
        StepSchedule schedule;
        var iterators = new ArrayList<Iterator<ScheduledBatch>>(local.count());
        FeedErrors errors = null;
        // opened once the order is fixed, after the rank iterators are made (their streams start later, with the pipeline)
        var stepErrors = new AtomicReference<FeedErrors>();
        try {
            var encode = config.encode();
            var plan = steps(config, records, () -> shapes != null ? shapes.shapes(records, source)
                    : ShapeIndexes.measure(records, source, tokenizer, encode, threads));
            var at = startStep >= 0 ? plan.cursorAt(startStep) : plan.aligned(config.start());
            long label = startStep >= 0 ? startStep : config.startLabel();
            schedule = plan.labelled(at, label);
            config = config.withStart(at, label);
            var packing = config.packing();
            for (int r = local.first(); r <= local.last(); r++) {
                var steps = schedule.iterator(at, r);
                boolean first = r == local.first();
                // each step's predicted costs, imbalance and padding, once per step whichever local rank takes it first; the
                // samples a step leaves out belong to no rank: the first local rank's stream records them as it takes the step
                // (FeedErrors records each step once)
                iterators.add(new Iterator<>() {
                    @Override
                    public boolean hasNext() { return steps.hasNext(); }

                    @Override
                    public ScheduledBatch next() {
                        var b = steps.next();
                        metrics.pack().record(b, packing);
                        if (first) stepErrors.get().leftOut(b, records::id);
                        return b;
                    }
                });
            }
            errors = FeedErrors.open(config, schedule, engine.sourceNames());
            stepErrors.set(errors);
            engine.awaitReady();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            engine.close();
            throw new IOException("interrupted while measuring the samples' shapes", e);
        } catch (IOException | RuntimeException e) {
            engine.close();
            if (errors != null) errors.close();
            throw e;
        }
        var materializer = engine.materializer();
        var cpu = engine.cpu();
        var pipeline = new SamplePipeline(records, source, cpu, metrics, config.encode(), config.packing().padTo());
        pipeline.observe(errors::outcome); // the early judgement sees each sample as it fails, before its batch is made
        boolean serial = config.mode() == FeedMode.SERIAL, tune = config.autotune();
        // tuned, each rank's stream is built with its own fetch gate and as wide as the tuner's ceilings; pinned, all share one flow
        var flow = zeroCopy || tune ? null : pipeline.flow(serial, config.fetchConcurrency(), threads);
        if (zeroCopy) store.shareAmong(local.count()); // a rank that stops reading pins at most its share of the store
        var writer = !zeroCopy ? null : new StoredBatchWriter(store, cpu, metrics, config.ranks(), local.first(), config.encode(),
                config.packing().packPadTo());
        var storedFlow = !zeroCopy || tune ? null : pipeline.storedFlow(config.fetchConcurrency(), threads, writer);
        long startNanos = System.nanoTime();
        var feeds = new ArrayList<RankFeed<?>>(local.count());
        var gates = new ArrayList<FetchGate>();
        var buffers = new ArrayList<PrefetchBuffer<?>>();
        for (int r = local.first(); r <= local.last(); r++) {
            var state = new RankState(r, startNanos, metrics, errors); // the global rank: batches and metrics carry it
            var iterator = iterators.get(r - local.first());
            var gate = tune && !serial ? new FetchGate(config.fetchConcurrency()) : null;
            if (gate != null) gates.add(gate);
            if (zeroCopy) {
                var buffer = new PrefetchBuffer<StoredBatch>(config.prefetchBatches(), config.prefetchBytes(), RankFeed.MAX_OUTSTANDING_REQUESTS);
                buffers.add(buffer);
                feeds.add(new PrefetchRankFeed<>(state, iterator,
                        tune ? pipeline.storedFlow(config.fetchConcurrencyMax(), width, writer, gate) : storedFlow, materializer, buffer));
                continue;
            }
            var rankFlow = tune ? pipeline.flow(serial, config.fetchConcurrencyMax(), width, gate) : flow;
            if (config.mode() == FeedMode.PREFETCH) {
                var buffer = new PrefetchBuffer<Batch>(config.prefetchBatches(), config.prefetchBytes(), RankFeed.MAX_OUTSTANDING_REQUESTS);
                buffers.add(buffer);
                feeds.add(new PrefetchRankFeed<>(state, iterator, rankFlow, materializer, buffer));
            } else {
                feeds.add(new OnDemandRankFeed(state, iterator, rankFlow, materializer));
            }
        }
        var tuning = tune ? new FeedTuning(config, metrics, cpu, gates, buffers) : null;
        // the bad-input policy failed the feed: every rank fails with its cause and stops its work
        errors.onFailure(cause -> feeds.forEach(f -> f.fail(cause)));
        var feeder = new Feeder(config, schedule, engine, errors, List.copyOf(feeds), owned, writer, store, startNanos, tuning);
        if (tuning != null) tuning.startTicking();
        return feeder;
    }

    /**
     * What the warm-up's rehearsal of the stream did ({@link FeedRehearsal}), as a line for the service's start: the
     * made-up samples that went through and how long it took, or why it stopped; null when none ran.
     */
    public String rehearsalSummary() {
        var r = engine.rehearsal();
        if (r == null) return null;
        return r.failure() == null
                ? String.format(java.util.Locale.ROOT, "warm-up: rehearsed the stream on %d made-up samples in %d ms", r.samples(), r.millis())
                : "warm-up: no rehearsal of the stream (" + r.failure() + ")";
    }

    private static void startThread(Runnable task, String name) {
        var t = new Thread(task, name);
        t.setDaemon(true);
        t.start();
    }

    /** One sampler tick: reads adders, the CPU pool's queue, each buffer's state and the store's bytes in use. */
    private static FeedSampler.Tick probe(long tMillis, FeedMetrics m, CpuPool cpu, List<RankFeed<?>> ranks, ShmObjectStore store) {
        int r = ranks.size();
        long[] batches = new long[r], bytes = new long[r];
        boolean[] full = new boolean[r];
        for (int i = 0; i < r; i++) {
            long[] s = ranks.get(i).bufferState();
            batches[i] = s[0];
            bytes[i] = s[1];
            full[i] = s[2] != 0;
        }
        return new FeedSampler.Tick(tMillis, m.fetchedSamples.sum(), m.encodedSamples.sum(), m.deliveredSamples.sum(), m.fetchInFlight(),
                Math.max(0, m.cpuBusyNow()), cpu.queued(), store == null ? 0 : store.metrics().inUseBytes(), batches, bytes, full);
    }

    /** One watchdog tick: the sampler's figures plus each rank's delivered batches and the store's budget and leases. */
    private static StallWatchdog.Observation stallProbe(long tMillis, FeedMetrics m, CpuPool cpu, List<RankFeed<?>> ranks,
                                                        ShmObjectStore store) {
        var t = probe(tMillis, m, cpu, ranks, store);
        long[] delivered = new long[ranks.size()];
        for (int i = 0; i < delivered.length; i++)
            delivered[i] = ranks.get(i).snapshot().deliveredBatches();
        var sm = store == null ? null : store.metrics();
        return new StallWatchdog.Observation(tMillis, t.fetched(), t.fetchInFlight(), t.encoded(), t.cpuQueued(), t.cpuBusy(),
                delivered, t.bufferFull(), sm == null ? 0 : sm.inUseBytes(), sm == null ? 0 : sm.budgetBytes(), sm == null ? 0 : sm.leases());
    }

    /**
     * Sets after how long without progress a pending stage is reported as stalled (a WARNING through
     * {@code System.Logger}, once per stall episode); {@link StallWatchdog#STALL_SECONDS_DEFAULT} s by default.
     * Zero disables the watchdog.
     */
    public void stallTimeout(java.time.Duration timeout) {
        if (timeout.isNegative()) throw new IllegalArgumentException("stall timeout must be >= 0, got " + timeout);
        watchdog.stallMillis(timeout.toMillis());
    }

    /** The feed's stall watchdog (its warnings, its threshold). */
    public StallWatchdog stallWatchdog() { return watchdog; }

    /** The watchdog's current stall threshold (zero: disabled). */
    public java.time.Duration stallTimeout() { return java.time.Duration.ofMillis(Math.max(0, watchdog.stallMillis())); }

    /** The feed sampled every {@value FeedSampler#INTERVAL_MILLIS_DEFAULT} ms since it started (the last hour at most). */
    public FeedSampler.Timeline timeline() { return sampler.timeline(); }

    /**
     * What the rules of {@link Bottleneck} read, from this feed's timeline and stage latencies, and, for a packed job, the
     * balance of its recent steps ({@link FeedMetrics#pack()}); trainer figures unknown.
     */
    public Bottleneck.Inputs bottleneckInputs() {
        var firstByte = sourceMetrics().map(SourceMetrics::firstByteLatency).filter(h -> h.count() > 0).orElse(null);
        long fetchP50 = firstByte != null ? firstByte.percentileNanos(0.5) : metrics.fetchLatency.percentileNanos(0.5);
        long encodeP50 = metrics.encodeLatency.percentileNanos(0.5) + metrics.pixelWriteLatency.percentileNanos(0.5);
        return new Bottleneck.Inputs(timeline(), fetchP50, firstByte != null, encodeP50, java.util.OptionalDouble.empty(),
                java.util.OptionalDouble.empty(), config.mode() == FeedMode.ZERO_COPY, metrics.pack.packing(), metrics.videoFigures());
    }

    /** The pipeline-side verdict now ({@link Bottleneck#classify} without the trainers' figures). */
    public BottleneckVerdict verdict() { return Bottleneck.classify(bottleneckInputs()); }

    public FeedConfig config() { return config; }

    /** The autotuner's knobs and decisions ({@link FeedConfig#autotune()}); empty when the knobs are pinned. */
    public Optional<FeedTuning> autotune() { return Optional.ofNullable(tuning); }

    /**
     * What a saved position is only valid against: the manifest's bytes, the seed, the batch size and
     * the encoding, pixel format included (not the rank count, nor the mode: every mode yields the same
     * batches). Never 0.
     */
    public long fingerprint() { return fingerprint; }

    /** The job's order over {@code records}: of their mix's places when they are several sources mixed by weight. */
    public static SampleSchedule schedule(FeedConfig config, dev.stoker.source.SampleRecords records) {
        var mix = records instanceof MixedSource.Records mixed ? new SourceMix(config.seed(), mixed.sizes(), mixed.weights()) : null;
        return StepSchedules.order(config.seed(), mix, records.size(), config.ranks(), config.batchSize(), config.packing());
    }

    /**
     * The job's steps over {@code records}, unlabelled ({@link StepSchedules#of}): its order's batches, or packs planned
     * from the order with the shapes {@code shapes} gives (asked only then) and the dummy image of the job's processing.
     */
    public static StepSchedule steps(FeedConfig config, dev.stoker.source.SampleRecords records, StepSchedules.Shapes shapes)
            throws IOException, InterruptedException {
        return StepSchedules.of(schedule(config, records), config.packing(), shapes, dummyShape(config));
    }

    /** Where a packed feed's shapes come from: the length index {@code stoker validate} wrote, or measured from image headers. */
    @FunctionalInterface
    public interface ShapeSource {
        /** The shapes of {@code records}, read through {@code source} (the feed's own) where they must be measured. */
        ShapeIndex shapes(dev.stoker.source.SampleRecords records, FeedSource source) throws IOException, InterruptedException;
    }

    /** The dummy image's segment as a packed job's planner reserves it: its tokens and its one image's patch rows. */
    public static SampleShape dummyShape(FeedConfig config) {
        var dummy = DummyImage.of(config.encode().vision());
        return SampleShape.of(dummy.tokenCount(), dummy.rows());
    }

    /** From the SHA-256 of the manifest's bytes ({@link dev.stoker.source.ManifestRecords#digest()}) and the configuration. */
    static long fingerprint(byte[] manifestDigest, FeedConfig config) {
        try {
            var md = java.security.MessageDigest.getInstance("SHA-256");
            md.update(manifestDigest);
            // a packed job's steps are decided by its budgets, balance, pad and cost model as a padded job's by its batch size
            String steps = config.packing().stepsText(config.batchSize());
            md.update(("seed=" + config.seed() + ";" + steps + ";encode=" + encodingText(config.encode()))
                    .getBytes(java.nio.charset.StandardCharsets.UTF_8));
            long v = java.nio.ByteBuffer.wrap(md.digest()).getLong();
            return v == 0 ? 1 : v;
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The encoding as the fingerprint hashes it: the options' text, in which a FLOAT32 job leaves its pixel
     * format out, so that it keeps the fingerprint it had before the compact format existed (states saved
     * then still resume); UINT8 is part of the text, so a state never resumes across formats. No
     * {@code --max-images} limit (0) is left out the same way; a limit changes which samples are
     * refused, and so the fingerprint. The text-only policy ALLOW (what every job did before the policy existed) is left
     * out too; DUMMY_IMAGE changes the batches of image-less steps, so it is part of the text and a state saved under
     * ALLOW does not resume under it (nor the other way round). The input contract likewise: the default
     * (QWEN_VL_FINETUNE, the tensors every job had before {@code --transformers} existed) is left out, another is part
     * of the text (its batches carry other tensors). A model folder's part
     * ({@link dev.stoker.encode.EncodeOptions#model()}: its tokenizer, its template) is appended when there is one; a
     * job without one keeps its fingerprint. The decode memory budget ({@code --decode-memory}) is left out: its default
     * follows the machine (heap, threads), a job must resume on another one, and what it refuses is an error (recorded in
     * the errors file), not a sample a limit filters. The image backend PIL (what every job had before
     * {@code --image-backend} existed) is left out; TORCHVISION changes the images' pixel values and is part of the text.
     * A job with video ({@link dev.stoker.encode.EncodeOptions#video()} set) appends the video encoding and the decoder
     * path, the FFmpeg libraries' versions or that FFmpeg is unavailable here
     * ({@link dev.stoker.encode.video.VideoEncoding#fingerprintText()}); a job without video keeps its fingerprint.
     */
    static String encodingText(dev.stoker.encode.EncodeOptions e) {
        var text = new StringBuilder("EncodeOptions[preset=").append(e.preset()).append(", vision=").append(e.vision())
                .append(", exif=").append(e.exif()).append(", decodeScale=").append(e.decodeScale()).append(", maxSourcePixels=")
                .append(e.maxSourcePixels()).append(", maxSequenceLength=").append(e.maxSequenceLength()).append(", truncation=")
                .append(e.truncation());
        // each setting added later is written only where it differs from what every job had before it existed
        if (e.pixelFormat() != dev.stoker.encode.EncodeOptions.PixelFormat.FLOAT32 || e.maxImages() != 0)
            text.append(", pixelFormat=").append(e.pixelFormat());
        if (e.maxImages() != 0) text.append(", maxImages=").append(e.maxImages());
        if (e.textOnly() != dev.stoker.encode.EncodeOptions.TextOnlyPolicy.ALLOW) text.append(", textOnly=").append(e.textOnly());
        if (e.inputContract() != dev.stoker.encode.EncodeOptions.DEFAULT_INPUT_CONTRACT)
            text.append(", inputContract=").append(e.inputContract());
        if (e.imageBackend() != dev.stoker.image.qwenvl.ImageBackend.PIL) text.append(", imageBackend=").append(e.imageBackend());
        text.append(']');
        if (e.model() != null) text.append(";model=").append(e.model());
        if (e.chatTemplate() != null) text.append(";template:").append(e.chatTemplateSha256()); // the model's own, rendering
        if (e.video() != null) text.append(";video=").append(e.video().fingerprintText());
        return text.toString();
    }

    /** The steps the feed's ranks walk, labelled as their batches are: batches of the order, or packs planned from it. */
    public StepSchedule schedule() { return schedule; }

    /** Samples in the manifest (non-blank lines). */
    public int datasetSize() { return schedule.datasetSize(); }

    /**
     * Rank {@code rank}'s next heap batch (every mode but ZERO_COPY), in schedule order: one per global step, even when
     * every sample of it failed (then B = 0), so that all ranks take the same steps; fails with the feed's error, or
     * CancellationException after close. The future may complete on a pipeline thread: do not block in its callbacks.
     */
    public CompletableFuture<Batch> next(int rank) { return rank(rank).next(); }

    /** Rank {@code rank}'s next batch in shared memory (ZERO_COPY), as {@link #next(int)}; the caller releases it. */
    public CompletableFuture<StoredBatch> nextStored(int rank) { return storedRank(rank).next(); }

    @SuppressWarnings("unchecked")
    RankFeed<Batch> rank(int rank) {
        if (config.mode() == FeedMode.ZERO_COPY) throw new IllegalStateException("a ZERO_COPY feed yields stored batches: use nextStored()");
        return (RankFeed<Batch>) feed(rank);
    }

    @SuppressWarnings("unchecked")
    RankFeed<StoredBatch> storedRank(int rank) {
        if (config.mode() != FeedMode.ZERO_COPY) throw new IllegalStateException("only a ZERO_COPY feed yields stored batches");
        return (RankFeed<StoredBatch>) feed(rank);
    }

    private RankFeed<?> feed(int rank) {
        var local = config.localRanks();
        if (rank < 0 || rank >= config.ranks()) throw new IllegalArgumentException("rank " + rank + " outside [0, " + config.ranks() + ")");
        if (!local.contains(rank))
            throw new IllegalArgumentException("rank " + rank + " is not served here: this feed serves ranks " + local + " of " + config.ranks());
        return ranks.get(rank - local.first());
    }

    /** The skipped samples and the bad-input policy; {@code errors().failure()} says whether the policy failed the feed. */
    public FeedErrors errors() { return errors; }

    /** The object source's counters when this feeder opened it ({@link #open}), else empty. */
    public Optional<SourceMetrics> sourceMetrics() {
        return Optional.ofNullable(ownedSource).map(DataSources::metrics);
    }

    public FeedMetrics.Snapshot metrics() {
        var perRank = new ArrayList<FeedMetrics.Rank>(ranks.size());
        for (var r : ranks) perRank.add(r.snapshot());
        return metrics.snapshot(perRank, sourceMetrics().map(SourceMetrics::firstByteLatency).orElse(null), errors.counts());
    }

    /** Stops every rank's stream, then the engine (the streams' materializer, the CPU pool) and the writer, waiting at most {@link #CLOSE_TIMEOUT_SECONDS} for the streams. */
    @Override
    public void close() {
        if (tuning != null) tuning.close(); // first: no knob moves while the streams stop
        watchdog.close();
        sampler.close();
        for (var r : ranks) r.close();
        // the ranks' streams stop before what they use: the CPU pool, the store's writer (a process's actor system outlives
        // this feed, so its end is no sign that they have)
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(CLOSE_TIMEOUT_SECONDS);
        for (var r : ranks) {
            try {
                r.terminated().get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            } catch (ExecutionException | TimeoutException e) {
                // the materializer's shutdown below stops what is left
            }
        }
        engine.close(); // the materializer, a system of the feed's own, and the CPU pool, which waits for its samples
        if (writer != null) writer.close(); // after the CPU pool: nothing writes into the store any more
        errors.close();
        if (ownedSource != null) ownedSource.close();
    }
}
