package dev.stoker.video.ffmpeg;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.io.SeekableByteSource;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The version table, the refusal of other majors, the message for a missing library, and binding the real ones. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class FfmpegBindingTest {
    private static int v(int major, int minor, int micro) { return major << 16 | minor << 8 | micro; }

    @Test
    void ffmpeg51IsAcceptedAndOtherMajorsAreRefusedByName() {
        assertNull(FfmpegVersions.refusal(v(59, 27, 100), v(59, 37, 100), v(57, 28, 100)));
        String m = FfmpegVersions.refusal(v(60, 16, 100), v(60, 31, 102), v(58, 29, 100));
        assertTrue(m.contains("libavformat 60.16.100") && m.contains("libavcodec 60.31.102")
                && m.contains("libavutil 58.29.100"), m);
        assertTrue(m.contains("FFmpeg 5.1: libavformat 59, libavcodec 59, libavutil 57"), m);
        String one = FfmpegVersions.refusal(v(59, 27, 100), v(61, 3, 100), v(57, 28, 100));
        assertTrue(one.startsWith("unsupported FFmpeg version: libavcodec 61.3.100;"), one);
    }

    @Test
    void aMissingLibraryIsNamedInOneMessage() {
        String[][] libs = {{"libavutil.so.57"}, {"libavcodec-absent.so.59"}, {"libavformat.so.59"},
            {"libswscale.so.6"}};
        var e = assertThrows(FfmpegUnavailableException.class, () -> new Ffmpeg(libs));
        assertTrue(e.getMessage().startsWith("FFmpeg library libavcodec-absent.so.59 not found"), e.getMessage());
        assertTrue(e.getMessage().contains("images are not affected"), e.getMessage());
    }

    @Test
    void withoutTheLibrariesAVideoFailsAsThatSamplesErrorNamingTheLibrary() {
        String[][] libs = {{"libavutil-absent.so.57"}, {"libavcodec.so.59"}, {"libavformat.so.59"},
            {"libswscale.so.6"}};
        var e = assertThrows(dev.stoker.core.SampleException.class, () -> Demuxer.open(
                SeekableByteSource.of("clip.mp4", new byte[16]), System.nanoTime() + 1_000_000_000L,
                () -> new Ffmpeg(libs)));
        assertTrue(e.getMessage().startsWith("video clip.mp4: FFmpeg library libavutil-absent.so.57 not found"),
                e.getMessage());
        assertEquals(dev.stoker.core.SampleException.Stage.DECODE, e.stage());
    }

    @Test
    void theSystemLibrariesBindAndReportTheirVersions() {
        NativeTools.requireLibraries();
        String versions = Ffmpeg.get().versions();
        assertTrue(versions.matches("libavformat 59\\.\\d+\\.\\d+, libavcodec 59\\.\\d+\\.\\d+, "
                + "libavutil 57\\.\\d+\\.\\d+, libswscale 6\\.\\d+\\.\\d+"), versions);
        assertEquals("Invalid data found when processing input", Ffmpeg.get().errorText(-1094995529));
    }
}
