package dev.stoker.node;

import static dev.stoker.node.NodeSettings.MAX_PIXELS;
import static dev.stoker.node.NodeSettings.PACK_PAD_TO;
import static dev.stoker.node.NodeSettings.PACK_PATCHES;
import static dev.stoker.node.NodeSettings.PACK_TOKENS;
import static dev.stoker.node.NodeSettings.SHM_BUDGET;
import static dev.stoker.node.NodeSettings.SHM_DIR;

import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.batch.BatchShape;
import dev.stoker.encode.batch.LargestBatch;
import dev.stoker.encode.batch.PackAssembler;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/**
 * The shared memory a local job needs, and the refusal of a budget that cannot hold it. A zero-copy trainer keeps the
 * batches it leased until it asks for the next ones, so a rank whose share of the store cannot hold those leases and the
 * batch being filled waits on itself forever; this is refused at start, with the numbers, instead of hanging the job.
 * The largest batch is the data's where its samples' shapes are known ({@link #withData}: from {@code stoker validate}'s
 * length index or a header scan, {@link LargestBatch}), else the largest the configuration can make: each sample at the
 * sequence limit with the most pixels it may carry, or each pack at its token and patch limits. {@link #sizedFrom} says
 * which, for the service's start line.
 *
 * <p>Every value is read from the configuration as resolved ({@link NodeConfig#encodeOptions()}: the processor's or the
 * model's pixel bounds where none were given), never from a raw key, so that the refusal names the numbers in force.
 */
public final class ShmBudget {
    /**
     * Leases a trainer may hold at once: the plain {@code for batch in loader:} loop holds batch k
     * while it asks for k+1.
     */
    public static final int LEASES_PER_TRAINER = 2;

    private final EncodeOptions options;
    private final int batch;
    private final int packTokens;
    private final int packPatches;
    private final int packPadTo;
    private final int ranks;
    private final RankRange local;
    private final Long given;
    private final Path dir;
    /** Where the pixel cap in force came from, for the refusal: empty when given, else " (the processor's)" or " (the model's)". */
    private final String maxPixelsSource;
    /** The data's largest batch, or null: the configuration's worst case. */
    private final LargestBatch data;
    /** Where {@link #data} came from ("stoker validate's length index", "a header scan of …"), for the start line. */
    private final String dataSource;

    private ShmBudget(ShmBudget b, LargestBatch data, String dataSource) {
        this.options = b.options;
        this.batch = b.batch;
        this.packTokens = b.packTokens;
        this.packPatches = b.packPatches;
        this.packPadTo = b.packPadTo;
        this.ranks = b.ranks;
        this.local = b.local;
        this.given = b.given;
        this.dir = b.dir;
        this.maxPixelsSource = b.maxPixelsSource;
        this.data = data;
        this.dataSource = dataSource;
    }

    private ShmBudget(NodeConfig config) {
        this.options = config.encodeOptions();
        this.batch = config.batch();
        this.packTokens = config.get(PACK_TOKENS);
        this.packPatches = config.get(PACK_PATCHES);
        this.packPadTo = config.get(PACK_PAD_TO);
        this.ranks = config.ranks();
        this.local = config.localRanks();
        this.given = config.get(SHM_BUDGET);
        this.dir = config.get(SHM_DIR);
        this.maxPixelsSource = config.isGiven(MAX_PIXELS) ? "" : config.isFromModel(MAX_PIXELS) ? " (the model's)" : " (the processor's)";
        this.data = null;
        this.dataSource = null;
    }

    /** The budget of {@code config}'s store and what its ranks need. */
    public static ShmBudget of(NodeConfig config) { return new ShmBudget(config); }

    private boolean packed() { return packTokens > 0; }

    /**
     * This budget with its largest batch taken from the data: {@code largest}, the bound on a batch of the job's samples
     * ({@link LargestBatch#padded}), found as {@code source} says (for {@link #sizedFrom}). A padded job's only: a pack's
     * bound stays {@code --pack-tokens}'s.
     */
    public ShmBudget withData(LargestBatch largest, String source) {
        if (packed()) throw new IllegalArgumentException("a packed job's shared memory is sized by --pack-tokens, not by its samples");
        return new ShmBudget(this, java.util.Objects.requireNonNull(largest, "largest"), source);
    }

