package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

@Timeout(60)
class BatchAssemblerTest {
    private static final long P = 151643;
    private static final long I = -100;

    private static long[] positions(int base, int n) {
        long[] p = new long[3 * n];
        for (int c = 0; c < 3; c++) for (int l = 0; l < n; l++) p[c * n + l] = base + 10 * c + l;
        return p;
    }

    private static final EncodedSample S0 = new EncodedSample("s0", new long[] {10, 151655, 12}, new long[] {I, I, 12},
            new long[] {1, 1, 1}, positions(0, 3), new float[] {1, 2, 3, 4, 5, 6, 7, 8}, 4, new long[] {1, 2, 1}, 100);
    /** Holds a literal <|endoftext|> inside its text, which the official collator masks too. */
    private static final EncodedSample S1 = new EncodedSample("s1", new long[] {20, 21, 22, P, 24}, new long[] {I, I, 22, I, 24},
            new long[] {1, 1, 1, 1, 1}, positions(100, 5), new float[0], 4, new long[0], 0);
    private static final EncodedSample S2 = new EncodedSample("s2", new long[] {30}, new long[] {30},
            new long[] {1}, positions(200, 1), new float[] {9, 10, 11, 12}, 4, new long[] {1, 1, 1}, 50);

    private static ScheduledBatch scheduled(int size) {
        return new ScheduledBatch(new ScheduleCursor(2, 16), 4, 9, 1, new int[size]);
    }

