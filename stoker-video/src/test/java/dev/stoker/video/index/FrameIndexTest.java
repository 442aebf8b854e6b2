package dev.stoker.video.index;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.video.ffmpeg.Rational;
import dev.stoker.video.ffmpeg.StreamInfo;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The stored format without FFmpeg: round trip, and every malformed input refused with an IOException. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class FrameIndexTest {
    private static FrameIndex sample() {
        var s = new StreamInfo(0, "avi", "h264", new Rational(12, 359), new Rational(359, 12), new Rational(359, 12),
                64, 48, 0, "yuv420p", 2, 1, 2, 2, Double.NaN, 0, 30, 30);
        return new FrameIndex(s, new long[] {0, 1, 2}, new long[] {0, 1, 2}, new long[] {1, 1, 1},
                new byte[] {FrameIndex.KEY, 0, FrameIndex.DISCARD});
    }

    @Test
    void roundTripAndCounts() throws IOException {
        FrameIndex x = sample();
        assertEquals(x, FrameIndex.fromBytes(x.toBytes()));
        assertEquals(3, x.entryCount());
        assertEquals(2, x.frameCount());
        assertEquals(2, x.durationTicks());
    }

    @Test
    void malformedBytesAreRefused() {
        byte[] good = sample().toBytes();
        byte[] magic = good.clone();
        magic[7] = '9';
        assertTrue(assertThrows(IOException.class, () -> FrameIndex.fromBytes(magic)).getMessage().contains("magic"));
        for (int len = 0; len < good.length; len += 7) {
            byte[] cut = Arrays.copyOf(good, len);
            assertThrows(IOException.class, () -> FrameIndex.fromBytes(cut), "truncated to " + len);
        }
        byte[] huge = good.clone();
        int headBytes = ByteBuffer.wrap(good, 8, 4).order(ByteOrder.LITTLE_ENDIAN).getInt();
        ByteBuffer.wrap(huge).order(ByteOrder.LITTLE_ENDIAN).putInt(12 + headBytes, Integer.MAX_VALUE);
        assertTrue(assertThrows(IOException.class, () -> FrameIndex.fromBytes(huge)).getMessage().contains("claims"));
    }
}
