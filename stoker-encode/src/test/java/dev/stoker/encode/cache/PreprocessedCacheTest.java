package dev.stoker.encode.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cache.SampleCache;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.image.qwenvl.ImageBackend;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.ChatSample;
import dev.stoker.text.SampleParser;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The cache of preprocessed images as an encoder uses it: what an encoder gives with the cache — on a miss (decoded,
 * stored) and on a hit (read back, in this and in a restarted cache) — is bit for bit what it gives without, in every
 * pixel path (PIL and torchvision resize, float32 and the compact u8 format, heap arrays and in place in native memory),
 * over JPEG (DCT-scaled and EXIF-rotated), PNG and WebP; a damaged entry is recomputed, never served.
 */
@Timeout(120)
@ExtendWith(SharedTokenizer.class)
class PreprocessedCacheTest {
    @TempDir Path tmp;

    private static final List<String> IMAGES = List.of("jpeg_progressive_203x157.jpg", "orient_6_203x157.jpg", "png_rgba.png",
            "webp_lossy_203x157.webp", "gif_palette.gif", "bmp_rgb24.bmp");

    static Stream<Arguments> paths() {
        return Stream.of(Arguments.of(ImageBackend.PIL, EncodeOptions.PixelFormat.FLOAT32),
                Arguments.of(ImageBackend.TORCHVISION, EncodeOptions.PixelFormat.FLOAT32),
                Arguments.of(ImageBackend.PIL, EncodeOptions.PixelFormat.UINT8));
    }

    private static EncodeOptions options(ImageBackend backend, EncodeOptions.PixelFormat format) {
        return EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(56 * 56, 112 * 112).withExif(ExifPolicy.APPLY)
                .withImageBackend(backend).withPixelFormat(format);
    }

    /** One sample per image of testdata/images, and a few large JPEGs that decode DCT-scaled (1/2, 1/4, 1/8). */
    private Map<ChatSample, Map<String, byte[]>> samples() throws IOException {
        var parser = new SampleParser();
        var out = new java.util.LinkedHashMap<ChatSample, Map<String, byte[]>>();
        Path dir = Vectors.projectDir().resolve("testdata/images");
        int i = 0;
        for (String name : IMAGES) {
            out.put(sample(parser, "s" + i++, name), Map.of(name, Files.readAllBytes(dir.resolve(name))));
        }
        for (int w : new int[] {640, 1280, 2000}) {
            String name = "big_" + w + ".jpg";
            out.put(sample(parser, "s" + i++, name), Map.of(name, SmallJpegDataset.jpeg(w, w * 3 / 4, w)));
        }
        return out;
    }

    private static ChatSample sample(SampleParser parser, String id, String image) {
        String json = "{\"id\": \"" + id + "\", \"image\": \"" + image + "\", \"conversations\": [{\"from\": \"human\", \"value\": "
                + "\"<image>\\nWhat is it?\"}, {\"from\": \"gpt\", \"value\": \"A picture.\"}]}";
        return parser.parseLine(json.getBytes(StandardCharsets.UTF_8), id);
    }