    @Test
    void padsLikeTheOfficialCollator() {
        var skipped = new SkippedSample("s9", 9, SampleException.Stage.DECODE, "truncated");
        var b = new BatchAssembler().assemble(scheduled(4), new int[] {7, 3, 5}, List.of(S0, S1, S2), List.of(skipped));
        assertEquals(3, b.samples());
        assertEquals(5, b.length());
        assertEquals(4, b.scheduled());
        assertEquals(1, b.skipped());
        assertEquals(List.of(skipped), b.skippedSamples());
        assertEquals(List.of("s0", "s1", "s2"), b.sampleIds());
        assertArrayEquals(new int[] {7, 3, 5}, b.datasetIndices());
        assertEquals(2, b.epoch());
        assertEquals(4, b.step());
        assertEquals(9, b.globalStep());
        assertEquals(1, b.rank());
        assertArrayEquals(new long[] {10, 151655, 12, P, P, 20, 21, 22, P, 24, 30, P, P, P, P}, b.inputIds());
        assertArrayEquals(new long[] {I, I, 12, I, I, I, I, 22, I, 24, 30, I, I, I, I}, b.labels());
        assertArrayEquals(new long[] {1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0}, b.attentionMask());
        assertArrayEquals(new long[] {
                0, 1, 2, 1, 1, 100, 101, 102, 103, 104, 200, 1, 1, 1, 1,
                10, 11, 12, 1, 1, 110, 111, 112, 113, 114, 210, 1, 1, 1, 1,
                20, 21, 22, 1, 1, 120, 121, 122, 123, 124, 220, 1, 1, 1, 1}, b.positionIds());
        assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b.pixelValues());
        assertArrayEquals(new long[] {1, 2, 1, 1, 1, 1}, b.imageGridThw());
        assertEquals(new BatchShape(3, 5, 3, 4, 2), b.shape());
        // the STKB layout: a 64-byte header, 7 descriptors of 128 (960) and the resume block (1056: 2048 in all, aligned), then
        // each tensor at a 64-aligned offset:
        // input_ids, labels, attention_mask 120 → 128 each, position_ids 360 → 384, pixel_values 48, image_grid_thw 48,
        // sample_index 24 → 64 each
        assertEquals(2048 + 3 * 128 + 384 + 3 * 64, b.sizeBytes());
    }

    @Test
    void allSamplesFailedGivesAnEmptyBatch() {
        var gone = List.of(new SkippedSample("a", 0, SampleException.Stage.FETCH, "404"), new SkippedSample("b", 1, SampleException.Stage.MANIFEST, "bad JSON"));
        var b = new BatchAssembler().assemble(scheduled(2), new int[0], List.of(), gone);
        assertEquals(0, b.samples());
        assertEquals(0, b.length());
        assertEquals(2, b.skipped());
        assertEquals(0, b.inputIds().length);
        assertEquals(0, b.positionIds().length);
        assertEquals(0, b.pixelValues().length);
        assertEquals(2048, b.sizeBytes(), "the header, descriptors and resume block of seven empty tensors");
    }

    /** Qwen2.5-VL at 3136…50176 pixels: a white 64×64 image becomes 56×56, 4×4 patches, 4 tokens (6 with start and end). */
    private static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176);
    private static final long VS = 151652, IP = 151655, VE = 151653;

    /** A sample in {@code format} without images. */
    private static EncodedSample text(String id, long[] ids, long[] labels, int base, PixelFormat format) {
        return new EncodedSample(id, ids, labels, new long[ids.length], positions(base, ids.length), new float[0], 1176, new long[0], 0,
                format == PixelFormat.UINT8 ? new byte[0] : null);
    }

    /** With the torchvision image backend the dummy is that processor's white image (its fused normalize). */
    @org.junit.jupiter.api.Test
    void theDummyImageFollowsTheImageBackend() {
        var options = OPTIONS.withImageBackend(dev.stoker.image.qwenvl.ImageBackend.TORCHVISION);
        var samples = List.of(text("t0", new long[] {10, 11, 12}, new long[] {I, I, 12}, 0, PixelFormat.FLOAT32));
        var batch = new BatchAssembler(options).assemble(scheduled(1), new int[] {0}, samples, List.of());
        float[] table = dev.stoker.image.qwenvl.PatchWriter.fusedNormalizationTable(options.vision());
        float[] pixels = batch.pixelValues();
        int row = options.vision().rowLength(), perChannel = row / 3;
        assertTrue(pixels.length > 0 && pixels.length % row == 0);
        boolean differsFromPil = false;
        float[] pil = dev.stoker.image.qwenvl.PatchWriter.normalizationTable(options.vision());
        for (int k = 0; k < pixels.length; k++) {
            int c = (k % row) / perChannel;
            assertEquals(Float.floatToRawIntBits(table[c * 256 + 255]), Float.floatToRawIntBits(pixels[k]), "value " + k);
            differsFromPil |= pil[c * 256 + 255] != pixels[k];
        }
        assertTrue(differsFromPil, "the fused normalize of a white pixel should differ from PIL's in some channel");
    }

    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void aBatchWithoutImagesGetsTheDummyImageAfterItsFirstSample(PixelFormat format) {
        var options = OPTIONS.withPixelFormat(format);
        assertEquals(TextOnlyPolicy.DUMMY_IMAGE, options.textOnly(), "the default");
        var samples = List.of(text("t0", new long[] {10, 11, 12}, new long[] {I, I, 12}, 0, format),
                text("t1", new long[] {20, 21, 22, P, 24}, new long[] {I, I, 22, I, 24}, 100, format));
        var skipped = new SkippedSample("s9", 9, SampleException.Stage.DECODE, "truncated");
        var allow = new BatchAssembler(options.withTextOnly(TextOnlyPolicy.ALLOW)).assemble(scheduled(3), new int[] {7, 3}, samples, List.of(skipped));
        var dummy = new BatchAssembler(options).assemble(scheduled(3), new int[] {7, 3}, samples, List.of(skipped));
        assertEquals(0, allow.shape().images());
        assertEquals(0, allow.shape().pixelRows());
        assertTrue(TextOnlyBatches.assertDummyOf(allow, dummy, options.vision(), TextOnlyBatches.GRID_64_AT_3136, format.toString()));
        // spelled out: 3 + 6 tokens in row 0, the second sample padded to 9
        assertArrayEquals(new long[] {10, 11, 12, VS, IP, IP, IP, IP, VE, 20, 21, 22, P, 24, P, P, P, P}, dummy.inputIds());
        assertArrayEquals(new long[] {I, I, 12, I, I, I, I, I, I, I, I, 22, I, 24, I, I, I, I}, dummy.labels());
        assertArrayEquals(new long[] {1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0}, dummy.attentionMask());
        assertArrayEquals(new long[] {
                0, 1, 2, 1, 1, 1, 1, 1, 1, 100, 101, 102, 103, 104, 1, 1, 1, 1,
                10, 11, 12, 1, 1, 1, 1, 1, 1, 110, 111, 112, 113, 114, 1, 1, 1, 1,
                20, 21, 22, 1, 1, 1, 1, 1, 1, 120, 121, 122, 123, 124, 1, 1, 1, 1}, dummy.positionIds());
        assertEquals(List.of("t0", "t1"), dummy.sampleIds());
        assertEquals(2, dummy.samples());
        assertEquals(3, dummy.scheduled());
        assertEquals(1, dummy.skipped());
        // the image through the job's own transform, in the batch's format
        var expected = DummyImage.of(options.vision());
        assertArrayEquals(format == PixelFormat.UINT8 ? new float[0] : expected.pixelValues(), dummy.pixelValues());
        if (format == PixelFormat.UINT8) assertArrayEquals(expected.pixelsU8(), dummy.pixelsU8());
    }

    /**
     * transformers 5.3 and later (docs/model-inputs.md §7): the dummy batch above with position_ids padded with 0, the
     * dummy's tokens included, and mm_token_type_ids after position_ids, 1 at every image pad (the dummy's too), spelled out.
     */
    @Test
    void underTransformers53PaddingPositionsAreZeroAndImagePadsAreTypeOne() {
        var options = OPTIONS.withInputContract(EncodeOptions.InputContract.TRANSFORMERS_5_3);
        var samples = List.of(text("t0", new long[] {10, 11, 12}, new long[] {I, I, 12}, 0, PixelFormat.FLOAT32),
                text("t1", new long[] {20, 21, 22, P, 24}, new long[] {I, I, 22, I, 24}, 100, PixelFormat.FLOAT32));
        var b = new BatchAssembler(options).assemble(scheduled(2), new int[] {7, 3}, samples, List.of());
        assertArrayEquals(new long[] {10, 11, 12, VS, IP, IP, IP, IP, VE, 20, 21, 22, P, 24, P, P, P, P}, b.inputIds());
        assertArrayEquals(new long[] {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, b.mmTokenTypeIds());
        assertArrayEquals(new long[] {
                0, 1, 2, 0, 0, 0, 0, 0, 0, 100, 101, 102, 103, 104, 0, 0, 0, 0,
                10, 11, 12, 0, 0, 0, 0, 0, 0, 110, 111, 112, 113, 114, 0, 0, 0, 0,
                20, 21, 22, 0, 0, 0, 0, 0, 0, 120, 121, 122, 123, 124, 0, 0, 0, 0}, b.positionIds());
        var laid = BatchSchema.tensors(b, 1, options.vision()).tensors();
        assertEquals(List.of("input_ids", "labels", "attention_mask", "position_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw",
                "sample_index"), laid.stream().map(dev.stoker.core.batch.Tensor::name).toList());
        assertArrayEquals(b.mmTokenTypeIds(), laid.get(4).toLongs());
        assertEquals(BatchSchema.plan(b.shape(), options.vision().rowLength()).totalBytes(), b.sizeBytes(), "the shape plans mm_token_type_ids");
        assertTrue(b.sizeBytes() > new BatchAssembler(OPTIONS).assemble(scheduled(2), new int[] {7, 3}, samples, List.of()).sizeBytes());
        assertNull(new BatchAssembler(OPTIONS).assemble(scheduled(2), new int[] {7, 3}, samples, List.of()).mmTokenTypeIds(),
                "none under the official contract");
    }

    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void aBatchWithAnImageOrWithoutSamplesIsTheSameUnderEitherPolicy(PixelFormat format) {
        var options = OPTIONS.withPixelFormat(format);
        var image = new EncodedSample("i", new long[] {30, IP, 32}, new long[] {I, I, 32}, new long[3], positions(0, 3),
                format == PixelFormat.UINT8 ? new float[0] : new float[4 * 1176], 1176, new long[] {1, 2, 2}, 28 * 28,
                format == PixelFormat.UINT8 ? new byte[28 * 28 * 3] : null);
        var samples = List.of(text("t", new long[] {10, 11}, new long[] {I, 11}, 0, format), image);
        var allow = new BatchAssembler(options.withTextOnly(TextOnlyPolicy.ALLOW)).assemble(scheduled(2), new int[] {1, 2}, samples, List.of());
        var dummy = new BatchAssembler(options).assemble(scheduled(2), new int[] {1, 2}, samples, List.of());
        assertTrue(!TextOnlyBatches.assertDummyOf(allow, dummy, options.vision(), TextOnlyBatches.GRID_64_AT_3136, "with an image"));
        var gone = List.of(new SkippedSample("a", 0, SampleException.Stage.FETCH, "404"));
        var empty = new BatchAssembler(options).assemble(scheduled(1), new int[0], List.of(), gone);
        assertEquals(0, empty.samples());
        assertEquals(0, empty.shape().images(), "no sample, no row for the dummy: the batch stays empty");
    }

    @Test
    void refusesMismatchedRowLengthsAndCounts() {
        var other = new EncodedSample("x", new long[] {1}, new long[] {1}, new long[] {1}, positions(0, 1),
                new float[6], 6, new long[] {1, 1, 1}, 1);
        var a = new BatchAssembler();
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(2), new int[2], List.of(S0, other), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(2), new int[1], List.of(S0, S2), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(1), new int[2], List.of(S0, S2), List.of()));
        assertThrows(IllegalArgumentException.class, () -> a.assemble(scheduled(3), new int[2], List.of(S0, S2), List.of()));
    }
}
