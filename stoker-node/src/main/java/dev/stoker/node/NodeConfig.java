package dev.stoker.node;

import static dev.stoker.node.ConfigKey.Group.CLUSTER;
import static dev.stoker.node.ConfigKey.Group.DATA;
import static dev.stoker.node.ConfigKey.Group.MEMBER;
import static dev.stoker.node.ConfigKey.Group.PROCESSOR;
import static dev.stoker.node.ConfigKey.Group.SERVE;
import static dev.stoker.node.ConfigKey.Group.STORE;
import static dev.stoker.node.ConfigKey.Kind.FLAG;
import static dev.stoker.node.ConfigKey.Kind.LIST;
import static dev.stoker.node.ConfigKey.Kind.NUMBER;
import static dev.stoker.node.ConfigKey.Kind.TEXT;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.DecodeScale;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.encode.batch.BatchShape;
import dev.stoker.source.mix.DataSources;
import dev.stoker.pipeline.feed.ErrorPolicy;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedErrors;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.core.model.ModelFolder;
import dev.stoker.plan.pack.PackCost;
import dev.stoker.plan.pack.Packing;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.text.TruncationPolicy;
import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * The whole configuration of a Stoker node, immutable and validated once ({@link Builder#build()}):
 * what to feed (data, processor, ranks, batch), how (fetch, CPU, buffers, bad input), where batches
 * live (the shared-memory store), how trainers reach them (socket, Arrow Flight, metrics) and, for a
 * cluster, how this node joins it. Every default is defined once, in the table below; the command
 * line's defaults are these, and a config file's keys are these names.
 *
 * <p>A configuration travels as text: {@link #toJson()} carries the settings that were given (the
 * others stay defaults where it is read, so that a derived default such as the CPU threads is the
 * reading node's), and {@link #toYaml} prints every setting, those left at their defaults commented
 * out, so that the printed file read back means the same.
 *
 * <pre>{@code
 * var config = NodeConfig.builder().data("s3://bucket/ds/train.jsonl").processor(ProcessorPreset.QWEN2_5_VL)
 *         .ranks(8).batch(8).shmBudgetBytes(16L << 30).build();
 * try (var node = StokerNode.launch(config)) { node.awaitStop(); }
 * }</pre>
 */
public final class NodeConfig {
    /** How a cluster places its workers: pack fills the oldest node's slots first; spread deals them over the nodes. */
    public enum Placement { PACK, SPREAD }

    /** Which chat template renders a sample's chat: Stoker's built-in one of the family, or the model folder's own. */
    public enum ChatTemplateChoice { BUILTIN, MODEL }

    /** Workers a cluster job may place: a node may be given any of them when another dies (the task producer's bound). */
    public static final int MAX_CLUSTER_WORKERS = 64;

    private static final List<ConfigKey<?>> KEYS = new ArrayList<>();

    // ---- PROCESSOR: how a sample becomes model inputs
    public static final ConfigKey<Path> MODEL = key("model", PROCESSOR, "DIR", TEXT, ConfigKey.path(), Path::toString, null, "none",
            "A Hugging Face model folder (config.json, preprocessor_config.json, tokenizer.json, tokenizer_config.json, "
                    + "chat_template.jinja/.json where present): the family, pixel bounds, patch sizes, mean, std, tokenizer and chat "
                    + "template come from it, as AutoProcessor.from_pretrained reads them. An option given beside it that disagrees "
                    + "with it is refused, unless --override-model.");
    public static final ConfigKey<Boolean> OVERRIDE_MODEL = key("override-model", PROCESSOR, null, FLAG, ConfigKey.flag(), String::valueOf,
            false, null, "Let --processor, --min-pixels, --max-pixels and --tokenizer given beside --model win over the model's "
                    + "values (each difference is warned about once).");
    public static final ConfigKey<ChatTemplateChoice> CHAT_TEMPLATE = key("chat-template", PROCESSOR, "WHICH", TEXT,
            ConfigKey.enumOf(ChatTemplateChoice.class), ConfigKey::cliName, ChatTemplateChoice.BUILTIN, null, "builtin: render chats with "
                    + "Stoker's template of the family (fast); a --model whose own template renders the template cases differently is "
                    + "refused at start, naming the case and the first differing character. model: render with the model's own template "
                    + "(Jinja, as transformers' apply_chat_template does; slower), labels by the official rule (docs/chat-templates.md).");
    public static final ConfigKey<ProcessorPreset> PROCESSOR_KEY = key("processor", PROCESSOR, "NAME", TEXT, ProcessorPreset::fromName,
            ProcessorPreset::cliName, ProcessorPreset.QWEN2_5_VL, null, "Model family: qwen2-vl, qwen2.5-vl, qwen3-vl (with --model: "
                    + "the model's).");
    public static final ConfigKey<Long> MIN_PIXELS = key("min-pixels", PROCESSOR, "N", NUMBER, ConfigKey.longInt(1, Long.MAX_VALUE),
            String::valueOf, null, "the processor's: 3136 for qwen2-vl and qwen2.5-vl, 65536 for qwen3-vl; with --model, the model's",
            "Lower bound of the resized image area in pixels.");
    public static final ConfigKey<Long> MAX_PIXELS = key("max-pixels", PROCESSOR, "N", NUMBER, ConfigKey.longInt(1, Long.MAX_VALUE),
            String::valueOf, null, "the processor's: 12845056 for qwen2-vl and qwen2.5-vl, 16777216 for qwen3-vl; with --model, the "
                    + "model's", "Upper bound of the resized image area in pixels.");
    public static final ConfigKey<ExifPolicy> EXIF = key("exif", PROCESSOR, "POLICY", TEXT, ConfigKey.enumOf(ExifPolicy.class),
            ConfigKey::cliName, ExifPolicy.APPLY, null, "EXIF orientation: apply (as transformers' load_image, which the official Qwen "
                    + "SFT code uses) or ignore (as a bare PIL.Image.open).");
    public static final ConfigKey<DecodeScale> DECODE_SCALE = key("decode-scale", PROCESSOR, "MODE", TEXT,
            ConfigKey.enumOf(DecodeScale.class), ConfigKey::cliName, DecodeScale.OFF, null, "off: bit-exact with Pillow. auto: JPEG "
                    + "DCT-scaled decode when the target is at most half the source (like Pillow's draft()); faster, NOT bit-exact.");
    public static final ConfigKey<Long> MAX_SOURCE_PIXELS = key("max-source-pixels", PROCESSOR, "N", NUMBER,
            ConfigKey.longInt(1, Long.MAX_VALUE), String::valueOf, EncodeOptions.DEFAULT_MAX_SOURCE_PIXELS, null,
            "Refuse images whose header claims more pixels, before decoding (Pillow's bomb limit).");
    public static final ConfigKey<Long> DECODE_MEMORY = key("decode-memory", PROCESSOR, "BYTES", NUMBER, ConfigKey.bytes(1),
            String::valueOf, null, "half the heap divided by --threads",
            "Most memory decoding one image may take on one CPU thread; an image whose header says it needs more is that "
                    + "sample's error, refused before decoding. Suffixes K, M, G allowed.");
    public static final ConfigKey<Integer> MAX_SEQ_LEN = key("max-seq-len", PROCESSOR, "N", NUMBER, ConfigKey.integer(0, Integer.MAX_VALUE),
            String::valueOf, EncodeOptions.DEFAULT_MAX_SEQUENCE_LENGTH, null, "Token limit per sample, 0 for none.");
    public static final ConfigKey<Integer> MAX_IMAGES = key("max-images", PROCESSOR, "N", NUMBER, ConfigKey.integer(0, Integer.MAX_VALUE),
            String::valueOf, 0, null, "Images a sample may have, 0 for no limit but --max-seq-len's; a sample with more is refused "
                    + "(an error naming it). With it the largest possible batch, and so the shared memory a rank needs, is smaller.");
    public static final ConfigKey<TruncationPolicy> TRUNCATION = key("truncation", PROCESSOR, "POLICY", TEXT,
            ConfigKey.enumOf(TruncationPolicy.class), ConfigKey::cliName, TruncationPolicy.REJECT, null, "Over-long samples: reject (an "
                    + "error naming the sample) or truncate (text only; an image's token run is never cut, images past the cut are dropped).");
    public static final ConfigKey<PixelFormat> PIXEL_FORMAT = key("pixel-format", PROCESSOR, "FORMAT", TEXT,
            ConfigKey.enumOf(PixelFormat.class), ConfigKey::cliName, PixelFormat.FLOAT32, null, "What a batch carries of its images: "
                    + "float32 pixel_values, or uint8, each image's resized RGB pixels (pixel_values_u8, 1/8 of the bytes) that the trainer "
                    + "normalizes and patchifies itself, bit for bit the same (Python: stoker.pixels.to_pixel_values); for network-bound "
                    + "delivery (socket copies, Arrow Flight).");
    public static final ConfigKey<TextOnlyPolicy> TEXT_ONLY = key("text-only", PROCESSOR, "POLICY", TEXT,
            ConfigKey.enumOf(TextOnlyPolicy.class), ConfigKey::cliName, EncodeOptions.DEFAULT_TEXT_ONLY, null, "A rank's batch in which no "
                    + "sample has an image: dummy-image appends one white 64x64 image (the job's processing; tokens after the first "
                    + "sample's, label -100, attention 0), as LLaMA-Factory does, so that every rank runs the vision tower (Hugging "
                    + "Face's fails on an empty pixel_values, and under FSDP/ZeRO-3 a rank that skips it hangs the job); allow sends "
                    + "the batch as it is (pixel_values with 0 rows).");
    public static final ConfigKey<TransformersVersion> TRANSFORMERS = key("transformers", PROCESSOR, "VERSION", TEXT,
            TransformersVersion::parse, TransformersVersion::toString, null, "with --model, its config.json transformers_version; "
                    + "else none: the official qwen-vl-finetune tensors", "The transformers release the trainer runs (4.57.6, 5.18, 5): "
                    + "which tensors a batch hands to forward. Before 5.3: the official qwen-vl-finetune collator's; 5.3 and later also "
                    + "mm_token_type_ids (1 at image pads, 2 at video pads, 0 elsewhere), with position_ids padded with 0 instead of 1 "
                    + "(docs/model-inputs.md). Given beside --model it wins over the model's, which names the release that saved it.");
    public static final ConfigKey<Path> TOKENIZER = key("tokenizer", PROCESSOR, "FILE", TEXT, ConfigKey.path(), Path::toString, null,
            "the bundled Qwen2 tokenizer; with --model, the model's", "tokenizer.json (or .json.gz).");

    // ---- DATA: what to feed and how
    public static final ConfigKey<String> DATA_KEY = key("data", DATA, "URI", TEXT, ConfigKey.text(), Function.identity(), null, null,
            "The manifest: a local path, file://… or s3://bucket/key of train.jsonl (images relative to its folder). Required.");
    public static final ConfigKey<String> WEIGHT = key("weight", DATA, "W", TEXT, ConfigKey.text(), Function.identity(), null, "1",
            "The weight of the --data before it: passes over that source per epoch of the mix (1: once; 0.5: half of it, as "
                    + "qwen-vl-finetune's name%50; 3: three times). Give --data URI [--weight W] once per source.");
    public static final ConfigKey<String> SOURCES = key("sources", DATA, "JSON", TEXT, ConfigKey.text(), Function.identity(), null, null,
            "Several sources mixed by weight, in a config file: a list of {data: URI, weight: W, image-root: DIR} (weight "
                    + "default 1, image-root default --image-root); on the command line, repeat --data URI [--weight W]. "
                    + "Not with a plain --data.");
    public static final ConfigKey<String> IMAGE_ROOT = key("image-root", DATA, "DIR", TEXT, ConfigKey.text(), Function.identity(), null,
            "each source's own folder", "The folder relative image paths resolve against (a local path or s3://bucket/prefix/), "
                    + "for every source without its own; paths must stay inside it.");
    public static final ConfigKey<String> INDEX_CACHE = key("index-cache", DATA, "DIR", TEXT, ConfigKey.text(), Function.identity(), null,
            "$STOKER_INDEX_CACHE, else $XDG_CACHE_HOME/stoker/index, else ~/.cache/stoker/index",
            "Where the record indexes of large sources (64 MiB and up) are kept between runs, keyed by each source's URI, "
                    + "size and version (modification time or ETag); 'off': index every run.");
    public static final ConfigKey<Integer> RANKS = key("ranks", DATA, "R", NUMBER, ConfigKey.integer(1, 1 << 16), String::valueOf, 1, null,
            "Trainer ranks (world size).");
    public static final ConfigKey<Integer> BATCH = key("batch", DATA, "B", NUMBER, ConfigKey.integer(1, 1 << 20), String::valueOf, 8, null,
            "Samples per rank and step. Not with --pack-tokens: a packed step takes a variable number of samples.");
    public static final ConfigKey<Integer> PACK_TOKENS = key("pack-tokens", DATA, "N", NUMBER, ConfigKey.integer(0, 1 << 24),
            String::valueOf, 0, null, "Pack each step: one row per rank of whole samples, at most N tokens (no padding computed), the "
                    + "samples of the global order dealt to the ranks so that their predicted cost is even (--balance); a step then "
                    + "takes a variable number of samples, so --batch does not apply. 0: off (batches of --batch padded samples).");
    public static final ConfigKey<Integer> PACK_PATCHES = key("pack-patches", DATA, "P", NUMBER, ConfigKey.integer(0, 1 << 28),
            String::valueOf, 0, null, "With --pack-tokens: at most P vision patches (pixel_values rows) per pack; 0: no limit but "
                    + "what --pack-tokens implies.");
    public static final ConfigKey<PackPlanner.Balance> BALANCE = key("balance", DATA, "WHAT", TEXT,
            ConfigKey.enumOf(PackPlanner.Balance.class), ConfigKey::cliName, PackPlanner.Balance.COST, null,
            "With --pack-tokens: cost evens the predicted compute of the ranks' packs (the cost model, --cost-*), so that no rank "
                    + "waits for another at the all-reduce; count evens only their sample counts.");
    public static final ConfigKey<Integer> PACK_PAD_TO = key("pack-pad-to", DATA, "M", NUMBER, ConfigKey.integer(1, 1 << 16),
            String::valueOf, 1, null, "With --pack-tokens: pad each row at its tail to a multiple of M tokens (8 or 64 suit tensor "
                    + "cores); --pack-tokens must be a multiple of it. 1: no pad.");
    private static final String COST_DEFAULT = "the model's (--model), else the family's smallest published model (docs/packing.md)";
    public static final ConfigKey<Double> COST_LLM_PARAMS = key("cost-llm-params", DATA, "N", NUMBER, ConfigKey.positive(),
            ConfigKey::formatNumber, null, COST_DEFAULT, "Cost model: matrix-multiply weights each LLM token goes through (e.g. 3.1e9).");
    public static final ConfigKey<Integer> COST_LLM_LAYERS = key("cost-llm-layers", DATA, "N", NUMBER, ConfigKey.integer(1, 1 << 16),
            String::valueOf, null, COST_DEFAULT, "Cost model: LLM decoder layers (the quadratic attention term).");
    public static final ConfigKey<Integer> COST_LLM_ATTENTION_WIDTH = key("cost-llm-attention-width", DATA, "N", NUMBER,
            ConfigKey.integer(1, 1 << 24), String::valueOf, null, COST_DEFAULT, "Cost model: LLM attention heads × head dimension.");
    public static final ConfigKey<Double> COST_VIT_PARAMS = key("cost-vit-params", DATA, "N", NUMBER, ConfigKey.positive(),
            ConfigKey::formatNumber, null, COST_DEFAULT, "Cost model: matrix-multiply weights each vision patch goes through.");
    public static final ConfigKey<Integer> COST_VIT_ATTENTION_LAYERS = key("cost-vit-attention-layers", DATA, "N", NUMBER,
            ConfigKey.integer(0, 1 << 16), String::valueOf, null, COST_DEFAULT, "Cost model: ViT layers with full attention over the "
                    + "image (the quadratic term; Qwen2.5-VL: its 4 full-attention layers).");
    public static final ConfigKey<Integer> COST_VIT_HIDDEN = key("cost-vit-hidden", DATA, "N", NUMBER, ConfigKey.integer(1, 1 << 24),
            String::valueOf, null, COST_DEFAULT, "Cost model: ViT hidden size.");
    public static final ConfigKey<Boolean> COST_VISION_TRAINED = key("cost-vision-trained", DATA, "BOOL", TEXT, ConfigKey.flag(),
            String::valueOf, true, null, "Cost model: whether the vision tower is trained (false: frozen, its backward pass not counted).");
    public static final ConfigKey<Long> SEED = key("seed", DATA, "N", NUMBER, ConfigKey.longInt(Long.MIN_VALUE, Long.MAX_VALUE),
            String::valueOf, FeedConfig.SEED_DEFAULT, null, "Shuffle seed.");
    public static final ConfigKey<Integer> THREADS = key("threads", DATA, "N", NUMBER, ConfigKey.integer(1, 4096), String::valueOf, null,
            "the number of cores", "CPU threads for decode, transform and tokenize.");
    public static final ConfigKey<Integer> FETCH_CONCURRENCY = key("fetch-concurrency", DATA, "N", NUMBER,
            ConfigKey.integer(1, SourceConfig.MAX_IN_FLIGHT_LIMIT), String::valueOf, FeedConfig.FETCH_CONCURRENCY_DEFAULT, null,
            "Object fetches in flight.");
    public static final ConfigKey<Long> FETCH_LATENCY_MS = key("fetch-latency-ms", DATA, "MS", NUMBER, ConfigKey.longInt(0, 3_600_000),
            String::valueOf, SourceConfig.FETCH_LATENCY_MILLIS_DEFAULT, null,
            "Added first-byte delay per object, to model object storage on a local disk.");
    public static final ConfigKey<Long> LOCAL_READ_TIMEOUT_MS = key("local-read-timeout-ms", DATA, "MS", NUMBER,
            ConfigKey.longInt(1, 3_600_000), String::valueOf, SourceConfig.LOCAL_READ_TIMEOUT_MILLIS_DEFAULT, null,
            "A local read (an image, a record, a shard's member) not done in this time fails its sample (a hung network "
                    + "file system); its thread is interrupted, and replaced while it does not return.");
    public static final ConfigKey<Boolean> ALLOW_REFS_OUTSIDE_ROOT = key("allow-refs-outside-root", DATA, null, FLAG, ConfigKey.flag(),
            String::valueOf, false, null, "Let a manifest's file:// references name files outside its data set's folder and its "
                    + "s3:// references objects of other buckets. Without it they are refused per sample, so that a manifest "
                    + "from elsewhere reads only its own data set; with it, trust the manifest as you trust the command line.");
    public static final ConfigKey<Integer> PREFETCH_BATCHES = key("prefetch-batches", DATA, "N", NUMBER, ConfigKey.integer(1, 1 << 16),
            String::valueOf, FeedConfig.PREFETCH_BATCHES_DEFAULT, null, "Prefetch buffer per rank, in batches.");
    public static final ConfigKey<Long> PREFETCH_BYTES = key("prefetch-bytes", DATA, "BYTES", NUMBER, ConfigKey.bytes(1), String::valueOf,
            FeedConfig.PREFETCH_BYTES_DEFAULT, null, "Prefetch buffer per rank, in bytes; suffixes K, M, G allowed.");
    public static final ConfigKey<Long> WARM_UP_MS = key("warm-up-ms", DATA, "MS", NUMBER, ConfigKey.longInt(0, 600_000), String::valueOf,
            FeedConfig.WARM_UP_MILLIS_DEFAULT, null, "Before the feed opens, each CPU thread encodes a made-up sample for this long, so "
                    + "that the JIT compiles the hot path before a trainer waits on it; 0 turns it off.");
    public static final ConfigKey<ErrorPolicy> ON_ERROR = key("on-error", DATA, "POLICY", TEXT, ConfigKey.enumOf(ErrorPolicy.class),
            ConfigKey::cliName, ErrorPolicy.SKIP, null, "A broken sample (missing or broken image, malformed line, path outside the "
                    + "data set): skip leaves it out of its batch, records it and goes on (within --max-error-rate); fail stops the "
                    + "feed at the first one, every rank's next batch failing with an error that names it. Samples filtered by a "
                    + "limit (over --max-seq-len, over --max-images) are left out and recorded under both, and are not errors.");
    public static final ConfigKey<Double> MAX_ERROR_RATE = key("max-error-rate", DATA, "R", NUMBER, ConfigKey.fraction(), String::valueOf,
            FeedConfig.MAX_ERROR_RATE_DEFAULT, null, "With --on-error skip: stop the feed when more than this share (0–1) of the "
                    + "samples scheduled so far failed (filtered samples are not counted), over all ranks and the job so far, judged "
                    + "from " + FeedErrors.MIN_SCHEDULED_FOR_RATE + " samples on, and at once when the first " + FeedErrors.EARLY_SAMPLES
                    + " samples all fail (a wrong image folder stops the job within seconds, naming the most common cause). The "
                    + "default tolerates the few percent of lost images scraped data sets have and stops a systemic fault; 1 turns "
                    + "every limit off.");
    public static final ConfigKey<Path> ERRORS_FILE = key("errors-file", DATA, "FILE", TEXT, ConfigKey.path(), Path::toString, null, null,
            "Append every skipped sample to this file, one JSON object per line {id, index, epoch, step, rank, kind, stage, cause} "
                    + "with kind error or filtered (docs/run-data.md); they are counted in the metrics either way.");
    public static final ConfigKey<URI> S3_ENDPOINT = key("s3-endpoint", DATA, "URL", TEXT, ConfigKey.uri(), URI::toString, null, "AWS",
            "S3 endpoint override, e.g. http://127.0.0.1:9090.");
    public static final ConfigKey<String> S3_REGION = key("s3-region", DATA, "REGION", TEXT, ConfigKey.text(), Function.identity(),
            SourceConfig.REGION_DEFAULT, null, "S3 region.");
    public static final ConfigKey<Boolean> S3_PATH_STYLE = key("s3-path-style", DATA, null, FLAG, ConfigKey.flag(), String::valueOf, false,
            null, "Path-style S3 addressing (needed by most S3-compatible servers).");

    // ---- STORE: where batches live
    public static final ConfigKey<Path> SHM_DIR = key("shm-dir", STORE, "DIR", TEXT, ConfigKey.path(), Path::toString,
            StoreConfig.DEFAULT_DIRECTORY, null, "Where the shared-memory object store keeps its segment files.");
    public static final ConfigKey<Long> SHM_BUDGET = key("shm-budget", STORE, "BYTES", NUMBER, ConfigKey.bytes(1), String::valueOf, null,
            "4G, or half the free space of --shm-dir when that is less",
            "Hard limit of the shared-memory object store in bytes; suffixes K, M, G allowed.");

    // ---- SERVE: the job and how trainers reach it
    public static final ConfigKey<String> JOB = key("job", SERVE, "NAME", TEXT, ConfigKey.text(), Function.identity(), "default", null,
            "Job name.");
    public static final ConfigKey<FeedMode> MODE = key("mode", SERVE, "MODE", TEXT, ConfigKey.enumOf(FeedMode.class), ConfigKey::cliName,
            FeedMode.ZERO_COPY, null, "zero-copy (batches in shared memory, trainers read them in place) or prefetch (batches copied "
                    + "through the socket).");
    public static final ConfigKey<RankRange> LOCAL_RANKS = key("local-ranks", SERVE, "A-B", TEXT, RankRange::parse, RankRange::toString,
            null, "all of --ranks", "The ranks this node serves, A-B inclusive (A alone: one rank), of the --ranks of the whole job: "
                    + "on a multi-node job each node runs a service for its own ranks; the schedule is the world's, so rank r gets the "
                    + "same batches on any node. A trainer of another rank is refused.");
    public static final ConfigKey<Long> START_STEP = key("start-step", SERVE, "N", NUMBER, ConfigKey.longInt(0, Long.MAX_VALUE),
            String::valueOf, 0L, null, "Global step every rank starts at, to resume a job from a saved position.");
    public static final ConfigKey<Long> STEPS = key("steps", SERVE, "N", NUMBER, ConfigKey.longInt(0, Long.MAX_VALUE), String::valueOf, 0L,
            null, "Stop each rank after this many steps (END); 0 runs until the service is stopped.");
    public static final ConfigKey<String> FLIGHT = key("flight", SERVE, "[HOST:]PORT", TEXT, FlightAccess::checkSpec, Function.identity(),
            null, "off", "Also serve the ranks' batches over Arrow Flight on PORT (127.0.0.1), HOST:PORT or [IPv6]:PORT (port 0: any free "
                    + "port), for trainers on other nodes; a rank reads either here or over the socket, not both. An address other hosts "
                    + "can reach (0.0.0.0 included) needs a token.");
    public static final ConfigKey<Path> FLIGHT_TOKEN_FILE = key("flight-token-file", SERVE, "FILE", TEXT, ConfigKey.path(), Path::toString,
            null, null, "File holding the token every Flight call must carry (authorization: Bearer TOKEN); mode 0600, or set $"
                    + FlightAccess.TOKEN_ENV + " instead. Required unless --flight is a loopback address.");
    public static final ConfigKey<Path> FLIGHT_TLS_CERT = key("flight-tls-cert", SERVE, "PEM", TEXT, ConfigKey.path(), Path::toString, null,
            null, "PEM certificate chain: Flight speaks TLS (grpc+tls) with --flight-tls-key.");
    public static final ConfigKey<Path> FLIGHT_TLS_KEY = key("flight-tls-key", SERVE, "PEM", TEXT, ConfigKey.path(), Path::toString, null,
            null, "PEM private key (PKCS#8) of --flight-tls-cert.");
    public static final ConfigKey<Integer> METRICS_PORT = key("metrics-port", SERVE, "PORT", NUMBER, ConfigKey.integer(0, 65535),
            String::valueOf, null, "off", "Serve Prometheus metrics (counters, buffers, store, bottleneck verdict) at "
                    + "http://ADDR:PORT/metrics (ADDR: --metrics-bind); 0 picks a free port.");
    public static final ConfigKey<String> METRICS_BIND = key("metrics-bind", SERVE, "ADDR", TEXT, ConfigKey.text(), Function.identity(),
            "127.0.0.1", null, "Address the metrics endpoint listens on; the metrics have no access control, so bind another address only "
                    + "where everyone who can reach it may read them.");
    public static final ConfigKey<Path> REPORT_DIR = key("report-dir", SERVE, "DIR", TEXT, ConfigKey.path(), Path::toString, null, "off",
            "Write the job's run data here every 5 s and on shutdown: job-rank<R>.json per rank (the steps its trainer measured and "
                    + "reported) and job-pipeline.json (counters, stages, timeline, verdict); `stoker report DIR` renders them.");

    // ---- CLUSTER: a job over a cluster (serve --join)
    public static final ConfigKey<Integer> NODES = key("nodes", CLUSTER, "N", NUMBER, ConfigKey.integer(1, 4096), String::valueOf, 1, null,
            "With --join: worker nodes (slots > 0, this one included) to wait for before the job starts.");
    public static final ConfigKey<Placement> PLACEMENT = key("placement", CLUSTER, "POLICY", TEXT, ConfigKey.enumOf(Placement.class),
            ConfigKey::cliName, Placement.SPREAD, null, "With --join: pack fills one node's slots before the next; spread deals the "
                    + "workers over the nodes.");
    public static final ConfigKey<Integer> WORKERS = key("workers", CLUSTER, "N", NUMBER, ConfigKey.integer(1, MAX_CLUSTER_WORKERS),
            String::valueOf, null, "--nodes", "With --join: workers to place.");

    // ---- MEMBER: this node as a member of a cluster (node, serve --join), its socket and its counters
    public static final ConfigKey<List<String>> JOIN = key("join", MEMBER, "HOST:PORT", LIST, ConfigKey.hostPorts(), l -> String.join(",", l),
            List.of(), null, "Cluster member(s) HOST:PORT to join through (the first node names its own --bind); on serve, runs the "
                    + "job over that cluster.");
    public static final ConfigKey<String> BIND = key("bind", MEMBER, "HOST:PORT", TEXT, ConfigKey.hostPort(), Function.identity(),
            "127.0.0.1:0", null, "HOST:PORT this node's cluster member binds and advertises; the other nodes must reach HOST; port 0: any "
                    + "free port.");
    public static final ConfigKey<Integer> SLOTS = key("slots", MEMBER, "N", NUMBER, ConfigKey.integer(0, 4096), String::valueOf, 4, null,
            "Workers this node takes; pack placement fills them before the next node; 0: none.");
    public static final ConfigKey<Integer> FLIGHT_PORT = key("flight-port", MEMBER, "PORT", NUMBER, ConfigKey.integer(0, 65535),
            String::valueOf, 0, null, "Port of the node's Arrow Flight endpoint on HOST of --bind, from which ranks on other nodes pull "
                    + "the batches this node made (0: any free port).");
    public static final ConfigKey<Long> NODE_SHM_BUDGET = key("node-shm-budget", MEMBER, "BYTES", NUMBER, ConfigKey.bytes(1),
            String::valueOf, 2L << 30, null, "Budget of this node's object store, which holds the batches it made until their ranks "
                    + "pulled them, and the batches pulled for its own ranks.");
    public static final ConfigKey<Path> NODE_SHM_DIR = key("node-shm-dir", MEMBER, "DIR", TEXT, ConfigKey.path(), Path::toString,
            StoreConfig.DEFAULT_DIRECTORY, null, "Folder of this node's object store.");
    public static final ConfigKey<Long> DOWN_AFTER_MS = key("down-after-ms", MEMBER, "MS", NUMBER, ConfigKey.longInt(1, 3_600_000),
            String::valueOf, 3000L, null, "How long the split-brain resolver waits for a stable set of unreachable nodes before downing them.");
    public static final ConfigKey<Long> HEARTBEAT_PAUSE_MS = key("heartbeat-pause-ms", MEMBER, "MS", NUMBER,
            ConfigKey.longInt(1, 3_600_000), String::valueOf, 4000L, null, "How long a node may miss heartbeats before it counts as "
                    + "unreachable and its work is redone elsewhere.");
    public static final ConfigKey<Integer> PULL_AHEAD = key("pull-ahead", MEMBER, "N", NUMBER, ConfigKey.integer(0, 64), String::valueOf, 2,
            null, "Batches this node pulls for each of its ranks ahead of the trainer's request, so that a batch's transfer from its "
                    + "owner overlaps the trainer's step.");
    public static final ConfigKey<Path> CLUSTER_TOKEN_FILE = key("cluster-token-file", MEMBER, "FILE", TEXT, ConfigKey.path(),
            Path::toString, null, null, "File (mode 0600) holding the token the nodes' Flight endpoints ask for and send, the same on "
                    + "every node; or set $" + FlightAccess.CLUSTER_TOKEN_ENV + ". Required when --bind is not a loopback address.");
    public static final ConfigKey<Path> CLUSTER_KEY = key("cluster-key", MEMBER, "FILE", TEXT, ConfigKey.path(), Path::toString, null,
            "$XDG_CONFIG_HOME/stoker/cluster.key (made on first use; loopback only)", "The cluster's key (mode 0600, the same file on "
                    + "every member; make one with stoker cluster-key FILE): members authenticate each other with it (TLS) and the "
                    + "nodes' Flight endpoints use its certificate. Required when --bind or --join is not a loopback address.");
    public static final ConfigKey<Path> SOCKET = key("socket", MEMBER, "PATH", TEXT, ConfigKey.path(), Path::toString, null,
            "$XDG_RUNTIME_DIR/stoker/<job>.sock, else /tmp/stoker-<uid>/<job>.sock (node: node.sock)",
            "Unix socket the node's trainer ranks connect to.");
    public static final ConfigKey<Integer> MAX_TRAINER_CONNECTIONS = key("max-trainer-connections", MEMBER, "N", NUMBER,
            ConfigKey.integer(1, 1 << 16), String::valueOf, dev.stoker.transport.FeedServer.Limits.MAX_CONNECTIONS_DEFAULT, null,
            "Trainer socket connections open at once; more are refused with an ERROR that says so (each holds a thread and buffers).");
    public static final ConfigKey<Long> HELLO_TIMEOUT_MS = key("hello-timeout-ms", MEMBER, "MS", NUMBER, ConfigKey.longInt(1, 3_600_000),
            String::valueOf, dev.stoker.transport.FeedServer.Limits.HELLO_TIMEOUT_MILLIS_DEFAULT, null,
            "A connection to the trainer socket that has not sent its whole HELLO this long after connecting is closed with an ERROR.");
    public static final ConfigKey<Long> COPY_BUFFER_BUDGET = key("copy-buffer-budget", MEMBER, "BYTES", NUMBER, ConfigKey.bytes(0),
            String::valueOf, dev.stoker.transport.FeedServer.Limits.COPY_BUFFER_BUDGET_BYTES_DEFAULT, null,
            "Bytes of copy-delivery buffers the service allocates ahead when trainers say hello, over all connections; beyond it a "
                    + "trainer's buffer is allocated at its first batch, once it holds its rank.");
    public static final ConfigKey<Path> METRICS_FILE = key("metrics-file", MEMBER, "FILE", TEXT, ConfigKey.path(), Path::toString, null, null,
            "On shutdown, write the node's counters (pipeline, store and server; a cluster job's per-rank and per-node counters) to "
                    + "this file as JSON.");

    private final Map<ConfigKey<?>, Object> values;
    private final Set<ConfigKey<?>> given;
    /** The model folder's settings (--model), or null. */
    private final ModelFolder model;
    /** The settings whose value came from the model folder rather than the command line or a default. */
    private final Set<ConfigKey<?>> fromModel;
    /** What --override-model let through, each once. */
    private final List<String> warnings;
    /**
     * What the model folder adds to the encoding for the job's fingerprint ({@link EncodeOptions#model()}): the
     * SHA-256 of the tokenizer the job encodes with (the model's, or the one --override-model put in its place);
     * null without a model folder. Read once, as the configuration is built.
     */
    private final String modelIdentity;

    private NodeConfig(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given, ModelFolder model, Set<ConfigKey<?>> fromModel,
                       List<String> warnings) {
        Path tokenizer = (Path) values.get(TOKENIZER);
        this.modelIdentity = model == null ? null : "tokenizer:"
                + (tokenizer == null || tokenizer.equals(model.tokenizer()) ? model.tokenizerSha256() : sha256(tokenizer));
        this.values = Collections.unmodifiableMap(values);
        this.given = Collections.unmodifiableSet(given);
        this.model = model;
        this.fromModel = Collections.unmodifiableSet(fromModel);
        this.warnings = List.copyOf(warnings);
    }

    private static <T> ConfigKey<T> key(String name, ConfigKey.Group group, String label, ConfigKey.Kind kind, Function<String, T> reader,
                                        Function<T, String> writer, T defaultValue, String defaultText, String doc) {
        var k = new ConfigKey<>(name, group, label, kind, reader, writer, defaultValue, defaultText, doc);
        KEYS.add(k);
        return k;
    }

    /** Every setting, in the order config files and help list them. */
    public static List<ConfigKey<?>> keys() { return Collections.unmodifiableList(KEYS); }

    /** The settings of {@code groups}, in order. */
    public static List<ConfigKey<?>> keys(Collection<ConfigKey.Group> groups) {
        return KEYS.stream().filter(k -> groups.contains(k.group())).toList();
    }

    /** The setting called {@code name} ({@code max-pixels}), or null. */
    public static ConfigKey<?> key(String name) {
        for (var k : KEYS) if (k.name().equals(name)) return k;
        return null;
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

    public ProcessorPreset processor() { return get(PROCESSOR_KEY); }

    /** The model folder (--model), read and checked; null when none was given. */
    public ModelFolder model() { return model; }

    /** Whether {@code key}'s value came from the model folder. */
    public boolean isFromModel(ConfigKey<?> key) { return fromModel.contains(key); }

    /** Differences from the model folder that --override-model let through: warn about each once. */
    public List<String> warnings() { return warnings; }

    public String data() {
        if (get(DATA_KEY) != null) return get(DATA_KEY);
        var list = sources();
        return list.isEmpty() ? null : String.join(" + ", list.stream().map(DataSources.Spec::data).toList());
    }

    /** Where large sources' record indexes are kept ({@code --index-cache}); null: nowhere ('off'). */
    public dev.stoker.source.ManifestRecords.IndexCache indexCache() {
        String dir = get(INDEX_CACHE);
        if (dir == null) return dev.stoker.source.ManifestRecords.IndexCache.defaults(System.getenv());
        if (dir.equals("off")) return null;
        return new dev.stoker.source.ManifestRecords.IndexCache(Path.of(dir), dev.stoker.source.ManifestRecords.IndexCache.MIN_BYTES_DEFAULT);
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
            throw new ConfigException("--sources: not a JSON list of {data, weight, image-root}: " + e.getMessage().lines().findFirst().orElse(""));
        }
        if (tree == null || !tree.isArray() || tree.isEmpty()) throw new ConfigException("--sources: expected a non-empty list of {data, weight, image-root}");
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
     * The store's budget: as given, else what every rank needs at once ({@link #rankNeedBytes}) and at
     * least 4 GiB, but no more than half of what the store's folder has free (a container's /dev/shm
     * may be 64 MB; a budget too small for the ranks is then refused at start, with the numbers).
     */
    public long shmBudgetBytes() {
        if (values.get(SHM_BUDGET) instanceof Long n) return n;
        long need = rankNeedBytes();
        int local = localRanks().count(); // only this node's ranks keep batches in its store
        long wanted = need > 0 && need <= Long.MAX_VALUE / local ? Math.max(StoreConfig.DEFAULT_BUDGET_BYTES, need * local)
                : StoreConfig.DEFAULT_BUDGET_BYTES;
        try {
            long usable = Files.getFileStore(get(SHM_DIR)).getUsableSpace();
            return Math.max(1, Math.min(wanted, usable / 2));
        } catch (IOException e) {
            return wanted; // the store reports the folder's problem itself
        }
    }

    /** How samples are encoded, from the PROCESSOR settings. */
    public EncodeOptions encodeOptions() {
        try {
            var preset = processor();
            var base = EncodeOptions.defaults(preset);
            // the model's geometry, mean and std, unless --override-model chose another family
            if (model != null && model.family() == preset) base = base.withVision(model.vision()).withModel(modelIdentity);
            else if (model != null) base = base.withModel(modelIdentity);
            if (model != null && get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) base = base.withChatTemplate(model.chatTemplate());
            long min = get(MIN_PIXELS) != null ? get(MIN_PIXELS) : base.vision().minPixels();
            long max = get(MAX_PIXELS) != null ? get(MAX_PIXELS) : base.vision().maxPixels();
            return base.withPixels(min, max).withExif(get(EXIF))
                    .withDecodeScale(get(DECODE_SCALE)).withMaxSourcePixels(get(MAX_SOURCE_PIXELS))
                    .withDecodeMemory(get(DECODE_MEMORY) != null ? get(DECODE_MEMORY) : 0) // 0: shared among the CPU pool's threads (CpuPool)
                    .withSequenceLimit(get(MAX_SEQ_LEN), get(TRUNCATION)).withPixelFormat(get(PIXEL_FORMAT)).withMaxImages(get(MAX_IMAGES))
                    .withTextOnly(get(TEXT_ONLY)).withInputContract(TransformersVersion.inputContract(get(TRANSFORMERS)));
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--min-pixels/--max-pixels/--max-seq-len: " + e.getMessage());
        }
    }

    /** How objects are fetched, from the DATA settings. */
    public SourceConfig sourceConfig() {
        var b = SourceConfig.builder().region(get(S3_REGION)).pathStyle(get(S3_PATH_STYLE)).fetchLatencyMillis(get(FETCH_LATENCY_MS))
                .maxInFlight(get(FETCH_CONCURRENCY)).localReadTimeoutMillis(get(LOCAL_READ_TIMEOUT_MS))
                .refsOutsideRoot(get(ALLOW_REFS_OUTSIDE_ROOT));
        if (get(S3_ENDPOINT) != null) b.endpointOverride(get(S3_ENDPOINT));
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new ConfigException("--s3-*/--fetch-*: " + e.getMessage()); // the message never holds a credential
        }
    }

    /** The pipeline's configuration in {@code mode}, from the DATA settings. */
    public FeedConfig feedConfig(FeedMode mode) {
        return FeedConfig.of(mode, encodeOptions(), ranks(), batch()).withSeed(seed()).withCpuThreads(threads())
                .withFetchConcurrency(get(FETCH_CONCURRENCY)).withPrefetch(get(PREFETCH_BATCHES), get(PREFETCH_BYTES))
                .withWarmUp(get(WARM_UP_MS)).withErrorPolicy(get(ON_ERROR), get(MAX_ERROR_RATE)).withErrorsFile(get(ERRORS_FILE))
                .withLocalRanks(localRanks()).withPacking(packing());
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
            base = model != null && !all ? PackCost.fromModelFolder(model.dir()) : PackCost.forFamily(processor());
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

    /** The settings that mean something only with --pack-tokens. */
    private static final List<ConfigKey<?>> PACK_ONLY = List.of(PACK_PATCHES, BALANCE, PACK_PAD_TO, COST_LLM_PARAMS, COST_LLM_LAYERS,
            COST_LLM_ATTENTION_WIDTH, COST_VIT_PARAMS, COST_VIT_ATTENTION_LAYERS, COST_VIT_HIDDEN, COST_VISION_TRAINED);

    /** The local job's store. */
    public StoreConfig storeConfig() {
        try {
            return new StoreConfig(get(SHM_DIR), shmBudgetBytes(), StoreConfig.DEFAULT_INSTANCE_NAME);
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
    public long oneBatchBytes() { return packed() ? largestBatchBytes() : batch() * encodeOptions().maxPixelBytesPerImage(); }

    /**
     * Leases a trainer may hold at once: the plain {@code for batch in loader:} loop holds batch k
     * while it asks for k+1.
     */
    public static final int LEASES_PER_TRAINER = 2;

    /**
     * Bytes of the largest batch this configuration can make (a packed job's: the largest pack,
     * {@link dev.stoker.encode.batch.PackAssembler#largestPackBytes}): every sample at the sequence limit and
     * carrying the most pixels it may ({@link EncodeOptions#maxPixelsPerSample}); -1 when unbounded
     * (no --max-seq-len). A text-only batch with the dummy image ({@code --text-only dummy-image}) is smaller: its
     * few tokens past the limit weigh far less than the pixels of an image per sample counted here.
     */
    public long largestBatchBytes() {
        var options = encodeOptions();
        if (packed()) // a pack: at most --pack-tokens tokens, as many of them image tokens as --pack-patches allows
            return dev.stoker.encode.batch.PackAssembler.largestPackBytes(options, get(PACK_TOKENS), get(PACK_PATCHES), get(PACK_PAD_TO));
        long pixels = options.maxPixelsPerSample();
        int length = get(MAX_SEQ_LEN);
        if (pixels < 0 || length == 0) return -1;
        var vision = options.vision();
        long patch = (long) vision.patchSize() * vision.patchSize();
        int images = get(MAX_IMAGES) > 0 ? get(MAX_IMAGES) : length; // an image takes one token at the least
        int b = batch();
        var shape = new BatchShape(b, length, b * (pixels / patch), vision.rowLength(), Math.multiplyExact(b, images), get(PIXEL_FORMAT),
                get(PIXEL_FORMAT) == PixelFormat.UINT8 ? b * pixels * 3 : 0, options.inputContract());
        return shape.sizeBytes();
    }

    /**
     * Shared memory one rank needs at once so that it can never wait on itself: the leases its
     * trainer may hold ({@link #LEASES_PER_TRAINER}) and the batch being filled, each the largest
     * possible, in the store's segment size ({@link ShmObjectStore#sizeClass}); -1 when unbounded.
     */
    public long rankNeedBytes() {
        long largest = largestBatchBytes();
        return largest < 0 ? -1 : Math.multiplyExact(ShmObjectStore.sizeClass(largest), LEASES_PER_TRAINER + 1);
    }

    // ---- as text

    /** The given settings as JSON {name: text}: what a cluster job carries to its nodes. */
    public String toJson() {
        var m = new LinkedHashMap<String, String>();
        for (var k : KEYS) if (given.contains(k)) m.put(k.name(), k.format(values.get(k)));
        try {
            return new ObjectMapper().writeValueAsString(m);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The configuration {@link #toJson()} wrote. */
    public static NodeConfig fromJson(String json) {
        JsonNode tree;
        try {
            tree = new ObjectMapper().readTree(json);
        } catch (JsonProcessingException e) {
            throw new ConfigException("not a node configuration: " + e.getOriginalMessage());
        }
        if (tree == null || !tree.isObject()) throw new ConfigException("not a node configuration: expected a JSON object");
        var b = builder();
        tree.properties().forEach(e -> b.set(e.getKey(), e.getValue().asText()));
        return b.build();
    }

    /**
     * The settings a YAML config file holds, as text by name: a flat mapping whose keys are the long option names,
     * each value a scalar or, for a repeatable option, a list (read as comma-separated text); a null value leaves
     * the setting out. Names are not checked here (a command also takes options of its own).
     */
    public static Map<String, String> readSettings(Path file) {
        JsonNode tree;
        try {
            tree = new ObjectMapper(new com.fasterxml.jackson.dataformat.yaml.YAMLFactory()).readTree(file.toFile());
        } catch (java.io.FileNotFoundException | java.nio.file.NoSuchFileException e) {
            throw new ConfigException("--config " + file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException("--config " + file + ": not YAML: " + e.getMessage().lines().findFirst().orElse(""));
        }
        var out = new LinkedHashMap<String, String>();
        if (tree == null || tree.isMissingNode() || tree.isNull()) return out;
        if (!tree.isObject()) throw new ConfigException("--config " + file + ": expected a mapping of option names to values");
        for (var e : tree.properties()) {
            JsonNode v = e.getValue();
            if (v.isNull()) continue;
            if (v.isFloatingPointNumber() && e.getKey().equals(TRANSFORMERS.name())) // YAML reads 5.10 as the number 5.1
                throw new ConfigException("--config " + file + ": " + e.getKey() + ": " + v.asText() + " is a number to YAML (an unquoted "
                        + "5.10 reads as 5.1): quote the version, e.g. " + e.getKey() + ": \"5.10\"");
            if (v.isArray() && e.getKey().equals(SOURCES.name())) { // a list of mappings, kept as JSON text
                out.put(e.getKey(), v.toString());
            } else if (v.isArray()) {
                var items = new ArrayList<String>();
                for (JsonNode item : v) {
                    if (!item.isValueNode()) throw new ConfigException("--config " + file + ": " + e.getKey() + ": a list of plain values expected");
                    items.add(item.asText());
                }
                out.put(e.getKey(), String.join(",", items));
            } else if (v.isValueNode()) {
                out.put(e.getKey(), v.asText());
            } else {
                throw new ConfigException("--config " + file + ": " + e.getKey() + ": a value or a list expected, got a mapping");
            }
        }
        return out;
    }

    /** The configuration a YAML config file ({@link #readSettings}) holds; every key must be a setting. */
    public static NodeConfig fromYaml(Path file) {
        var b = builder();
        readSettings(file).forEach((name, text) -> {
            if (key(name) == null) throw new ConfigException("--config " + file + ": unknown setting '" + name + "'");
            b.set(name, text);
        });
        return b.build();
    }

    /**
     * The settings {@code keys} (e.g. {@code keys(groups)}) as YAML, one per line in the table's order: those given as
     * {@code name: value}, those at their defaults commented out ({@code # name: value  (default)}),
     * so that the text read back as a config file means the same.
     */
    public String toYaml(Collection<? extends ConfigKey<?>> keys) {
        var out = new StringBuilder();
        for (var k : KEYS) {
            if (!keys.contains(k)) continue;
            Object v = values.get(k);
            if (given.contains(k)) {
                out.append(k.name()).append(": ").append(yaml(k, v)).append('\n');
            } else if (fromModel.contains(k)) {
                out.append("# ").append(k.name()).append(": ").append(yaml(k, v)).append("  (from --model)\n");
            } else {
                out.append("# ").append(k.name()).append(": ");
                out.append(v != null ? yaml(k, v) + "  (default)" : "(default: " + k.describeDefault() + ")").append('\n');
            }
        }
        return out.toString();
    }

    private static String yaml(ConfigKey<?> k, Object v) {
        if (k.kind() == LIST) {
            var items = new ArrayList<String>();
            for (Object o : (List<?>) v) items.add(scalar(String.valueOf(o)));
            return "[" + String.join(", ", items) + "]";
        }
        String text = k.format(v);
        if (k == SOURCES) return text; // a JSON list of mappings is YAML as it is
        return k.kind() == TEXT ? scalar(text) : text;
    }

    /** A YAML scalar: plain where that reads back as the same string, else double-quoted (JSON's escapes are YAML's). */
    private static String scalar(String s) {
        if (s.matches("[A-Za-z/._~][A-Za-z0-9/._~@+-]*") && !s.matches("(?i)true|false|yes|no|on|off|null|y|n|~|\\.nan|\\.inf"))
            return s;
        try {
            return new ObjectMapper().writeValueAsString(s);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

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
            for (var k : KEYS) all.put(k, values.containsKey(k) ? values.get(k) : k.defaultValue());
            for (var e : values.entrySet()) { // a value set as an object goes through its text, so that it is checked as text is
                var k = e.getKey();
                all.put(k, k.parse(k.format(e.getValue())));
            }
            var given = new LinkedHashSet<ConfigKey<?>>(values.keySet());
            var fromModel = new LinkedHashSet<ConfigKey<?>>();
            var warnings = new ArrayList<String>();
            ModelFolder model = readModel(all, given, fromModel, warnings);
            var config = new NodeConfig(all, given, model, fromModel, warnings);
            config.encodeOptions(); // min <= max pixels, sequence limit
            config.sourceConfig();
            if (given.contains(SOURCES) && given.contains(DATA_KEY))
                throw new ConfigException("--data and --sources: give one (several sources: repeat --data URI [--weight W], or list them under sources)");
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

    /**
     * Reads the model folder of {@code all} (--model), if any, and takes from it the settings not given: the family,
     * the pixel bounds, the tokenizer, the transformers release (which a setting given replaces without a word: the
     * model's is the release that saved it, the setting the one the trainer runs). A setting given that disagrees with the model is refused, or with
     * --override-model kept and warned about; {@code fromModel} collects the settings taken from the model.
     */
    private static ModelFolder readModel(Map<ConfigKey<?>, Object> all, Set<ConfigKey<?>> given, Set<ConfigKey<?>> fromModel,
                                         List<String> warnings) {
        Path dir = (Path) all.get(MODEL);
        boolean override = Boolean.TRUE.equals(all.get(OVERRIDE_MODEL));
        if (dir == null) {
            if (override) throw new ConfigException("--override-model goes with --model");
            if (all.get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) throw new ConfigException("--chat-template model needs --model DIR");
            return null;
        }
        ModelFolder model;
        try {
            model = ModelFolder.read(dir);
        } catch (ModelFolder.ModelFolderException e) {
            throw new ConfigException("--model: " + e.getMessage());
        }
        String pre = dir.resolve(ModelFolder.PREPROCESSOR_CONFIG).toString();
        adopt(all, given, fromModel, warnings, override, PROCESSOR_KEY, model.family(), dir.resolve(ModelFolder.CONFIG) + " model_type");
        adopt(all, given, fromModel, warnings, override, MIN_PIXELS, model.vision().minPixels(), pre + " min_pixels (or size.shortest_edge)");
        adopt(all, given, fromModel, warnings, override, MAX_PIXELS, model.vision().maxPixels(), pre + " max_pixels (or size.longest_edge)");
        if (!given.contains(TRANSFORMERS) && model.transformersVersion() != null) { // given, it wins: the model's is the release that saved it
            try {
                all.put(TRANSFORMERS, TransformersVersion.parse(model.transformersVersion()));
            } catch (IllegalArgumentException e) {
                throw new ConfigException("--model: " + dir.resolve(ModelFolder.CONFIG) + ": transformers_version: " + e.getMessage()
                        + "; give --transformers VERSION, the release the trainer runs");
            }
            fromModel.add(TRANSFORMERS);
        }
        Path tokenizer = (Path) all.get(TOKENIZER);
        if (tokenizer == null) {
            all.put(TOKENIZER, model.tokenizer());
            fromModel.add(TOKENIZER);
        } else if (!sha256(tokenizer).equals(model.tokenizerSha256())) {
            String what = "--tokenizer " + tokenizer + " is not the model's " + model.tokenizer() + " (their bytes differ)";
            if (!override) throw new ConfigException(what + "; leave --tokenizer out, or add --override-model");
            warnings.add(what + ": encoding with " + tokenizer + " (--override-model)");
        }
        checkTemplate(model, ((ProcessorPreset) all.get(PROCESSOR_KEY)).chatFamily(), (ChatTemplateChoice) all.get(CHAT_TEMPLATE));
        return model;
    }

    /** Template checks already made, by the template's SHA-256 and family: the check renders 19 chats, and a configuration is built more than once. */
    private static final Map<String, String> TEMPLATE_CHECKS = new java.util.concurrent.ConcurrentHashMap<>();

    /**
     * The model's chat template against {@code choice}: with the built-in renderer, the model's template must render the
     * template cases as the built-in template of {@code family} does (else refused, naming the case and character);
     * with the model's own, it must compile. A model without a template encodes with the built-in one.
     */
    private static void checkTemplate(ModelFolder model, ProcessorPreset.ChatFamily family, ChatTemplateChoice choice) {
        String source = model.chatTemplate();
        Path file = model.dir().resolve(model.chatTemplateSource() == null ? ModelFolder.CHAT_TEMPLATE_JSON : model.chatTemplateSource());
        if (source == null) {
            if (choice == ChatTemplateChoice.MODEL)
                throw new ConfigException("--chat-template model: " + model.dir() + " has no chat template (chat_template.jinja, "
                        + "chat_template.json or tokenizer_config.json's chat_template)");
            return;
        }
        String problem = TEMPLATE_CHECKS.computeIfAbsent(EncodeOptions.sha256(source) + "/" + family + "/" + choice, k -> {
            try {
                if (choice == ChatTemplateChoice.MODEL) {
                    dev.stoker.text.JinjaChatRenderer.compile(source);
                    return "";
                }
                return dev.stoker.text.TemplateCheck.compare(source, family).map(d -> "the chat template of " + file + " renders "
                        + "differently from Stoker's built-in " + family.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-')
                        + " template: " + d.message() + "; to encode with the model's own template, add --chat-template model").orElse("");
            } catch (dev.stoker.text.ChatTemplateException e) {
                return "the chat template of " + file + " cannot be used: " + e.getMessage();
            }
        });
        if (!problem.isEmpty()) throw new ConfigException("--model: " + problem);
    }

    /** Takes the model's value of {@code key} where none was given; a given one that differs is refused or, overridden, warned about. */
    private static <T> void adopt(Map<ConfigKey<?>, Object> all, Set<ConfigKey<?>> given, Set<ConfigKey<?>> fromModel, List<String> warnings,
                                  boolean override, ConfigKey<T> key, T modelValue, String source) {
        if (!given.contains(key)) {
            all.put(key, modelValue);
            fromModel.add(key);
            return;
        }
        @SuppressWarnings("unchecked") T value = (T) all.get(key);
        if (value.equals(modelValue)) return;
        String what = key.option() + " " + key.format(value) + " disagrees with the model's " + key.format(modelValue) + " (" + source + ")";
        if (!override) throw new ConfigException(what + "; leave " + key.option() + " out, or add --override-model");
        warnings.add(what + ": using " + key.format(value) + " (--override-model)");
    }

    /** The SHA-256 of {@code file}, hex. */
    static String sha256(Path file) {
        try (var in = Files.newInputStream(file)) {
            var md = java.security.MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
            return java.util.HexFormat.of().formatHex(md.digest());
        } catch (java.nio.file.NoSuchFileException e) {
            throw new ConfigException(file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException(file + ": cannot read: " + e.getMessage());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A set of groups, for {@link #keys(Collection)} and {@link #only}. */
    public static Set<ConfigKey.Group> groups(ConfigKey.Group first, ConfigKey.Group... rest) { return EnumSet.of(first, rest); }
}
