package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.RgbImage;
import dev.stoker.testkit.Vectors;
import java.awt.image.BufferedImage;
import java.awt.image.IndexColorModel;
import java.awt.image.Raster;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.TestFactory;

/** Every image case × setting of the conformance manifest (spec §15), bit for bit. */
@Timeout(60)
class QwenVlConformanceTest {
    private static final Vectors VECTORS = Vectors.get();

    @TestFactory
    Stream<DynamicTest> everyImageCaseAndSetting() {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode c : VECTORS.manifest().get("image_cases")) {
            String id = c.get("id").asText();
            c.get("outputs").properties().forEach(e ->
                    tests.add(DynamicTest.dynamicTest(id + " / " + e.getKey(), () -> checkCase(c, e.getKey(), e.getValue()))));
        }
        assertTrue(tests.size() >= 18, "manifest lists only " + tests.size() + " image outputs");
        return tests.stream();
    }

    private static void checkCase(JsonNode c, String setting, JsonNode expected) {
        String id = c.get("id").asText();
        RgbImage img = decodeChecked(id);
        var transform = new QwenVlImageTransform(config(setting));
        if (expected.hasNonNull("expected_error")) {
            // The older transformers the vectors follow raised for a side under the factor; current releases (4.57.6,
            // 5.18.0) resize the image up, as Stoker does: testdata/qwen-vl-hub holds what they give.
            assertTrue(expected.get("expected_error").asText().contains("must be larger than factor"), expected.toString());
            JsonNode now = hubOutputs(id, setting);
            var plan = transform.plan(img.height(), img.width());
            assertArrayEquals(longs(now.get("image_grid_thw")), plan.gridThw(), "image_grid_thw as current transformers give it");
            assertEquals(now.get("pixel_values_shape").get(0).asInt(), plan.rows());
            return;
        }
        var plan = transform.plan(img.height(), img.width());
        assertEquals(expected.get("resized_height").asInt(), plan.resizedHeight(), "resized height");
        assertEquals(expected.get("resized_width").asInt(), plan.resizedWidth(), "resized width");
        long[] grid = longs(expected.get("image_grid_thw"));
        assertArrayEquals(grid, plan.gridThw(), "image_grid_thw");
        assertEquals(expected.get("pixel_values_shape").get(0).asInt(), plan.rows());
        assertEquals(expected.get("num_image_tokens").asInt(), plan.tokenCount());

        var resized = transform.resized(img, plan);
        assertEquals(expected.get("resized_rgb_sha256_raw_hwc_u8").asText(), Vectors.sha256(resized.data()), "resized u8 image");

        var features = transform.apply(img, plan);
        assertArrayEquals(grid, features.gridThw());
        assertEquals(expected.get("pixel_values_shape").get(1).asInt(), features.rowLength());
        String sha = Vectors.sha256(features.pixelValues());
        if (!sha.equals(expected.get("pixel_values_sha256").asText()))
            fail("pixel_values sha256 " + sha + " != expected; " + locateMismatch(expected, features));

        try (var arena = Arena.ofConfined()) {
            long offset = 6;
            var seg = arena.allocate(plan.byteSize() + offset + 10);
            transform.writePixelValues(img, plan, seg, offset);
            float[] back = new float[features.pixelValues().length];
            MemorySegment.copy(seg, PatchWriter.FLOAT_LE, offset, back, 0, back.length);
            assertEquals(sha, Vectors.sha256(back), "MemorySegment path differs from float[] path");
        }
    }

    private static String locateMismatch(JsonNode expected, ImageFeatures actual) {
        if (VECTORS.sharedDir().isEmpty()) return "(../shared absent: cannot locate the first difference)";
        var path = VECTORS.file(expected.get("pixel_values").asText());
        if (path.isEmpty()) return "(no " + expected.get("pixel_values").asText() + ")";
        try {
            float[] want = Npy.read(path.get()).asFloats();
            float[] got = actual.pixelValues();
            if (want.length != got.length) return "length " + got.length + " != expected " + want.length;
            for (int i = 0; i < want.length; i++)
                if (Float.floatToRawIntBits(want[i]) != Float.floatToRawIntBits(got[i]))
                    return "first difference at row " + i / actual.rowLength() + ", col " + i % actual.rowLength()
                            + ": got " + got[i] + ", expected " + want[i];
            return "no element differs (hash input mismatch?)";
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void identity448IsNotResampled() {
        var img = decodeChecked("p08_exact_448x448");
        var t = new QwenVlImageTransform(config("qwen2vl_p14"));
        var plan = t.plan(448, 448);
        assertEquals(448, plan.resizedWidth());
        assertArrayEquals(img.data(), t.resized(img, plan).data());
    }

    @Test
    void upscaleOfTheSmallImageGoesThroughTheCeilBranch() {
        var img = decodeChecked("p03_small_40x36");
        var plan = new QwenVlImageTransform(config("qwen2vl_p14")).plan(img.height(), img.width());
        assertEquals(56, plan.resizedHeight());
        assertEquals(84, plan.resizedWidth());
        assertEquals(24, plan.rows());
        assertEquals(6, plan.tokenCount());
    }

    @Test
    void bothHalfEvenRoundingTrapsOfP07() {
        var img = decodeChecked("p07_halfround_400x294");
        var p14 = new QwenVlImageTransform(config("qwen2vl_p14")).plan(img.height(), img.width());
        var p16 = new QwenVlImageTransform(config("qwen3vl_p16")).plan(img.height(), img.width());
        assertEquals(280, p14.resizedHeight());
        assertEquals(384, p16.resizedWidth());
    }

    @Test
    void smallerDecodedImageIsResizedToTheOriginalPlan() {
        // a DCT-scaled decode (1/2) of p01 must land on the plan of the full-size image
        var full = decodeChecked("p01_photo_grace_hopper");
        var t = new QwenVlImageTransform(config("qwen2vl_p14"));
        var plan = t.plan(full.height(), full.width());
        var half = new BicubicResizer().resize(full, full.width() / 2, full.height() / 2);
        var f = t.apply(half, plan);
        assertArrayEquals(new long[] {1, 42, 36}, f.gridThw());
        assertEquals(plan.floatCount(), f.pixelValues().length);
        var direct = new PatchWriter(config("qwen2vl_p14"));
        float[] expected = new float[(int) plan.floatCount()];
        var up = new BicubicResizer().resize(half, plan.resizedWidth(), plan.resizedHeight());
        direct.write(up.data(), up.width(), up.height(), expected, 0);
        assertArrayEquals(expected, f.pixelValues());
    }

    static VisionConfig config(String setting) {
        JsonNode s = VECTORS.manifest().get("settings").get(setting);
        return new VisionConfig(s.get("patch_size").asInt(), s.get("merge_size").asInt(), s.get("temporal_patch_size").asInt(),
                doubles(s.get("image_mean")), doubles(s.get("image_std")), s.get("min_pixels").asLong(), s.get("max_pixels").asLong());
    }

    /** Decodes a case's input with ImageIO and checks it against the manifest's decoded_rgb hash. */
    static RgbImage decodeChecked(String caseId) {
        RgbImage img = decode(VECTORS.inputImage(caseId));
        JsonNode c = VECTORS.imageCase(caseId);
        assertEquals(c.get("input").get("width").asInt(), img.width());
        assertEquals(c.get("input").get("height").asInt(), img.height());
        assertEquals(c.get("decoded_rgb").get("sha256_raw_hwc_u8").asText(), Vectors.sha256(img.data()), "ImageIO decode of " + caseId);
        return img;
    }

    /** Spec §3 Java notes: samples from the Raster, palette lookup for indexed images, alpha dropped. */
    static RgbImage decode(Path file) {
        BufferedImage bi;
        try {
            bi = ImageIO.read(file.toFile());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        if (bi == null) throw new IllegalArgumentException("ImageIO cannot read " + file);
        int w = bi.getWidth(), h = bi.getHeight();
        Raster r = bi.getRaster();
        byte[] out = new byte[w * h * 3];
        int bands = r.getNumBands();
        int[] row = new int[w * bands];
        for (int y = 0; y < h; y++) {
            r.getPixels(0, y, w, 1, row);
            for (int x = 0; x < w; x++) {
                int o = (y * w + x) * 3;
                int s = x * bands;
                if (bi.getColorModel() instanceof IndexColorModel icm) {
                    int idx = row[s];
                    out[o] = (byte) icm.getRed(idx);
                    out[o + 1] = (byte) icm.getGreen(idx);
                    out[o + 2] = (byte) icm.getBlue(idx);
                } else if (bands < 3) {
                    out[o] = out[o + 1] = out[o + 2] = (byte) row[s];
                } else {
                    out[o] = (byte) row[s];
                    out[o + 1] = (byte) row[s + 1];
                    out[o + 2] = (byte) row[s + 2];
                }
            }
        }
        return new RgbImage(w, h, out);
    }

    private static double[] doubles(JsonNode a) {
        double[] d = new double[a.size()];
        for (int i = 0; i < d.length; i++) d[i] = a.get(i).asDouble();
        return d;
    }

    /** What testdata/qwen-vl-hub's manifest says image {@code id} gives at {@code setting}. */
    private static JsonNode hubOutputs(String id, String setting) {
        try {
            var hub = new com.fasterxml.jackson.databind.ObjectMapper().readTree(
                    dev.stoker.testkit.Vectors.projectDir().resolve("testdata/qwen-vl-hub/manifest.json").toFile());
            for (JsonNode c : hub.get("image_cases")) if (c.get("id").asText().equals(id)) return c.get("outputs").get(setting);
            throw new AssertionError("no hub case " + id);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static long[] longs(JsonNode a) {
        long[] d = new long[a.size()];
        for (int i = 0; i < d.length; i++) d[i] = a.get(i).asLong();
        return d;
    }

    /**
     * Each preset is the published processor (the vectors' {@code _hub} settings); with the constructor's bounds it is
     * the vectors' {@code qwen2vl_p14} / {@code qwen3vl_p16}.
     */
    @Test
    void manifestSettingsMatchThePresets() {
        assertEquals(ProcessorPreset.QWEN2_5_VL.vision().toString(), config("qwen2_5vl_hub").toString());
        assertEquals(ProcessorPreset.QWEN2_VL.vision().toString(), config("qwen2_5vl_hub").toString());
        assertEquals(ProcessorPreset.QWEN3_VL.vision().toString(), config("qwen3vl_hub").toString());
        long min = ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, max = ProcessorPreset.CONSTRUCTOR_MAX_PIXELS;
        assertEquals(ProcessorPreset.QWEN2_VL.vision(min, max).toString(), config("qwen2vl_p14").toString());
        assertEquals(ProcessorPreset.QWEN3_VL.vision(min, max).toString(), config("qwen3vl_p16").toString());
        assertTrue(Arrays.equals(VisionConfig.HALF, config("qwen3vl_hub").mean()));
    }
}
