package dev.stoker.image.decode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Per-thread decoders give the same bytes as one thread, and refuse use from a foreign thread. */
@Timeout(60)
class ConcurrentDecodeTest {
    private static final List<String> NAMES = List.of("jpeg_420_203x157.jpg", "jpeg_progressive_160x120.jpg", "jpeg_cmyk_adobe_160x120.jpg",
            "jpeg_gray_203x157.jpg", "png_rgba.png", "webp_lossless.webp", "webp_lossy_rgba.webp", "webp_lossy_203x157.webp", "bad_corrupt_vp8.webp",
            "bad_truncated.jpg", "orient_6_be.jpg", "orient_8.webp");

    @Test
    void fourThreadsDecodingDifferentImagesMatchSingleThreaded() throws Exception {
        var opts = DecodeOptions.defaults().withExif(ExifPolicy.APPLY);
        Map<String, String> single = new HashMap<>();
        for (String n : NAMES) single.put(n, hash(ImageDecoders.forCurrentThread(), n, opts));
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try {
            List<Future<Map<String, String>>> results = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                int shift = t;
                results.add(pool.submit(() -> {
                    Map<String, String> seen = new HashMap<>();
                    var decoder = ImageDecoders.forCurrentThread();
                    for (int round = 0; round < 25; round++) {
                        String n = NAMES.get((round + shift) % NAMES.size());
                        String h = hash(decoder, n, opts);
                        String before = seen.putIfAbsent(n, h);
                        if (before != null) assertEquals(before, h, n);
                    }
                    return seen;
                }));
            }
            for (var f : results) f.get(120, TimeUnit.SECONDS).forEach((n, h) -> assertEquals(single.get(n), h, n));
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void eachThreadHasItsOwnDecoderAndAForeignThreadIsRefused() throws Exception {
        var mine = ImageDecoders.forCurrentThread();
        var pool = Executors.newSingleThreadExecutor();
        try {
            var theirs = pool.submit(ImageDecoders::forCurrentThread).get();
            if (!(mine instanceof NativeDecoder)) return;
            assertNotSame(mine, theirs);
            String n = ImageDecoders.turboJpegAvailable() ? "jpeg_420_160x120.jpg" : "webp_lossy.webp";
            var e = pool.submit(() -> assertThrows(IllegalStateException.class, () -> mine.decode(Fixtures.bytes(n), n))).get();
            assertEquals(true, e.getMessage().contains("used from"), e.getMessage());
        } finally {
            pool.shutdownNow();
        }
    }

    private static String hash(ImageDecoder decoder, String name, DecodeOptions opts) {
        try {
            return Fixtures.sha256(decoder.decode(Fixtures.bytes(name), name, opts));
        } catch (SampleException e) {
            return "error: " + e.getMessage();
        }
    }
}
