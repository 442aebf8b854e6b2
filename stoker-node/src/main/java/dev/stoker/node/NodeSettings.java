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

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions.DecodeScale;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.image.qwenvl.ImageBackend;
import dev.stoker.pipeline.feed.ErrorPolicy;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedErrors;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.plan.pack.PackPlanner;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.StoreConfig;
import dev.stoker.text.TruncationPolicy;
import dev.stoker.transport.FeedServer;
import dev.stoker.video.sample.VideoKey;
import dev.stoker.video.sample.VideoSampler;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.function.Function;

/**
 * The table of a node's settings: every key with its name (the long option, and the key of a config file), the
 * commands that take it (its group), its help and its default, each defined once, here. The command line's options,
 * its help and a config file's keys are made from this table, so that they cannot drift from it. The table holds no
 * values: a {@link NodeConfig} does, checked together once it is built. This is Aeron's split of {@code Configuration}
 * (the property names and defaults) from {@code MediaDriver.Context} (one driver's values, concluded once).
 *
 * <p>{@link NodeConfig} extends this table, and nothing else may: so a setting reads {@code NodeConfig.MAX_PIXELS}
 * wherever a configuration is read (the byte-oracle tests among them), and the class that holds the values names the
 * keys it holds.
 */
public abstract sealed class NodeSettings permits NodeConfig {
    /** How a cluster places its workers: pack fills the oldest node's slots first; spread deals them over the nodes. */
    public enum Placement { PACK, SPREAD }

    /**
     * How a rank's node gets a batch another node made: straight from its owner (zero-copy retrieval), or relayed through
     * the coordinator's node, as a driver that hands out every batch would (the talk's "retrieval off").
     */
    public enum Retrieval { DIRECT, RELAY }

    /** Which chat template renders a sample's chat: Stoker's built-in one of the family, or the model folder's own. */
    public enum ChatTemplateChoice { BUILTIN, MODEL }

    private static final String VIDEO_SAMPLER_OPTION = "--video-sampler";

