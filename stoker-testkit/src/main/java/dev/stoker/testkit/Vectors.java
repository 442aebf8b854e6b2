package dev.stoker.testkit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Optional;

/**
 * The Qwen-VL conformance vectors. Inputs, the manifest (with the sha256 of every expected array)
 * and the small token arrays are vendored in {@code testdata/qwen-vl}; the full expected arrays
 * are read from {@code ../shared/vectors/qwen-vl} only when it exists, to locate a mismatch.
 */
public final class Vectors {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static Vectors instance;

    private final Path vendored;
    private final Path shared;
    private final JsonNode manifest;

    private Vectors(Path vendored, Path shared) throws IOException {
        this.vendored = vendored;
        this.shared = shared;
        this.manifest = JSON.readTree(vendored.resolve("manifest.json").toFile());
    }

    public static synchronized Vectors get() {
        if (instance == null) {
            try {
                var project = projectDir();
                var sharedProp = System.getProperty("stoker.shared.dir");
                Path shared = sharedProp == null ? project.resolve("../shared") : Path.of(sharedProp);
                shared = shared.resolve("vectors/qwen-vl").normalize();
                instance = new Vectors(project.resolve("testdata/qwen-vl"), Files.isDirectory(shared) ? shared : null);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return instance;
    }

    /** The project root: {@code -Dstoker.project.dir}, else the nearest parent holding testdata/. */
    public static Path projectDir() {
        var prop = System.getProperty("stoker.project.dir");
        if (prop != null) return Path.of(prop).toAbsolutePath().normalize();
        var p = Path.of("").toAbsolutePath();
        while (p != null && !Files.isDirectory(p.resolve("testdata"))) p = p.getParent();
        if (p == null) throw new IllegalStateException("cannot find the project root (no testdata/ above the working directory)");
        return p;
    }

    public JsonNode manifest() { return manifest; }

    public Path vendoredDir() { return vendored; }

    /** The ../shared copy of the vectors, when present. */
    public Optional<Path> sharedDir() { return Optional.ofNullable(shared); }

    /** A file of the vectors by its manifest-relative path: vendored copy first, then ../shared. */
    public Optional<Path> file(String relative) {
        var v = vendored.resolve(relative);
        if (Files.exists(v)) return Optional.of(v);
        if (shared != null && Files.exists(shared.resolve(relative))) return Optional.of(shared.resolve(relative));
        return Optional.empty();
    }

    public JsonNode imageCase(String id) {
        for (var c : manifest.get("image_cases")) if (c.get("id").asText().equals(id)) return c;
        throw new IllegalArgumentException("no image case " + id);
    }

    public JsonNode chatCase(String id) {
        for (var c : manifest.get("chat_cases")) if (c.get("id").asText().equals(id)) return c;
        throw new IllegalArgumentException("no chat case " + id);
    }

    /** The input image of an image case. */
    public Path inputImage(String caseId) {
        return vendored.resolve(imageCase(caseId).get("input").get("path").asText());
    }

    public static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** sha256 of the raw little-endian bytes of a float32 array (how the manifest hashes arrays). */
    public static String sha256(float[] values) {
        var buf = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        buf.asFloatBuffer().put(values);
        return sha256(buf.array());
    }

    public static String sha256(long[] values) {
        var buf = ByteBuffer.allocate(values.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        buf.asLongBuffer().put(values);
        return sha256(buf.array());
    }
}
