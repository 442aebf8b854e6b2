package dev.stoker.image.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.testkit.Bombs;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Audit #10: an image under the pixel limit that would cost more memory to decode than the per-thread budget is refused
 * from its header, before any pixel memory is allocated, as that image's DECODE error naming the bytes it needs and the
 * bytes allowed; the decoder stays usable and the next good image decodes as Pillow decodes it.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DecodeBudgetTest {
    /** Under Pillow's pixel limit (2 x 89.5 Mpx), yet about 1 GB of pixels alone. */
    static final int BOMB_SIDE = 13_000;

    @Test
    void bombsUnderThePixelLimitAreRefusedFromTheHeaderAgainstTheDefaultBudget() {
        var bombs = List.of(
                new Named("black_13000x13000.png", Bombs.blackPng(BOMB_SIDE, BOMB_SIDE)),
                new Named("progressive_13000x13000.jpg", Bombs.resizedJpegHeader(Fixtures.bytes("jpeg_progressive_160x120.jpg"), BOMB_SIDE, BOMB_SIDE)),
                new Named("lossless_13000x13000.webp", Bombs.resizedVp8lHeader(Fixtures.bytes("webp_lossless.webp"), BOMB_SIDE, BOMB_SIDE)));
        for (var decoder : List.of(ImageDecoders.forCurrentThread(), ImageDecoders.imageIo())) {
            for (var bomb : bombs) {
                assertTrue((long) BOMB_SIDE * BOMB_SIDE <= DecodeOptions.DEFAULT_MAX_SOURCE_PIXELS, "under the pixel limit");
                var e = assertThrows(SampleException.class, () -> decoder.decode(bomb.bytes(), bomb.name()), bomb.name());
                assertEquals(SampleException.Stage.DECODE, e.stage());
                assertEquals(bomb.name(), e.sampleId());
                assertTrue(e.getMessage().startsWith("over the decode memory budget: "), bomb.name() + ": " + e.getMessage());
                assertTrue(e.getMessage().contains(BOMB_SIDE + "x" + BOMB_SIDE), e.getMessage());
                assertTrue(e.getMessage().matches(".* needs about \\d+ bytes to decode, more than the \\d+ bytes allowed per thread.*"),
                        e.getMessage());
                String next = "jpeg_420_160x120.jpg";
                PillowParityTest.assertPillow(next, decoder.decode(Fixtures.bytes(next), next), Fixtures.expected(next));
            }
        }
    }

    @Test
    void theBudgetIsExactAtItsBoundAndCountsWhatEachPathAllocates() {
        for (var decoder : List.of(ImageDecoders.forCurrentThread(), ImageDecoders.imageIo())) {
            for (String name : List.of("jpeg_420_160x120.jpg", "jpeg_progressive_160x120.jpg", "png_rgb.png", "webp_lossless.webp",
                    "gif_palette.gif", "bmp_rgb24.bmp", "jpeg_cmyk_adobe_160x120.jpg")) {
                byte[] data = Fixtures.bytes(name);
                var opts = DecodeOptions.defaults();
                long need = decoder.decodeBytes(data, name, opts);
                var info = decoder.probe(data, name);
                assertTrue(need >= 4L * info.pixelCount(), name + ": at least the result and one raster: " + need);
                var e = assertThrows(SampleException.class, () -> decoder.decode(data, name, opts.withMaxDecodeBytes(need - 1)), name);
                assertTrue(e.getMessage().contains("needs about " + need + " bytes to decode, more than the " + (need - 1) + " bytes"),
                        e.getMessage());
                PillowParityTest.assertPillow(name, decoder.decode(data, name, opts.withMaxDecodeBytes(need)), Fixtures.expected(name));
            }
            // a progressive frame keeps every coefficient: 2 bytes x 3 components per pixel (160x120 rounds to 160x128)
            long baseline = decoder.decodeBytes(Fixtures.bytes("jpeg_420_160x120.jpg"), "b", DecodeOptions.defaults());
            long progressive = decoder.decodeBytes(Fixtures.bytes("jpeg_progressive_160x120.jpg"), "p", DecodeOptions.defaults());
            assertEquals(2L * 3 * 160 * 128, progressive - baseline);
        }
        // DCT scaling shrinks the native path's output (not a progressive frame's coefficients)
        if (ImageDecoders.turboJpegAvailable()) {
            byte[] jpeg = Fixtures.bytes("jpeg_420_160x120.jpg");
            var decoder = ImageDecoders.forCurrentThread();
            assertEquals(6L * 160 * 120, decoder.decodeBytes(jpeg, "j", DecodeOptions.defaults()));
            assertEquals(6L * 80 * 60, decoder.decodeBytes(jpeg, "j", DecodeOptions.defaults().withScale(2)));
        }
        assertEquals(Runtime.getRuntime().maxMemory() / 2 / 4, DecodeOptions.defaultMaxDecodeBytes(4));
        assertThrows(IllegalArgumentException.class, () -> DecodeOptions.defaults().withMaxDecodeBytes(0));
    }

    record Named(String name, byte[] bytes) {}
}
