package dev.stoker.encode.batch;

import dev.stoker.core.Npy;
import dev.stoker.core.batch.Tensor;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The Python client's compact-format conversion ({@code stoker.pixels.batch_to_pixel_values}, NumPy and, where
 * Debian's python3-torch is installed, torch) run on batches a test made, through
 * {@code clients/python/tests/integration/convert_pixels.py} with Debian's {@code /usr/bin/python3}: so that a Java test
 * can hold the trainer's real conversion to the float32 batches bit for bit. Tests skip it where that Python has no
 * NumPy ({@link #available()}).
 */
public final class PythonPixels {
    public static final String PYTHON = "/usr/bin/python3";
    private static final long TIMEOUT_SECONDS = 60;

    private PythonPixels() {}

    /** Whether {@value #PYTHON} with NumPy is there. */
    public static boolean available() {
        if (!Files.isExecutable(Path.of(PYTHON))) return false;
        try {
            var p = new ProcessBuilder(PYTHON, "-c", "import numpy").redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            return p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** What the conversion gave for one batch: the converted dict's keys in order, and its float tensors by name. */
    public record Converted(List<String> keys, Map<String, float[]> floats) {}

    /**
     * Converts each batch of {@code batches} (every tensor as the trainer gets it: inputs, and metadata flagged so),
     * working in {@code dir}; returns, per batch in order, what the client made of it.
     */
    public static List<Converted> convert(Path dir, List<List<Tensor>> batches) throws IOException, InterruptedException {
        for (int i = 0; i < batches.size(); i++) {
            Path folder = Files.createDirectories(dir.resolve(String.format("b%04d", i)));
            var inputs = new ArrayList<String>();
            for (Tensor t : batches.get(i)) {
                Npy.write(folder.resolve(t.name() + ".npy"), t.dtype().numpy(), t.shape(), t.data().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
                if (!t.metadata()) inputs.add(t.name());
            }
            Files.writeString(folder.resolve("inputs.txt"), String.join("\n", inputs) + "\n");
        }
        Path script = Vectors.projectDir().resolve("clients/python/tests/integration/convert_pixels.py");
        Path log = dir.resolve("convert.log");
        var p = new ProcessBuilder(PYTHON, script.toString(), dir.toString()).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!p.waitFor(TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("convert_pixels.py took over " + TIMEOUT_SECONDS + " s: " + Files.readString(log));
        }
        if (p.exitValue() != 0) throw new AssertionError("convert_pixels.py failed: " + Files.readString(log));
        var out = new ArrayList<Converted>();
        for (int i = 0; i < batches.size(); i++) {
            Path converted = dir.resolve(String.format("b%04d", i)).resolve("converted");
            var keys = Files.readAllLines(converted.resolve("keys.txt"), StandardCharsets.UTF_8).stream().filter(s -> !s.isBlank()).toList();
            var floats = new LinkedHashMap<String, float[]>();
            for (String name : List.of(BatchSchema.PIXEL_VALUES, BatchSchema.PIXEL_VALUES_VIDEOS)) {
                Path f = converted.resolve(name + ".npy");
                if (Files.exists(f)) floats.put(name, Npy.read(f).asFloats());
            }
            out.add(new Converted(keys, floats));
        }
        return out;
    }
}
