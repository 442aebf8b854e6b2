package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@code stoker encode} against every case of the Qwen-VL video vectors ({@code ../shared/vectors/qwen-vl-video}),
 * with the flags of their README's contract ({@code --transformers 5.18}, {@code --image-backend pil}, {@code --exif
 * ignore}, the case's sampler and options): every array the case lists bit for bit (sha256 of the .npy data, as the
 * MANIFEST holds them) — the decoder-dependent cases too, since Stoker's decoder gives PyAV's frames on these clips —
 * and d16 refused with exit 2 and one line naming the video. Both record layouts (HF messages and LLaMA-Factory).
 * Skipped, saying so, without the shared folder.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VideoConformanceCliTest {
    @TempDir Path tmp;
    private static final ObjectMapper JSON = new ObjectMapper();

    static Path vectors() {
        String prop = System.getProperty("stoker.shared.dir");
        return (prop == null ? Path.of("../shared") : Path.of(prop)).resolve("vectors/qwen-vl-video");
    }

    static Stream<String> cases() throws IOException {
        if (!Files.isRegularFile(vectors().resolve("MANIFEST.json"))) return Stream.of("(no vectors)");
        var out = new ArrayList<String>();
        try (var dirs = Files.list(vectors())) {
            dirs.filter(d -> Files.isRegularFile(d.resolve("case.json"))).map(d -> d.getFileName().toString()).sorted()
                    .forEach(id -> {
                        out.add(id + " sample.json");
                        if (Files.isRegularFile(vectors().resolve(id).resolve("sample_llamafactory.json"))) {
                            out.add(id + " sample_llamafactory.json");
                        }
                    });
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void encodeMatchesTheCase(String name) throws Exception {
        Assumptions.assumeTrue(Files.isRegularFile(vectors().resolve("MANIFEST.json")),
                "no Qwen-VL video vectors at " + vectors() + " (-Dstoker.shared.dir)");
        String id = name.substring(0, name.indexOf(' ')), sampleFile = name.substring(name.indexOf(' ') + 1);
        Path dir = vectors().resolve(id);
        JsonNode c = JSON.readTree(dir.resolve("case.json").toFile());
        Path work = Files.createDirectories(tmp.resolve("work"));
        for (JsonNode media : c.get("media")) {
            Files.copy(vectors().resolve("videos").resolve(media.asText()), work.resolve(media.asText()));
        }
        Files.copy(dir.resolve(sampleFile), work.resolve("sample.json"));
        Path out = tmp.resolve("out");
        var args = new ArrayList<>(List.of("encode", "--processor", c.get("family").asText(), "--tokenizer",
                vectors().resolve("../../tokenizers/qwen2/tokenizer.json").normalize().toString(), "--sample",
                work.resolve("sample.json").toString(), "--out", out.toString(), "--transformers", "5.18",
                "--image-backend", "pil", "--exif", "ignore", "--video-sampler", c.get("sampler").asText()));
        c.get("options").properties().forEach(e -> {
            if (!e.getValue().isNull()) args.addAll(List.of("--video-" + e.getKey().replace('_', '-'), e.getValue().asText()));
        });
        if (c.hasNonNull("image_options")) {
            args.addAll(List.of("--min-pixels", c.get("image_options").get("min_pixels").asText(), "--max-pixels",
                    c.get("image_options").get("max_pixels").asText()));
        }
        var r = CliRunner.run(args.toArray(String[]::new));
        if (c.hasNonNull("expected_error")) {
            assertEquals(2, r.status(), r.out() + r.err());
            assertEquals(1, r.err().strip().split("\n").length, r.err());
            assertTrue(r.err().contains("v09_x264rgb_lossless_24fps_17f_176x144.mp4"), r.err());
            return;
        }
        assertEquals(0, r.status(), r.err());
        Map<String, String> differ = new TreeMap<>();
        c.get("files").properties().forEach(e -> {
            String file = e.getKey();
            if (!file.endsWith(".npy")) return;
            try {
                Path ours = out.resolve(file);
                String want = e.getValue().get("sha256").asText();
                String got = Files.exists(ours) ? sha256(npyData(Files.readAllBytes(ours))) : "missing";
                if (!want.equals(got)) differ.put(file, got.equals("missing") ? "missing" : "differs");
            } catch (IOException x) {
                throw new java.io.UncheckedIOException(x);
            }
        });
        assertEquals(Map.of(), differ, id + " (" + sampleFile + ")");
    }

    /** The data of a .npy file (after its header). */
    private static byte[] npyData(byte[] npy) {
        int headerLength = (npy[8] & 0xff) | (npy[9] & 0xff) << 8;
        return java.util.Arrays.copyOfRange(npy, 10 + headerLength, npy.length);
    }

    private static String sha256(byte[] data) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
