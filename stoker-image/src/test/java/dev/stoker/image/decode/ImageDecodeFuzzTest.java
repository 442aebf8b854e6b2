package dev.stoker.image.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes what a data set's image bytes reach first: the header readers ({@link ImageDecoder#probe},
 * {@link ImageDecoder#decodeBytes}) and the decoders — this thread's native one (libjpeg-turbo and libwebp through
 * FFM, where they load) and the ImageIO one (PNG, GIF, BMP, TwelveMonkeys WebP) — with a small pixel limit (1 Mpx)
 * and decode budget (64 MiB), so that a fuzzed header cannot make a run allocate much, nor take long: TwelveMonkeys'
 * lossy WebP decoder, instrumented, is the slowest path (a 2 KB flat WebP declaring 1024x1024 is in the corpus,
 * {@code slow_webp_lossy_1024x1024_flat.webp}; at 2048x2048 it is four times the work).
 *
 * <p>The contract checked on every input ({@link ImageDecoder}'s javadoc): an image whose size agrees with its probed
 * header, within the pixel limit and the budget, or a {@link SampleException} at stage DECODE naming the sample, with
 * a message; never another exception, never an out-of-memory (the budget is checked before allocating), never a hang
 * (each input's limit is the class's {@code @Timeout}); and every 100 inputs both decoders still decode a good image.
 * The last byte picks the EXIF policy and DCT scale, so that the fuzzer also reaches rotation and scaled decoding.
 */
@Timeout(10)
class ImageDecodeFuzzTest {
    private static final long MAX_PIXELS = 1L << 20;
    private static final long MAX_DECODE_BYTES = 64L << 20;
    private static final String NAME = "fuzzed-image";
    private static long inputs;

    @FuzzTest(maxDuration = "10s")
    void decode(byte[] data) {
        int knob = data.length == 0 ? 0 : data[data.length - 1] & 0xFF;
        var opts = DecodeOptions.defaults().withMaxSourcePixels(MAX_PIXELS).withMaxDecodeBytes(MAX_DECODE_BYTES)
                .withExif((knob & 1) != 0 ? ExifPolicy.APPLY : ExifPolicy.IGNORE).withScale(1 << ((knob >> 1) & 3));
        for (var decoder : new ImageDecoder[] {ImageDecoders.forCurrentThread(), ImageDecoders.imageIo()}) check(decoder, data, opts);
        if (++inputs % 100 == 0) goodImageStillDecodes();
    }

    private static void check(ImageDecoder decoder, byte[] data, DecodeOptions opts) {
        ImageInfo info;
        long need;
        try {
            info = decoder.probe(data, NAME);
            need = decoder.decodeBytes(data, NAME, opts);
        } catch (SampleException refused) {
            assertRefusal(refused);
            return;
        }
        assertTrue(info.width() > 0 && info.height() > 0, "probe gave " + info);
        assertTrue(need > 0, "decodeBytes " + need);
        RgbImage image;
        try {
            image = decoder.decode(data, NAME, opts);
        } catch (SampleException refused) {
            assertRefusal(refused);
            return;
        }
        assertTrue(info.pixelCount() <= MAX_PIXELS, "decoded an image of " + info.pixelCount() + " px over the limit " + MAX_PIXELS);
        assertTrue(need <= MAX_DECODE_BYTES, "decoded an image that needs " + need + " bytes, over the budget " + MAX_DECODE_BYTES);
        assertTrue(image.width() > 0 && image.height() > 0, image.width() + "x" + image.height());
        assertTrue((long) image.width() * image.height() * 3 <= image.data().length, "pixel data shorter than the image");
        long w = opts.exif() == ExifPolicy.APPLY ? info.orientedWidth() : info.width();
        long h = opts.exif() == ExifPolicy.APPLY ? info.orientedHeight() : info.height();
        // DCT scaling (JPEG on libjpeg-turbo) may shrink the image, never enlarge it
        assertTrue(image.width() <= w && image.height() <= h,
                "decoded " + image.width() + "x" + image.height() + " from a header of " + w + "x" + h + " (" + info + ")");
    }

    private static void assertRefusal(SampleException e) {
        assertEquals(SampleException.Stage.DECODE, e.stage(), e.getMessage());
        assertEquals(NAME, e.sampleId(), e.getMessage());
        assertTrue(e.getMessage() != null && !e.getMessage().isBlank(), "a refusal says why");
        assertFalse(e.getMessage().contains("out of memory"), "the budget let an image exhaust the heap: " + e.getMessage());
    }

    private static void goodImageStillDecodes() {
        byte[] jpeg;
        try (var in = ImageDecodeFuzzTest.class.getResourceAsStream("ImageDecodeFuzzTestInputs/decode/jpeg_420_160x120.jpg")) {
            jpeg = in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        for (var decoder : new ImageDecoder[] {ImageDecoders.forCurrentThread(), ImageDecoders.imageIo()}) {
            var image = decoder.decode(jpeg, "good.jpg");
            assertEquals(160, image.width());
            assertEquals(120, image.height());
        }
    }
}