    @ParameterizedTest
    @MethodSource("paths")
    void cachedPixelsAreBitForBitTheDecodedOnes(ImageBackend backend, EncodeOptions.PixelFormat format) throws IOException {
        var options = options(backend, format);
        var samples = samples();
        var plain = new SampleEncoder(options, SharedTokenizer.get());
        var expected = new HashMap<String, EncodedSample>();
        for (var e : samples.entrySet()) expected.put(e.getKey().id(), plain.encode(e.getKey(), e.getValue()));

        Path dir = tmp.resolve("cache");
        try (var store = SampleCache.open(dir, 1L << 30)) {
            var cached = new SampleEncoder(options, SharedTokenizer.get()).useCache(new PreprocessedCache(store));
            for (int round = 0; round < 2; round++) { // round 0 misses and stores, round 1 hits
                for (var e : samples.entrySet()) assertSame(expected.get(e.getKey().id()), cached.encode(e.getKey(), e.getValue()), "round " + round);
            }
            var s = store.stats(); // per sample two entries: its image's pixels and its tokens
            assertEquals(2 * samples.size(), s.written(), s.toString());
            assertEquals(2 * samples.size(), s.hits(), s.toString());
            assertEquals(2 * samples.size(), s.misses(), s.toString());
        }
        // a restarted service over the same folder: hits only, in place in native memory too (the batch's segment)
        try (var store = SampleCache.open(dir, 1L << 30); var arena = Arena.ofConfined()) {
            var cached = new SampleEncoder(options, SharedTokenizer.get()).useCache(new PreprocessedCache(store));
            for (var e : samples.entrySet()) {
                var want = expected.get(e.getKey().id());
                assertSame(want, cached.encode(e.getKey(), e.getValue()), "after a restart");
                var prepared = cached.prepare(e.getKey(), e.getValue());
                var seg = arena.allocate(prepared.pixelBytes() + 16);
                cached.writePixels(prepared, seg, 16);
                var bytes = seg.asSlice(16).toArray(ValueLayout.JAVA_BYTE);
                if (format == EncodeOptions.PixelFormat.UINT8) assertArrayEquals(want.pixelsU8(), bytes, "in place, u8");
                else {
                    var floats = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
                    float[] got = new float[floats.remaining()];
                    floats.get(got);
                    assertArrayEquals(want.pixelValues(), got, "in place, float32");
                }
            }
            assertEquals(0, store.stats().misses(), store.stats().toString());
        }
    }

    /**
     * A cluster node routes image entries elsewhere ({@link PreprocessedCache#routeMedia}, its AffineCache): the pixels
     * are read and written there, the tokens stay in the node's own cache, and what the encoder gives is the same bit
     * for bit.
     */
    @Test
    void imageEntriesGoWhereTheyAreRoutedAndTokensStayLocal() throws IOException {
        var options = options(ImageBackend.PIL, EncodeOptions.PixelFormat.FLOAT32);
        var samples = samples();
        var plain = new SampleEncoder(options, SharedTokenizer.get());
        try (var local = SampleCache.open(tmp.resolve("local"), 1L << 30); var routed = SampleCache.open(tmp.resolve("routed"), 1L << 30)) {
            var cache = new PreprocessedCache(local);
            cache.routeMedia(routed);
            var cached = new SampleEncoder(options, SharedTokenizer.get()).useCache(cache);
            for (int round = 0; round < 2; round++)
                for (var e : samples.entrySet()) assertSame(plain.encode(e.getKey(), e.getValue()), cached.encode(e.getKey(), e.getValue()), "round " + round);
            assertEquals(samples.size(), routed.stats().written(), "the images' pixels, routed: " + routed.stats());
            assertEquals(samples.size(), routed.stats().hits(), routed.stats().toString());
            assertEquals(samples.size(), local.stats().written(), "the tokens, local: " + local.stats());
            cache.routeMedia(null); // back to the node's own cache, which holds no pixels
            for (var e : samples.entrySet()) assertSame(plain.encode(e.getKey(), e.getValue()), cached.encode(e.getKey(), e.getValue()), "local");
            assertEquals(2L * samples.size(), local.stats().written(), "now the pixels too: " + local.stats());
        }
    }

    private static void assertSame(EncodedSample want, EncodedSample got, String where) {
        assertArrayEquals(want.inputIds(), got.inputIds(), where);
        assertArrayEquals(want.labels(), got.labels(), where);
        assertArrayEquals(want.attentionMask(), got.attentionMask(), where);
        assertArrayEquals(want.positionIds(), got.positionIds(), where);
        assertArrayEquals(want.imageGridThw(), got.imageGridThw(), where);
        assertArrayEquals(want.pixelValues(), got.pixelValues(), where + ": pixel_values of " + want.id());
        assertArrayEquals(want.pixelsU8(), got.pixelsU8(), where + ": u8 pixels of " + want.id());
    }

