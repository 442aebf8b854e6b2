package dev.stoker.video.ffmpeg;

/**
 * FFmpeg could not be used: a library is missing, a symbol is absent or the version has no struct layout in
 * Stoker. Video samples fail with this message; nothing else in Stoker loads FFmpeg.
 */
public final class FfmpegUnavailableException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public FfmpegUnavailableException(String message) { super(message); }
}
