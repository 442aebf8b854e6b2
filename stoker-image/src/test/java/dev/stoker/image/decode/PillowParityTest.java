package dev.stoker.image.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.image.RgbImage;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Every good fixture decodes to Pillow's {@code convert("RGB")} bytes, on both decoder paths. */
@Timeout(60)
class PillowParityTest {
    static List<String> goodFixtures() { return Fixtures.names(false); }

    static Stream<String> orientationFixtures() {
        return goodFixtures().stream().filter(n -> Fixtures.expected(n).has("transposed"));
    }

    static Stream<String> draftFixtures() {
        return goodFixtures().stream().filter(n -> Fixtures.expected(n).has("draft"));
    }

    @Test
    void theDefaultDecoderIsNativeWhenALibraryLoadsAndImageIoOtherwise() {
        var decoder = ImageDecoders.forCurrentThread();
        if (ImageDecoders.turboJpegAvailable() || ImageDecoders.libWebpAvailable()) {
            var nativeDecoder = assertInstanceOf(NativeDecoder.class, decoder);
            assertEquals(ImageDecoders.turboJpegAvailable(), nativeDecoder.decodesJpeg(), "JPEG: " + TurboJpeg.unavailableReason());
            assertEquals(ImageDecoders.libWebpAvailable(), nativeDecoder.decodesWebp(), "WebP: " + LibWebp.unavailableReason());
        } else {
            assertSame(ImageDecoders.imageIo(), decoder, "fallback expected: " + TurboJpeg.unavailableReason() + "; " + LibWebp.unavailableReason());
        }
        assertSame(decoder, ImageDecoders.forCurrentThread());
    }

    @Test
    void libWebpIsTheVersionThePillowExpectationsWereMadeWith() {
        assumeTrue(ImageDecoders.libWebpAvailable(), () -> "libwebp not loaded: " + LibWebp.unavailableReason());
        assertEquals(Fixtures.libwebpVersion(), LibWebp.version());
    }

