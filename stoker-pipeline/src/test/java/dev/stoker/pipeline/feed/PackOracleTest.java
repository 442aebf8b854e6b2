package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.feed.FeedMetrics;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.batch.PackAssembler;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.pipeline.feed.StoredBatch;
import dev.stoker.encode.batch.TextOnlyBatches;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.text.ChatSample;
import dev.stoker.text.QwenTokenIds;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.text.SampleParser;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The canonical pack against its oracle, on real samples (the vendored photos, the bundled tokenizer, the real encoder):
 * each segment of a pack is, bit for bit, the same sample encoded alone — its input_ids, labels, M-RoPE rows 1–3 (its
 * own (3, L) position_ids), row 0 = 0..L−1, its pixel rows (float32 or compact u8) and its grid rows — the k-th image's
 * rows belong to the k-th vision-start run of input_ids, cu_seqlens/max_seqlen/seg_ids/sample_index agree with the
 * segments, the tail pad and the dummy segment follow their rules; and the zero-copy writer's pack of the same samples is
 * byte for byte the heap pack in the STKB layout, also when a sample fails while its pixels are written.
 * Everything is checked on the layout as a trainer reads it, with expectations built here, not by {@link PackAssembler}.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class PackOracleTest {
    /** {@link TestDatasets}: sample i has no image when i % 7 == 3, two when i % 5 == 1, else one. */
    private static final int SAMPLES = 14;
    private static final int TRUNCATED = 8;
    private static final long PAD = 151643, IGNORE = -100;
    /** The dummy at the test's bounds: white 64×64 → 56×56, grid (1, 4, 4), 4 merged tokens; its M-RoPE alone, spelled out. */
    private static final long[] DUMMY_GRID = TextOnlyBatches.GRID_64_AT_3136;
    private static final long[][] DUMMY_ROPE = {{0, 1, 1, 1, 1, 3}, {0, 1, 1, 2, 2, 3}, {0, 1, 2, 1, 2, 3}};
    private static final int WORLD = 2, RANK = 1;

    static QwenTokenizer tokenizer;

    @TempDir Path tmp;
    @TempDir Path shm;

    @BeforeAll
    static void loadTokenizer() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void closeTokenizer() { tokenizer.close(); }

    /** One pack to check: the data set's samples it holds, in order, the planner's dummy flag, the pad multiple, the policy. */
    record Case(int[] samples, boolean plannedDummy, int padTo, TextOnlyPolicy policy, InputContract contract) {
        Case(int[] samples, boolean plannedDummy, int padTo, TextOnlyPolicy policy) {
            this(samples, plannedDummy, padTo, policy, InputContract.QWEN_VL_FINETUNE);
        }

        String name() { return java.util.Arrays.toString(samples) + " dummy " + plannedDummy + " pad " + padTo + " " + policy + " " + contract; }
    }

    private static final List<Case> CASES = List.of(
            new Case(new int[] {0}, false, 1, TextOnlyPolicy.DUMMY_IMAGE),                 // one sample, one image
            new Case(new int[] {1}, false, 64, TextOnlyPolicy.DUMMY_IMAGE),                // one sample, two images, a tail pad
            new Case(new int[] {3}, true, 1, TextOnlyPolicy.ALLOW),                        // text only: the planner's dummy
            new Case(new int[] {3, 10}, false, 8, TextOnlyPolicy.ALLOW),                   // text only, no dummy: no image at all
            new Case(new int[] {3, 10}, false, 1, TextOnlyPolicy.DUMMY_IMAGE),             // text only: the policy's dummy
            new Case(new int[] {0, 1}, false, 8, TextOnlyPolicy.DUMMY_IMAGE),              // two samples, 1 + 2 images
            new Case(new int[] {2, 3, 4, 5, 6, 7}, true, 64, TextOnlyPolicy.DUMMY_IMAGE),  // several, 0, 1, 2 images; flag moot
            new Case(new int[] {9, 10, 11}, false, 1, TextOnlyPolicy.DUMMY_IMAGE, InputContract.TRANSFORMERS_5_3));

    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void eachSegmentIsItsSampleEncodedAloneAndZeroCopyWritesTheHeapBytes(PixelFormat format) throws Exception {
        var data = Data.write(tmp, Set.of());
        try (var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            for (var c : CASES) {
                var options = FeederTest.OPTIONS.withPixelFormat(format).withTextOnly(c.policy()).withInputContract(c.contract());
                String at = format + " " + c.name();
                var encoder = new SampleEncoder(options, tokenizer);
                var alone = new ArrayList<EncodedSample>();
                for (int i : c.samples()) alone.add(encoder.encode(data.samples.get(i), data.images));
                var scheduled = scheduled(c.samples(), c.plannedDummy());
                Batch heap = new PackAssembler(options, c.padTo()).assemble(scheduled, c.samples(), alone, List.of());
                var heapBytes = layout(heap, options);
                boolean dummy = alone.stream().allMatch(s -> s.images() == 0) && (c.plannedDummy() || c.policy() == TextOnlyPolicy.DUMMY_IMAGE);
                assertPackOf(BatchLayout.read(heapBytes), alone, c.samples(), dummy, c.padTo(), options, at + " heap");

                try (var inPlace = new InPlace(store, options, c.padTo())) {
                    var stored = inPlace.write(scheduled, prepare(encoder, data, c.samples()));
                    assertEquals(0, stored.bytesCopied(), at);
                    assertSameBytes(heapBytes, stored, at);
                    assertEquals(heap.sampleIds(), stored.sampleIds(), at);
                    assertArrayEquals(heap.datasetIndices(), stored.datasetIndices(), at);
                    stored.release();
                }
            }
            assertEquals(0, store.metrics().inUseBytes(), "every pack released");
        }
    }

    /**
     * A sample whose JPEG fails while its pixels are written in place leaves the pack; the rows behind it move down and the
     * pack is the heap pack of the others; a pack left without images gets the planner's dummy, in the object allocated
     * before anyone knew.
     */
    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void aSampleFailingDuringItsPixelsLeavesThePackOfTheOthers(PixelFormat format) throws Exception {
        var data = Data.write(tmp, Set.of(TRUNCATED));
        var options = FeederTest.OPTIONS.withPixelFormat(format).withTextOnly(TextOnlyPolicy.ALLOW);
        var encoder = new SampleEncoder(options, tokenizer);
        assertThrows(SampleException.class, () -> encoder.encode(data.samples.get(TRUNCATED), data.images), "the truncated JPEG fails");
        try (var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            for (var c : List.of(new Case(new int[] {TRUNCATED, 0, 3}, false, 8, TextOnlyPolicy.ALLOW),
                    new Case(new int[] {3, TRUNCATED}, true, 1, TextOnlyPolicy.ALLOW))) {
                String at = format + " " + c.name();
                var scheduled = scheduled(c.samples(), c.plannedDummy());
                var kept = new ArrayList<Integer>();
                var alone = new ArrayList<EncodedSample>();
                for (int i : c.samples())
                    if (i != TRUNCATED) {
                        kept.add(i);
                        alone.add(encoder.encode(data.samples.get(i), data.images));
                    }
                int[] keptIndices = kept.stream().mapToInt(Integer::intValue).toArray();
                var skipped = List.of(new SkippedSample("s" + TRUNCATED, TRUNCATED, SampleException.Stage.DECODE, "truncated"));
                Batch heap = new PackAssembler(options, c.padTo()).assemble(scheduled, keptIndices, alone, skipped);
                var heapBytes = layout(heap, options);
                boolean dummy = alone.stream().allMatch(s -> s.images() == 0) && c.plannedDummy();
                assertPackOf(BatchLayout.read(heapBytes), alone, keptIndices, dummy, c.padTo(), options, at + " heap");
                try (var inPlace = new InPlace(store, options, c.padTo())) {
                    var stored = inPlace.write(scheduled, prepare(encoder, data, c.samples()));
                    assertEquals(1, stored.skipped(), at);
                    assertEquals("s" + TRUNCATED, stored.skippedSamples().getFirst().sampleId(), at);
                    assertEquals(SampleException.Stage.DECODE, stored.skippedSamples().getFirst().stage(), at);
                    if (c.samples()[0] == TRUNCATED) assertTrue(stored.bytesCopied() > 0, at + ": the rows behind it moved down");
                    assertSameBytes(heapBytes, stored, at);
                    stored.release();
                }
            }
            assertEquals(0, store.metrics().inUseBytes());
        }
    }

    // ---- the oracle

    /**
     * {@code b} is the canonical pack of {@code alone} (each encoded by itself; data set indices {@code indices}), with the
     * dummy segment last when {@code dummy}, padded to a multiple of {@code padTo}.
     */
    static void assertPackOf(BatchLayout.Batch b, List<EncodedSample> alone, int[] indices, boolean dummy, int padTo,
                             EncodeOptions options, String at) {
        boolean compact = options.pixelFormat() == PixelFormat.UINT8, mm = options.inputContract().mmTokenTypeIds();
        int images = alone.stream().mapToInt(EncodedSample::images).sum() + (dummy ? 1 : 0);
        // the table: the inputs without attention_mask, then the metadata; empty vision inputs are metadata
        var names = new ArrayList<>(List.of("input_ids", "labels", "position_ids"));
        if (mm) names.add("mm_token_type_ids");
        names.addAll(List.of(compact ? "pixel_values_u8" : "pixel_values", "image_grid_thw", "sample_index", "cu_seqlens", "max_seqlen", "seg_ids"));
        if (compact) names.addAll(List.of("pixel_norm", "pixel_patch"));
        assertEquals(names, b.tensors().stream().map(Tensor::name).toList(), at);
        var inputs = new ArrayList<>(names.subList(0, mm ? 6 : 5));
        if (images == 0) inputs.removeAll(List.of("pixel_values", "pixel_values_u8", "image_grid_thw"));
        assertEquals(inputs, b.inputs().stream().map(Tensor::name).toList(), at + ": the model inputs");
        assertEquals(alone.size(), b.meta().batchSize(), at + ": the header counts samples");

        int n = alone.size() + (dummy ? 1 : 0), dummyTokens = (int) (DUMMY_GRID[1] * DUMMY_GRID[2] / 4) + 2;
        int[] lengths = new int[n];
        for (int i = 0; i < alone.size(); i++) lengths[i] = alone.get(i).length();
        if (dummy) lengths[n - 1] = dummyTokens;
        int real = java.util.Arrays.stream(lengths).sum(), t = (real + padTo - 1) / padTo * padTo;
        assertArrayEquals(new long[] {1, t}, b.tensor("input_ids").shape(), at);
        assertArrayEquals(new long[] {1, t}, b.tensor("labels").shape(), at);
        assertArrayEquals(new long[] {4, 1, t}, b.tensor("position_ids").shape(), at);
        assertArrayEquals(new long[] {1, t}, b.tensor("seg_ids").shape(), at);
        assertEquals(Tensor.DType.INT32, b.tensor("cu_seqlens").dtype(), at);
        assertEquals(Tensor.DType.INT32, b.tensor("max_seqlen").dtype(), at);
        assertEquals(Tensor.DType.INT32, b.tensor("seg_ids").dtype(), at);
        long[] ids = b.tensor("input_ids").toLongs(), labels = b.tensor("labels").toLongs(), pos = b.tensor("position_ids").toLongs();
        int[] seg = b.tensor("seg_ids").toInts(), cu = b.tensor("cu_seqlens").toInts();
        long[] types = mm ? b.tensor("mm_token_type_ids").toLongs() : null;
        long[] grid = b.tensor("image_grid_thw").toLongs();
        var pixels = b.tensor(compact ? "pixel_values_u8" : "pixel_values").data();

        int o = 0, gridRow = 0;
        long pixelAt = 0;
        int maxLength = 0;
        assertEquals(0, cu[0], at);
        for (int i = 0; i < n; i++) {
            boolean isDummy = dummy && i == n - 1;
            String where = at + " segment " + i;
            int len = lengths[i];
            long[] sIds, sLabels, rope;
            if (isDummy) {
                sIds = new long[len];
                java.util.Arrays.fill(sIds, QwenTokenIds.IMAGE_PAD);
                sIds[0] = QwenTokenIds.VISION_START;
                sIds[len - 1] = QwenTokenIds.VISION_END;
                sLabels = new long[len];
                java.util.Arrays.fill(sLabels, IGNORE);
                rope = new long[3 * len];
                for (int r = 0; r < 3; r++) System.arraycopy(DUMMY_ROPE[r], 0, rope, r * len, len);
            } else {
                var s = alone.get(i);
                sIds = s.inputIds();
                sLabels = s.labels();
                rope = s.positionIds();
                assertEquals(IGNORE, sLabels[0], where + ": a sample's first label is −100");
            }
            for (int k = 0; k < len; k++) {
                assertEquals(sIds[k], ids[o + k], where + " input_ids " + k);
                assertEquals(sLabels[k], labels[o + k], where + " labels " + k);
                assertEquals(k, pos[o + k], where + " position row 0 " + k);
                for (int r = 0; r < 3; r++) assertEquals(rope[r * len + k], pos[(r + 1) * t + o + k], where + " M-RoPE row " + r + " at " + k);
                assertEquals(i + 1, seg[o + k], where + " seg_ids " + k);
                if (mm) assertEquals(sIds[k] == QwenTokenIds.IMAGE_PAD ? 1 : 0, types[o + k], where + " mm_token_type_ids " + k);
            }
            // its pixel rows and grid rows, next in the pack's
            long[] sGrid = isDummy ? DUMMY_GRID : alone.get(i).imageGridThw();
            for (int g = 0; g < sGrid.length; g++) assertEquals(sGrid[g], grid[3 * gridRow + g], where + " image_grid_thw");
            gridRow += sGrid.length / 3;
            MemorySegment own;
            if (isDummy) {
                long rows = DUMMY_GRID[0] * DUMMY_GRID[1] * DUMMY_GRID[2];
                long bytes = compact ? rows * 14 * 14 * 3 : rows * options.vision().rowLength() * 4;
                var slice = pixels.asSlice(pixelAt, bytes);
                if (compact) for (byte v : slice.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE)) assertEquals((byte) 255, v, where);
                else TextOnlyBatches.assertWhite(slice.toArray(BatchLayout.FLOAT_LE), options.vision(), where);
                pixelAt += bytes;
            } else {
                var s = alone.get(i);
                own = compact ? MemorySegment.ofArray(s.pixelsU8()) : MemorySegment.ofArray(java.util.Arrays.copyOf(s.pixelValues(), s.pixelFloats()));
                assertEquals(-1, pixels.asSlice(pixelAt, own.byteSize()).mismatch(own), where + ": its pixel rows, bit for bit");
                pixelAt += own.byteSize();
            }
            o += len;
            maxLength = Math.max(maxLength, len);
            assertEquals(o, cu[i + 1], where + " cu_seqlens");
        }
        assertEquals(n + 1, cu.length, at);
        assertEquals(pixels.byteSize(), pixelAt, at + ": no pixel row but the segments'");
        assertEquals(grid.length / 3, gridRow, at);
        assertArrayEquals(new int[] {maxLength}, b.tensor("max_seqlen").toInts(), at);
        long[] index = new long[n];
        for (int i = 0; i < indices.length; i++) index[i] = indices[i];
        if (dummy) index[n - 1] = -1;
        assertArrayEquals(index, b.sampleIndex(), at + ": sample_index, −1 for the dummy");
        for (int k = o; k < t; k++) { // the tail pad
            assertEquals(PAD, ids[k], at + " pad " + k);
            assertEquals(IGNORE, labels[k], at + " pad " + k);
            for (int r = 0; r < 4; r++) assertEquals(k - o, pos[r * t + k], at + " pad position row " + r);
            assertEquals(0, seg[k], at + " pad seg_ids");
            if (mm) assertEquals(0, types[k], at);
        }
        assertVisionRunsFollowImages(ids, grid, seg, alone, dummy, options.vision().mergeSize(), at);
    }

    /**
     * The k-th {@code <|vision_start|>} run of input_ids holds as many image pads as the k-th grid row has merged patches,
     * and lies in the segment that owns the k-th image (pixel rows and grids follow the vision tokens).
     */
    static void assertVisionRunsFollowImages(long[] ids, long[] grid, int[] seg, List<EncodedSample> alone, boolean dummy, int merge, String at) {
        var owner = new ArrayList<Integer>(); // image k → its segment number
        for (int i = 0; i < alone.size(); i++) for (int k = 0; k < alone.get(i).images(); k++) owner.add(i + 1);
        if (dummy) owner.add(alone.size() + 1);
        int k = 0;
        for (int j = 0; j < ids.length; j++) {
            if (ids[j] != QwenTokenIds.VISION_START) continue;
            int pads = 0;
            while (j + 1 + pads < ids.length && ids[j + 1 + pads] == QwenTokenIds.IMAGE_PAD) pads++;
            assertTrue(k < owner.size(), at + ": more vision runs than images");
            assertEquals(grid[3 * k] * grid[3 * k + 1] * grid[3 * k + 2] / ((long) merge * merge), pads, at + ": vision run " + k + " vs grid row " + k);
            assertEquals(owner.get(k), seg[j], at + ": vision run " + k + " is in the segment of image " + k);
            k++;
        }
        assertEquals(owner.size(), k, at + ": one vision run per image");
    }

    // ---- helpers

    /** The data set's parsed samples and where their images are read from. */
    record Data(List<ChatSample> samples, SampleEncoder.ImageSource images) {
        static Data write(Path dir, Set<Integer> truncated) throws Exception {
            Path manifest = TestDatasets.write(dir, SAMPLES, Set.of(), truncated);
            var parser = new SampleParser();
            var samples = new ArrayList<ChatSample>();
            var lines = Files.readAllLines(manifest);
            for (int i = 0; i < lines.size(); i++) samples.add(parser.parseLine(lines.get(i).getBytes(StandardCharsets.UTF_8), "line" + i));
            var source = ObjectSources.open(manifest.toAbsolutePath().toString(), SourceConfig.defaults());
            return new Data(samples, SampleEncoder.ImageSource.blocking(source));
        }
    }

    /** Rank {@value #RANK}'s pack of a step whose plan gives it {@code records} and the dummy flag {@code dummy}. */
    static ScheduledBatch scheduled(int[] records, boolean dummy) {
        var cursor = new ScheduleCursor(0, 40);
        var plan = new PackedStep(cursor, new ScheduleCursor(0, 40 + records.length + 1), 7, new int[][] {{13}, records.clone()},
                new double[WORLD], new int[WORLD], new int[WORLD], new boolean[] {false, dummy}, new int[0], new int[0]);
        var after = new BatchLayout.Resume(0, 40 + records.length + 1, 8, new long[] {0}, new long[] {40 + records.length + 1});
        return new ScheduledBatch(cursor, 7, 7, RANK, records.clone(), after, plan);
    }

    private static List<SampleEncoder.Prepared> prepare(SampleEncoder encoder, Data data, int[] samples) {
        var out = new ArrayList<SampleEncoder.Prepared>();
        for (int i : samples) out.add(encoder.prepare(data.samples.get(i), data.images));
        return out;
    }

    /** The heap batch in the STKB layout, as the socket path hands it over. */
    static MemorySegment layout(Batch b, EncodeOptions options) {
        var prepared = BatchSchema.tensors(b, WORLD, options.vision());
        var dst = Arena.ofAuto().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
        BatchLayout.write(prepared.meta(), prepared.tensors(), dst);
        return dst;
    }

    /** A zero-copy writer in packed mode and its CPU pool; closing it releases what it wrote. */
    static final class InPlace implements AutoCloseable {
        private final CpuPool cpu;
        private final StoredBatchWriter writer;

        InPlace(ShmObjectStore store, EncodeOptions options, int padTo) {
            this.cpu = new CpuPool(2, 64, options, tokenizer);
            this.writer = new StoredBatchWriter(store, cpu, new FeedMetrics(), WORLD, 0, options, padTo);
        }

        /** The pack of {@code prepared} (the samples of {@code scheduled}, in order) written in place. */
        StoredBatch write(ScheduledBatch scheduled, List<SampleEncoder.Prepared> prepared) throws Exception {
            var group = new ArrayList<SamplePipeline.Outcome>();
            for (int i = 0; i < prepared.size(); i++) group.add(new SamplePipeline.Ready(new SamplePipeline.Slot(scheduled, i), prepared.get(i)));
            var allocated = writer.allocate(scheduled, group).get(60, TimeUnit.SECONDS);
            return writer.fill(allocated).get(60, TimeUnit.SECONDS);
        }

        @Override
        public void close() {
            writer.close();
            cpu.close();
        }
    }

    static void assertSameBytes(MemorySegment heap, StoredBatch stored, String at) {
        assertEquals(heap.byteSize(), stored.sizeBytes(), at + ": the same size");
        var bytes = stored.object().segment().asSlice(0, stored.sizeBytes());
        long mismatch = bytes.mismatch(heap);
        assertEquals(-1, mismatch, at + ": zero-copy and heap packs differ at byte " + mismatch);
    }
}