    /** A tokenizer's identity is its tokenizer.json's digest: the same for two loads of one file, another for another file. */
    @Test
    void aTokenizersIdentityIsItsFilesDigest() throws IOException {
        try (var again = dev.stoker.text.QwenTokenizer.bundled()) {
            assertEquals(SharedTokenizer.get().identity(), again.identity());
            assertTrue(again.identity().matches("sha256:[0-9a-f]{64}"), again.identity());
        }
        Path other = tmp.resolve("tokenizer.json");
        try (var in = new java.util.zip.GZIPInputStream(dev.stoker.text.QwenTokenizer.class.getResourceAsStream(
                dev.stoker.text.QwenTokenizer.BUNDLED_RESOURCE))) {
            var json = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            Files.writeString(other, json + " "); // the same tokenizer, another file
        }
        try (var t = dev.stoker.text.QwenTokenizer.load(other)) {
            assertNotEquals(SharedTokenizer.get().identity(), t.identity());
        }
    }

    /** Entries of one setting are not another's: the keys differ in every setting that changes pixels, never by path. */
    @Test
    void theKeyHoldsEverySettingThatChangesPixelsAndNotThePath() {
        byte[] digest = dev.stoker.cache.CacheKey.sha256(new byte[] {1, 2, 3});
        var pil = options(ImageBackend.PIL, EncodeOptions.PixelFormat.FLOAT32);
        var base = PreprocessedCache.imageKey(pil, digest, dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 56, 112, 1);
        assertEquals(base, PreprocessedCache.imageKey(options(ImageBackend.PIL, EncodeOptions.PixelFormat.UINT8), digest,
                dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 56, 112, 1), "the wire format is applied on read");
        assertNotEquals(base, PreprocessedCache.imageKey(options(ImageBackend.TORCHVISION, EncodeOptions.PixelFormat.FLOAT32), digest,
                dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 56, 112, 1), "resize backend");
        assertNotEquals(base, PreprocessedCache.imageKey(pil.withExif(ExifPolicy.IGNORE), digest, dev.stoker.image.decode.ImageFormat.JPEG,
                100, 200, 56, 112, 1), "EXIF policy");
        assertNotEquals(base, PreprocessedCache.imageKey(pil, digest, dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 56, 112, 2), "DCT scale");
        assertNotEquals(base, PreprocessedCache.imageKey(pil, digest, dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 84, 168, 1), "target");
        assertNotEquals(base, PreprocessedCache.imageKey(pil, dev.stoker.cache.CacheKey.sha256(new byte[] {1, 2, 4}),
                dev.stoker.image.decode.ImageFormat.JPEG, 100, 200, 56, 112, 1), "content");
    }

    /** A flipped byte in every entry: each is recomputed (decoded again, bit for bit) and counted, never served. */
    @Test
    void aDamagedEntryIsRecomputedNotServed() throws IOException {
        var options = options(ImageBackend.PIL, EncodeOptions.PixelFormat.FLOAT32);
        var samples = samples();
        var plain = new SampleEncoder(options, SharedTokenizer.get());
        Path dir = tmp.resolve("cache");
        try (var store = SampleCache.open(dir, 1L << 30)) {
            var cached = new SampleEncoder(options, SharedTokenizer.get()).useCache(new PreprocessedCache(store));
            for (var e : samples.entrySet()) cached.encode(e.getKey(), e.getValue());
        }
        try (var files = Files.walk(dir)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".stc")).toList()) {
                byte[] b = Files.readAllBytes(f);
                b[b.length - 7] ^= 0x01;
                Files.write(f, b);
            }
        }
        try (var store = SampleCache.open(dir, 1L << 30)) {
            var cached = new SampleEncoder(options, SharedTokenizer.get()).useCache(new PreprocessedCache(store));
            for (var e : samples.entrySet()) assertSame(plain.encode(e.getKey(), e.getValue()), cached.encode(e.getKey(), e.getValue()), "damaged");
            var s = store.stats();
            assertEquals(2 * samples.size(), s.corrupt(), s.toString());
            assertEquals(0, s.hits(), s.toString());
            assertEquals(2 * samples.size(), s.written(), "recomputed entries written again: " + s);
            for (var e : samples.entrySet()) cached.encode(e.getKey(), e.getValue());
            assertEquals(2 * samples.size(), store.stats().hits());
            assertFalse(store.stats().corrupt() > 2 * samples.size());
            assertTrue(store.stats().storedBytes() > 0);
        }
    }
}
