package dev.stoker.encode.video;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.video.ffmpeg.Ffmpeg;
import dev.stoker.video.sample.VideoSampler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The decoder path a job's fingerprint holds: FFmpeg's rgb24 conversion with the versions of the libraries bound, or,
 * where FFmpeg cannot be bound, a text that says so (nothing thrown: images work without FFmpeg); and the sampler
 * Stoker cannot encode yet, refused by one check that the encoding and the settings share.
 */
@Timeout(60)
class VideoEncodingTest {
    @Test
    void theDecoderPathNamesTheLibrariesVersionsOrSaysFfmpegIsUnavailable() {
        assertEquals("decoder=FFmpeg rgb24 swscale bicubic (libavformat 59.27.100, libavcodec 59.37.100, libavutil 57.28.100, "
                + "libswscale 6.7.100)", VideoEncoding.decoderPath(null, "libavformat 59.27.100, libavcodec 59.37.100, "
                + "libavutil 57.28.100, libswscale 6.7.100"));
        assertEquals("decoder=FFmpeg unavailable", VideoEncoding.decoderPath("FFmpeg library libavformat.so.59 not found", null));
        String here = VideoEncoding.decoderPath();
        if (Ffmpeg.unavailableReason() == null) assertTrue(here.contains("(" + Ffmpeg.get().versions() + ")"), here);
        else assertEquals("decoder=FFmpeg unavailable", here);
    }
}
