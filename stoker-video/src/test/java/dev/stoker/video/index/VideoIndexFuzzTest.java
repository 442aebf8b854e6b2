package dev.stoker.video.index;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.NativeTools;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes the container/index path: the bytes as a video through {@link FrameIndexer} (libavformat through the
 * custom AVIOContext's upcalls, the packet loop, the pts sort) with a packet bound and a deadline, and as a stored
 * index through {@link FrameIndex#fromBytes}.
 *
 * <p>The contract on every input: a {@link FrameIndex} whose entries are in pts order with at least one frame and
 * that round-trips through its stored format, or a {@link SampleException} at stage DECODE naming the video, with
 * a message; as a stored index, a {@code FrameIndex} or an {@link IOException}; never another exception, never a
 * hang (the class's {@code @Timeout}). libavformat itself is native: a crash in it ends the JVM, which a fuzz run
 * reports as a finding too. Every 100 inputs a good video still indexes.
 */
@Timeout(10)
class VideoIndexFuzzTest {
    private static final String NAME = "fuzzed-video";
    private static final FrameIndexer INDEXER = new FrameIndexer(100_000, 5_000_000_000L);
    private static long inputs;

    @FuzzTest(maxDuration = "10s")
    void index(byte[] data) {
        NativeTools.requireLibraries();
        FrameIndex x;
        try {
            x = INDEXER.index(SeekableByteSource.of(NAME, data));
            checkIndex(x);
        } catch (SampleException refused) {
            assertEquals(SampleException.Stage.DECODE, refused.stage(), refused.getMessage());
            assertEquals(NAME, refused.sampleId(), refused.getMessage());
            assertTrue(refused.getMessage().startsWith("video " + NAME + ": "), refused.getMessage());
        }
        try {
            FrameIndex stored = FrameIndex.fromBytes(data);
            assertEquals(stored, FrameIndex.fromBytes(stored.toBytes()));
        } catch (IOException refused) {
            assertTrue(refused.getMessage() != null && !refused.getMessage().isBlank(), "a refusal says why");
        }
        if (++inputs % 100 == 0) goodVideoStillIndexes();
    }

    private static void checkIndex(FrameIndex x) {
        assertTrue(x.frameCount() >= 1, "an index without frames: " + x);
        for (int i = 1; i < x.entryCount(); i++) {
            assertTrue(x.pts()[i - 1] <= x.pts()[i], "pts order broken at " + i);
        }
        try {
            assertEquals(x, FrameIndex.fromBytes(x.toBytes()));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void goodVideoStillIndexes() {
        try (var in = VideoIndexFuzzTest.class.getResourceAsStream(
                "VideoIndexFuzzTestInputs/index/h264_5frames_faststart.mp4")) {
            assertEquals(5, INDEXER.index(SeekableByteSource.of("good.mp4", in.readAllBytes())).frameCount());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
