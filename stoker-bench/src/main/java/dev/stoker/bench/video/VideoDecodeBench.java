package dev.stoker.bench.video;

import dev.stoker.bench.Stats;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.index.FrameIndex;
import dev.stoker.video.index.FrameIndexer;
import dev.stoker.video.isolate.IsolatedDecoder;
import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * {@code stoker bench video-decode}: Stoker's FFM decode path against {@code ffmpeg -threads 1 -benchmark -i V -f
 * null -} on the same files, side by side (the two alternate, {@code rounds} times each; medians), and the
 * sampled-decode check: {@code frames} frames spread over each file (linspace, rounded) decoded with seeking, counted,
 * and compared with the same frames of a sequential decode, and the same decode in a worker process
 * ({@link IsolatedDecoder}: what crash isolation costs per video).
 *
 * <p>Both sides decode every frame with one thread and convert nothing ({@code -f null} passes frames through
 * unconverted); Stoker's rgb24 conversion is timed separately (decode + rgb24).
 */
public final class VideoDecodeBench {
    private VideoDecodeBench() {}

    /**
     * @param files  the videos
     * @param rounds timed rounds per side per file of the full decode (0: skip it)
     * @param frames frames sampled per file for the seeking check (0: skip it)
     */
    public record Settings(List<Path> files, int rounds, int frames) {}


    public static void run(Settings s, PrintWriter out) throws Exception {
        List<String> json = new ArrayList<>();
        for (Path file : s.files()) {
            FrameIndex index;
            try (var source = SeekableByteSource.of(file)) {
                index = new FrameIndexer().index(source);
            }
            var st = index.stream();
            int n = index.frameCount();
            double[] ours = new double[s.rounds()], oursRgb = new double[s.rounds()], ffmpeg = new double[s.rounds()];
            if (s.rounds() > 0) decodeAll(file, index, false); // warm-up: JIT, page cache
            for (int r = 0; r < s.rounds(); r++) {
                ffmpeg[r] = n / ffmpegSeconds(file);
                ours[r] = n / decodeAll(file, index, false);
                oursRgb[r] = n / decodeAll(file, index, true);
            }
            double ratio = s.rounds() == 0 ? Double.NaN : Stats.median(ours) / Stats.median(ffmpeg);
            if (s.rounds() > 0) out.printf(Locale.ROOT, "%s: %s %dx%d %s, %d frames: ffmpeg -threads 1 %.1f fps, Stoker decode %.1f fps "
                            + "(%.1f%% of ffmpeg), decode + rgb24 %.1f fps (medians of %d)%n", file.getFileName(),
                    st.codec(), st.width(), st.height(), st.pixelFormatName(), n, Stats.median(ffmpeg),
                    Stats.median(ours), 100 * ratio, Stats.median(oursRgb), s.rounds());
            String sampled = "";
            if (s.frames() > 0) {
                int[] wanted = linspace(n, s.frames());
                String[] seq = new String[1], seek = new String[1];
                VideoDecoder.Result r = sampledDecode(file, index, wanted, seek);
                sequentialHash(file, index, wanted, seq);
                boolean same = seq[0].equals(seek[0]);
                out.printf(Locale.ROOT, "  %d frames sampled: %d decoded (of %d), %d seeks, %.0f ms; frames %s the "
                                + "sequential decode's%n", wanted.length, r.framesDecoded(), n, r.seeks(),
                        r.nanos() / 1e6, same ? "identical to" : "DIFFERENT FROM");
                int isolationRounds = Math.max(3, s.rounds());
                double[] inProcess = new double[isolationRounds], isolated = new double[isolationRounds];
                try (var workers = new IsolatedDecoder(1, List.of())) {
                    isolatedSampled(workers, file, index, wanted); // the worker starts (not timed)
                    for (int k = 0; k < isolationRounds; k++) {
                        String[] unused = new String[1];
                        inProcess[k] = sampledDecode(file, index, wanted, unused).nanos() / 1e6;
                        isolated[k] = isolatedSampled(workers, file, index, wanted);
                    }
                }
                out.printf(Locale.ROOT, "  the same %d frames in a decode worker process: %.1f ms vs %.1f ms in process "
                                + "(medians of %d; +%.1f ms per video)%n", wanted.length, Stats.median(isolated),
                        Stats.median(inProcess), isolationRounds, Stats.median(isolated) - Stats.median(inProcess));
                sampled = String.format(Locale.ROOT, ", \"sampled\": %d, \"sampled_decoded\": %d, \"seeks\": %d, "
                        + "\"sampled_identical\": %b, \"sampled_ms\": %.2f, \"sampled_isolated_ms\": %.2f",
                        wanted.length, r.framesDecoded(), r.seeks(), same, Stats.median(inProcess), Stats.median(isolated));
            }
            json.add(String.format(Locale.ROOT, "{\"file\": \"%s\", \"frames\": %d, \"ffmpeg_fps\": %s, "
                            + "\"stoker_fps\": %s, \"stoker_rgb24_fps\": %s, \"ratio\": %s%s}",
                    file.getFileName(), n, num(s, Stats.median(ffmpeg)), num(s, Stats.median(ours)),
                    num(s, Stats.median(oursRgb)), num(s, ratio), sampled));
        }
        out.println("[" + String.join(", ", json) + "]");
        out.flush();
    }

