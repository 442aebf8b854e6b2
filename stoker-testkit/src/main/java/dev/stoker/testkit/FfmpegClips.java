package dev.stoker.testkit;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Video clips made by the {@code ffmpeg} command (Debian's package, which {@code ./stoker test} installs), for tests
 * that need real media: {@code ffmpeg -nostdin -y … OUT} with the arguments a test gives (a {@code lavfi} test source,
 * the codec, the rate). A machine without the command fails the test saying what to install, unless the system
 * property {@code stoker.video.skipWithoutFfmpeg} is set (then it is skipped).
 */
public final class FfmpegClips {
    /** The longest one clip may take to make. */
    private static final long MAKE_TIMEOUT_SECONDS = 60;

    private FfmpegClips() {}

    /** Fails (or, with {@code -Dstoker.video.skipWithoutFfmpeg=true}, skips) a test on a machine without {@code ffmpeg}. */
    public static void require() {
        if (onPath()) return;
        String message = "the ffmpeg command is missing: install the Debian package ffmpeg (./stoker test installs it)";
        if (Boolean.getBoolean("stoker.video.skipWithoutFfmpeg")) org.junit.jupiter.api.Assumptions.abort(message);
        throw new AssertionError(message);
    }

    /** Whether {@code ffmpeg} is on the PATH. */
    public static boolean onPath() {
        String path = System.getenv("PATH");
        if (path == null) return false;
        for (String dir : path.split(java.io.File.pathSeparator)) if (Files.isExecutable(Path.of(dir, "ffmpeg"))) return true;
        return false;
    }

    /** Makes {@code out} with {@code ffmpeg -nostdin -hide_banner -loglevel error -y ARGS… OUT}; returns {@code out}. */
    public static Path make(Path out, String... args) throws IOException, InterruptedException {
        var cmd = new ArrayList<>(List.of("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"));
        cmd.addAll(List.of(args));
        cmd.add(out.toString());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        boolean done = p.waitFor(MAKE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        String text = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!done) {
            p.destroyForcibly();
            throw new IOException("ffmpeg took over " + MAKE_TIMEOUT_SECONDS + " s making " + out);
        }
        if (p.exitValue() != 0) throw new IOException("ffmpeg failed making " + out + ": " + text);
        return out;
    }

    /** An H.264/MP4 test pattern ({@code testsrc2}) of {@code size} (e.g. 320x240) at {@code rate} fps for {@code seconds}. */
    public static Path h264(Path out, String size, String rate, double seconds) throws IOException, InterruptedException {
        return make(out, "-f", "lavfi", "-i", "testsrc2=size=" + size + ":rate=" + rate + ":duration=" + seconds, "-c:v", "libx264",
                "-preset", "ultrafast", "-pix_fmt", "yuv420p");
    }
}
