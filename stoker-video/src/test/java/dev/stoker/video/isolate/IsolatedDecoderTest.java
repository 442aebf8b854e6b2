package dev.stoker.video.isolate;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.ffmpeg.NativeTools;
import dev.stoker.video.index.FrameIndex;
import dev.stoker.video.index.FrameIndexer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Decoding in worker processes (real child JVMs): the same frames as in-process decoding, from a file the worker
 * opens and from bytes it reads through the protocol; a video's error comes back as that video's error and the
 * worker serves the next one; a worker that crashes in native code (a SIGSEGV in libc made by the test hook, as a crashing
 * decoder does) fails only that video, naming it, and the next video is decoded by a new worker.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class IsolatedDecoderTest {
    @TempDir static Path dir;
    static IsolatedDecoder decoder;

    @BeforeAll
    static void setUp() throws Exception {
        NativeTools.requireFfmpegCli();
        NativeTools.requireLibraries();
        NativeTools.ffmpeg(dir, "clip.mp4", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25:duration=1", "-c:v",
                "libx264", "-preset", "ultrafast", "-g", "8", "-pix_fmt", "yuv420p", "-colorspace", "bt709");
        Files.copy(dir.resolve("clip.mp4"), dir.resolve("crash-me.mp4"));
        decoder = new IsolatedDecoder(1, List.of("-D" + DecodeWorker.CRASH_ON + "=crash-me"));
    }

    @AfterAll
    static void tearDown() {
        if (decoder != null) decoder.close();
    }

    private static FrameIndex index(SeekableByteSource s) { return new FrameIndexer().index(s); }

    private static byte[] frames(boolean isolated, SeekableByteSource source, FrameIndex index, int[] wanted) {
        var out = new ByteArrayOutputStream();
        VideoDecoder.FrameSink sink = (f, w, h, rgb) -> out.write(rgb, 0, w * h * 3);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        if (isolated) decoder.decode(source, index, wanted, deadline, sink);
        else VideoDecoder.decode(source, index, wanted, deadline, sink);
        return out.toByteArray();
    }

    @Test
    void aWorkerGivesTheSameFramesAsInProcessFromAFileAndFromBytes() throws IOException {
        int[] wanted = {0, 3, 9, 17, 24};
        try (var file = SeekableByteSource.of(dir.resolve("clip.mp4"))) {
            FrameIndex index = index(file);
            byte[] expected = frames(false, file, index, wanted);
            assertEquals(5 * 64 * 48 * 3, expected.length);
            assertArrayEquals(expected, frames(true, file, index, wanted), "a local file the worker opens itself");
            var bytes = SeekableByteSource.of("in-memory.mp4", Files.readAllBytes(dir.resolve("clip.mp4")));
            assertArrayEquals(expected, frames(true, bytes, index, wanted), "bytes read through the protocol");
        }
    }

    @Test
    void aVideosErrorIsThatVideosAndTheWorkerServesTheNext() throws IOException {
        byte[] good = Files.readAllBytes(dir.resolve("clip.mp4"));
        FrameIndex index = index(SeekableByteSource.of("clip.mp4", good));
        byte[] cut = java.util.Arrays.copyOf(good, good.length / 2);
        int startedBefore = decoder.workersStarted();
        var e = assertThrows(SampleException.class,
                () -> frames(true, SeekableByteSource.of("cut.mp4", cut), index, new int[] {20}));
        assertTrue(e.getMessage().startsWith("video cut.mp4: "), e.getMessage());
        assertEquals(64 * 48 * 3, frames(true, SeekableByteSource.of("clip.mp4", good), index, new int[] {1}).length);
        assertTrue(decoder.workersStarted() <= Math.max(1, startedBefore), "no new worker for a reported error");
    }

    @Test
    void aDecoderThatCrashesFailsOnlyItsVideo() throws IOException {
        byte[] good = Files.readAllBytes(dir.resolve("clip.mp4"));
        FrameIndex index = index(SeekableByteSource.of("clip.mp4", good));
        frames(true, SeekableByteSource.of("clip.mp4", good), index, new int[] {0}); // a worker is up
        int died = decoder.workersDied(), started = decoder.workersStarted();
        try (var crashing = SeekableByteSource.of(dir.resolve("crash-me.mp4"))) {
            var e = assertThrows(SampleException.class, () -> frames(true, crashing, index, new int[] {0, 5}));
            assertTrue(e.getMessage().contains("crash-me.mp4: the decode worker process died while decoding it"),
                    e.getMessage());
            assertTrue(e.getMessage().contains("it crashed in native code: SIGSEGV (0xb) in C  [libc.so.6+"),
                    e.getMessage());
        }
        assertEquals(died + 1, decoder.workersDied());
        byte[] after = frames(true, SeekableByteSource.of("clip.mp4", good), index, new int[] {0, 5});
        assertEquals(2 * 64 * 48 * 3, after.length, "the next video is decoded by a new worker");
        assertEquals(started + 1, decoder.workersStarted());
    }
}