    /** Where the data's largest batch was found ("stoker validate's length index in …", "a header scan of …"); null: none. */
    public String dataSource() { return dataSource; }

    /** Whether the largest batch is the data's ({@link #withData}) rather than the configuration's worst case. */
    public boolean fromData() { return data != null; }

    /** The data's largest batch, or null when the budget is sized from the configuration's worst case. */
    public LargestBatch data() { return data; }

    /**
     * What the largest batch was taken from, in words for the service's start line: the data's (and where its shapes came
     * from) or the configuration's worst case.
     */
    public String sizedFrom() {
        long worst = worstCaseBatchBytes();
        String how = given != null ? "checked against " : "sized from "; // a budget given is the user's: only checked
        if (data != null)
            return String.format(Locale.ROOT, "%sthe data's largest batch, %d bytes (%s), not the configuration's worst case%s", how,
                    largestBatchBytes(), dataSource, worst < 0 ? "" : " of " + worst);
        return how + (packed() ? "the largest pack --pack-tokens allows" : "the configuration's worst case");
    }

    /**
     * Whether the configuration's worst case already fits: every rank's need within the budget given, or, none given, within
     * the default floor ({@link StoreConfig#DEFAULT_BUDGET_BYTES}) — then the data cannot shrink the store, and its shapes
     * need not be read.
     */
    public boolean worstCaseFits() {
        long need = worstCaseNeedBytes();
        if (need < 0) return false;
        int count = local.count();
        if (need > Long.MAX_VALUE / count) return false;
        return need * count <= (given != null ? given : StoreConfig.DEFAULT_BUDGET_BYTES);
    }

    private long worstCaseNeedBytes() {
        long worst = worstCaseBatchBytes();
        return worst < 0 ? -1 : Math.multiplyExact(ShmObjectStore.sizeClass(worst), LEASES_PER_TRAINER + 1);
    }

    /**
     * Bytes of the largest batch: the data's where it is known ({@link #withData}; never above the configuration's worst
     * case, which bounds every batch the feed makes, but for an audio job's, whose worst case counts no audio features),
     * else {@link #worstCaseBatchBytes}; -1 when unbounded.
     */
    public long largestBatchBytes() {
        long worst = worstCaseBatchBytes();
        if (data == null) return worst;
        if (options.audio() != null) return data.bytes(); // the worst case counts no audio features: the data's clips do
        return worst < 0 ? data.bytes() : Math.min(worst, data.bytes());
    }

