package dev.stoker.image.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.assertTimeout;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.stoker.core.SampleException;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Bad input fails as a DECODE SampleException naming the file, quickly, and leaves the decoder usable. */
@Timeout(60)
class BadInputTest {
    static List<String> badFixtures() { return Fixtures.names(true); }

    @ParameterizedTest
    @MethodSource("badFixtures")
    void defaultDecoderRejectsAndStaysUsable(String name) {
        assertRejected(ImageDecoders.forCurrentThread(), name);
    }

    @ParameterizedTest
    @MethodSource("badFixtures")
    void imageIoDecoderRejectsAndStaysUsable(String name) {
        assertRejected(ImageDecoders.imageIo(), name);
    }

    @Test
    void hugeHeadersAreRefusedFromTheHeaderAgainstThePixelLimit() {
        for (String name : List.of("bad_huge_header.png", "bad_huge_header.jpg")) {
            var e = assertThrows(SampleException.class, () -> ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name));
            assertTrue(e.getMessage().contains("exceeds maxSourcePixels"), e.getMessage());
        }
        var opts = DecodeOptions.defaults().withMaxSourcePixels(160 * 120 - 1);
        var e = assertThrows(SampleException.class,
                () -> ImageDecoders.forCurrentThread().decode(Fixtures.bytes("png_rgb.png"), "png_rgb.png", opts));
        assertTrue(e.getMessage().contains("exceeds maxSourcePixels"), e.getMessage());
        ImageDecoders.forCurrentThread().decode(Fixtures.bytes("png_rgb.png"), "png_rgb.png", opts.withMaxSourcePixels(160 * 120));
    }

    @Test
    void probeRejectsWhatDecodeRejectsFromTheHeader() {
        for (String name : List.of("bad_empty.jpg", "bad_text.png", "bad_unsupported.tif", "bad_zero_width.png", "bad_zero_height.jpg", "bad_zero_size.gif")) {
            var e = assertThrows(SampleException.class, () -> ImageDecoders.forCurrentThread().probe(Fixtures.bytes(name), name), name);
            assertEquals(SampleException.Stage.DECODE, e.stage());
            assertEquals(name, e.sampleId());
        }
        var info = ImageDecoders.forCurrentThread().probe(Fixtures.bytes("bad_huge_header.png"), "bad_huge_header.png");
        assertEquals(100_000, info.width());
        assertEquals(10_000_000_000L, info.pixelCount());
    }

    /**
     * Audit #23: the "unknown format" error goes to the errors file, so it carries none of the file's bytes (a manifest
     * could name any file the service can read, such as a private key), only its size; in both decoders.
     */
    @Test
    void anUnknownFormatIsNamedWithoutAnyOfTheFilesBytes() {
        byte[] secret = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        for (var decoder : List.of(ImageDecoders.forCurrentThread(), ImageDecoders.imageIo())) {
            var e = assertThrows(SampleException.class, () -> decoder.decode(secret, "id_ed25519"));
            assertEquals("unknown image format (" + secret.length + " bytes, not JPEG, PNG, GIF, BMP or WebP)",
                    e.getMessage().substring(e.getMessage().indexOf("unknown image format")), e.getMessage());
            String hex = java.util.HexFormat.of().formatHex(secret, 0, 8);
            for (String leak : List.of("BEGIN", "-----", hex, hex.toUpperCase(java.util.Locale.ROOT), "2d 2d", "2D 2D"))
                assertTrue(!e.getMessage().contains(leak), "leaks '" + leak + "': " + e.getMessage());
        }
    }

    @Test
    void truncatedJpegSaysWhy() {
        var e = assertThrows(SampleException.class,
                () -> ImageDecoders.forCurrentThread().decode(Fixtures.bytes("bad_truncated.jpg"), "bad_truncated.jpg"));
        if (ImageDecoders.turboJpegAvailable()) assertTrue(e.getMessage().contains("Premature end of JPEG file"), e.getMessage());
    }

    @Test
    void corruptWebpBitstreamsAreRejectedByLibWebp() {
        assumeTrue(ImageDecoders.libWebpAvailable(), () -> "libwebp not loaded: " + LibWebp.unavailableReason());
        for (String name : List.of("bad_corrupt_vp8l.webp", "bad_corrupt_vp8.webp")) {
            var e = assertThrows(SampleException.class, () -> ImageDecoders.forCurrentThread().decode(Fixtures.bytes(name), name));
            assertTrue(e.getMessage().contains("libwebp"), e.getMessage());
        }
    }

    @Test
    void everyPrefixOfAJpegAndAPngFailsCleanlyOrDecodes() {
        for (String good : List.of("jpeg_progressive_160x120.jpg", "png_palette.png", "gif_palette.gif", "webp_lossless.webp",
                "webp_lossy_rgba.webp")) {
            byte[] all = Fixtures.bytes(good);
            for (int n = 0; n < all.length; n += Math.max(1, all.length / 97)) {
                byte[] prefix = java.util.Arrays.copyOf(all, n);
                String name = good + "[0:" + n + "]";
                try {
                    ImageDecoders.forCurrentThread().decode(prefix, name);
                } catch (SampleException e) {
                    assertEquals(name, e.sampleId());
                    assertEquals(SampleException.Stage.DECODE, e.stage());
                }
            }
            PillowParityTest.assertPillow(good, ImageDecoders.forCurrentThread().decode(all, good), Fixtures.expected(good));
        }
    }

    private static void assertRejected(ImageDecoder decoder, String name) {
        byte[] data = Fixtures.bytes(name);
        var e = assertTimeout(Duration.ofSeconds(20),
                () -> assertThrows(SampleException.class, () -> decoder.decode(data, name)));
        assertEquals(SampleException.Stage.DECODE, e.stage());
        assertEquals(name, e.sampleId());
        assertTrue(e.getMessage() != null && !e.getMessage().isBlank(), "no cause given for " + name);
        String next = "jpeg_420_160x120.jpg";
        PillowParityTest.assertPillow(next, decoder.decode(Fixtures.bytes(next), next), Fixtures.expected(next));
    }
}
