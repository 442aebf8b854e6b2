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

    @Test
    void tooSmallHasTheTransformersMessage() {
        var e = assertThrows(SampleException.class, () -> SmartResize.compute(30, 20, QWEN2));
        assertEquals("height:30 or width:20 must be larger than factor:28", e.getMessage());
        assertEquals(SampleException.Stage.TRANSFORM, e.stage());
        assertNull(e.sampleId());
        assertEquals("height:30 or width:20 must be larger than factor:32",
                assertThrows(SampleException.class, () -> SmartResize.compute(30, 20, QWEN3)).getMessage());
    }

    @Test
    void aspectRatioAbove200IsRejectedAndExactly200Accepted() {
        var e = assertThrows(SampleException.class, () -> SmartResize.compute(28, 28 * 201, QWEN2));
        assertEquals("absolute aspect ratio must be smaller than 200, got 201.0", e.getMessage());
        int[] hw = SmartResize.compute(28, 28 * 200, QWEN2);
        assertEquals(28, hw[0]);
        assertEquals(5600, hw[1]);
    }

    @Test
    void floorBranchThatWouldGiveAnEmptyImageIsAnError() {
        // upstream returns h_bar = 0 here: beta = sqrt(28*5600/3136) = 7.07, floor(28/7.07/28) = 0
        var tight = QWEN2.withPixels(3136, 3136);
        var e = assertThrows(SampleException.class, () -> SmartResize.compute(28, 5600, tight));
        assertTrue(e.getMessage().contains("resizes to 0x"), e.getMessage());
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