    /**
     * Bytes of the largest batch this configuration can make (a packed job's: the largest pack,
     * {@link PackAssembler#largestPackBytes}): every sample at the sequence limit and carrying the most pixels it may
     * ({@link EncodeOptions#maxPixelsPerSample}); -1 when unbounded (no --max-seq-len). A text-only batch with the dummy
     * image ({@code --text-only dummy-image}) is smaller: its few tokens past the limit weigh far less than the pixels
     * of an image per sample counted here.
     */
    public long worstCaseBatchBytes() {
        if (packed()) // a pack: at most --pack-tokens tokens, as many of them image tokens as --pack-patches allows
            return PackAssembler.largestPackBytes(options, packTokens, packPatches, packPadTo);
        long pixels = options.maxPixelsPerSample();
        int length = options.maxSequenceLength();
        if (pixels < 0 || length == 0) return -1;
        var vision = options.vision();
        long patch = (long) vision.patchSize() * vision.patchSize();
        int images = options.maxImages() > 0 ? options.maxImages() : length; // an image takes one token at the least
        PixelFormat format = options.pixelFormat();
        var shape = new BatchShape(batch, length, batch * (pixels / patch), vision.rowLength(), Math.multiplyExact(batch, images), format,
                format == PixelFormat.UINT8 ? batch * pixels * 3 : 0, options.inputContract());
        // with video the same pixels may be split between images and videos: the videos' grids (one token each at least) on
        // top, and in the compact format their frames (a video row is up to temporal-patch frames: tps times an image's bytes)
        if (options.video() != null)
            shape = shape.withVideos(new BatchShape.Videos(0, Math.multiplyExact(batch, length), true, format == PixelFormat.UINT8
                    ? Math.multiplyExact(batch * pixels * 3, vision.temporalPatchSize()) : 0));
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

    /**
     * The store's budget: as given, else what every rank needs at once ({@link #rankNeedBytes}) and at
     * least 4 GiB, but no more than half of what the store's folder has free (a container's /dev/shm
     * may be 64 MB; a budget too small for the ranks is then refused at start, with the numbers).
     */
    public long budgetBytes() {
        if (given != null) return given;
        long need = rankNeedBytes();
        int count = local.count(); // only this node's ranks keep batches in its store
        long wanted = need > 0 && need <= Long.MAX_VALUE / count ? Math.max(StoreConfig.DEFAULT_BUDGET_BYTES, need * count)
                : StoreConfig.DEFAULT_BUDGET_BYTES;
        try {
            long usable = Files.getFileStore(dir).getUsableSpace();
            return Math.max(1, Math.min(wanted, usable / 2));
        } catch (IOException e) {
            return wanted; // the store reports the folder's problem itself
        }
    }

    /**
     * Refuses (ConfigException) a budget under which a rank could wait on itself: each of this node's ranks' share must
     * hold the leases its trainer may keep and the batch being filled, each the largest the configuration can make. The
     * message names the values in force and what to change.
     */
    public void check() {
        long largest = largestBatchBytes();
        if (largest < 0)
            throw new ConfigException("--max-seq-len 0 leaves a batch's size unbounded, so no --shm-budget can be known to suffice; "
                    + "set --max-seq-len (and --max-images) for zero-copy");
        int count = local.count(); // the store holds this node's ranks' batches only
        long need = rankNeedBytes(), budget = budgetBytes(), share = budget / count;
        if (share >= need) return;
        String shares = String.format(Locale.ROOT, "--shm-budget %d gives each of the %d ranks%s %d bytes, and a rank needs %d", budget,
                count, count == ranks ? "" : " this node serves (--local-ranks " + local + ")", share, need);
        if (data != null)
            throw new ConfigException(String.format(Locale.ROOT, "%s: its trainer may hold %d batches while the next is filled, and the "
                    + "largest batch of this data set is %d bytes (--batch %d of its largest samples, record %d the largest, shapes from "
                    + "%s; %s). Raise --shm-budget to %d, or lower --batch or --max-pixels", shares, LEASES_PER_TRAINER, largest, batch,
                    data.largestRecord(), dataSource, ConfigKey.cliName(options.pixelFormat()), need * count));
        if (packed())
            throw new ConfigException(String.format(Locale.ROOT, "%s: its trainer may hold %d packs while the next is filled, and the "
                    + "largest pack this configuration can make is %d bytes (--pack-tokens %d, %s). Raise --shm-budget to %d, or lower "
                    + "--pack-tokens or set --pack-patches", shares, LEASES_PER_TRAINER, largest, packTokens,
                    packPatches > 0 ? "--pack-patches " + packPatches : "every token an image token", need * count));
        if (options.video() != null) // --max-images and --max-pixels bound images, not a video's frames: only the tokens do
            throw new ConfigException(String.format(Locale.ROOT, "%s: its trainer may hold %d batches while the next is filled, and "
                    + "the largest batch this configuration can make is %d bytes (--batch %d, each sample at --max-seq-len %d with as "
                    + "many image or video pixels as it has tokens for: with --video on, --max-images and --max-pixels do not bound "
                    + "a video's frames, %s). Raise --shm-budget to %d, or lower --batch or --max-seq-len; a job without video: "
                    + "--video off", shares, LEASES_PER_TRAINER, largest, batch, options.maxSequenceLength(),
                    ConfigKey.cliName(options.pixelFormat()), need * count));
        throw new ConfigException(String.format(Locale.ROOT, "%s: its trainer may hold %d batches while the next is filled, and the "
                + "largest batch this configuration can make is %d bytes (--batch %d, each sample at --max-seq-len %d with %s at "
                + "--max-pixels %d%s, %s). Raise --shm-budget to %d, or lower --batch, --max-pixels, --max-seq-len or --max-images",
                shares, LEASES_PER_TRAINER, largest, batch, options.maxSequenceLength(),
                options.maxImages() > 0 ? "up to " + options.maxImages() + " images" : "as many images as it has tokens for",
                options.vision().maxPixels(), maxPixelsSource, ConfigKey.cliName(options.pixelFormat()), need * count));
    }
}
