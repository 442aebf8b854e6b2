package dev.stoker.node;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.model.ModelFolder;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.image.qwenvl.ImageBackend;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.plan.pack.Packing;
import dev.stoker.source.ManifestRecords;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.DataSources;
import dev.stoker.store.StoreConfig;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The whole configuration of a Stoker node, immutable and validated once ({@link Builder#build()}):
 * what to feed (data, processor, ranks, batch), how (fetch, CPU, buffers, bad input), where batches
 * live (the shared-memory store), how trainers reach them (socket, Arrow Flight, metrics) and, for a
 * cluster, how this node joins it. Its settings are the keys of {@link NodeSettings}, where each one's
 * default and help are defined once; this class holds their values and what follows from them: the
 * encoding, the sources, the feed's and the store's configurations.
 *
 * <p>What {@link Builder#build()} concludes, once: every default filled in, the model folder's settings adopted
 * or refused ({@link ModelDefaults}), and the settings checked together (pixel bounds, sources, packing,
 * Flight, local ranks, the mode a node serves). A derived value is read from what it derives
 * ({@link #encodeOptions()}, {@link #shm()}), never from its key, whose value is null where the default
 * is derived. A configuration travels as text ({@link ConfigText}: JSON for a cluster job, YAML for files).
 *
 * <pre>{@code
 * var config = NodeConfig.builder().data("s3://bucket/ds/train.jsonl").processor(ProcessorPreset.QWEN2_5_VL)
 *         .ranks(8).batch(8).shmBudgetBytes(16L << 30).build();
 * try (var node = StokerNode.launch(config)) { node.failure().join(); }
 * }</pre>
 */
public final class NodeConfig extends NodeSettings {
    private final Map<ConfigKey<?>, Object> values;
    private final Set<ConfigKey<?>> given;
    /** What the model folder (--model) gave: the folder, the settings taken from it, the warnings, its identity. */
    private final ModelDefaults.Adopted adopted;
    /** What the video settings concluded: the job's video encoding, or why it has none ({@link VideoSettings}). */
    private final VideoSettings videoGiven;
    /** {@link #videoGiven} once {@code --video auto} is resolved against the data ({@link #video()}); null until then. */
    private volatile VideoSettings videoResolved;
    /** The cache of preprocessed samples, opened on first use ({@link #preprocessedCache()}). */
    private dev.stoker.encode.cache.PreprocessedCache cacheOpened;

    private NodeConfig(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given, ModelDefaults.Adopted adopted) {
        this.values = Collections.unmodifiableMap(values);
        this.given = Collections.unmodifiableSet(given);
        this.adopted = adopted;
        this.videoGiven = VideoSettings.of(this, processor().videoFamily()); // reads the model folder's video processor config once
    }

    public static Builder builder() { return new Builder(); }

    /** A builder holding this configuration's given settings. */
    public Builder toBuilder() {
        var b = new Builder();
        for (var k : given) b.values.put(k, values.get(k));
        return b;
    }

    /** This configuration with only the given settings of {@code groups} (the others back at their defaults). */
    public NodeConfig only(Collection<ConfigKey.Group> groups) {
        var b = new Builder();
        for (var k : given) if (groups.contains(k.group())) b.values.put(k, values.get(k));
        return b.build();
    }

    /** The value of {@code key}: the one given, else its default (null where the default is derived or absent). */
    @SuppressWarnings("unchecked")
    public <T> T get(ConfigKey<T> key) { return (T) values.get(key); }

    /** Whether {@code key} was given (set through the builder), rather than left at its default. */
    public boolean isGiven(ConfigKey<?> key) { return given.contains(key); }

    // ---- typed accessors

    /** {@code --processor}: a Qwen-VL family or an audio family ({@link ProcessorPreset#audio()}). */
    public ProcessorPreset processor() { return get(PROCESSOR_KEY); }

    /** The audio family {@code --processor} names (issue 32), or null for a Qwen-VL processor. */
    public dev.stoker.core.AudioPreset audioPreset() { return processor().audio(); }

    /**
     * Why a feed ({@code stoker serve}, and {@code stoker plan}, which prints its steps) cannot serve this job's audio family
     * (issue 32), or null when it can: padded batches of Qwen2-Audio, Qwen2.5-Omni and Qwen3-Omni samples, float32 or
     * compact ({@code --pixel-format uint8}: the pixels compact, the audio tensors float32 and int32 as ever), through shared
     * memory, the socket, Arrow Flight ({@code --flight}) and a cluster ({@code --join}: its workers make them, ranks pull
     * them over Flight); packs ({@code --pack-tokens}) of every family, on one node and in a cluster, each family's
     * {@code position_ids} in its pack layout (docs/packing.md "Audio packs"); the cache. Nothing is refused today; the
     * check stays as the one place a new limit would go.
     */
    public String audioFeedRefusal() {
        return null;
    }

    /**
     * {@code --audio-pad}, or when not given the family's default: {@code hf} for Qwen2-Audio, whose audio tower takes
     * exactly 3,000 mel frames a clip (transformers 5.18.0 {@code Qwen2AudioEncoder.forward} raises a ValueError on any other
     * length: valid frames alone could never be fed to it), {@code valid} for the Omni families (their encoders take the
     * valid frames, {@code feature_attention_mask} says which).
     */
    public dev.stoker.encode.audio.AudioEncoding.Pad audioPad() {
        if (isGiven(AUDIO_PAD)) return get(AUDIO_PAD);
        return audioPreset() == dev.stoker.core.AudioPreset.QWEN2_AUDIO ? dev.stoker.encode.audio.AudioEncoding.Pad.HF
                : dev.stoker.encode.audio.AudioEncoding.Pad.VALID;
    }

    /** The model folder (--model) of a Qwen-VL family, read and checked; null when none was given or it is an audio family's. */
    public ModelFolder model() { return adopted.model(); }

    /** The model folder (--model) of an audio family (issue 32), read and checked; null when none was given or it is a Qwen-VL one. */
    public dev.stoker.core.model.AudioModelFolder audioModel() { return adopted.audioModel(); }

    /** Whether {@code key}'s value came from the model folder. */
    public boolean isFromModel(ConfigKey<?> key) { return adopted.fromModel().contains(key); }

    /** Differences from the model folder that --override-model let through: warn about each once. */
    public List<String> warnings() { return adopted.warnings(); }

    public String data() {
        if (get(DATA_KEY) != null) return get(DATA_KEY);
        var list = sources();
        return list.isEmpty() ? null : String.join(" + ", list.stream().map(DataSources.Spec::data).toList());
    }

    /** Where large sources' record indexes are kept ({@code --index-cache}); null: nowhere ('off'). */
    public ManifestRecords.IndexCache indexCache() {
        String dir = get(INDEX_CACHE);
        if (dir == null) return ManifestRecords.IndexCache.defaults(System.getenv());
        if (dir.equals("off")) return null;
        return new ManifestRecords.IndexCache(Path.of(dir), ManifestRecords.IndexCache.MIN_BYTES_DEFAULT);
    }

    /**
     * Where {@code stoker validate} writes the length index by default and a packed job looks for it: the index cache's
     * folder ({@link #indexCache()}), or {@code ~/.cache/stoker/index} when the cache is off.
     */
    public Path lengthsDir() {
        var cache = indexCache();
        return cache != null ? cache.dir() : Path.of(System.getProperty("user.home"), ".cache", "stoker", "index");
    }

    /**
     * The job's sources: those of {@code sources}, or the one {@code --data} (weight {@code --weight}, default 1);
     * each without its own image root takes {@code --image-root}. Empty when no data is given.
     */
    public List<DataSources.Spec> sources() {
        String root = get(IMAGE_ROOT);
        String list = get(SOURCES);
        if (list == null) {
            if (get(DATA_KEY) == null) return List.of();
            return List.of(spec(get(DATA_KEY), get(WEIGHT) == null ? null : get(WEIGHT), root, "--data"));
        }
        JsonNode tree;
        try {
            tree = new ObjectMapper().readTree(list);
        } catch (IOException e) {
            throw new ConfigException("--sources: not a JSON list of {data, weight, image-root}: "
                    + e.getMessage().lines().findFirst().orElse(""));
        }
        if (tree == null || !tree.isArray() || tree.isEmpty())
            throw new ConfigException("--sources: expected a non-empty list of {data, weight, image-root}");
        var out = new ArrayList<DataSources.Spec>();
        for (int i = 0; i < tree.size(); i++) {
            var e = tree.get(i);
            String at = "sources[" + i + "]";
            if (!e.isObject()) throw new ConfigException(at + ": expected a mapping {data, weight, image-root}");
            for (var f : e.properties())
                if (!List.of("data", "weight", "image-root").contains(f.getKey()))
                    throw new ConfigException(at + ": unknown key '" + f.getKey() + "' (expected data, weight, image-root)");
            var data = e.get("data");
            if (data == null || !data.isTextual()) throw new ConfigException(at + ": 'data' (a path or s3:// URI) is required");
            var w = e.get("weight");
            var r = e.get("image-root");
            out.add(spec(data.asText(), w == null || w.isNull() ? null : w.asText(), r == null || r.isNull() ? root : r.asText(), at));
        }
        return List.copyOf(out);
    }

    private static DataSources.Spec spec(String data, String weight, String imageRoot, String at) {
        double w;
        try {
            w = weight == null ? 1 : Double.parseDouble(weight);
        } catch (NumberFormatException e) {
            throw new ConfigException(at + ": weight '" + weight + "' is not a number");
        }
        try {
            return new DataSources.Spec(data, w, imageRoot);
        } catch (IllegalArgumentException e) {
            throw new ConfigException(at + ": " + e.getMessage());
        }
    }

    public int ranks() { return get(RANKS); }

    /** The ranks this node serves ({@code --local-ranks}): as given, else every rank of the world. */
    public RankRange localRanks() { return get(LOCAL_RANKS) != null ? get(LOCAL_RANKS) : RankRange.all(ranks()); }

    public int batch() { return get(BATCH); }

    public long seed() { return get(SEED); }

    /** CPU threads: as given, else the number of cores. */
    public int threads() { return values.get(THREADS) instanceof Integer n ? n : Runtime.getRuntime().availableProcessors(); }

    public FeedMode mode() { return get(MODE); }

    public String job() { return get(JOB); }

    public long startStep() { return get(START_STEP); }

    public long steps() { return get(STEPS); }

    public List<String> join() { return get(JOIN); }

    /** Workers of a cluster job: as given, else one per node. */
    public int workers() { return values.get(WORKERS) instanceof Integer n ? n : get(NODES); }

    /**
     * The store's budget: as given, else what every rank needs at once and at least 4 GiB, but no more than half of what
     * the store's folder has free ({@link ShmBudget#budgetBytes()}).
     */
    public long shmBudgetBytes() { return shm().budgetBytes(); }

    /** The shared memory this node's store needs and has ({@code --shm-budget}), and the refusal of too little. */
    public ShmBudget shm() { return ShmBudget.of(this); }

    /** How samples are encoded, from the PROCESSOR settings. */
    public EncodeOptions encodeOptions() {
        try {
            var preset = processor().visionFamily(); // an audio family's images and videos follow its vision family's rules
            var base = EncodeOptions.defaults(preset);
            // an audio family's own published image processor settings (Qwen3-Omni's differ from Qwen3-VL's bounds)
            if (audioPreset() != null) base = base.withVision(processor().vision());
            // the model's geometry, mean and std, unless --override-model chose another family
            var folder = model();
            if (folder != null && folder.family() == preset) base = base.withVision(folder.vision()).withModel(adopted.identity());
            else if (folder != null) base = base.withModel(adopted.identity());
            if (folder != null && get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) base = base.withChatTemplate(folder.chatTemplate());
            var audioFolder = audioModel();
            if (audioFolder != null) { // its image processor where it has one (Qwen2.5-Omni), unless --override-model chose another family
                if (audioFolder.vision() != null && audioFolder.family() == audioPreset()) base = base.withVision(audioFolder.vision());
                base = base.withModel(adopted.identity());
                if (get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) base = base.withChatTemplate(audioFolder.chatTemplate());
            }
            long min = get(MIN_PIXELS) != null ? get(MIN_PIXELS) : base.vision().minPixels();
            long max = get(MAX_PIXELS) != null ? get(MAX_PIXELS) : base.vision().maxPixels();
            base = base.withPixels(min, max).withExif(get(EXIF))
                    .withDecodeScale(get(DECODE_SCALE)).withMaxSourcePixels(get(MAX_SOURCE_PIXELS))
                    .withDecodeMemory(get(DECODE_MEMORY) != null ? get(DECODE_MEMORY) : 0) // 0: shared among the CPU pool's threads
                    .withSequenceLimit(get(MAX_SEQ_LEN), get(TRUNCATION)).withPixelFormat(get(PIXEL_FORMAT))
                    .withMaxImages(get(MAX_IMAGES))
                    .withTextOnly(get(TEXT_ONLY)).withInputContract(TransformersVersion.inputContract(get(TRANSFORMERS)))
                    .withImageBackend(imageBackend());
            var video = video();
            if (audioPreset() == null && (isGiven(AUDIO_PAD) || get(USE_AUDIO_IN_VIDEO)))
                throw new ConfigException("--audio-pad and --use-audio-in-video need an audio family's --processor (qwen2-audio, "
                        + "qwen2.5-omni, qwen3-omni), not " + processor());
            if (audioPreset() != null) base = base.withAudio(new dev.stoker.encode.audio.AudioEncoding(audioPreset(), audioPad(),
                    get(USE_AUDIO_IN_VIDEO)));
            return video.encoding() != null ? base.withVideo(video.encoding()) : base.withVideoRefused(video.refusal());
        } catch (IllegalArgumentException e) {
            throw new ConfigException(e.getMessage().startsWith("--") ? e.getMessage() : "--min-pixels/--max-pixels/--max-seq-len: " + e.getMessage());
        }
    }

    /**
     * How the job encodes the videos of its samples ({@code --video}, {@code --video-*}, {@code --transformers} and
     * {@code --model}'s {@code video_preprocessor_config.json}), what {@link #encodeOptions()} carries; null when it takes
     * no video: {@code --video off}, or a trainer's release whose video rules Stoker does not know ({@link #videoRefusal()}).
     */
    public VideoEncoding videoEncoding() { return video().encoding(); }

    /**
     * Why the job takes no video when {@code --video} is on: the trainer's release has no video rules Stoker knows (the
     * message names it and what to pass); null otherwise. {@link #encodeOptions()} carries it, and its record parser says it
     * where it refuses a video record ({@link EncodeOptions#sampleParser()}).
     */
    public String videoRefusal() { return video().refusal(); }

    /**
     * The video settings, {@code --video auto} resolved: with {@code --data}, on only when the data may hold a video
     * ({@link dev.stoker.source.SampleRecords#mayHoldVideo()}: its records are opened once, here, to tell), so that an image
     * job keeps its batches, fingerprint and shared memory; without {@code --data} (encode), on.
     */
    private VideoSettings video() {
        var r = videoResolved;
        if (r == null) videoResolved = r = resolve(videoGiven);
        return r;
    }

    private VideoSettings resolve(VideoSettings given) {
        if (given.encoding() == null || get(VIDEO) != VideoMode.AUTO || sources().isEmpty() || dataMayHoldVideo()) return given;
        return new VideoSettings(null, null); // an image job's options, as before video existed (its fingerprint too)
    }

    /**
     * Whether the job's data may hold a video; false when it cannot be opened here (the job's own start then says why, and
     * sizes nothing for videos it could not see).
     */
    private boolean dataMayHoldVideo() {
        try (var data = dev.stoker.source.mix.DataSources.open(sources(), sourceConfig(), indexCache())) {
            return data.feedSource().records().mayHoldVideo();
        } catch (java.io.IOException | RuntimeException e) {
            System.getLogger(NodeConfig.class.getName()).log(System.Logger.Level.DEBUG, "--video auto: the data was not read (" + e
                    + "): no video");
            return false;
        }
    }

    /**
     * The image processor images reproduce: {@code --image-backend} as given; else the one {@code AutoProcessor} loads on
     * the trainer's transformers release ({@code --transformers}, or the model's {@code transformers_version}), except
     * with {@code --pixel-format uint8}, whose trainer-side normalize is the PIL processor's; else PIL.
     */
    public ImageBackend imageBackend() {
        if (get(IMAGE_BACKEND) != null) return get(IMAGE_BACKEND);
        if (get(PIXEL_FORMAT) == PixelFormat.UINT8) return ImageBackend.PIL;
        return TransformersVersion.imageBackend(get(TRANSFORMERS));
    }

    /** How objects are fetched, from the DATA settings. */
    public SourceConfig sourceConfig() {
        var b = SourceConfig.builder().region(get(S3_REGION)).pathStyle(get(S3_PATH_STYLE)).fetchLatencyMillis(get(FETCH_LATENCY_MS))
                .maxInFlight(maxFetchesInFlight()).localReadTimeoutMillis(get(LOCAL_READ_TIMEOUT_MS))
                .refsOutsideRoot(get(ALLOW_REFS_OUTSIDE_ROOT));
        if (get(S3_ENDPOINT) != null) b.endpointOverride(get(S3_ENDPOINT));
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--s3-*/--fetch-*: " + e.getMessage()); // the message never holds a credential
        }
    }

    /**
     * The pipeline's configuration in {@code mode}, from the DATA settings. In ZERO_COPY with {@code --shm-resident}, each
     * local rank's prefetch bytes are at most its share of that limit: buffered batches are objects in flight, which keep
     * their pages whatever the limit, so neither the buffer nor the autotuner's prefetch raises may hold more (one batch is
     * always buffered).
     */
    public FeedConfig feedConfig(FeedMode mode) {
        long prefetchBytes = get(PREFETCH_BYTES);
        Long resident = get(SHM_RESIDENT);
        if (mode == FeedMode.ZERO_COPY && resident != null) prefetchBytes = Math.min(prefetchBytes, Math.max(1, resident / localRanks().count()));
        return FeedConfig.of(mode, encodeOptions(), ranks(), batch()).withSeed(seed()).withCpuThreads(threads())
                .withFetchConcurrency(get(FETCH_CONCURRENCY)).withPrefetch(get(PREFETCH_BATCHES), prefetchBytes)
                .withWarmUp(get(WARM_UP_MS)).withErrorPolicy(get(ON_ERROR), get(MAX_ERROR_RATE)).withErrorsFile(get(ERRORS_FILE))
                .withLocalRanks(localRanks()).withPacking(packing()).withAutotune(get(AUTOTUNE));
    }

    /** The source's bound on fetches in flight: the fetch concurrency, or the autotuner's ceiling for it when it is on. */
    private int maxFetchesInFlight() {
        int given = get(FETCH_CONCURRENCY);
        return get(AUTOTUNE) ? Math.min(SourceConfig.MAX_IN_FLIGHT_LIMIT, Math.max(given, FeedConfig.FETCH_CONCURRENCY_TUNED_MAX)) : given;
    }

    /** Whether steps are packed ({@code --pack-tokens N}, N > 0). */
    public boolean packed() { return get(PACK_TOKENS) > 0; }

    /**
     * Packing and balance as configured ({@link Packing#OFF} without {@code --pack-tokens}), with the cost model
     * ({@link #packCost()}).
     */
    public Packing packing() {
        if (!packed()) return Packing.OFF;
        try {
            return new Packing(get(PACK_TOKENS), get(PACK_PATCHES), get(BALANCE), get(PACK_PAD_TO), packCost());
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--pack-tokens/--pack-pad-to: " + e.getMessage());
        }
    }

    /**
     * The cost model a packed job balances: the model folder's ({@code --model}: {@link PackCost#fromModelFolder}), else the
     * family's smallest published model ({@link PackCost#forFamily}), each constant a {@code --cost-*} option gives put in
     * its place (all six numbers given: the model folder is not read for them).
     */
    public PackCost packCost() {
        boolean all = isGiven(COST_LLM_PARAMS) && isGiven(COST_LLM_LAYERS) && isGiven(COST_LLM_ATTENTION_WIDTH) && isGiven(COST_VIT_PARAMS)
                && isGiven(COST_VIT_ATTENTION_LAYERS) && isGiven(COST_VIT_HIDDEN);
        PackCost base;
        try {
            base = model() != null && !all ? PackCost.fromModelFolder(model().dir()) : PackCost.forFamily(processor().visionFamily());
        } catch (ModelFolder.ModelFolderException e) {
            throw new ConfigException("--model (the cost model of a packed job): " + e.getMessage() + "; or give every --cost-* option");
        }
        try {
            return new PackCost(or(COST_LLM_PARAMS, base.llmParams()), or(COST_LLM_LAYERS, base.llmLayers()),
                    or(COST_LLM_ATTENTION_WIDTH, base.llmAttentionWidth()), or(COST_VIT_PARAMS, base.vitParams()),
                    or(COST_VIT_ATTENTION_LAYERS, base.vitAttentionLayers()), or(COST_VIT_HIDDEN, base.vitHidden()),
                    or(COST_VISION_TRAINED, base.visionTrained()));
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--cost-*: " + e.getMessage());
        }
    }

    /** The value of {@code key} when given, else {@code fallback}. */
    private <T> T or(ConfigKey<T> key, T fallback) { return isGiven(key) ? get(key) : fallback; }

    /**
     * Whether the cache of preprocessed samples is on: {@code --cache}, else on unless {@code $STOKER_CACHE} is off. An
     * audio family's job caches each clip's log-mel features too (docs/cache.md).
     */
    public boolean cacheOn() {
        if (isGiven(CACHE)) return get(CACHE);
        String env = System.getenv(CACHE_ENV);
        return env == null || !(env.equalsIgnoreCase("off") || env.equalsIgnoreCase("false") || env.equals("0"));
    }

    /** Whether a cluster job's nodes read media entries from their home node ({@code --cache-affinity}; with the cache on). */
    public boolean cacheAffinity() { return cacheOn() && get(CACHE_AFFINITY); }

    /** The cache's folder: {@code --cache-dir}, else {@code $STOKER_CACHE_DIR}, {@code $XDG_CACHE_HOME/stoker}, {@code ~/.cache/stoker}. */
    public Path cacheDir() {
        if (get(CACHE_DIR) != null) return get(CACHE_DIR);
        String dir = System.getenv(CACHE_DIR_ENV);
        if (dir != null && !dir.isBlank()) return Path.of(dir);
        String xdg = System.getenv("XDG_CACHE_HOME");
        if (xdg != null && !xdg.isBlank()) return Path.of(xdg, "stoker");
        return Path.of(System.getProperty("user.home"), ".cache", "stoker");
    }

    /**
     * The cache of preprocessed samples this job's feeds read and write, opened (its folder made, its entries listed) on
     * the first call; null when {@code --cache off}. Its budget is {@code --cache-bytes}, else a quarter of the folder's
     * free space now (entries already there count against it). A folder that cannot be made is refused here.
     */
    public synchronized dev.stoker.encode.cache.PreprocessedCache preprocessedCache() {
        if (!cacheOn()) return null;
        if (cacheOpened != null) return cacheOpened;
        Path dir = cacheDir();
        try {
            java.nio.file.Files.createDirectories(dir);
            long budget = get(CACHE_BYTES) != null ? get(CACHE_BYTES)
                    : Math.max(1L << 20, java.nio.file.Files.getFileStore(dir).getUsableSpace() / 4);
            boolean zstd = get(CACHE_COMPRESS) && dev.stoker.cache.Zstd.available(); // without libzstd: raw, as docs/cache.md says
            cacheOpened = new dev.stoker.encode.cache.PreprocessedCache(dev.stoker.cache.SampleCache.open(dir, budget,
                    dev.stoker.cache.SampleCache.LEVEL_DEFAULT, zstd, System::currentTimeMillis));
            return cacheOpened;
        } catch (java.io.IOException | RuntimeException e) {
            throw new ConfigException("--cache-dir " + dir + ": " + e.getMessage() + " (--cache off runs without the cache)");
        }
    }

    /** The local job's store. */
    public StoreConfig storeConfig() { return storeConfig(shmBudgetBytes()); }

    /** The local store's settings with a budget of {@code budgetBytes} (a {@link ShmBudget}'s, sized from the data). */
    public StoreConfig storeConfig(long budgetBytes) {
        try {
            return new StoreConfig(get(SHM_DIR), budgetBytes, StoreConfig.DEFAULT_INSTANCE_NAME);
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--shm-dir/--shm-budget: " + e.getMessage());
        }
    }

    /** A cluster member's store, named {@code name}. */
    public StoreConfig nodeStoreConfig(String name) {
        try {
            return new StoreConfig(get(NODE_SHM_DIR), get(NODE_SHM_BUDGET), name);
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--node-shm-*: " + e.getMessage());
        }
    }

    /** Bytes of one batch of single-image samples at the pixel cap (what a batch usually takes at most). */
    public long oneBatchBytes() { return packed() ? shm().largestBatchBytes() : batch() * encodeOptions().maxPixelBytesPerImage(); }

    // ---- as text ({@link ConfigText})

    /** The given settings as JSON {name: text}: what a cluster job carries to its nodes ({@link ConfigText#toJson}). */
    public String toJson() { return ConfigText.toJson(this); }

    /** The configuration {@link #toJson()} wrote. */
    public static NodeConfig fromJson(String json) { return ConfigText.fromJson(json); }

    /** The settings of a YAML config file, as text by name ({@link ConfigText#readSettings}). */
    public static Map<String, String> readSettings(Path file) { return ConfigText.readSettings(file); }

    /** The configuration a YAML config file holds; every key must be a setting. */
    public static NodeConfig fromYaml(Path file) { return ConfigText.fromYaml(file); }

    /** The settings {@code keys} as YAML, those not given commented out, so that the text read back means the same. */
    public String toYaml(Collection<? extends ConfigKey<?>> keys) { return ConfigText.toYaml(this, keys); }

    @Override
    public boolean equals(Object o) { return o instanceof NodeConfig c && c.values.equals(values) && c.given.equals(given); }

    @Override
    public int hashCode() { return values.hashCode(); }

    /** The given settings; never a token (tokens are only ever read from files or the environment). */
    @Override
    public String toString() { return "NodeConfig" + toJson(); }

    /** Collects settings; {@link #build()} validates them together. Not thread-safe. */
    public static final class Builder {
        private final Map<ConfigKey<?>, Object> values = new LinkedHashMap<>();

        private Builder() {}

        /** Sets {@code key} to {@code value}; null goes back to the default. */
        public <T> Builder set(ConfigKey<T> key, T value) {
            if (value == null) values.remove(key);
            else values.put(key, value);
            return this;
        }

        /** Sets the setting called {@code name} from its text, as the command line or a config file gives it. */
        public Builder set(String name, String text) {
            var k = key(name);
            if (k == null) throw new ConfigException("unknown setting '" + name + "'");
            values.put(k, k.parse(text));
            return this;
        }

        public Builder data(String uri) { return set(DATA_KEY, uri); }

        public Builder processor(ProcessorPreset p) { return set(PROCESSOR_KEY, p); }

        public Builder pixels(long min, long max) { return set(MIN_PIXELS, min).set(MAX_PIXELS, max); }

        public Builder ranks(int r) { return set(RANKS, r); }

        public Builder batch(int b) { return set(BATCH, b); }

        /** Packed steps of at most {@code tokens} tokens per rank ({@code --pack-tokens}; 0: off). */
        public Builder packTokens(int tokens) { return set(PACK_TOKENS, tokens); }

        public Builder packPatches(int patches) { return set(PACK_PATCHES, patches); }

        public Builder balance(PackPlanner.Balance b) { return set(BALANCE, b); }

        public Builder seed(long s) { return set(SEED, s); }

        public Builder threads(int n) { return set(THREADS, n); }

        public Builder mode(FeedMode m) { return set(MODE, m); }

        public Builder pixelFormat(PixelFormat f) { return set(PIXEL_FORMAT, f); }

        public Builder textOnly(TextOnlyPolicy t) { return set(TEXT_ONLY, t); }

        public Builder socket(Path p) { return set(SOCKET, p); }

        public Builder shmBudgetBytes(long n) { return set(SHM_BUDGET, n); }

        public Builder shmDir(Path p) { return set(SHM_DIR, p); }

        public Builder warmUpMillis(long ms) { return set(WARM_UP_MS, ms); }

        public Builder steps(long n) { return set(STEPS, n); }

        public Builder flight(String spec) { return set(FLIGHT, spec); }

        public Builder tokenizer(Path p) { return set(TOKENIZER, p); }

        /** Validates the settings together; every default is filled in. */
        public NodeConfig build() {
            var all = new LinkedHashMap<ConfigKey<?>, Object>();
            for (var k : keys()) all.put(k, values.containsKey(k) ? values.get(k) : k.defaultValue());
            for (var e : values.entrySet()) { // a value set as an object goes through its text, so that it is checked as text is
                var k = e.getKey();
                all.put(k, k.parse(k.format(e.getValue())));
            }
            var given = new LinkedHashSet<ConfigKey<?>>(values.keySet());
            var config = new NodeConfig(all, given, ModelDefaults.apply(all, given));
            config.encodeOptions(); // min <= max pixels, sequence limit
            FeedMode mode = config.mode(); // the rungs a node serves; bench ladder runs the others on a feed of its own
            if (mode != FeedMode.ZERO_COPY && mode != FeedMode.PREFETCH)
                throw new ConfigException("--mode must be zero-copy or prefetch, got " + ConfigKey.cliName(mode));
            config.sourceConfig();
            if (given.contains(SOURCES) && given.contains(DATA_KEY))
                throw new ConfigException("--data and --sources: give one (several sources: repeat --data URI [--weight W], or list them "
                        + "under sources)");
            if (given.contains(WEIGHT) && !given.contains(DATA_KEY))
                throw new ConfigException("--weight goes with the --data before it");
            config.sources(); // every source's data and weight well formed
            if (config.packed() && given.contains(BATCH))
                throw new ConfigException("a packed step takes a variable number of samples: --batch does not apply with --pack-tokens");
            if (!config.packed())
                for (var k : PACK_ONLY)
                    if (given.contains(k)) throw new ConfigException(k.option() + " goes with --pack-tokens N (N > 0: packing on)");
            config.packing(); // N a multiple of M
            boolean flight = config.get(FLIGHT) != null;
            if (!flight && (given.contains(FLIGHT_TOKEN_FILE) || given.contains(FLIGHT_TLS_CERT) || given.contains(FLIGHT_TLS_KEY)))
                throw new ConfigException("--flight-token-file and --flight-tls-* need --flight");
            if (given.contains(FLIGHT_TLS_CERT) != given.contains(FLIGHT_TLS_KEY))
                throw new ConfigException("--flight-tls-cert and --flight-tls-key go together");
            var local = config.get(LOCAL_RANKS);
            if (local != null && local.last() >= config.ranks())
                throw new ConfigException("--local-ranks " + local + " is outside the job's ranks 0-" + (config.ranks() - 1)
                        + " (--ranks " + config.ranks() + " is the world size, every node's ranks together)");
            if (local != null && !config.join().isEmpty())
                throw new ConfigException("--local-ranks is for a job of this node's own (serve without --join); a cluster job "
                        + "places its ranks itself");
            if (config.workers() > MAX_CLUSTER_WORKERS)
                throw new ConfigException("--workers: must be between 1 and " + MAX_CLUSTER_WORKERS + ", got " + config.workers());
            return config;
        }
    }
}
