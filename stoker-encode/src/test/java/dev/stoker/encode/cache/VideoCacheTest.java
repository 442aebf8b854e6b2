package dev.stoker.encode.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cache.SampleCache;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.encode.video.VideoPreprocessor;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Videos through the cache of preprocessed samples: a video's resized frames read back from the cache give every
 * video tensor bit for bit (float32 {@code pixel_values_videos} and the compact u8 frames, heap and in place), a hit
 * decodes no frame, and two videos whose first and last 64 KiB agree (what the frame index store's key reads) but
 * whose middle differs get entries of their own: the key is the digest of all the bytes.
 */
@Timeout(120)
@ExtendWith(SharedTokenizer.class)
class VideoCacheTest {
    @TempDir Path tmp;

    private static SampleEncoder encoder(EncodeOptions.PixelFormat format, VideoSampler sampler) {
        var video = new VideoEncoding(sampler, VideoOptions.DEFAULTS, null, VideoContract.TRANSFORMERS_5_18, CpuCapability.AVX2,
                VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        return new SampleEncoder(EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withVideo(video).withPixelFormat(format),
                SharedTokenizer.get());
    }

    private static byte[] record(String video) {
        return ("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": \"" + video + "\"}, "
                + "{\"type\": \"text\", \"text\": \"What happens?\"}]}, {\"role\": \"assistant\", \"content\": \"Things move.\"}]}")
                .getBytes(StandardCharsets.UTF_8);
    }

    @ParameterizedTest
    @EnumSource(value = EncodeOptions.PixelFormat.class)
    void cachedFramesGiveEveryVideoTensorBitForBit(EncodeOptions.PixelFormat format) throws Exception {
        FfmpegClips.require();
        byte[] a = Files.readAllBytes(FfmpegClips.h264(tmp.resolve("a.mp4"), "640x480", "10", 3.0));
        byte[] b = middleChanged(a);
        var videos = Map.of("a.mp4", a, "b.mp4", b);
        VideoPreprocessor.VideoSource src = (id, ref) -> SeekableByteSource.of(ref, videos.get(ref));
        SampleEncoder.ImageSource none = (id, ref) -> {
            throw new IllegalStateException("no image here: " + ref);
        };
        for (VideoSampler sampler : new VideoSampler[] {VideoSampler.HF, VideoSampler.LLAMAFACTORY}) {
            var plain = encoder(format, sampler);
            var wantA = plain.encode(plain.parse(record("a.mp4"), "a"), none, src);
            var wantB = plain.encode(plain.parse(record("b.mp4"), "b"), none, src);
            try (var store = SampleCache.open(tmp.resolve("cache-" + format + "-" + sampler), 1L << 30)) {
                var cached = encoder(format, sampler).useCache(new PreprocessedCache(store));
                for (int round = 0; round < 2; round++) {
                    assertSameVideo(wantA, cached.encode(cached.parse(record("a.mp4"), "a"), none, src), sampler + " a, round " + round);
                    assertSameVideo(wantB, cached.encode(cached.parse(record("b.mp4"), "b"), none, src), sampler + " b, round " + round);
                }
                var s = store.stats();
                assertEquals(2, s.written(), "a and b are two entries: their digests differ in the middle: " + s);
                assertEquals(2, s.hits(), s.toString());
                assertEquals(2, s.misses(), s.toString());
                // in place (the batch's shared memory): the hit path writes the same bytes
                var prepared = cached.prepare(cached.parse(record("a.mp4"), "a"), Map.of(), src);
                long framesBefore = cached.videoStats().framesDecoded();
                try (var arena = Arena.ofConfined()) {
                    var seg = arena.allocate(prepared.videoBytes() + 8);
                    cached.writeVideoPixels(prepared, seg, 8);
                    byte[] got = seg.asSlice(8).toArray(ValueLayout.JAVA_BYTE);
                    if (format == EncodeOptions.PixelFormat.UINT8) assertArrayEquals(wantA.videos().pixelsU8(), got, "in place, u8");
                    else {
                        float[] f = new float[got.length / 4];
                        java.nio.ByteBuffer.wrap(got).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(f);
                        assertArrayEquals(wantA.videos().pixelValuesVideos(), f, "in place, float32");
                    }
                }
                assertEquals(framesBefore, cached.videoStats().framesDecoded(), "a hit decodes no frame");
                assertEquals(3, store.stats().hits());
            }
        }
    }

    /** {@code bytes} with one byte in the middle changed: the same first and last 64 KiB, another video. */
    private static byte[] middleChanged(byte[] bytes) {
        assertTrue(bytes.length > 2 * (64 << 10) + 1000, "the clip is long enough to have a middle: " + bytes.length);
        byte[] out = bytes.clone();
        // a byte of the mdat payload (a frame's entropy-coded data), so the container stays valid and decodes
        out[bytes.length / 2] ^= 0x01;
        return out;
    }

    private static void assertSameVideo(EncodedSample want, EncodedSample got, String where) {
        assertArrayEquals(want.inputIds(), got.inputIds(), where);
        assertArrayEquals(want.videos().videoGridThw(), got.videos().videoGridThw(), where);
        assertArrayEquals(want.videos().pixelValuesVideos(), got.videos().pixelValuesVideos(), where + ": pixel_values_videos");
        assertArrayEquals(want.videos().pixelsU8(), got.videos().pixelsU8(), where + ": u8 frames");
    }
}
