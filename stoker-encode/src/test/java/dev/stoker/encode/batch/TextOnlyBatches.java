package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.stoker.core.VisionConfig;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.text.QwenTokenIds;

/**
 * What a batch under the text-only policy DUMMY_IMAGE must be, checked against the same step's batch under ALLOW,
 * from first principles rather than through {@link DummyImage}: the tokens of the dummy, a white image's pixels (every
 * value of channel c is {@code (1 − mean[c]) / std[c]} in float32, every u8 byte 255), and every other token as it was.
 */
public final class TextOnlyBatches {
    private TextOnlyBatches() {}

    /** The grid a white 64×64 image gets at the Qwen2/2.5-VL bounds the tests use (3136…50176 pixels): 56×56, 4×4 patches. */
    public static final long[] GRID_64_AT_3136 = {1, 4, 4};

    /**
     * {@code dummy} is {@code allow} with the dummy image when {@code allow} has samples and no image, else {@code allow}
     * itself; returns whether it got the dummy.
     */
    public static boolean assertDummyOf(Batch allow, Batch dummy, VisionConfig vision, long[] grid, String at) {
        assertEquals(allow.sampleIds(), dummy.sampleIds(), at + ": the samples are the same");
        assertArrayEquals(allow.datasetIndices(), dummy.datasetIndices(), at + ": sample_index is the same");
        assertEquals(allow.scheduled(), dummy.scheduled(), at);
        assertEquals(allow.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(),
                dummy.skippedSamples().stream().map(s -> s.sampleId() + "@" + s.stage()).toList(), at + ": the same skipped");
        assertEquals(allow.samples(), dummy.samples(), at + ": the dummy is not a sample");
        if (allow.samples() == 0 || allow.shape().images() > 0) {
            assertEquals(allow.shape(), dummy.shape(), at + ": a batch with images (or without samples) is unchanged");
            assertArrayEquals(allow.inputIds(), dummy.inputIds(), at);
            assertArrayEquals(allow.labels(), dummy.labels(), at);
            assertArrayEquals(allow.attentionMask(), dummy.attentionMask(), at);
            assertArrayEquals(allow.positionIds(), dummy.positionIds(), at);
            assertArrayEquals(allow.imageGridThw(), dummy.imageGridThw(), at);
            assertArrayEquals(allow.pixelValues(), dummy.pixelValues(), at);
            assertArrayEquals(allow.pixelsU8(), dummy.pixelsU8(), at);
            return false;
        }
        int b = allow.samples(), la = allow.length(), ld = dummy.length();
        long tokens = grid[0] * grid[1] * grid[2] / ((long) vision.mergeSize() * vision.mergeSize()) + 2;
        int first = 0; // the first sample's length: its last token is never the pad token (it ends its turn)
        for (int c = 0; c < la; c++) if (allow.inputIds()[c] != BatchAssembler.PAD_TOKEN_ID) first = c + 1;
        assertEquals(Math.max(la, first + tokens), ld, at + ": the dummy's tokens go after the first sample's last");
        for (int i = 0; i < b; i++)
            for (int c = 0; c < ld; c++) {
                String where = at + " row " + i + " column " + c;
                int d = i * ld + c, a = i * la + c;
                boolean isDummy = i == 0 && c >= first && c < first + tokens;
                long id = isDummy ? (c == first ? QwenTokenIds.VISION_START : c == first + tokens - 1 ? QwenTokenIds.VISION_END : QwenTokenIds.IMAGE_PAD)
                        : c < la ? allow.inputIds()[a] : BatchAssembler.PAD_TOKEN_ID;
                assertEquals(id, dummy.inputIds()[d], where + " input_ids");
                assertEquals(isDummy || c >= la ? BatchAssembler.IGNORE_INDEX : allow.labels()[a], dummy.labels()[d], where + " labels");
                assertEquals(isDummy || c >= la ? 0 : allow.attentionMask()[a], dummy.attentionMask()[d], where + " attention_mask");
                for (int r = 0; r < 3; r++)
                    assertEquals(isDummy || c >= la ? BatchAssembler.POSITION_PAD : allow.positionIds()[(r * b + i) * la + c],
                            dummy.positionIds()[(r * b + i) * ld + c], where + " position_ids row " + r);
            }
        assertArrayEquals(grid, dummy.imageGridThw(), at + ": image_grid_thw is the dummy's");
        long rows = grid[0] * grid[1] * grid[2];
        assertEquals(new BatchShape(b, ld, rows, vision.rowLength(), 1, dummy.shape().pixelFormat(),
                dummy.shape().pixelFormat() == PixelFormat.UINT8 ? rows * vision.patchSize() * vision.patchSize() * 3 : 0), dummy.shape(), at);
        if (dummy.shape().pixelFormat() == PixelFormat.UINT8) {
            assertEquals(rows * vision.patchSize() * vision.patchSize() * 3, dummy.pixelsU8().length, at);
            for (byte v : dummy.pixelsU8()) assertEquals((byte) 255, v, at + ": a white image's resized pixels");
            assertEquals(0, dummy.pixelValues().length, at);
        } else {
            assertNull(dummy.pixelsU8(), at);
            assertWhite(dummy.pixelValues(), vision, at);
        }
        return true;
    }

    /** Every pixel_values row of a white image: each channel's columns hold {@code (1 − mean) / std} in float32. */
    public static void assertWhite(float[] pixelValues, VisionConfig vision, String at) {
        int row = vision.rowLength(), perChannel = row / 3;
        assertEquals(0, pixelValues.length % row, at);
        double[] mean = vision.mean(), std = vision.std();
        for (int k = 0; k < pixelValues.length; k++) {
            int c = (k % row) / perChannel;
            float want = (1f - (float) mean[c]) / (float) std[c];
            if (Float.floatToRawIntBits(want) != Float.floatToRawIntBits(pixelValues[k]))
                throw new AssertionError(at + ": pixel_values[" + k + "] = " + pixelValues[k] + ", a white pixel of channel " + c + " is " + want);
        }
    }
}
