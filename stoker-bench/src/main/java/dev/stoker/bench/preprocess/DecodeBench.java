package dev.stoker.bench.preprocess;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.image.decode.DecodeOptions;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.node.ConfigException;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code stoker bench decode}: decodes images to RGB at full size, over and over, on N threads, and
 * reports megapixels/s, to compare with libjpeg-turbo's tjbench. The last line printed is JSON
 * {@code {"mpix_per_s", "images_per_s", "threads", "decoder"}}.
 */
public final class DecodeBench {
    /** @param seconds timed seconds, after a warm-up of the same length; @param decoder auto (libjpeg-turbo when present) or imageio */
    public record Settings(List<Path> images, int threads, double seconds, String decoder) {}

    private DecodeBench() {}

    public static Map<String, Object> run(Settings s, PrintWriter out) throws IOException, InterruptedException {
        var data = new ArrayList<byte[]>();
        for (Path p : s.images()) data.add(read(p));
        boolean imageIo = s.decoder().equalsIgnoreCase("imageio");
        var opts = DecodeOptions.defaults();
        runFor(data, opts, imageIo, s.threads(), s.seconds());
        long[] counts = runFor(data, opts, imageIo, s.threads(), s.seconds());
        double mpix = counts[1] / 1e6 / s.seconds();
        String name = imageIo || !ImageDecoders.turboJpegAvailable() ? "imageio" : "libjpeg-turbo";
        out.printf("decoder %s, %d threads, %d images: %.1f MP/s, %.1f images/s%n", name, s.threads(), data.size(), mpix, counts[0] / s.seconds());
        var json = new LinkedHashMap<String, Object>();
        json.put("mpix_per_s", PreprocessBench.round(mpix));
        json.put("images_per_s", PreprocessBench.round(counts[0] / s.seconds()));
        json.put("threads", s.threads());
        json.put("decoder", name);
        out.println(new ObjectMapper().writeValueAsString(json));
        out.flush();
        return json;
    }

    private static long[] runFor(List<byte[]> data, DecodeOptions opts, boolean imageIo, int threads, double secs) throws InterruptedException {
        var decoded = new AtomicLong();
        var pixels = new AtomicLong();
        long deadline = System.nanoTime() + (long) (secs * 1e9);
        var workers = new ArrayList<Thread>();
        for (int t = 0; t < threads; t++) {
            int first = t;
            workers.add(Thread.ofPlatform().start(() -> {
                var dec = imageIo ? ImageDecoders.imageIo() : ImageDecoders.forCurrentThread();
                for (int i = first; System.nanoTime() < deadline; i++) {
                    var img = dec.decode(data.get(i % data.size()), "image", opts);
                    decoded.incrementAndGet();
                    pixels.addAndGet(img.pixelCount());
                }
            }));
        }
        for (Thread w : workers) w.join();
        return new long[] {decoded.get(), pixels.get()};
    }

    private static byte[] read(Path file) {
        try {
            return Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            throw new ConfigException(file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException(file + ": cannot read: " + e.getMessage());
        }
    }
}