    /** A JSON number, or null where the full decode was skipped. */
    private static String num(Settings s, double v) {
        return s.rounds() == 0 || Double.isNaN(v) ? "null" : String.format(Locale.ROOT, "%.4f", v);
    }

    /** Seconds to decode every frame of {@code file} (with or without the rgb24 conversion). */
    static double decodeAll(Path file, FrameIndex index, boolean rgb) throws IOException {
        long t0 = System.nanoTime();
        try (var source = SeekableByteSource.of(file)) {
            if (rgb) {
                int[] all = java.util.stream.IntStream.range(0, index.frameCount()).toArray();
                VideoDecoder.decode(source, index, all, System.nanoTime() + TimeUnit.HOURS.toNanos(1), (f, w, h, x) -> {});
            } else {
                long decoded = VideoDecoder.decodeEvery(source, System.nanoTime() + TimeUnit.HOURS.toNanos(1));
                if (decoded != index.frameCount()) {
                    throw new IllegalStateException(file + ": decoded " + decoded + " frames, index has " + index.frameCount());
                }
            }
        }
        return (System.nanoTime() - t0) / 1e9;
    }

    /** Wall seconds of {@code ffmpeg -threads 1 -benchmark -i file -f null -} (process start included: ~tens of ms). */
    static double ffmpegSeconds(Path file) throws IOException, InterruptedException {
        long t0 = System.nanoTime();
        Process p = new ProcessBuilder("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1",
                "-benchmark", "-i", file.toString(), "-f", "null", "-")
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
        if (!p.waitFor(1, TimeUnit.HOURS) || p.exitValue() != 0) throw new IOException("ffmpeg failed on " + file);
        return (System.nanoTime() - t0) / 1e9;
    }

    /** {@code n} frames spread over {@code total}: round(k·(total−1)/(n−1)), as qwen-vl-utils spreads them. */
    static int[] linspace(int total, int n) {
        int[] out = new int[Math.min(n, total)];
        for (int k = 0; k < out.length; k++) {
            out[k] = out.length == 1 ? 0 : (int) Math.rint((double) k * (total - 1) / (out.length - 1));
        }
        return out;
    }

    private static VideoDecoder.Result sampledDecode(Path file, FrameIndex index, int[] wanted, String[] hash) throws IOException {
        MessageDigest sha = sha256();
        try (var source = SeekableByteSource.of(file)) {
            var r = VideoDecoder.decode(source, index, wanted, System.nanoTime() + TimeUnit.HOURS.toNanos(1),
                    (f, w, h, rgb) -> sha.update(rgb, 0, w * h * 3));
            hash[0] = HexFormat.of().formatHex(sha.digest());
            return r;
        }
    }

    /** Milliseconds to decode {@code wanted} in a worker process (frames received, sha256 taken as in process). */
    private static double isolatedSampled(IsolatedDecoder workers, Path file, FrameIndex index, int[] wanted) throws IOException {
        MessageDigest sha = sha256();
        long t0 = System.nanoTime();
        try (var source = SeekableByteSource.of(file)) {
            workers.decode(source, index, wanted, System.nanoTime() + TimeUnit.HOURS.toNanos(1),
                    (f, w, h, rgb) -> sha.update(rgb, 0, w * h * 3));
        }
        return (System.nanoTime() - t0) / 1e6;
    }

    /** The same frames from a decode of every frame in order up to the last (no seeking). */
    private static void sequentialHash(Path file, FrameIndex index, int[] wanted, String[] hash) throws IOException {
        MessageDigest sha = sha256();
        try (var source = SeekableByteSource.of(file)) {
            VideoDecoder.decode(source, index, wanted, System.nanoTime() + TimeUnit.HOURS.toNanos(1),
                    (f, w, h, rgb) -> sha.update(rgb, 0, w * h * 3), false);
        }
        hash[0] = HexFormat.of().formatHex(sha.digest());
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
