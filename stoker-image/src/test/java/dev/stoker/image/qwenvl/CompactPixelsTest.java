package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.RgbImage;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The compact wire format's reference decoder gives the float32 path's pixel_values, bit for bit. */
@Timeout(60)
class CompactPixelsTest {

    /** The u8 pixels of images {@code (w, h)} (synthetic), concatenated, with their grids. */
    private record Images(byte[] u8, long[] grid, float[] expected) {}

    /** Pixel values computed independently of the table ({@link PatchWriterTest#twoPass}), images concatenated. */
    private static Images images(VisionConfig cfg, int[]... sizes) {
        int p = cfg.patchSize();
        var u8 = new java.io.ByteArrayOutputStream();
        long[] grid = new long[3 * sizes.length];
        float[] expected = new float[0];
        for (int i = 0; i < sizes.length; i++) {
            int w = sizes[i][0], h = sizes[i][1];
            byte[] rgb = BicubicResizerTest.syntheticImage(17 + i, i % 3, w, h);
            u8.writeBytes(rgb);
            grid[3 * i] = 1;
            grid[3 * i + 1] = h / p;
            grid[3 * i + 2] = w / p;
            float[] rows = PatchWriterTest.twoPass(rgb, w, h, cfg);
            int at = expected.length;
            expected = Arrays.copyOf(expected, at + rows.length);
            System.arraycopy(rows, 0, expected, at, rows.length);
        }
        return new Images(u8.toByteArray(), grid, expected);
    }

    private static void assertBitEqual(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what);
        for (int k = 0; k < expected.length; k++)
            if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(actual[k]))
                throw new AssertionError(what + ": differs at float " + k + ": " + expected[k] + " vs " + actual[k]);
    }

    @Test
    void oneAndTwoImagesOfSeveralSizesGiveTheFloat32PixelValuesForEveryPreset() {
        for (var preset : ProcessorPreset.values()) {
            var cfg = preset.vision();
            int f = cfg.factor();
            int[][][] cases = {
                    {{f, f}},
                    {{23 * f, 17 * f}},
                    {{2 * f, 9 * f}},
                    {{5 * f, 3 * f}, {f, 4 * f}},
                    {{16 * f, 16 * f}, {7 * f, 2 * f}}};
            for (int[][] sizes : cases) {
                var img = images(cfg, sizes);
                String what = preset + " " + Arrays.deepToString(sizes);
                assertEquals(img.u8().length, CompactPixels.byteSize(img.grid(), cfg), what);
                float[] got = CompactPixels.toPixelValues(MemorySegment.ofArray(img.u8()), img.grid(), cfg);
                assertBitEqual(img.expected(), got, what);
            }
        }
    }

    @Test
    void theBatchMetadataRoundTripsToTheSameTable() {
        for (var preset : ProcessorPreset.values()) {
            var cfg = preset.vision();
            var back = CompactPixels.config(CompactPixels.norm(cfg), CompactPixels.patch(cfg));
            assertEquals(cfg.patchSize(), back.patchSize());
            assertEquals(cfg.mergeSize(), back.mergeSize());
            assertEquals(cfg.temporalPatchSize(), back.temporalPatchSize());
            assertArrayEquals(PatchWriter.normalizationTable(cfg), PatchWriter.normalizationTable(back), preset.name());
        }
    }

    @Test
    void aResizedImageWrittenCompactDecodesToWhatTheTransformWrites() {
        var cfg = ProcessorPreset.QWEN2_5_VL.vision().withPixels(3136, 200_704);
        var transform = new QwenVlImageTransform(cfg);
        var src = new RgbImage(611, 397, BicubicResizerTest.syntheticImage(5, 1, 611, 397));
        var plan = transform.plan(src.height(), src.width());
        var expected = transform.apply(src, plan).pixelValues();
        try (var arena = Arena.ofConfined()) {
            var seg = arena.allocate(plan.resizedByteSize() + 7);
            transform.writeResized(src, plan, seg, 7); // any byte offset
            var u8 = seg.asSlice(7);
            assertArrayEquals(transform.resized(src, plan).data(), u8.toArray(ValueLayout.JAVA_BYTE), "the resized image itself");
            assertBitEqual(expected, CompactPixels.toPixelValues(u8, plan.gridThw(), cfg), "pixel_values");
        }
        byte[] heap = new byte[(int) plan.resizedByteSize() + 3];
        transform.writeResized(src, plan, heap, 3);
        assertBitEqual(expected, CompactPixels.toPixelValues(MemorySegment.ofArray(heap).asSlice(3), plan.gridThw(), cfg), "from a heap array");
        assertEquals(plan.byteSize(), 8 * plan.resizedByteSize(), "an eighth of the float32 bytes (t = 2)");
    }

    @Test
    void aSizeThatDoesNotMatchTheGridsIsRefused() {
        var cfg = ProcessorPreset.QWEN2_VL.vision();
        var img = images(cfg, new int[] {56, 28});
        var e = assertThrows(IllegalArgumentException.class,
                () -> CompactPixels.toPixelValues(MemorySegment.ofArray(Arrays.copyOf(img.u8(), img.u8().length - 3)), img.grid(), cfg));
        assertEquals("pixel_values_u8 has 4701 bytes, the grids need 4704", e.getMessage());
    }
}
