package dev.stoker.video.ffmpeg;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;

/**
 * The tools the video tests need (ffmpeg/ffprobe to make and probe media, gcc and the libav*-dev headers for the
 * layout check), and what happens without them: the test fails naming the Debian package, unless
 * {@code -Dstoker.video.skipWithoutFfmpeg=true} is given, which skips it instead (never a silent pass).
 */
public final class NativeTools {
    public static final String SKIP_PROPERTY = "stoker.video.skipWithoutFfmpeg";

    private NativeTools() {}

    /** Fails (or, with the skip property, aborts) when {@code check} is false. */
    public static void require(boolean check, String what, String debianPackages) {
        if (check) return;
        String message = what + " is missing: install the Debian packages " + debianPackages
                + " (./stoker test installs them), or run with -D" + SKIP_PROPERTY + "=true to skip this test";
        if (Boolean.getBoolean(SKIP_PROPERTY)) Assumptions.abort(message);
        fail(message);
    }

    public static boolean onPath(String tool) {
        String path = System.getenv("PATH");
        if (path == null) return false;
        for (String dir : path.split(File.pathSeparator)) if (Files.isExecutable(Path.of(dir, tool))) return true;
        return false;
    }

    public static void requireFfmpegCli() {
        require(onPath("ffmpeg") && onPath("ffprobe"), "the ffmpeg/ffprobe command", "ffmpeg");
    }

    public static void requireLibraries() {
        require(Ffmpeg.unavailableReason() == null, "FFmpeg 5.1's libraries (" + Ffmpeg.unavailableReason() + ")",
                "libavformat59 libavcodec59 libavutil57 libswscale6");
    }

    /**
     * The Qwen-VL video vectors' folder ({@code -Dstoker.shared.dir}, else {@code ../shared}), or aborts the test
     * saying so where it is absent (a user's clone has no ../shared).
     */
    public static Path videoVectorsOrSkip() {
        String prop = System.getProperty("stoker.shared.dir");
        Path vectors = (prop == null ? Path.of("../shared") : Path.of(prop)).resolve("vectors/qwen-vl-video");
        Assumptions.assumeTrue(Files.isRegularFile(vectors.resolve("MANIFEST.json")),
                "no Qwen-VL video vectors at " + vectors + " (-Dstoker.shared.dir)");
        return vectors;
    }

    /** Runs a command, returns its stdout; fails the test with its stderr when it exits non-zero. */
    public static String run(Path dir, List<String> command) throws IOException, InterruptedException {
        Path err = Files.createTempFile(dir, "stderr", ".txt");
        Process p = new ProcessBuilder(command).directory(dir.toFile()).redirectError(err.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
        byte[] out = p.getInputStream().readAllBytes();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            fail("timed out: " + command);
        }
        if (p.exitValue() != 0) fail(command + " exited " + p.exitValue() + ": " + Files.readString(err));
        return new String(out, StandardCharsets.UTF_8);
    }

    /** {@code ffmpeg -y -loglevel error ARGS... OUT} in {@code dir}; returns OUT. */
    public static Path ffmpeg(Path dir, String out, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"));
        cmd.addAll(List.of(args));
        cmd.add(out);
        run(dir, cmd);
        return dir.resolve(out);
    }
}
