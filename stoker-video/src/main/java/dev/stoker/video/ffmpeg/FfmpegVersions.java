package dev.stoker.video.ffmpeg;

import java.util.List;

/**
 * The FFmpeg library majors Stoker has struct layouts for ({@link AvField}), and the check made once when the
 * libraries are bound: any other major is refused, naming the library, its version and the supported ones.
 */
public final class FfmpegVersions {
    /** One FFmpeg release's library majors. */
    public record Majors(String release, int avformat, int avcodec, int avutil) {}

    /** Debian 12's FFmpeg 5.1 (lavf 59.27, lavc 59.37, lavu 57.28). */
    public static final List<Majors> SUPPORTED = List.of(new Majors("FFmpeg 5.1", 59, 59, 57));

    private FfmpegVersions() {}

    /** "59.27.100" from an {@code AV_VERSION_INT} as the {@code *_version()} functions return it. */
    public static String dotted(int versionInt) {
        return (versionInt >>> 16) + "." + ((versionInt >>> 8) & 0xff) + "." + (versionInt & 0xff);
    }

    /** Null when the three versions match one supported release, else the message that refuses them. */
    public static String refusal(int avformatVersion, int avcodecVersion, int avutilVersion) {
        int f = avformatVersion >>> 16, c = avcodecVersion >>> 16, u = avutilVersion >>> 16;
        for (Majors m : SUPPORTED) if (m.avformat == f && m.avcodec == c && m.avutil == u) return null;
        StringBuilder wrong = new StringBuilder();
        Majors first = SUPPORTED.getFirst();
        if (f != first.avformat) wrong.append("libavformat ").append(dotted(avformatVersion)).append(", ");
        if (c != first.avcodec) wrong.append("libavcodec ").append(dotted(avcodecVersion)).append(", ");
        if (u != first.avutil) wrong.append("libavutil ").append(dotted(avutilVersion)).append(", ");
        if (wrong.isEmpty()) {
            wrong.append("libavformat ").append(dotted(avformatVersion)).append(", libavcodec ")
                    .append(dotted(avcodecVersion)).append(", libavutil ").append(dotted(avutilVersion)).append(", ");
        }
        StringBuilder supported = new StringBuilder();
        for (Majors m : SUPPORTED) {
            if (!supported.isEmpty()) supported.append("; ");
            supported.append(m.release).append(": libavformat ").append(m.avformat).append(", libavcodec ")
                    .append(m.avcodec).append(", libavutil ").append(m.avutil);
        }
        return "unsupported FFmpeg version: " + wrong.substring(0, wrong.length() - 2)
                + "; Stoker has struct layouts only for " + supported + " (install Debian 12's libavformat59 "
                + "libavcodec59 libavutil57 libswscale6 libswresample4)";
    }
}
