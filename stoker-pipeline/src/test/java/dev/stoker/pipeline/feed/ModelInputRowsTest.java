package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.batch.DummyImage;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The rows of docs/model-inputs.md §8 that hold without transformers (R1–R7), each checked against the rule the row
 * cites, written out here rather than taken from the code under test, on the batches a trainer receives: their
 * {@code STKB} layout, from heap feeds (laid out as the socket and Flight send them) and from zero-copy feeds (read
 * back from the shared-memory object they were written into), under both input contracts, in both pixel formats and
 * families of both patch sizes, on padded batches with no image, one image, several images (two in a sample among
 * them, grids that are not square) and the dummy image. Rows R8–R13 need transformers and run in its own check.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ModelInputRowsTest {
    static final long PAD = 151643, VISION_START = 151652, VISION_END = 151653, IMAGE_PAD = 151655, VIDEO_PAD = 151656;
    static final int MERGE = 2;
    static final EncodeOptions QWEN25 = FeederTest.OPTIONS;
    static final EncodeOptions QWEN3 = EncodeOptions.defaults(ProcessorPreset.QWEN3_VL).withPixels(4096, 65536);
    static final InputContract FINETUNE = InputContract.QWEN_VL_FINETUNE, V5_3 = InputContract.TRANSFORMERS_5_3;

    /** One feed: its options, where its batches were made, and the batches as laid out. */
    record Run(String name, EncodeOptions options, FeedMode mode, List<BatchLayout.Batch> batches) {
        InputContract contract() { return options.inputContract(); }

        boolean dummyImage() { return options.textOnly() == TextOnlyPolicy.DUMMY_IMAGE; }

        long[] dummyGrid() { return DummyImage.of(options.vision()).gridThw(); }
    }

    @TempDir static Path tmp;
    static final Map<String, Run> runs = new LinkedHashMap<>();

    @BeforeAll
    static void feed() throws Exception {
        FeederTest.loadTokenizer();
        // mostly one image, every fifth sample two, every seventh none; six images of different sizes and aspect ratios
        Path images = TestDatasets.write(tmp.resolve("images"), 18, Set.of());
        // two in three samples without an image, two whose only image fails: batches of no image under --text-only allow
        Path textOnly = TextOnlyFeedTest.write(java.nio.file.Files.createDirectories(tmp.resolve("text-only")));
        try (var store = ShmObjectStore.open(new StoreConfig(java.nio.file.Files.createDirectories(tmp.resolve("shm")), 64L << 20, "stoker_rows"))) {
            add("qwen2.5 images finetune heap", images, QWEN25.withInputContract(FINETUNE), FeedMode.PREFETCH, 3, store);
            add("qwen2.5 images 5.3 zero-copy", images, QWEN25.withInputContract(V5_3), FeedMode.ZERO_COPY, 3, store);
            add("qwen3 images 5.3 heap", images, QWEN3.withInputContract(V5_3), FeedMode.PREFETCH, 3, store);
            add("qwen2.5 text allow 5.3 u8 zero-copy", textOnly, QWEN25.withTextOnly(TextOnlyPolicy.ALLOW).withInputContract(V5_3)
                    .withPixelFormat(PixelFormat.UINT8), FeedMode.ZERO_COPY, 2, store);
            add("qwen2.5 text allow finetune heap", textOnly, QWEN25.withTextOnly(TextOnlyPolicy.ALLOW), FeedMode.PREFETCH, 2, store);
            add("qwen2.5 text dummy 5.3 heap", textOnly, QWEN25.withInputContract(V5_3), FeedMode.PREFETCH, 2, store);
            add("qwen2.5 text dummy finetune zero-copy", textOnly, QWEN25, FeedMode.ZERO_COPY, 2, store);
            assertEquals(0, store.metrics().inUseBytes(), "every object released");
        }
    }

    @AfterAll
    static void closeTokenizer() { FeederTest.closeTokenizer(); }

    /** Feeds one epoch of one rank of {@code batch} samples and keeps each batch as laid out. */
    static void add(String name, Path manifest, EncodeOptions options, FeedMode mode, int batch, ShmObjectStore store) throws Exception {
        int steps = (batch == 3 ? 18 : 24) / batch;
        var config = FeedConfig.of(mode, options, 1, batch).withSeed(FeederTest.SEED).withCpuThreads(2).withFetchConcurrency(4).withWarmUp(0);
        var out = new ArrayList<BatchLayout.Batch>();
        try (var source = new LocalFeedSource(manifest, 0)) {
            if (mode == FeedMode.ZERO_COPY) {
                try (var feeder = Feeder.start(config, source, FeederTest.tokenizer, store)) {
                    for (int s = 0; s < steps; s++) {
                        var b = feeder.storedRank(0).next().get(60, TimeUnit.SECONDS);
                        out.add(copied(b.object().segment().asSlice(0, b.sizeBytes())));
                        b.release();
                    }
                }
            } else {
                for (var b : FeederTest.run(config, source, steps)) { // as the socket and Flight lay a heap batch out
                    var prepared = BatchSchema.tensors(b, 1, options.vision());
                    var seg = MemorySegment.ofArray(new byte[(int) BatchLayout.sizeOf(prepared.tensors())]);
                    BatchLayout.write(prepared.meta(), prepared.tensors(), seg);
                    out.add(BatchLayout.read(seg));
                }
            }
        }
        runs.put(name, new Run(name, options, mode, out));
    }

    /** The batch laid out in {@code seg}, read from a copy of its bytes (the object goes back to the store). */
    static BatchLayout.Batch copied(MemorySegment seg) { return BatchLayout.read(MemorySegment.ofArray(seg.toArray(ValueLayout.JAVA_BYTE))); }

    // ---- the tensors of a laid-out batch

    static long[] longs(BatchLayout.Batch b, String name) { return b.tensor(name).toLongs(); }

    static int samples(BatchLayout.Batch b) { return (int) b.tensor("input_ids").shape()[0]; }

    static int length(BatchLayout.Batch b) { return (int) b.tensor("input_ids").shape()[1]; }

    static int images(BatchLayout.Batch b) { return (int) b.tensor("image_grid_thw").shape()[0]; }

    /** Whether {@code b} carries the dummy image: its run adds one, and no token of an image pad is attended. */
    static boolean hasDummy(Run run, BatchLayout.Batch b) {
        long[] ids = longs(b, "input_ids"), mask = longs(b, "attention_mask");
        boolean attendedImage = false;
        for (int k = 0; k < ids.length; k++) attendedImage |= ids[k] == IMAGE_PAD && mask[k] == 1;
        return run.dummyImage() && images(b) == 1 && !attendedImage && Arrays.equals(run.dummyGrid(), longs(b, "image_grid_thw"));
    }

    /** Every batch of every run, with its run. */
    static List<Map.Entry<Run, BatchLayout.Batch>> all() {
        var out = new ArrayList<Map.Entry<Run, BatchLayout.Batch>>();
        for (var run : runs.values()) for (var b : run.batches()) out.add(Map.entry(run, b));
        return out;
    }

    static String at(Run run, BatchLayout.Batch b) { return run.name() + ", step " + b.meta().globalStep(); }

    // ---- the rows

    /**
     * R1 (docs/model-inputs.md §8; §2, {@code get_rope_index} {@code q2:925-1073} @4.57.6): on every token of attention 1,
     * {@code position_ids} are the M-RoPE rule: text advances by 1 on all three rows; an image of grid (t, h, w), found as
     * {@code <|vision_start|>} followed by its image pads among the attended tokens, takes the next grid row (in batch
     * order) and gives its t × h/2 × w/2 tokens (start + ti, start + hi, start + wi); the text after it starts at
     * start + max(t, h/2, w/2). The dummy image, of attention 0, consumes no row. Batches of one and several images,
     * two in a sample, grids that are not square and a family of patch 16 among them.
     */
    @Test
    void r1PositionIdsAreTheRopeIndexRuleOnAttendedTokens() {
        int several = 0, twoInASample = 0, notSquare = 0;
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            String at = at(run, b);
            int n = samples(b), len = length(b);
            long[] ids = longs(b, "input_ids"), mask = longs(b, "attention_mask"), pos = longs(b, "position_ids"), grid = longs(b, "image_grid_thw");
            int row = 0;
            for (int i = 0; i < n; i++) {
                long next = 0;
                int imagesHere = 0;
                for (int c = 0; c < len; ) {
                    int k = i * len + c;
                    if (mask[k] == 0) {
                        c++;
                        continue;
                    }
                    if (ids[k] == IMAGE_PAD) {
                        assertEquals(VISION_START, ids[k - 1], at + ": an image's pads follow <|vision_start|>");
                        long t = grid[3 * row], h = grid[3 * row + 1] / MERGE, w = grid[3 * row + 2] / MERGE;
                        if (h != w) notSquare++;
                        row++;
                        imagesHere++;
                        for (long ti = 0; ti < t; ti++)
                            for (long hi = 0; hi < h; hi++)
                                for (long wi = 0; wi < w; wi++, c++) {
                                    int kk = i * len + c;
                                    assertEquals(IMAGE_PAD, ids[kk], at + ": sample " + i + " column " + c + " is one of the image's pads");
                                    assertPosition(pos, n, len, i, c, next + ti, next + hi, next + wi, at);
                                }
                        next += Math.max(t, Math.max(h, w));
                    } else {
                        assertPosition(pos, n, len, i, c, next, next, next, at);
                        next++;
                        c++;
                    }
                }
                if (imagesHere > 1) twoInASample++;
            }
            assertEquals(images(b) - (hasDummy(run, b) ? 1 : 0), row, at + ": every grid row but the dummy's is consumed");
            if (row > 1) several++;
        }
        assertTrue(several > 0 && twoInASample > 0 && notSquare > 0,
                "batches of several images (" + several + "), two in a sample (" + twoInASample + "), grids not square (" + notSquare + ")");
    }

    private static void assertPosition(long[] pos, int n, int len, int i, int c, long t, long h, long w, String at) {
        long[] got = {pos[i * len + c], pos[(n + i) * len + c], pos[(2 * n + i) * len + c]};
        assertArrayEquals(new long[] {t, h, w}, got, at + ": position_ids of sample " + i + " column " + c);
    }

    /**
     * R2 (docs/model-inputs.md §8; §2, {@code q2:985} @4.57.6 {@code torch.ones}, @5.18.0 {@code torch.zeros}): a token of
     * attention 0 (padding, the dummy image's tokens) has position 1 on all three rows under the official contract and 0
     * under transformers 5.3's; the same samples under the two contracts differ only there and in mm_token_type_ids.
     */
    @Test
    void r2PaddingPositionsAreOneOrZeroByContract() {
        int padded = 0;
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            long pad = run.contract() == V5_3 ? 0 : 1;
            int n = samples(b), len = length(b);
            long[] mask = longs(b, "attention_mask"), pos = longs(b, "position_ids");
            for (int k = 0; k < n * len; k++)
                if (mask[k] == 0) {
                    padded++;
                    for (int r = 0; r < 3; r++) assertEquals(pad, pos[r * n * len + k], at(run, b) + ": position row " + r + " at " + k);
                }
        }
        assertTrue(padded > 0);
        var finetune = runs.get("qwen2.5 images finetune heap").batches();
        var v53 = runs.get("qwen2.5 images 5.3 zero-copy").batches();
        for (int s = 0; s < finetune.size(); s++) {
            var a = finetune.get(s);
            var b = v53.get(s);
            String at = "step " + s;
            for (String name : List.of("input_ids", "labels", "attention_mask", "image_grid_thw", "sample_index"))
                assertArrayEquals(longs(a, name), longs(b, name), at + ": " + name);
            assertArrayEquals(a.tensor("pixel_values").toFloats(), b.tensor("pixel_values").toFloats(), at);
            long[] mask = longs(a, "attention_mask"), pa = longs(a, "position_ids"), pb = longs(b, "position_ids");
            for (int k = 0; k < pa.length; k++) assertEquals(mask[k % mask.length] == 1 ? pa[k] : 0, pb[k], at + ": position " + k);
        }
    }

    /**
     * R3 (docs/model-inputs.md §8; §3, {@code ProcessorMixin.create_mm_token_type_ids}, {@code processing_utils.py:952-954}
     * @5.18.0): under transformers 5.3's contract every batch carries {@code mm_token_type_ids} int64 (B, L), right after
     * {@code position_ids}: 1 where {@code input_ids} is 151655, 2 where it is 151656, 0 elsewhere — vision start and end,
     * padding, and the dummy image's pads 1 —; under the official contract none. Batches with no, one and several images
     * and with the dummy among them, padded.
     */
    @Test
    void r3MmTokenTypeIdsMarkImagePadsOnly() {
        var seen = new java.util.TreeSet<String>();
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            String at = at(run, b);
            var names = b.tensors().stream().map(Tensor::name).toList();
            if (run.contract() == FINETUNE) {
                assertFalse(names.contains("mm_token_type_ids"), at);
                continue;
            }
            assertEquals(names.indexOf("position_ids") + 1, names.indexOf("mm_token_type_ids"), at + ": right after position_ids");
            Tensor types = b.tensor("mm_token_type_ids");
            assertFalse(types.metadata(), at + ": a model input");
            assertEquals(Tensor.DType.INT64, types.dtype(), at);
            assertArrayEquals(b.tensor("input_ids").shape(), types.shape(), at + ": (B, L)");
            long[] ids = longs(b, "input_ids"), t = types.toLongs();
            boolean padded = false;
            for (int k = 0; k < ids.length; k++) {
                assertEquals(ids[k] == IMAGE_PAD ? 1 : ids[k] == VIDEO_PAD ? 2 : 0, t[k], at + ": token " + k + " (" + ids[k] + ")");
                padded |= ids[k] == PAD;
            }
            if (padded) seen.add(hasDummy(run, b) ? "dummy" : images(b) == 0 ? "none" : images(b) == 1 ? "one" : "several");
        }
        assertEquals(new java.util.TreeSet<>(List.of("dummy", "none", "one", "several")), seen, "padded batches of each kind");
    }

    /**
     * R4 (docs/model-inputs.md §8; {@code get_rope_index} {@code q2:997-1028} @5.18.0, groupby at {@code :1004}): the runs of
     * 1s in {@code mm_token_type_ids}, sample by sample, are the rows of {@code image_grid_thw} in order, each of t·h·w/4
     * tokens; among the attended tokens (what 5.x groups) they are every row but the dummy's.
     */
    @Test
    void r4RunsOfImageTypesAreTheGridRowsInOrder() {
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            if (run.contract() != V5_3) continue;
            String at = at(run, b);
            int n = samples(b), len = length(b);
            long[] types = longs(b, "mm_token_type_ids"), mask = longs(b, "attention_mask"), grid = longs(b, "image_grid_thw");
            var runsAll = new ArrayList<Long>();
            var runsAttended = new ArrayList<Long>();
            for (int i = 0; i < n; i++) {
                long all = 0, attended = 0;
                for (int c = 0; c <= len; c++) {
                    boolean one = c < len && types[i * len + c] == 1;
                    boolean seenByRope = one && mask[i * len + c] == 1;
                    if (!one && all > 0) runsAll.add(all);
                    if (!seenByRope && attended > 0) runsAttended.add(attended);
                    all = one ? all + 1 : 0;
                    attended = seenByRope ? attended + 1 : 0;
                }
            }
            var rows = new ArrayList<Long>();
            for (int r = 0; r < grid.length; r += 3) rows.add(grid[r] * grid[r + 1] * grid[r + 2] / (MERGE * MERGE));
            assertEquals(rows, runsAll, at + ": runs of 1s = image_grid_thw rows (t·h·w/4 each)");
            assertEquals(hasDummy(run, b) ? List.of() : rows, runsAttended, at + ": the attended runs");
        }
    }

    /**
     * R5 (docs/model-inputs.md §8; §4, the vision tower fails on {@code pixel_values} (0, R), {@code q2:696} @4.57.6): a
     * batch without images (under {@code --text-only allow}) hands {@code forward} no pixel tensor and no
     * {@code image_grid_thw}: they stay in its layout, empty, as metadata; a batch with images has both among its inputs.
     * On the heap and in place, in both pixel formats (Flight and the cluster's pulls: TensorOrderTest; the Python
     * client: test_model_inputs.py).
     */
    @Test
    void r5BatchesWithoutImagesHandForwardNoVisionInputs() {
        var kinds = new java.util.TreeSet<String>();
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            String at = at(run, b), pixels = BatchSchema.pixelTensor(run.options().pixelFormat());
            var inputs = b.inputs().stream().map(Tensor::name).toList();
            var metadata = b.metadata().stream().map(Tensor::name).toList();
            if (images(b) == 0) {
                assertFalse(inputs.contains(pixels) || inputs.contains("image_grid_thw"), at + ": " + inputs);
                assertTrue(metadata.containsAll(List.of(pixels, "image_grid_thw")), at + ": " + metadata);
                assertEquals(0, b.tensor(pixels).shape()[0], at);
                assertArrayEquals(new long[] {0, 3}, b.tensor("image_grid_thw").shape(), at);
                assertEquals(run.options().pixelFormat() == PixelFormat.UINT8 ? 3 : run.options().vision().rowLength(), b.tensor(pixels).shape()[1], at);
                kinds.add(run.mode() + " " + run.options().pixelFormat());
            } else {
                assertTrue(inputs.containsAll(List.of(pixels, "image_grid_thw")), at + ": " + inputs);
                assertFalse(metadata.contains(pixels) || metadata.contains("image_grid_thw"), at + ": " + metadata);
            }
        }
        assertEquals(new java.util.TreeSet<>(List.of("PREFETCH FLOAT32", "ZERO_COPY UINT8")), kinds, "batches without images on the heap and in place");
    }

    /**
     * R6 (docs/model-inputs.md §8; §4, {@code get_placeholder_mask} {@code q2:1108-1146} @4.57.6): the image pads
     * (151655) number Σ t·h·w / 4 over {@code image_grid_thw}, the {@code pixel_values} rows Σ t·h·w, each 3·2·p² wide
     * (1176 for patch 14, 1536 for patch 16); in the compact format {@code pixel_values_u8} holds Σ (h·p)(w·p) pixels of 3.
     */
    @Test
    void r6ImagePadsAndPixelRowsAreTheGrids() {
        var widths = new java.util.TreeSet<Long>();
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            String at = at(run, b);
            long[] ids = longs(b, "input_ids"), grid = longs(b, "image_grid_thw");
            long patches = 0, pixels = 0, pads = Arrays.stream(ids).filter(id -> id == IMAGE_PAD).count();
            int p = run.options().vision().patchSize();
            for (int r = 0; r < grid.length; r += 3) {
                patches += grid[r] * grid[r + 1] * grid[r + 2];
                pixels += grid[r + 1] * p * grid[r + 2] * p;
            }
            assertEquals(patches / (MERGE * MERGE), pads, at + ": image pads");
            if (run.options().pixelFormat() == PixelFormat.UINT8) {
                assertArrayEquals(new long[] {pixels, 3}, b.tensor("pixel_values_u8").shape(), at);
            } else {
                long width = 3L * 2 * p * p;
                assertArrayEquals(new long[] {patches, width}, b.tensor("pixel_values").shape(), at);
                widths.add(width);
            }
        }
        assertEquals(new java.util.TreeSet<>(List.of(1176L, 1536L)), widths);
    }

    /**
     * R7 (docs/model-inputs.md §8; {@code masking_utils.py:722-723} @4.57.6, {@code attention_mask == 1} at {@code q2:1049}):
     * {@code attention_mask} is int64 of 0 and 1, equal to {@code input_ids != 151643} but for the dummy image's tokens,
     * which are 0 — one run in sample 0: {@code <|vision_start|>}, its pads, {@code <|vision_end|>}.
     */
    @Test
    void r7AttentionMaskIsNotPaddingButForTheDummy() {
        int dummies = 0;
        for (var e : all()) {
            var run = e.getKey();
            var b = e.getValue();
            String at = at(run, b);
            Tensor mask = b.tensor("attention_mask");
            assertEquals(Tensor.DType.INT64, mask.dtype(), at);
            assertArrayEquals(b.tensor("input_ids").shape(), mask.shape(), at);
            long[] ids = longs(b, "input_ids"), m = mask.toLongs();
            var unattended = new ArrayList<Integer>();
            for (int k = 0; k < ids.length; k++) {
                assertTrue(m[k] == 0 || m[k] == 1, at + ": " + m[k]);
                if (ids[k] != PAD && m[k] == 0) unattended.add(k);
                if (ids[k] == PAD) assertEquals(0, m[k], at + ": padding at " + k);
            }
            if (!hasDummy(run, b)) {
                assertEquals(List.of(), unattended, at + ": attention_mask = input_ids != 151643");
                continue;
            }
            dummies++;
            long[] grid = run.dummyGrid();
            int tokens = (int) (grid[0] * grid[1] * grid[2] / (MERGE * MERGE)) + 2, first = unattended.get(0);
            assertEquals(tokens, unattended.size(), at);
            assertTrue(first + tokens <= length(b), at + ": in sample 0");
            for (int j = 0; j < tokens; j++) {
                assertEquals(first + j, unattended.get(j), at + ": one run");
                assertEquals(j == 0 ? VISION_START : j == tokens - 1 ? VISION_END : IMAGE_PAD, ids[first + j], at);
            }
            assertNotEquals(PAD, ids[first - 1], at + ": right after the sample's last token");
        }
        assertTrue(dummies > 0, "batches with the dummy image");
    }

    /** The contract is part of the job's fingerprint; the default (what every job had before it) leaves the fingerprint as it was. */
    @Test
    void theContractIsPartOfTheFingerprintAndTheDefaultKeepsTheEarlierOne() throws Exception {
        String before = Feeder.encodingText(QWEN25);
        assertFalse(before.contains("inputContract"), before);
        assertTrue(before.endsWith(", truncation=REJECT, textOnly=DUMMY_IMAGE]"), before);
        assertEquals(before.substring(0, before.length() - 1) + ", inputContract=TRANSFORMERS_5_3]", Feeder.encodingText(QWEN25.withInputContract(V5_3)));
        assertEquals(before, Feeder.encodingText(QWEN25.withImageBackend(dev.stoker.image.qwenvl.ImageBackend.PIL)), "PIL keeps the fingerprint");
        assertEquals(before.substring(0, before.length() - 1) + ", imageBackend=TORCHVISION]",
                Feeder.encodingText(QWEN25.withImageBackend(dev.stoker.image.qwenvl.ImageBackend.TORCHVISION)));
        try (var source = new LocalFeedSource(TestDatasets.write(tmp.resolve("fingerprint"), 4, Set.of()), 0);
             var finetune = Feeder.start(FeedConfig.of(FeedMode.CONCURRENT, QWEN25, 1, 2).withWarmUp(0), source, FeederTest.tokenizer);
             var v53 = Feeder.start(FeedConfig.of(FeedMode.CONCURRENT, QWEN25.withInputContract(V5_3), 1, 2).withWarmUp(0), source, FeederTest.tokenizer)) {
            assertNotEquals(finetune.fingerprint(), v53.fingerprint(), "a state never resumes across contracts");
        }
    }
}
