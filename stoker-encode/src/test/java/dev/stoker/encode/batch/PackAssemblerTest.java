package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.lang.foreign.Arena;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The canonical pack spelled out on small hand-made samples (docs/protocol.md "The canonical pack"): the row, its four
 * position rows, the tail pad, the dummy segment, the metadata and the layout's table. Real samples encoded alone are
 * the oracle of {@code PackOracleTest}.
 */
@Timeout(60)
class PackAssemblerTest {
    private static final long P = BatchAssembler.PAD_TOKEN_ID, I = BatchAssembler.IGNORE_INDEX;
    private static final long VS = 151652, IP = 151655, VE = 151653;
    /** Qwen2.5-VL at 3136…50176 pixels: the dummy (white 64×64) becomes 56×56, grid (1, 4, 4), 4 tokens (6 with start and end). */
    private static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176);
    private static final int ROW = 1176;

    /** Rows r0, r1, r2 of a sample's (3, L) M-RoPE: base + 10·row + position, so that every row differs. */
    private static long[] rope(int base, int n) {
        long[] p = new long[3 * n];
        for (int c = 0; c < 3; c++) for (int l = 0; l < n; l++) p[c * n + l] = base + 10 * c + l;
        return p;
    }

    /** A sample with one image of grid (1, 2, 2): 4 rows of 1176 floats, each holding its row number + 1000·{@code tag}. */
    private static EncodedSample image(String id, long[] ids, long[] labels, int base, int tag) {
        float[] pixels = new float[4 * ROW];
        for (int k = 0; k < pixels.length; k++) pixels[k] = 1000 * tag + k / ROW;
        return new EncodedSample(id, ids, labels, new long[ids.length], rope(base, ids.length), pixels, ROW, new long[] {1, 2, 2}, 28 * 28);
    }

    private static EncodedSample text(String id, long[] ids, long[] labels, int base) {
        return new EncodedSample(id, ids, labels, new long[ids.length], rope(base, ids.length), new float[0], ROW, new long[0], 0);
    }

    private static final EncodedSample A = image("a", new long[] {10, VS, IP, VE}, new long[] {I, I, I, 13}, 0, 1);
    private static final EncodedSample B = text("b", new long[] {20, 21, 22, P, 24}, new long[] {I, 21, 22, I, 24}, 100);
    private static final EncodedSample C = text("c", new long[] {30, 31}, new long[] {I, 31}, 200);

    private static ScheduledBatch scheduled(int size, boolean dummy) {
        var cursor = new ScheduleCursor(2, 16);
        var plan = new PackedStep(cursor, new ScheduleCursor(2, 30), 9, new int[][] {new int[0], new int[size]}, new double[2],
                new int[2], new int[2], new boolean[] {false, dummy}, new int[0], new int[0]);
        return new ScheduledBatch(cursor, 4, 9, 1, new int[size], null, plan);
    }

    @Test
    void aPackIsOneRowOfWholeSamplesWithPerSegmentPositionsAndATailPad() {
        var skipped = new SkippedSample("s9", 9, SampleException.Stage.DECODE, "truncated");
        var b = new PackAssembler(OPTIONS, 8).assemble(scheduled(3, false), new int[] {7, 3}, List.of(A, B), List.of(skipped));
        assertTrue(b.shape().packed());
        assertEquals(2, b.samples());
        assertEquals(2, b.shape().segments());
        assertEquals(3, b.scheduled());
        assertEquals(List.of("a", "b"), b.sampleIds());
        assertEquals(16, b.length(), "4 + 5 = 9 tokens padded to a multiple of 8");
        assertArrayEquals(new long[] {10, VS, IP, VE, 20, 21, 22, P, 24, P, P, P, P, P, P, P}, b.inputIds());
        assertArrayEquals(new long[] {I, I, I, 13, I, 21, 22, I, 24, I, I, I, I, I, I, I}, b.labels());
        assertNull(b.attentionMask(), "a pack has no attention_mask");
        assertArrayEquals(new long[] {
                0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6,               // row 0: per segment, then over the pad
                0, 1, 2, 3, 100, 101, 102, 103, 104, 0, 1, 2, 3, 4, 5, 6,     // rows 1-3: each sample's own three rows
                10, 11, 12, 13, 110, 111, 112, 113, 114, 0, 1, 2, 3, 4, 5, 6,
                20, 21, 22, 23, 120, 121, 122, 123, 124, 0, 1, 2, 3, 4, 5, 6}, b.positionIds());
        assertArrayEquals(new int[] {0, 4, 9}, b.cuSeqlens(), "the tail pad is no segment");
        assertEquals(5, b.maxSeqlen());
        assertArrayEquals(new int[] {1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, b.segIds());
        assertArrayEquals(new long[] {7, 3}, b.sampleIndex());
        assertArrayEquals(A.pixelValues(), b.pixelValues());
        assertArrayEquals(new long[] {1, 2, 2}, b.imageGridThw());

        var laid = layoutOf(b);
        assertEquals(List.of("input_ids", "labels", "position_ids", "pixel_values", "image_grid_thw", "sample_index", "cu_seqlens",
                "max_seqlen", "seg_ids"), laid.tensors().stream().map(Tensor::name).toList());
        assertEquals(List.of("input_ids", "labels", "position_ids", "pixel_values", "image_grid_thw"),
                laid.inputs().stream().map(Tensor::name).toList());
        assertArrayEquals(new long[] {1, 16}, laid.tensor("input_ids").shape());
        assertArrayEquals(new long[] {4, 1, 16}, laid.tensor("position_ids").shape());
        assertEquals(Tensor.DType.INT32, laid.tensor("cu_seqlens").dtype());
        assertArrayEquals(new int[] {0, 4, 9}, laid.tensor("cu_seqlens").toInts());
        assertArrayEquals(new int[] {5}, laid.tensor("max_seqlen").toInts());
        assertArrayEquals(b.segIds(), laid.tensor("seg_ids").toInts());
        assertArrayEquals(new long[] {1, 16}, laid.tensor("seg_ids").shape());
        assertArrayEquals(new long[] {7, 3}, laid.sampleIndex());
        assertEquals(2, laid.meta().batchSize());
        assertEquals(3, laid.meta().scheduled());
        assertEquals(b.sizeBytes(), laid.totalBytes(), "the shape plans the pack's layout");
    }

    @Test
    void withoutPadEveryTokenIsASamplesAndUnder53MmTokenTypesFollowTheIds() {
        var options = OPTIONS.withInputContract(EncodeOptions.InputContract.TRANSFORMERS_5_3);
        var b = new PackAssembler(options, 1).assemble(scheduled(3, false), new int[] {1, 2, 3}, List.of(C, A, B), List.of());
        assertEquals(11, b.length());
        assertArrayEquals(new long[] {30, 31, 10, VS, IP, VE, 20, 21, 22, P, 24}, b.inputIds());
        assertArrayEquals(new int[] {0, 2, 6, 11}, b.cuSeqlens());
        assertArrayEquals(new long[] {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, b.mmTokenTypeIds());
        var laid = layoutOf(b);
        assertEquals(List.of("input_ids", "labels", "position_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw",
                "sample_index", "cu_seqlens", "max_seqlen", "seg_ids"), laid.tensors().stream().map(Tensor::name).toList());
        assertArrayEquals(b.mmTokenTypeIds(), laid.tensor("mm_token_type_ids").toLongs());
    }

    /**
     * The dummy segment, spelled out: white 64×64 → grid (1, 4, 4) → merged 2×2: {@code <|vision_start|>}, 4 pads,
     * {@code <|vision_end|>}; its M-RoPE alone: start at 0, the pads at 1 + (t, h, w), the end at 1 + max(1, 2, 2) = 3.
     */
    @Test
    void aPackWithoutImagesGetsTheDummySegmentLastWhenThePlannerSaysSo() {
        var allow = OPTIONS.withTextOnly(TextOnlyPolicy.ALLOW);
        var b = new PackAssembler(allow, 1).assemble(scheduled(2, true), new int[] {4, 5}, List.of(B, C), List.of());
        assertEquals(2, b.samples(), "the dummy is not a sample");
        assertEquals(3, b.shape().segments());
        assertArrayEquals(new long[] {20, 21, 22, P, 24, 30, 31, VS, IP, IP, IP, IP, VE}, b.inputIds());
        assertArrayEquals(new long[] {I, 21, 22, I, 24, I, 31, I, I, I, I, I, I}, b.labels());
        assertArrayEquals(new long[] {
                0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 5,
                100, 101, 102, 103, 104, 200, 201, 0, 1, 1, 1, 1, 3,
                110, 111, 112, 113, 114, 210, 211, 0, 1, 1, 2, 2, 3,
                120, 121, 122, 123, 124, 220, 221, 0, 1, 2, 1, 2, 3}, b.positionIds());
        assertArrayEquals(new int[] {0, 5, 7, 13}, b.cuSeqlens());
        assertEquals(6, b.maxSeqlen());
        assertArrayEquals(new long[] {4, 5, PackAssembler.DUMMY_SAMPLE_INDEX}, b.sampleIndex());
        assertArrayEquals(new long[] {1, 4, 4}, b.imageGridThw());
        TextOnlyBatches.assertWhite(b.pixelValues(), allow.vision(), "the dummy's pixels");
        assertEquals(16 * ROW, b.pixelValues().length);
        var laid = layoutOf(b);
        assertArrayEquals(new long[] {4, 5, -1}, laid.sampleIndex());
        assertArrayEquals(new long[] {3}, laid.tensor("sample_index").shape());
        assertTrue(laid.inputs().stream().anyMatch(t -> t.name().equals("pixel_values")), "the dummy's pixels are a model input");
        assertEquals(2, laid.meta().batchSize(), "the header counts samples, not the dummy segment");

        // without the planner's word, under ALLOW: no dummy, the empty vision tensors are metadata (as a padded batch's)
        var plain = new PackAssembler(allow, 1).assemble(scheduled(2, false), new int[] {4, 5}, List.of(B, C), List.of());
        assertEquals(2, plain.shape().segments());
        assertEquals(0, plain.shape().images());
        assertArrayEquals(new int[] {0, 5, 7}, plain.cuSeqlens());
        var plainLaid = layoutOf(plain);
        assertEquals(List.of("input_ids", "labels", "position_ids"), plainLaid.inputs().stream().map(Tensor::name).toList());
        assertTrue(plainLaid.metadata().stream().map(Tensor::name).toList().containsAll(List.of("pixel_values", "image_grid_thw")));
        // under DUMMY_IMAGE a pack without images gets it whatever the planner said, as an unpacked batch does
        var byPolicy = new PackAssembler(OPTIONS, 1).assemble(scheduled(2, false), new int[] {4, 5}, List.of(B, C), List.of());
        assertArrayEquals(b.inputIds(), byPolicy.inputIds());
        assertArrayEquals(b.positionIds(), byPolicy.positionIds());
        // a pack with an image needs none, whatever the flag
        var withImage = new PackAssembler(OPTIONS, 1).assemble(scheduled(2, true), new int[] {4, 5}, List.of(B, A), List.of());
        assertEquals(2, withImage.shape().segments());
        assertArrayEquals(new long[] {1, 2, 2}, withImage.imageGridThw());
    }

    @Test
    void theDummyInTheCompactFormatIsItsWhiteBytes() {
        var u8 = OPTIONS.withPixelFormat(PixelFormat.UINT8);
        var b1 = new EncodedSample("b", B.inputIds(), B.labels(), B.attentionMask(), B.positionIds(), new float[0], ROW, new long[0], 0, new byte[0]);
        var b = new PackAssembler(u8, 1).assemble(scheduled(1, true), new int[] {4}, List.of(b1), List.of());
        assertEquals(56 * 56 * 3, b.pixelsU8().length);
        for (byte v : b.pixelsU8()) assertEquals((byte) 255, v);
        var laid = layoutOf(b);
        assertEquals(List.of("input_ids", "labels", "position_ids", "pixel_values_u8", "image_grid_thw", "sample_index", "cu_seqlens",
                "max_seqlen", "seg_ids", "pixel_norm", "pixel_patch"), laid.tensors().stream().map(Tensor::name).toList());
    }

    @Test
    void aSegmentWhoseFirstLabelIsSupervisedIsRefusedByName() {
        var bad = text("leaky", new long[] {40, 41}, new long[] {40, 41}, 0);
        var e = assertThrows(IllegalArgumentException.class,
                () -> new PackAssembler(OPTIONS, 1).assemble(scheduled(2, false), new int[] {1, 2}, List.of(B, bad), List.of()));
        assertTrue(e.getMessage().contains("sample leaky") && e.getMessage().contains("first label is 40"), e.getMessage());
        var odd = new EncodedSample("odd", new long[] {1, 2}, new long[] {I}, new long[2], rope(0, 2), new float[0], ROW, new long[0], 0);
        assertThrows(IllegalArgumentException.class,
                () -> new PackAssembler(OPTIONS, 1).assemble(scheduled(1, false), new int[] {1}, List.of(odd), List.of()));
        assertThrows(IllegalArgumentException.class, () -> new PackAssembler(OPTIONS, 0));
        assertThrows(IllegalArgumentException.class,
                () -> new PackAssembler(OPTIONS, 1).assemble(scheduled(3, false), new int[] {1}, List.of(B), List.of()));
    }

    @Test
    void aPackWhoseSamplesAllFailedIsEmpty() {
        var gone = List.of(new SkippedSample("a", 0, SampleException.Stage.FETCH, "404"));
        var b = new PackAssembler(OPTIONS, 64).assemble(scheduled(1, true), new int[0], List.of(), gone);
        assertEquals(0, b.length());
        assertEquals(0, b.shape().segments(), "no sample, no row for the dummy");
        assertArrayEquals(new int[] {0}, b.cuSeqlens());
        assertEquals(0, b.maxSeqlen());
        assertEquals(0, layoutOf(b).tensor("seg_ids").toInts().length);
    }

    /** The bound for sizing shared memory holds a pack that fills N with image tokens, pad and dummy reserve included. */
    @Test
    void theLargestPackBoundHoldsAFullPack() {
        int n = 64;
        // one sample of 64 tokens: text, start, 60 image pads (grid 1×2×120: 240 rows), end, text
        long[] ids = new long[n];
        Arrays.fill(ids, IP);
        ids[0] = 1;
        ids[1] = VS;
        ids[62] = VE;
        ids[63] = 2;
        long[] labels = new long[n];
        Arrays.fill(labels, I);
        var full = new EncodedSample("full", ids, labels, new long[n], rope(0, n), new float[240 * ROW], ROW, new long[] {1, 2, 120}, 0);
        for (var format : PixelFormat.values()) {
            var options = OPTIONS.withPixelFormat(format);
            var sample = format == PixelFormat.UINT8
                    ? new EncodedSample("full", ids, labels, new long[n], rope(0, n), new float[0], ROW, new long[] {1, 2, 120}, 0,
                    new byte[240 * 14 * 14 * 3])
                    : full;
            for (int pad : new int[] {1, 64}) {
                long bound = PackAssembler.largestPackBytes(options, n, 0, pad);
                var b = new PackAssembler(options, pad).assemble(scheduled(1, false), new int[] {0}, List.of(sample), List.of());
                assertTrue(b.sizeBytes() <= bound, format + " pad " + pad + ": " + b.sizeBytes() + " > " + bound);
                assertTrue(PackAssembler.largestPackBytes(options, n, 100, pad) < bound, "a patch budget lowers the bound");
            }
        }
    }

    /**
     * With video in the compact format the bound holds a pack that fills N with video tokens: a video row is two frames of
     * its patch, so the frames take twice an image's bytes per row (grid 2×2×60: 240 rows, 4 frames of 28×840).
     */
    @Test
    void theLargestPackBoundHoldsAFullCompactVideoPack() {
        int n = 64;
        long[] ids = new long[n];
        Arrays.fill(ids, VP);
        ids[0] = 1;
        ids[1] = VS;
        ids[62] = VE;
        ids[63] = 2;
        long[] labels = new long[n];
        Arrays.fill(labels, I);
        var options = OPTIONS.withPixelFormat(PixelFormat.UINT8).withVideo(dev.stoker.encode.video.VideoEncoding.defaults());
        var v = new dev.stoker.encode.video.VideoTensors(new float[0], ROW, new long[] {2, 2, 60}, new float[] {1}, new long[] {0, 1, 2, 3},
                new byte[4 * 28 * 840 * 3], new long[] {4});
        var sample = new EncodedSample("v", ids, labels, new long[n], rope(0, n), new float[0], ROW, new long[0], 0, new byte[0], v);
        for (int pad : new int[] {1, 64}) {
            long bound = PackAssembler.largestPackBytes(options, n, 0, pad);
            var b = new PackAssembler(options, pad).assemble(scheduled(1, false), new int[] {0}, List.of(sample), List.of());
            assertEquals(4L * 28 * 840 * 3, b.shape().videos().u8Bytes());
            assertTrue(b.sizeBytes() <= bound, "pad " + pad + ": " + b.sizeBytes() + " > " + bound);
        }
    }

    /** The batch as a trainer reads it: written in the STKB layout and parsed back. */
    static BatchLayout.Batch layoutOf(Batch b) {
        var prepared = BatchSchema.tensors(b, 2, OPTIONS.vision());
        var dst = Arena.ofAuto().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
        BatchLayout.write(prepared.meta(), prepared.tensors(), dst);
        return BatchLayout.read(dst);
    }

    private static final long VP = 151656;

    /** A sample with one video of grid (2, 2, 2): 8 rows of 1176 floats, each its row number + 1000·{@code tag}; 2 s per grid step. */
    private static EncodedSample video(String id, long[] ids, long[] labels, int base, int tag) {
        float[] pixels = new float[8 * ROW];
        for (int k = 0; k < pixels.length; k++) pixels[k] = 1000 * tag + k / ROW;
        var v = new dev.stoker.encode.video.VideoTensors(pixels, ROW, new long[] {2, 2, 2}, new float[] {tag}, new long[] {0, 1, 2, 3});
        return new EncodedSample(id, ids, labels, new long[ids.length], rope(base, ids.length), new float[0], ROW, new long[0], 0, null, v);
    }

    /**
     * Videos in a pack and in a padded batch (issue 29): their rows, grids and {@code second_per_grid_ts} in segment order, as
     * model inputs of the layout; a pack holding a video and no image gets no dummy image though the planner asked for one;
     * a batch without any video carries no video tensor.
     */
    @Test
    void videosGoInSegmentOrderAndTakeTheDummysPlace() {
        var v1 = video("v1", new long[] {40, VS, VP, VP, VE}, new long[] {I, I, I, I, 44}, 300, 1);
        var v2 = video("v2", new long[] {50, VS, VP, VP, VE}, new long[] {I, I, I, I, 54}, 400, 2);
        var options = OPTIONS.withVideo(dev.stoker.encode.video.VideoEncoding.defaults());
        var pack = new PackAssembler(options, 1).assemble(scheduled(3, true), new int[] {1, 2, 3}, List.of(v1, B, v2), List.of());
        assertEquals(3, pack.shape().segments(), "no dummy segment: the videos run the vision tower");
        assertEquals(new BatchShape.Videos(16, 2, true), pack.shape().videos());
        assertArrayEquals(new long[] {2, 2, 2, 2, 2, 2}, pack.videos().videoGridThw());
        assertArrayEquals(new float[] {1, 2}, pack.videos().secondPerGridTs());
        assertEquals(1000f, pack.videos().pixelValuesVideos()[0]);
        assertEquals(2007f, pack.videos().pixelValuesVideos()[16 * ROW - 1], "v2's last row last");
        var laid = BatchLayout.read(layout(pack));
        assertEquals(List.of("input_ids", "labels", "position_ids", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts"),
                laid.inputs().stream().map(Tensor::name).toList(), "no image: pixel_values and image_grid_thw are metadata");
        assertArrayEquals(new long[] {16, ROW}, laid.tensor("pixel_values_videos").shape());

        var padded = new BatchAssembler(options).assemble(scheduled(2, false), new int[] {1, 2}, List.of(v1, A), List.of());
        assertEquals(new BatchShape.Videos(8, 1, true), padded.shape().videos());
        assertEquals(1, padded.shape().images(), "A's image, no dummy");
        var none = new BatchAssembler(options).assemble(scheduled(2, false), new int[] {1, 2}, List.of(B, C), List.of());
        assertNull(none.videos());
        assertTrue(BatchLayout.read(layout(none)).tensors().stream().noneMatch(t -> t.name().contains("video")), "no video tensor");
    }

    /** A heap batch written into a segment as the socket path writes it. */
    private static java.lang.foreign.MemorySegment layout(Batch b) {
        var prepared = BatchSchema.tensors(b, 1, OPTIONS.vision());
        var seg = Arena.ofAuto().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
        BatchLayout.write(prepared.meta(), prepared.tensors(), seg);
        return seg;
    }
}