    @ParameterizedTest
    @MethodSource("goodFixtures")
    void defaultDecoderMatchesPillow(String name) {
        var img = ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name);
        if (ImageDecoders.libWebpAvailable()) assertPillow(name, img, Fixtures.expected(name));
        else assertPillowOrWithinTwelveMonkeysTolerance(name, img, Fixtures.expected(name));
    }

    /** The native decoder reuses one pixel buffer: each image must be whole while the buffer grows and shrinks under it. */
    @Test
    void reusedPixelBufferHoldsEachImageInTurn() {
        assumeTrue(ImageDecoders.libWebpAvailable(), () -> "libwebp not loaded: " + LibWebp.unavailableReason());
        var decoder = new NativeDecoder(true, true);
        var names = new java.util.ArrayList<>(goodFixtures());
        names.sort(java.util.Comparator.comparingInt((String n) -> Fixtures.expected(n).get("width").asInt() * Fixtures.expected(n).get("height").asInt()).reversed());
        names.addAll(List.copyOf(names).reversed());
        for (String name : names) assertPillow(name, decoder.decode(Fixtures.bytes(name), name), Fixtures.expected(name));
    }

    @ParameterizedTest
    @MethodSource("goodFixtures")
    void imageIoDecoderMatchesPillow(String name) {
        assertPillowOrWithinTwelveMonkeysTolerance(name, ImageDecoders.imageIo().decode(Fixtures.bytes(name), name), Fixtures.expected(name));
    }

    @ParameterizedTest
    @MethodSource("lossyWebpFixtures")
    void withoutLibWebpTheNativeDecoderFallsBackToTwelveMonkeysWithinTolerance(String name) {
        assumeTrue(ImageDecoders.turboJpegAvailable(), () -> "no native decoder without libturbojpeg: " + TurboJpeg.unavailableReason());
        var jpegOnly = new NativeDecoder(true, false);
        assertPillowOrWithinTwelveMonkeysTolerance(name, jpegOnly.decode(Fixtures.bytes(name), name), Fixtures.expected(name));
    }

    static Stream<String> lossyWebpFixtures() {
        return goodFixtures().stream().filter(n -> Fixtures.expected(n).has("pillow_rgb_png"));
    }

    @ParameterizedTest
    @MethodSource("goodFixtures")
    void probeReportsPillowsSizeAndOrientation(String name) {
        var e = Fixtures.expected(name);
        var info = ImageDecoders.forCurrentThread().probe(Fixtures.bytes(name), name);
        assertEquals(e.get("width").asInt(), info.width(), name);
        assertEquals(e.get("height").asInt(), info.height(), name);
        assertEquals(e.get("exif_orientation").asInt(), info.exifOrientation(), name);
        assertEquals(e.get("format").asText(), info.format().name(), name);
    }

    @ParameterizedTest
    @MethodSource("orientationFixtures")
    void exifApplyMatchesPillowExifTranspose(String name) {
        var t = Fixtures.expected(name).get("transposed");
        var opts = DecodeOptions.defaults().withExif(ExifPolicy.APPLY);
        var info = ImageDecoders.forCurrentThread().probe(Fixtures.bytes(name), name);
        assertEquals(t.get("width").asInt(), info.orientedWidth(), name);
        assertEquals(t.get("height").asInt(), info.orientedHeight(), name);
        assertPillow(name, ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name, opts), t);
        var io = ImageDecoders.imageIo().decode(Fixtures.bytes(name), name, opts);
        assertPillow(name, io, t);
    }

    @ParameterizedTest
    @MethodSource("orientationFixtures")
    void exifIgnoreLeavesPixelsAsStored(String name) {
        var opts = DecodeOptions.defaults().withExif(ExifPolicy.IGNORE);
        assertPillow(name, ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name, opts), Fixtures.expected(name));
    }

    @ParameterizedTest
    @MethodSource("draftFixtures")
    void dctScalingMatchesPillowDraft(String name) {
        var e = Fixtures.expected(name);
        for (var d : e.get("draft").properties()) {
            int scale = Integer.parseInt(d.getKey());
            var img = ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name, DecodeOptions.defaults().withScale(scale));
            if (ImageDecoders.turboJpegAvailable()) {
                assertPillow(name + " 1/" + scale, img, d.getValue());
            } else {
                assertPillow(name + " full size under the ImageIO fallback", img, e);
            }
        }
    }

    @Test
    void dctScalingHappensBeforeOrientation() {
        String name = "orient_6_203x157.jpg";
        var e = Fixtures.expected(name).get("draft_transposed");
        for (var d : e.properties()) {
            var opts = DecodeOptions.defaults().withExif(ExifPolicy.APPLY).withScale(Integer.parseInt(d.getKey()));
            var img = ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name, opts);
            if (ImageDecoders.turboJpegAvailable()) assertPillow(name + " 1/" + d.getKey(), img, d.getValue());
            else assertPillow(name, img, Fixtures.expected(name).get("transposed"));
        }
    }

    @Test
    void scaleIsIgnoredForNonJpeg() {
        var img = ImageDecoders.forCurrentThread().decode(Fixtures.bytes("png_rgb.png"), "png_rgb.png", DecodeOptions.defaults().withScale(4));
        assertPillow("png_rgb.png", img, Fixtures.expected("png_rgb.png"));
    }

    @Test
    void conformanceVectorInputsDecodeToTheManifestPixels() throws IOException {
        var vectors = Vectors.get();
        int checked = 0;
        for (JsonNode c : vectors.manifest().get("image_cases")) {
            String id = c.get("id").asText();
            byte[] data = Files.readAllBytes(vectors.inputImage(id));
            String want = vectors.imageCase(id).get("decoded_rgb").get("sha256_raw_hwc_u8").asText();
            for (var decoder : List.of(ImageDecoders.forCurrentThread(), ImageDecoders.imageIo())) {
                RgbImage img = decoder.decode(data, id);
                assertEquals(c.get("input").get("width").asInt(), img.width(), id);
                assertEquals(c.get("input").get("height").asInt(), img.height(), id);
                assertEquals(want, Fixtures.sha256(img), id + " via " + decoder.getClass().getSimpleName());
            }
            checked++;
        }
        assertTrue(checked >= 8, "only " + checked + " image cases");
    }

    static void assertPillow(String name, RgbImage img, JsonNode e) {
        assertEquals(e.get("width").asInt(), img.width(), name + " width");
        assertEquals(e.get("height").asInt(), img.height(), name + " height");
        assertTrue(img.data().length >= img.width() * img.height() * 3, name + " buffer length");
        assertEquals(e.get("sha256").asText(), Fixtures.sha256(img), name + " pixels");
    }

    /**
     * Largest per-sample difference between TwelveMonkeys' VP8 (lossy WebP) decoder, used only by the ImageIO decoder
     * and the fallback when libwebp does not load, and libwebp 1.2.4 as used by Pillow: its chroma upsampling is not
     * libwebp's. Measured max / mean: webp_lossy 35 / 2.29, webp_lossy_203x157 31 / 1.61, webp_lossy_rgba 34 / 2.18,
     * webp_lossy_rgba_37x23 34 / 3.87, webp_lossy_3x5 22 / 6.56, webp_lossy_1x1 0 / 0 (edge blocks dominate the
     * small images' mean). Lossless WebP is bit-exact.
     */
    static final int LOSSY_WEBP_MAX_ABS_DIFF = 35;
    static final double LOSSY_WEBP_MAX_MEAN_ABS_DIFF = 2.5;
    static final double SMALL_LOSSY_WEBP_MAX_MEAN_ABS_DIFF = 7.0;
    static final int SMALL_IMAGE_PIXELS = 10_000;

    /**
     * For an image decoded by ImageIO (TwelveMonkeys for WebP): bit-exact, except for fixtures with a Pillow reference
     * PNG (lossy WebP), which must be within the measured tolerance.
     */
    private static void assertPillowOrWithinTwelveMonkeysTolerance(String name, RgbImage img, JsonNode e) {
        if (!e.has("pillow_rgb_png")) {
            assertPillow(name, img, e);
            return;
        }
        String ref = e.get("pillow_rgb_png").asText();
        RgbImage want = ImageDecoders.imageIo().decode(Fixtures.bytes(ref), ref);
        assertEquals(e.get("sha256").asText(), Vectors.sha256(want.data()), ref + " is not Pillow's decode");
        assertEquals(want.width(), img.width(), name);
        assertEquals(want.height(), img.height(), name);
        int max = 0;
        long sum = 0, differing = 0;
        for (int i = 0; i < want.data().length; i++) {
            int d = Math.abs((want.data()[i] & 0xFF) - (img.data()[i] & 0xFF));
            max = Math.max(max, d);
            sum += d;
            if (d != 0) differing++;
        }
        double maxMean = want.width() * want.height() < SMALL_IMAGE_PIXELS ? SMALL_LOSSY_WEBP_MAX_MEAN_ABS_DIFF : LOSSY_WEBP_MAX_MEAN_ABS_DIFF;
        assertTrue(max <= LOSSY_WEBP_MAX_ABS_DIFF && (double) sum / want.data().length <= maxMean, name + ": max |diff| " + max + ", mean " + (double) sum / want.data().length
                + ", samples differing " + differing + "/" + want.data().length);
    }
}