    /** The longest decode deadline a video may be given: a day (a deadline guards against a hung decode, not a slow one). */
    public static final double MAX_VIDEO_DECODE_TIMEOUT_SECONDS = 86_400;

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
                    + "the model's); or an audio family, qwen2-audio, qwen2.5-omni, qwen3-omni (audio records read, log-mel features "
                    + "written; encode and validate, and serve for qwen2.5-omni, docs/audio.md).");
    public static final ConfigKey<dev.stoker.encode.audio.AudioEncoding.Pad> AUDIO_PAD = key("audio-pad", PROCESSOR, "valid|hf", TEXT,
            ConfigKey.enumOf(dev.stoker.encode.audio.AudioEncoding.Pad.class), ConfigKey::cliName, dev.stoker.encode.audio.AudioEncoding.Pad.VALID,
            null, "Audio families only: valid writes each clip's valid log-mel frames (100 per second); hf pads as the Hugging Face "
                    + "processor does (qwen2-audio to 30 s, qwen2.5-omni to 300 s, qwen3-omni to the clip), for parity. Default: hf "
                    + "for qwen2-audio (its audio tower takes exactly 3,000 frames a clip), valid for the Omni families.");
    public static final ConfigKey<Boolean> USE_AUDIO_IN_VIDEO = key("use-audio-in-video", PROCESSOR, null, FLAG, ConfigKey.flag(),
            String::valueOf, false, null, "Omni families only: a video whose item and record do not give use_audio_in_video uses its "
                    + "audio track (read and interleaved with its frames: Qwen2.5-Omni in 2 s chunks); a video without one is that "
                    + "sample's error.");
    public static final ConfigKey<Long> MIN_PIXELS = key("min-pixels", PROCESSOR, "N", NUMBER, ConfigKey.longInt(1, Long.MAX_VALUE),
            String::valueOf, null, "the processor's: 3136 for qwen2-vl and qwen2.5-vl, 65536 for qwen3-vl; with --model, the model's",
            "Lower bound of the resized image area in pixels.");
    public static final ConfigKey<Long> MAX_PIXELS = key("max-pixels", PROCESSOR, "N", NUMBER, ConfigKey.longInt(1, Long.MAX_VALUE),
            String::valueOf, null, "the processor's: 12845056 for qwen2-vl and qwen2.5-vl, 16777216 for qwen3-vl; with --model, the "
                    + "model's", "Upper bound of the resized image area in pixels.");
    public static final ConfigKey<ExifPolicy> EXIF = key("exif", PROCESSOR, "POLICY", TEXT, ConfigKey.enumOf(ExifPolicy.class),
            ConfigKey::cliName, ExifPolicy.APPLY, null, "EXIF orientation: apply (as transformers' load_image, which the official Qwen "
                    + "SFT code uses) or ignore (as a bare PIL.Image.open).");
    public static final ConfigKey<ImageBackend> IMAGE_BACKEND = key("image-backend", PROCESSOR, "BACKEND", TEXT,
            ConfigKey.enumOf(ImageBackend.class), ConfigKey::cliName, null, "torchvision when --transformers (or --model's "
                    + "transformers_version) is 4.57 or later, else pil", "Which Hugging Face image processor images reproduce bit "
                    + "for bit: pil (Qwen2VLImageProcessorPil, the slow 4.x class: Pillow resize) or torchvision (Qwen2VLImageProcessor "
                    + "of 5.x, Qwen2VLImageProcessorFast of 4.57, what AutoProcessor loads there when torchvision is installed: "
                    + "torchvision's uint8 bicubic and a fused normalize). Same grids and tokens; pixel values 1-2 levels apart "
                    + "(docs/model-inputs.md). Not with --pixel-format uint8.");
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
    /** Whether a job reads videos ({@code --video}). */
    public enum VideoMode {
        /** When its data may hold a video: a manifest that spells "video", a shard with a video member, a video column. */
        AUTO,
        /** Always. */
        ON,
        /** Never: video records are refused as media Stoker does not serve. */
        OFF
    }

    public static final ConfigKey<VideoMode> VIDEO = key("video", PROCESSOR, "auto|on|off", TEXT, NodeSettings::videoMode,
            ConfigKey::cliName, VideoMode.AUTO, null, "on: video records are read and their videos encoded (pixel_values_videos, "
                    + "video_grid_thw; docs/video.md), by the rules of --video-sampler and the trainer's --transformers release "
                    + "(4.57 or 5.18; without it qwen-vl-finetune's; another release refuses video records, naming it, and images "
                    + "keep working). off: video records are refused as media Stoker does not serve, and the other video settings do "
                    + "nothing. auto: on when the data may hold a video (its manifest spells \"video\", a shard has a video member, "
                    + "a Parquet file a video column), else off, so that an image job's batches, fingerprint and shared memory stay "
                    + "what they were; a command without --data (encode) is on.");
    public static final ConfigKey<VideoSampler> VIDEO_SAMPLER = key("video-sampler", PROCESSOR, "MODE", TEXT, NodeSettings::sampler,
            VideoSampler::cliName, VideoSampler.HF, null, "How frames are sampled and resized: hf (the family's Hugging Face "
                    + "video processor, sampling on), qwen-vl-utils (its fetch_video in front of the processor) or llamafactory "
                    + "(LLaMA-Factory's frame picks and Pillow pre-resize in front of it).");
    public static final ConfigKey<Double> VIDEO_FPS = key("video-fps", PROCESSOR, "FPS", NUMBER, videoNumber(VideoKey.FPS),
            ConfigKey::formatNumber, null, "2; with --model, its video processor's fps", "Frames per second sampled, for every "
                    + "video item that does not set fps itself.");
    public static final ConfigKey<Double> VIDEO_MIN_FRAMES = key("video-min-frames", PROCESSOR, "N", NUMBER,
            videoNumber(VideoKey.MIN_FRAMES), ConfigKey::formatNumber, null, "4; with --model, its video processor's",
            "Fewest frames sampled of a video (a video item's min_frames wins).");
    public static final ConfigKey<Double> VIDEO_MAX_FRAMES = key("video-max-frames", PROCESSOR, "N", NUMBER,
            videoNumber(VideoKey.MAX_FRAMES), ConfigKey::formatNumber, null, "768; with --model, its video processor's",
            "Most frames sampled of a video (a video item's max_frames wins).");
    public static final ConfigKey<Double> VIDEO_MIN_PIXELS = key("video-min-pixels", PROCESSOR, "N", NUMBER,
            videoNumber(VideoKey.MIN_PIXELS), ConfigKey::formatNumber, null, "hf: the Hub folders' (3136 per frame for qwen2-vl "
                    + "and qwen2.5-vl, 4096 over all frames for qwen3-vl), with --model its video processor's; qwen-vl-utils: "
                    + "128·f² (f = 28, qwen3-vl 32)", "Lower pixel bound of the resized video (hf: per frame for Qwen2/2.5, over all "
                    + "frames for Qwen3; qwen-vl-utils: per frame).");
    public static final ConfigKey<Double> VIDEO_MAX_PIXELS = key("video-max-pixels", PROCESSOR, "N", NUMBER,
            videoNumber(VideoKey.MAX_PIXELS), ConfigKey::formatNumber, null, "hf: the Hub folders' (12845056 per frame for qwen2-vl "
                    + "and qwen2.5-vl, 25165824 over all frames for qwen3-vl), with --model its video processor's; qwen-vl-utils: "
                    + "768·f²", "Upper pixel bound of the resized video, as --video-min-pixels.");
    public static final ConfigKey<Double> VIDEO_TOTAL_PIXELS = key("video-total-pixels", PROCESSOR, "N", NUMBER,
            videoNumber(VideoKey.TOTAL_PIXELS), ConfigKey::formatNumber, null, "128000·f²·0.9", "qwen-vl-utils only: the pixel "
                    + "budget over all frames of a video (the hf sampler's is --video-max-pixels).");
    public static final ConfigKey<CpuCapability> VIDEO_CPU = key("video-cpu", PROCESSOR, "CAP", TEXT, ConfigKey.enumOf(CpuCapability.class),
            ConfigKey::cliName, CpuCapability.AVX2, null, "The torch build's CPU capability (default, avx2, avx512: what "
                    + "torch.backends.cpu.get_cpu_capability() prints on the trainer) whose float rounding the qwen-vl-utils resize "
                    + "reproduces; avx2 and avx512 round alike, default differs.");
    public static final ConfigKey<Double> VIDEO_DECODE_TIMEOUT = key("video-decode-timeout", PROCESSOR, "SECONDS", NUMBER,
            seconds(MAX_VIDEO_DECODE_TIMEOUT_SECONDS), ConfigKey::formatNumber, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS / 1e9, null,
            "The most one video's reading and decoding may take; a video past it is that sample's error.");
    public static final ConfigKey<VideoEncoding.Decode> VIDEO_DECODE = key("video-decode", PROCESSOR, "WHERE", TEXT,
            ConfigKey.enumOf(VideoEncoding.Decode.class), ConfigKey::cliName, VideoEncoding.Decode.WORKERS, null, "workers: the feed decodes videos in "
                    + "child JVM worker processes, so that a video that crashes libavcodec (native code) fails only its sample; "
                    + "in-process: faster, but such a crash ends the service.");

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
            FeedConfig.PREFETCH_BYTES_DEFAULT, null, "Prefetch buffer per rank, in bytes (at least one batch is always buffered); suffixes K, M, "
                    + "G allowed. Zero-copy batches are shared memory held until read: these bytes are the job's memory.");
    public static final ConfigKey<Boolean> AUTOTUNE = key("autotune", DATA, "on|off", TEXT, ConfigKey.flag(), on -> on ? "on" : "off",
            FeedConfig.AUTOTUNE_DEFAULT, null, "Tune --threads, --fetch-concurrency and --prefetch-batches while the feed runs, from what "
                    + "it measures: one knob at a time, each change kept only when the next window delivers more samples/s (or, a "
                    + "lowering, no fewer), else rolled back; within the cores and the prefetch and store budgets. The values given "
                    + "are where it starts; off, they are pinned.");
    public static final ConfigKey<Long> WARM_UP_MS = key("warm-up-ms", DATA, "MS", NUMBER, ConfigKey.longInt(0, 600_000), String::valueOf,
            FeedConfig.WARM_UP_MILLIS_DEFAULT, null, "Before the feed opens, for at most this long: each CPU thread encodes a made-up "
                    + "sample (a third of it), then the feed's own stream runs over a made-up data set (read, prepared, written into "
                    + "shared memory, released; the job's cache and counts untouched), so that the JIT has compiled the whole "
                    + "per-sample path before a trainer waits on it; 0 turns it off.");
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
            "what the ranks need at once and at least 4G, each batch the data's largest where the worst case would not fit and the "
                    + "samples' shapes are known (stoker validate's length index, or a header scan of a local data set), else the "
                    + "configuration's worst case; at most half the free space of --shm-dir",
            "Hard limit of the shared-memory object store in bytes; suffixes K, M, G allowed.");

    public static final ConfigKey<Long> SHM_RESIDENT = key("shm-resident", STORE, "BYTES", NUMBER, ConfigKey.bytes(1), String::valueOf, null,
            "no limit: a free segment keeps its pages for the next batch",
            "Shared memory the store keeps in memory for batches, in use and free; suffixes K, M, G allowed. A released batch's "
                    + "segment gives its pages back while the store is over it, and the next batch that reuses it faults them in "
                    + "again: less memory for the time first-touching pages costs (docs/benchmarks.md, \"Memory against the "
                    + "peers\"). Batches in flight always keep theirs.");

    /** The environment variable that turns the cache's default off ({@code STOKER_CACHE=off}; the test suites set it). */
    public static final String CACHE_ENV = "STOKER_CACHE";
    /** The environment variable naming the cache's default folder (else {@code $XDG_CACHE_HOME/stoker}, {@code ~/.cache/stoker}). */
    public static final String CACHE_DIR_ENV = "STOKER_CACHE_DIR";

    public static final ConfigKey<Boolean> CACHE = key("cache", STORE, "on|off", TEXT, NodeSettings::onOff, v -> v ? "on" : "off",
            null, "on; off where $" + CACHE_ENV + "=off", "Keep each image's and video's preprocessed pixels (resized u8) and each sample's tokens in --cache-dir "
                    + "and serve them again instead of decoding and resizing: epoch two and a restarted job over the same data and "
                    + "settings read them (bit for bit what decoding gives; keyed by the content and every setting, never the path; "
                    + "docs/cache.md).");
    public static final ConfigKey<Path> CACHE_DIR = key("cache-dir", STORE, "DIR", TEXT, ConfigKey.path(), Path::toString, null,
            "$" + CACHE_DIR_ENV + ", else $XDG_CACHE_HOME/stoker, else ~/.cache/stoker", "The cache's folder; services of one host "
                    + "may share it (a second one over the same data and settings finds the first one's entries). Given to `node` "
                    + "or `serve --join`, the member's own folder for every cluster job it works on, whatever folder the job names.");
    public static final ConfigKey<Long> CACHE_BYTES = key("cache-bytes", STORE, "BYTES", NUMBER, ConfigKey.bytes(1 << 20), String::valueOf,
            null, "a quarter of --cache-dir's free space when the service starts", "The cache's byte budget (entries as stored, "
                    + "compressed); entries this job has not used make room first, and entries it uses are never evicted for new "
                    + "ones (a data set that does not fit keeps a stable part cached); suffixes K, M, G, T allowed.");

    public static final ConfigKey<Boolean> CACHE_AFFINITY = key("cache-affinity", STORE, "on|off", TEXT, NodeSettings::onOff,
            v -> v ? "on" : "off", true, null, "With --join and --cache on: each image's and video's cache entry has a home node "
                    + "(by its key, over the job's nodes), and a node making a batch reads the entries homed elsewhere from their home "
                    + "(over the nodes' Flight endpoints; a home that fails is skipped and the entry computed locally), so that in "
                    + "epoch two every node finds every entry whatever batch or pack its sample falls in; off: each node reads only "
                    + "its own cache (docs/cluster.md, docs/cache.md).");
    public static final ConfigKey<Boolean> CACHE_COMPRESS = key("cache-compress", STORE, "zstd|none", TEXT, NodeSettings::zstdOrNone,
            v -> v ? "zstd" : "none", false, null, "How new cache entries are stored: none (raw, the default: the cheapest "
                    + "to write in epoch 1 and to read in the next) or zstd (level 1: about 3/4 of the bytes of resized photos, at "
                    + "~2.6 ms more per image to write and ~1.4 ms more to read: for nodes short of disk; docs/cache.md). Entries "
                    + "of either kind are read.");

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
    public static final ConfigKey<Retrieval> RETRIEVAL = key("retrieval", CLUSTER, "MODE", TEXT, ConfigKey.enumOf(Retrieval.class),
            ConfigKey::cliName, Retrieval.DIRECT, null, "With --join: direct: a rank's node pulls each batch made on another node "
                    + "straight from the node that made it; relay: through the coordinator's node, whose network card then carries every "
                    + "such batch twice (in and out): the slower layout of a driver that hands out the data, kept for the scale "
                    + "ablation of `bench cluster`.");
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
                    + "pulled them, and the batches pulled for its own ranks. Not given: the default at start, raised for each job to "
                    + "what its largest batches need (its data's where the worst case would not fit and the samples' shapes are known), "
                    + "within half the free space of --node-shm-dir.");
    public static final ConfigKey<Path> NODE_SHM_DIR = key("node-shm-dir", MEMBER, "DIR", TEXT, ConfigKey.path(), Path::toString,
            StoreConfig.DEFAULT_DIRECTORY, null, "Folder of this node's object store.");
    public static final ConfigKey<Long> DOWN_AFTER_MS = key("down-after-ms", MEMBER, "MS", NUMBER, ConfigKey.longInt(1, 3_600_000),
            String::valueOf, 7000L, null, "How long the split-brain resolver waits for a stable set of unreachable nodes before downing them, "
                    + "and a node for its job's unreachable coordinator before ending the job; with --heartbeat-pause-ms, a member paused for "
                    + "up to about their sum less 1.5 s is not downed (docs/cluster.md, \"Pauses\").");
    public static final ConfigKey<Long> HEARTBEAT_PAUSE_MS = key("heartbeat-pause-ms", MEMBER, "MS", NUMBER,
            ConfigKey.longInt(1, 3_600_000), String::valueOf, 4000L, null, "How long a node may miss heartbeats before it counts as "
                    + "unreachable and its work is redone elsewhere (it is admitted again when it is heard again).");
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
            ConfigKey.integer(1, 1 << 16), String::valueOf, FeedServer.Limits.MAX_CONNECTIONS_DEFAULT, null,
            "Trainer socket connections open at once; more are refused with an ERROR that says so (each holds a thread and buffers).");
    public static final ConfigKey<Long> HELLO_TIMEOUT_MS = key("hello-timeout-ms", MEMBER, "MS", NUMBER, ConfigKey.longInt(1, 3_600_000),
            String::valueOf, FeedServer.Limits.HELLO_TIMEOUT_MILLIS_DEFAULT, null,
            "A connection to the trainer socket that has not sent its whole HELLO this long after connecting is closed with an ERROR.");
    public static final ConfigKey<Long> COPY_BUFFER_BUDGET = key("copy-buffer-budget", MEMBER, "BYTES", NUMBER, ConfigKey.bytes(0),
            String::valueOf, FeedServer.Limits.COPY_BUFFER_BUDGET_BYTES_DEFAULT, null,
            "Bytes of copy-delivery buffers the service allocates ahead when trainers say hello, over all connections; beyond it a "
                    + "trainer's buffer is allocated at its first batch, once it holds its rank.");
    public static final ConfigKey<Path> METRICS_FILE = key("metrics-file", MEMBER, "FILE", TEXT, ConfigKey.path(), Path::toString, null, null,
            "On shutdown, write the node's counters (pipeline, store and server; a cluster job's per-rank and per-node counters) to "
                    + "this file as JSON.");


    /**
     * The settings that make a job's video encoding ({@link NodeConfig#videoEncoding()}): what a command that encodes
     * videos in its own process takes ({@code encode}, {@code bench video}). {@link #VIDEO_DECODE} is not among them: it
     * says how the feed runs its decoders, not what they make.
     */
    public static final List<ConfigKey<?>> VIDEO_ENCODING = List.of(VIDEO, VIDEO_SAMPLER, VIDEO_FPS, VIDEO_MIN_FRAMES, VIDEO_MAX_FRAMES,
            VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS, VIDEO_CPU, VIDEO_DECODE_TIMEOUT);

    /** The settings that mean something only with --pack-tokens. */
    static final List<ConfigKey<?>> PACK_ONLY = List.of(PACK_PATCHES, BALANCE, PACK_PAD_TO, COST_LLM_PARAMS, COST_LLM_LAYERS,
            COST_LLM_ATTENTION_WIDTH, COST_VIT_PARAMS, COST_VIT_ATTENTION_LAYERS, COST_VIT_HIDDEN, COST_VISION_TRAINED);

    NodeSettings() {}

    private static <T> ConfigKey<T> key(String name, ConfigKey.Group group, String label, ConfigKey.Kind kind, Function<String, T> reader,
                                        Function<T, String> writer, T defaultValue, String defaultText, String doc) {
        var k = new ConfigKey<>(name, group, label, kind, reader, writer, defaultValue, defaultText, doc);
        KEYS.add(k);
        return k;
    }

    /** {@code --video}'s value: auto, on, off (a YAML file's true and false, what YAML 1.1 makes of on and off, too). */
    private static Boolean zstdOrNone(String value) {
        return switch (value.strip().toLowerCase(java.util.Locale.ROOT)) {
            case "zstd" -> true;
            case "none" -> false;
            default -> throw new IllegalArgumentException("expected zstd or none, got '" + value + "'");
        };
    }

    private static Boolean onOff(String value) {
        return switch (value.strip().toLowerCase(java.util.Locale.ROOT)) {
            case "on", "true" -> true;
            case "off", "false" -> false;
            default -> throw new IllegalArgumentException("expected on or off, got '" + value + "'");
        };
    }

    private static VideoMode videoMode(String value) {
        return switch (value.strip().toLowerCase(java.util.Locale.ROOT)) {
            case "auto" -> VideoMode.AUTO;
            case "on", "true" -> VideoMode.ON;
            case "off", "false" -> VideoMode.OFF;
            default -> throw new IllegalArgumentException("unknown value '" + value + "'; expected one of auto, on, off");
        };
    }

    /** A sampler by name ({@link VideoSampler#fromName}: hf, qwen-vl-utils, llamafactory). */
    private static VideoSampler sampler(String name) {
        return VideoSampler.fromName(name);
    }

    /** A number for a command-level video option, checked against {@code key}'s bounds as a video item's value is. */
    private static Function<String, Double> videoNumber(VideoKey key) {
        return s -> {
            double v;
            try {
                v = Double.parseDouble(s);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("'" + s + "' is not a number");
            }
            try {
                return key.check(key.flag(), v);
            } catch (IllegalArgumentException e) { // the key names its option, as ConfigKey.parse does too
                throw new IllegalArgumentException(e.getMessage().substring(key.flag().length() + 2));
            }
        };
    }

    /** A positive number of seconds, at most {@code max}. */
    private static Function<String, Double> seconds(double max) {
        var positive = ConfigKey.positive();
        return s -> {
            double v = positive.apply(s);
            if (v > max) throw new IllegalArgumentException("must be at most " + ConfigKey.formatNumber(max) + " seconds, got " + s);
            return v;
        };
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

    /** A set of groups, for {@link #keys(Collection)} and {@link NodeConfig#only}. */
    public static Set<ConfigKey.Group> groups(ConfigKey.Group first, ConfigKey.Group... rest) { return EnumSet.of(first, rest); }
}
