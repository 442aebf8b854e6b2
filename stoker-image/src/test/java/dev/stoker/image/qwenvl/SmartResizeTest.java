package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.VisionConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class SmartResizeTest {
    /** The spec's worked examples use the processor class's constructor bounds (56² … 28²·1280). */
    private static final VisionConfig QWEN2 = ProcessorPreset.QWEN2_VL.vision(ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, ProcessorPreset.CONSTRUCTOR_MAX_PIXELS);
    private static final VisionConfig QWEN3 = ProcessorPreset.QWEN3_VL.vision(ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, ProcessorPreset.CONSTRUCTOR_MAX_PIXELS);

    @Test
    void workedExamplesOfTheSpec() {
        assertArrayEquals(new int[] {588, 504}, SmartResize.compute(600, 512, QWEN2));
        assertArrayEquals(new int[] {56, 84}, SmartResize.compute(36, 40, QWEN2));
        assertArrayEquals(new int[] {812, 1204}, SmartResize.compute(2000, 3000, QWEN2));
    }

    @Test
    void roundsHalfToEvenNotHalfUp() {
        // 400x294: 294/28 = 10.5 -> 10 (Math.round: 11); 400/32 = 12.5 -> 12 (Math.round: 13)
        assertArrayEquals(new int[] {280, 392}, SmartResize.compute(294, 400, QWEN2));
        assertArrayEquals(new int[] {288, 384}, SmartResize.compute(294, 400, QWEN3));
        // 7.5 rounds up to the even 8
        assertArrayEquals(new int[] {224, 224}, SmartResize.compute(210, 210, QWEN2));
    }

    /**
     * An image with a side under the factor is resized up to min_pixels, as transformers 4.57.6 and 5.18.0 do (values
     * from their {@code smart_resize}); older releases, which the spec quotes, raised "must be larger than factor".
     */
    @Test
    void aSideUnderTheFactorIsResizedUpAsCurrentTransformersDo() {
        assertArrayEquals(new int[] {84, 56}, SmartResize.compute(30, 20, QWEN2));
        assertArrayEquals(new int[] {96, 64}, SmartResize.compute(30, 20, QWEN3));
        assertArrayEquals(new int[] {56, 56}, SmartResize.compute(5, 5, QWEN2));
        assertArrayEquals(new int[] {28, 700}, SmartResize.compute(1, 150, QWEN2));
        var e = assertThrows(SampleException.class, () -> SmartResize.compute(0, 20, QWEN2));
        assertEquals(SampleException.Stage.TRANSFORM, e.stage());
        assertNull(e.sampleId());
    }

    @Test
    void aspectRatioAbove200IsRejectedAndExactly200Accepted() {
        var e = assertThrows(SampleException.class, () -> SmartResize.compute(28, 28 * 201, QWEN2));
        assertEquals("absolute aspect ratio must be smaller than 200, got 201.0", e.getMessage());
        int[] hw = SmartResize.compute(28, 28 * 200, QWEN2);
        assertEquals(28, hw[0]);
        assertEquals(5600, hw[1]);
    }

    /** The shrinking branch keeps each side at least one factor, as transformers 4.57.6 and 5.18.0 do (older code gave 0). */
    @Test
    void theShrinkingBranchKeepsASideOfOneFactor() {
        var tight = QWEN2.withPixels(3136, 3136);
        assertArrayEquals(new int[] {28, 784}, SmartResize.compute(28, 5600, tight));
    }

    @Test
    void resultIsFactorAlignedAndWithinBounds() {
        var rnd = new java.util.SplittableRandom(3);
        for (int i = 0; i < 20_000; i++) {
            int h = 28 + rnd.nextInt(4000), w = 28 + rnd.nextInt(4000);
            if ((double) Math.max(h, w) / Math.min(h, w) > 200) continue;
            int[] hw = SmartResize.compute(h, w, QWEN2);
            assertEquals(0, hw[0] % 28);
            assertEquals(0, hw[1] % 28);
            assertTrue((long) hw[0] * hw[1] <= QWEN2.maxPixels(), () -> h + "x" + w);
        }
    }
}
