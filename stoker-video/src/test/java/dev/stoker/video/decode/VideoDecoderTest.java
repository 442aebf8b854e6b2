package dev.stoker.video.decode;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.NativeTools;
import dev.stoker.video.index.FrameIndex;
import dev.stoker.video.index.FrameIndexer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The decoder's frames against the reference decoder, {@code ffmpeg -noautorotate -i V -fps_mode passthrough -f
 * rawvideo -pix_fmt rgb24} (Debian's ffmpeg 5.1 CLI; byte-identical to PyAV 18.1's {@code to_ndarray("rgb24")} on
 * the conformance clips): byte for byte, every frame, on FFmpeg-made clips of every kind of colour handling — untagged
 * (BT.601), tagged BT.709 and BT.2020, full range, 4:2:0/4:2:2/4:4:4, 10-bit, odd sizes, RGB codecs, containers
 * without pts — and for sampled frames with seeking, which must give the same frames while decoding fewer.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VideoDecoderTest {
    @TempDir static Path dir;
    private static final String[] X264 = {"-c:v", "libx264", "-preset", "ultrafast", "-bf", "3", "-g", "12"};

    @BeforeAll
    static void media() throws Exception {
        NativeTools.requireFfmpegCli();
        NativeTools.requireLibraries();
        String src = "testsrc2=size=64x48:rate=25:duration=1";
        make("h264_untagged.mp4", src, X264, "-pix_fmt", "yuv420p");
        make("h264_bt709.mp4", src, X264, "-pix_fmt", "yuv420p", "-color_primaries", "bt709", "-color_trc",
                "bt709", "-colorspace", "bt709");
        make("h264_bt2020.mp4", src, X264, "-pix_fmt", "yuv420p", "-colorspace", "bt2020nc");
        make("h264_full_range.mp4", src, X264, "-pix_fmt", "yuv420p", "-color_range", "pc", "-colorspace", "bt709");
        make("h264_yuvj420p.mp4", src, X264, "-pix_fmt", "yuvj420p");
        make("h264_444_odd.mp4", "testsrc2=size=63x47:rate=25:duration=1", X264, "-pix_fmt", "yuv444p");
        make("h264_422.mp4", src, X264, "-pix_fmt", "yuv422p");
        make("h264_10bit.mp4", src, X264, "-pix_fmt", "yuv420p10le");
        make("x264rgb.mp4", src, new String[] {"-c:v", "libx264rgb", "-qp", "0", "-preset", "ultrafast"});
        make("png.mov", "testsrc2=size=64x48:rate=5:duration=1", new String[] {"-c:v", "png"});
        make("vp9_odd.webm", "testsrc2=size=65x49:rate=25:duration=1", new String[] {"-c:v", "libvpx-vp9",
            "-deadline", "realtime", "-cpu-used", "8", "-g", "10"});
        make("mpeg4.avi", src, new String[] {"-c:v", "mpeg4", "-q:v", "5"});
        make("h264.avi", src, X264, "-pix_fmt", "yuv420p");
        make("raw.avi", "testsrc2=size=32x24:rate=5:duration=1", new String[] {"-c:v", "rawvideo", "-pix_fmt", "bgr24"});
        NativeTools.ffmpeg(dir, "edit_list.mp4", "-ss", "0.3", "-i", "h264_untagged.mp4", "-c", "copy");
        NativeTools.ffmpeg(dir, "one_frame.mp4", "-i", "h264_untagged.mp4", "-frames:v", "1", "-c", "copy");
        // 10 s of noisy 320x240 (~1 MB) with a keyframe every half second: what a seek reads
        make("seek.mp4", "testsrc2=size=320x240:rate=30:duration=10,noise=alls=4:allf=t", new String[] {"-c:v",
            "libx264", "-preset", "ultrafast", "-g", "15", "-keyint_min", "15", "-sc_threshold", "0", "-pix_fmt",
            "yuv420p"});
        // 10 s at 30 fps, a keyframe every second: seeking pays
        make("long.mp4", "testsrc2=size=96x64:rate=30:duration=10", new String[] {"-c:v", "libx264", "-preset",
            "ultrafast", "-bf", "2", "-g", "30", "-keyint_min", "30", "-sc_threshold", "0", "-pix_fmt", "yuv420p"});
    }

    private static void make(String out, String lavfi, String[] codec, String... more) throws Exception {
        List<String> args = new ArrayList<>(List.of("-f", "lavfi", "-i", lavfi));
        args.addAll(List.of(codec));
        args.addAll(List.of(more));
        NativeTools.ffmpeg(dir, out, args.toArray(String[]::new));
    }

    /** Every frame as the reference decoder gives it. */
    private static byte[] reference(String file) throws Exception {
        String out = file + ".rgb";
        NativeTools.ffmpeg(dir, out, "-noautorotate", "-i", file, "-fps_mode", "passthrough", "-f", "rawvideo",
                "-pix_fmt", "rgb24");
        return Files.readAllBytes(dir.resolve(out));
    }

    private static FrameIndex index(String file) throws IOException {
        try (var source = SeekableByteSource.of(dir.resolve(file))) {
            return new FrameIndexer().index(source);
        }
    }

    /** The frames asked for, concatenated, and the decode's result. */
    private record Decoded(byte[] rgb, VideoDecoder.Result result, int width, int height) {}

    private static Decoded decode(String file, FrameIndex index, int[] frames) throws IOException {
        var out = new java.io.ByteArrayOutputStream();
        int[] size = new int[2];
        VideoDecoder.Result r;
        try (var source = SeekableByteSource.of(dir.resolve(file))) {
            r = VideoDecoder.decode(source, index, frames, System.nanoTime() + 60_000_000_000L, (f, w, h, rgb) -> {
                out.write(rgb, 0, w * h * 3);
                size[0] = w;
                size[1] = h;
            });
        }
        return new Decoded(out.toByteArray(), r, size[0], size[1]);
    }

    @ParameterizedTest
    @ValueSource(strings = {"h264_untagged.mp4", "h264_bt709.mp4", "h264_bt2020.mp4", "h264_full_range.mp4",
        "h264_yuvj420p.mp4", "h264_444_odd.mp4", "h264_422.mp4", "h264_10bit.mp4", "x264rgb.mp4", "png.mov",
        "vp9_odd.webm", "mpeg4.avi", "h264.avi", "edit_list.mp4", "one_frame.mp4", "raw.avi"})
    void everyFrameIsTheReferenceDecodersByteForByte(String file) throws Exception {
        FrameIndex index = index(file);
        int n = index.frameCount();
        int[] all = new int[n];
        for (int i = 0; i < n; i++) all[i] = i;
        Decoded d = decode(file, index, all);
        byte[] expected = reference(file);
        assertEquals(expected.length, d.rgb().length, file + ": bytes of all frames (" + n + " frames of "
                + d.width() + "x" + d.height() + ")");
        assertTrue(Arrays.equals(expected, d.rgb()), file + ": frames differ from ffmpeg's rgb24 at byte "
                + Arrays.mismatch(expected, d.rgb()));
        assertEquals(n, d.result().framesDecoded());
        assertEquals(0, d.result().seeks());
    }

    @Test
    void sampledFramesAreTheSequentialOnesAndOnlyThePacketsNeededAreDecoded() throws Exception {
        FrameIndex index = index("long.mp4");
        assertEquals(300, index.frameCount());
        byte[] all = reference("long.mp4");
        int frameBytes = 96 * 64 * 3;
        int[] wanted = {5, 40, 40, 100, 131, 220, 299};
        Decoded d = decode("long.mp4", index, wanted);
        int[] distinct = Arrays.stream(wanted).distinct().toArray();
        assertEquals(distinct.length * frameBytes, d.rgb().length);
        for (int i = 0; i < distinct.length; i++) {
            int f = distinct[i];
            assertArrayEquals(Arrays.copyOfRange(all, f * frameBytes, (f + 1) * frameBytes),
                    Arrays.copyOfRange(d.rgb(), i * frameBytes, (i + 1) * frameBytes), "frame " + f);
        }
        // keyframes every 30: at most the GOPs' frames up to each wanted one, 0..5, 30..40, 90..100, 120..131,
        // 210..220, 270..299 = 6+11+11+12+11+30 = 81; the B-frames nothing refers to among them are skipped (58 here)
        assertTrue(d.result().framesDecoded() < 81 && d.result().framesDecoded() > 6, d.result().toString());
        assertEquals(5, d.result().seeks());
    }

    @Test
    void aSeekReadsTheBytesOfItsGroupOfPicturesNotTheFile() throws Exception {
        FrameIndex index = index("seek.mp4");
        long[] read = new long[1];
        try (var file = SeekableByteSource.of(dir.resolve("seek.mp4"))) {
            SeekableByteSource counting = new SeekableByteSource() {
                @Override public String name() { return file.name(); }

                @Override public long sizeBytes() throws IOException { return file.sizeBytes(); }

                @Override
                public int read(long position, java.lang.foreign.MemorySegment dst) throws IOException {
                    int n = file.read(position, dst);
                    if (n > 0) read[0] += n;
                    return n;
                }
            };
            var r = VideoDecoder.decode(counting, index, new int[] {280}, System.nanoTime() + 60_000_000_000L,
                    (f, w, h, rgb) -> {});
            assertEquals(11, r.framesDecoded(), "the keyframe at 270 and the frames up to 280");
            long size = file.sizeBytes();
            // the header, the packets FFmpeg's stream analysis reads at the start, and one GOP (1/20 of the media)
            assertTrue(read[0] < size / 4, "read " + read[0] + " bytes of " + size);
        }
    }

    @Test
    void randomSamplesEqualTheSequentialDecode() throws Exception {
        FrameIndex index = index("long.mp4");
        byte[] all = reference("long.mp4");
        int frameBytes = 96 * 64 * 3;
        Random random = new Random(29);
        for (int round = 0; round < 5; round++) {
            int[] wanted = random.ints(1 + random.nextInt(12), 0, 300).sorted().toArray();
            Decoded d = decode("long.mp4", index, wanted);
            int[] distinct = Arrays.stream(wanted).distinct().toArray();
            for (int i = 0; i < distinct.length; i++) {
                int f = distinct[i];
                assertTrue(Arrays.equals(all, f * frameBytes, (f + 1) * frameBytes, d.rgb(), i * frameBytes,
                        (i + 1) * frameBytes), "frame " + f + " of " + Arrays.toString(wanted));
            }
            assertTrue(d.result().framesDecoded() <= 300, d.result().toString());
        }
    }

    @Test
    void aFrameOutsideTheVideoIsTheSamplesError() throws Exception {
        FrameIndex index = index("h264_untagged.mp4");
        var e = assertThrows(SampleException.class, () -> decode("h264_untagged.mp4", index, new int[] {3, 25}));
        assertTrue(e.getMessage().contains("frame 25 asked for, it has 25"), e.getMessage());
    }

    @Test
    void aDeclared30000By30000StreamIsRefusedBeforeDecoding() throws Exception {
        // libavformat itself zeroes a size av_image_check_size refuses; a size it lets through but Stoker's bound
        // does not (a 20000-pixel-wide stream) is refused by Stoker: neither reaches the decoder
        assertRefusedAs(30_000, 30_000, "its stream declares a frame of 0x0: outside what Stoker decodes");
        assertRefusedAs(20_000, 24, "its stream declares a frame of 20000x24: outside what Stoker decodes");
    }

    private static void assertRefusedAs(int width, int height, String message) throws Exception {
        byte[] avi = Files.readAllBytes(dir.resolve("raw.avi"));
        // the BITMAPINFOHEADER of the stream format chunk: "strf", its size, biSize, then biWidth and biHeight
        int strf = indexOf(avi, "strf".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        var header = java.nio.ByteBuffer.wrap(avi).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        assertEquals(32, header.getInt(strf + 12));
        header.putInt(strf + 12, width).putInt(strf + 16, height);
        String name = "huge_" + width + ".avi";
        Files.write(dir.resolve(name), avi);
        FrameIndex index = index(name);
        var e = assertThrows(SampleException.class, () -> decode(name, index, new int[] {0}));
        assertTrue(e.getMessage().contains(message), e.getMessage());
    }

    private static int indexOf(byte[] hay, byte[] needle) {
        for (int i = 0; i + needle.length <= hay.length; i++) {
            if (Arrays.equals(hay, i, i + needle.length, needle, 0, needle.length)) return i;
        }
        throw new AssertionError("not found");
    }

    @Test
    void aPassedDeadlineStopsTheDecode() throws Exception {
        FrameIndex index = index("long.mp4");
        try (var source = SeekableByteSource.of(dir.resolve("long.mp4"))) {
            var e = assertThrows(SampleException.class, () -> VideoDecoder.decode(source, index, new int[] {299},
                    System.nanoTime() - 1, (f, w, h, rgb) -> {}));
            assertTrue(e.getMessage().contains("deadline"), e.getMessage());
        }
    }

    @Test
    void decodingLeavesNoNativeMemoryBehind() throws Exception {
        byte[] good = Files.readAllBytes(dir.resolve("h264_bt709.mp4"));
        FrameIndex index = index("h264_bt709.mp4");
        Runnable run = () -> {
            VideoDecoder.decode(SeekableByteSource.of("v.mp4", good), index, new int[] {0, 7, 20}, System.nanoTime()
                    + 60_000_000_000L, (f, w, h, rgb) -> {});
            assertThrows(SampleException.class, () -> VideoDecoder.decode(SeekableByteSource.of("v.mp4", good), index,
                    new int[] {3}, System.nanoTime() - 1, (f, w, h, rgb) -> {}));
        };
        for (int i = 0; i < 30; i++) run.run();
        System.gc();
        long before = dev.stoker.video.ffmpeg.NativeHeap.inUseBytes();
        for (int i = 0; i < 150; i++) run.run();
        System.gc();
        long grownBytes = dev.stoker.video.ffmpeg.NativeHeap.inUseBytes() - before;
        // a decoder context with its frame pool is ~100 KB at 64x48: 150 left behind would be ~15 MB
        assertTrue(grownBytes < 12 << 20, "the C heap grew by " + grownBytes + " bytes over 150 runs");
    }

    @Test
    void damagedSliceDataIsAnErrorNotAConcealedFrame() throws Exception {
        Path good = dir.resolve("long.mp4");
        byte[] bytes = Files.readAllBytes(good);
        FrameIndex index = index("long.mp4");
        // overwrite the middle of the media data (packet sizes stay: the index is the same, the slices are garbage)
        Random random = new Random(7);
        byte[] damaged = bytes.clone();
        for (int i = bytes.length / 3; i < bytes.length / 3 + 2000; i++) damaged[i] = (byte) random.nextInt();
        Files.write(dir.resolve("damaged.mp4"), damaged);
        int[] all = new int[300];
        for (int i = 0; i < 300; i++) all[i] = i;
        var e = assertThrows(SampleException.class, () -> decode("damaged.mp4", index, all));
        assertTrue(e.getMessage().startsWith("video "), e.getMessage());
    }
}
