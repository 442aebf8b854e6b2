package dev.stoker.cli;

import dev.stoker.pipeline.feed.ErrorPolicy;
import dev.stoker.pipeline.feed.FeedErrors;
import java.net.URI;
import picocli.CommandLine.Option;

/** Options of every command that runs the feeding pipeline: data, ranks, concurrency, buffers, S3. */
final class FeedOptions {
    @Option(names = "--data", required = true,
            description = "The manifest: a local path, file://… or s3://bucket/key of train.jsonl (images relative to its folder).")
    String data;

    @Option(names = "--ranks", defaultValue = "1", description = "Trainer ranks (world size) (default: ${DEFAULT-VALUE}).")
    int ranks;

    @Option(names = "--batch", defaultValue = "8", description = "Samples per rank and step (default: ${DEFAULT-VALUE}).")
    int batch;

    @Option(names = "--seed", defaultValue = "1234", description = "Shuffle seed (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--threads", description = "CPU threads for decode/transform/tokenize (default: the number of cores).")
    Integer threads;

    @Option(names = "--fetch-concurrency", defaultValue = "64", description = "Object fetches in flight (default: ${DEFAULT-VALUE}).")
    int fetchConcurrency;

    @Option(names = "--fetch-latency-ms", defaultValue = "0",
            description = "Added first-byte delay per object, to model object storage on a local disk (default: ${DEFAULT-VALUE}).")
    long fetchLatencyMillis;

    @Option(names = "--prefetch-batches", defaultValue = "4", description = "Prefetch buffer per rank, in batches (default: ${DEFAULT-VALUE}).")
    int prefetchBatches;

    @Option(names = "--prefetch-bytes", defaultValue = "1073741824", description = "Prefetch buffer per rank, in bytes (default: ${DEFAULT-VALUE}).")
    long prefetchBytes;

    @Option(names = "--warm-up-ms", defaultValue = "1500",
            description = "Before the feed opens, each CPU thread encodes a made-up sample for this long, so that the JIT "
                    + "compiles the hot path before a trainer waits on it; 0 turns it off (default: ${DEFAULT-VALUE}).")
    long warmUpMillis;

    @Option(names = "--on-error", defaultValue = "skip",
            description = "A bad sample (missing or broken image, malformed line, too many tokens, path outside the data set): "
                    + "skip leaves it out of its batch, records it and goes on; fail stops the feed at the first one, every "
                    + "rank's next batch failing with an error that names it (default: ${DEFAULT-VALUE}).")
    ErrorPolicy onError;

    @Option(names = "--max-error-rate", defaultValue = "1",
            description = "With --on-error skip: stop the feed when more than this share (0–1) of the samples scheduled so far "
                    + "was skipped, counted over all ranks and judged from " + FeedErrors.MIN_SCHEDULED_FOR_RATE + " samples on, "
                    + "so that one bad sample early does not end a run; 1 turns the limit off (default: ${DEFAULT-VALUE}).")
    double maxErrorRate;

    @Option(names = "--errors-file",
            description = "Append every bad sample to this file, one JSON object per line {id, index, epoch, step, rank, stage, "
                    + "cause} (docs/run-data.md); they are counted in the metrics either way (default: none; bench ladder "
                    + "always writes <work-dir>/<mode>-errors.jsonl).")
    java.nio.file.Path errorsFile;

    @Option(names = "--pixel-format", defaultValue = "float32",
            description = "What a batch carries of its images: float32 pixel_values, or uint8, each image's resized RGB pixels "
                    + "(pixel_values_u8, 1/8 of the bytes) that the trainer normalizes and patchifies itself, bit for bit the "
                    + "same (Python: stoker.pixels.to_pixel_values, or Loader(…, to_pixel_values=True)); for network-bound "
                    + "delivery (socket copies, Arrow Flight) (default: ${DEFAULT-VALUE}).")
    String pixelFormat = "float32"; // also when built without picocli (tests)

    @Option(names = "--s3-endpoint", description = "S3 endpoint override, e.g. http://127.0.0.1:9090 (default: AWS).")
    URI s3Endpoint;

    @Option(names = "--s3-region", defaultValue = "us-east-1", description = "S3 region (default: ${DEFAULT-VALUE}).")
    String s3Region;

    @Option(names = "--s3-path-style", description = "Path-style S3 addressing (needed by most S3-compatible servers).")
    boolean s3PathStyle;

    @Option(names = "--tokenizer", description = "tokenizer.json (or .json.gz); default: the bundled Qwen2 tokenizer.")
    java.nio.file.Path tokenizer;

    @Option(names = "--shm-dir", defaultValue = "/dev/shm",
            description = "Where the shared-memory object store keeps its segment files (default: ${DEFAULT-VALUE}).")
    java.nio.file.Path shmDir;

    @Option(names = "--shm-budget", converter = ByteSizeConverter.class,
            description = "Hard limit of the shared-memory object store in bytes; suffixes K, M, G allowed "
                    + "(default: 4G, or half the free space of --shm-dir when that is less).")
    Long shmBudget;

    /** The store's budget: --shm-budget, else 4 GiB or half of what --shm-dir has free (a container's /dev/shm may be 64 MB). */
    long shmBudgetBytes() {
        if (shmBudget != null) return shmBudget;
        try {
            long usable = java.nio.file.Files.getFileStore(shmDir).getUsableSpace();
            return Math.max(1, Math.min(dev.stoker.store.StoreConfig.DEFAULT_BUDGET_BYTES, usable / 2));
        } catch (java.io.IOException e) {
            return dev.stoker.store.StoreConfig.DEFAULT_BUDGET_BYTES; // the store reports the directory's problem itself
        }
    }

    /** {@code encode} with --pixel-format. */
    dev.stoker.pipeline.EncodeOptions withPixelFormat(dev.stoker.pipeline.EncodeOptions encode) {
        for (var f : dev.stoker.pipeline.EncodeOptions.PixelFormat.values())
            if (f.name().equalsIgnoreCase(pixelFormat.trim())) return encode.withPixelFormat(f);
        throw new Main.InvalidInputException("--pixel-format must be float32 or uint8, got '" + pixelFormat + "'");
    }

    int cpuThreads() { return threads == null ? Runtime.getRuntime().availableProcessors() : threads; }
}
