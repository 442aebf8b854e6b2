package dev.stoker.image.decode;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.image.RgbImage;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/** The fixtures of testdata/images and what Pillow 9.4 made of them (expected.json, from make_fixtures.py). */
final class Fixtures {
    static final Path DIR = Vectors.projectDir().resolve("testdata/images");
    private static JsonNode root;

    private Fixtures() {}

    private static synchronized JsonNode root() {
        if (root == null) {
            try {
                root = new ObjectMapper().readTree(DIR.resolve("expected.json").toFile());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return root;
    }

    static JsonNode files() { return root().get("files"); }

    /** The libwebp version Pillow decoded the WebP fixtures with. */
    static String libwebpVersion() { return root().get("libwebp").asText(); }

    static JsonNode expected(String name) {
        var e = files().get(name);
        if (e == null) throw new IllegalArgumentException("no fixture " + name);
        return e;
    }

    /** sha256 of an image's pixels: the first w·h·3 bytes of its buffer (a native decoder's reused buffer is longer). */
    static String sha256(RgbImage img) {
        return Vectors.sha256(Arrays.copyOf(img.data(), img.width() * img.height() * 3));
    }

    static byte[] bytes(String name) {
        try {
            return Files.readAllBytes(DIR.resolve(name));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Names of the good (bad == false) or bad fixtures, sorted. */
    static List<String> names(boolean bad) {
        var out = new ArrayList<String>();
        for (Map.Entry<String, JsonNode> e : files().properties())
            if (e.getValue().path("bad").asBoolean(false) == bad) out.add(e.getKey());
        out.sort(null);
        if (out.isEmpty()) throw new IllegalStateException("no fixtures found in " + DIR);
        return out;
    }
}
