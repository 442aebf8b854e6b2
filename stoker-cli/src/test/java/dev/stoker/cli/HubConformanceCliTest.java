package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.testkit.ModelFolders;
import dev.stoker.testkit.Vectors;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Conformance at Hugging Face's published bounds, the presets' defaults: the cases of {@code testdata/qwen-vl-hub}
 * (made by its {@code make_cases.py} with the reference implementation; digests of the arrays, which reach 300 MB)
 * through the CLI with no pixel option at all, so that what is checked is the default: each image at
 * {@code qwen2.5-vl}'s and {@code qwen3-vl}'s published bounds (a 15.9-Mpixel photo included: over the first's cap,
 * under the second's), and each chat encoded for both families, also through a model folder ({@code --model}).
 */
@Timeout(300)
class HubConformanceCliTest {
    static JsonNode manifest;
    static Path root;
    @TempDir Path tmp;

    @BeforeAll
    static void read() throws IOException {
        root = Vectors.projectDir();
        manifest = new ObjectMapper().readTree(root.resolve("testdata/qwen-vl-hub/manifest.json").toFile());
    }

    static String processor(String setting) { return setting.startsWith("qwen3vl") ? "qwen3-vl" : "qwen2.5-vl"; }

    static Stream<Arguments> imageCases() throws IOException {
        read();
        var out = new ArrayList<Arguments>();
        for (JsonNode c : manifest.get("image_cases"))
            c.get("outputs").fieldNames().forEachRemaining(s -> out.add(Arguments.of(c.get("id").asText(), s)));
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("imageCases")
    void preprocessAtTheDefaultBoundsMatchesTheReference(String id, String setting) throws Exception {
        JsonNode c = find("image_cases", id), expected = c.get("outputs").get(setting);
        Path image = root.resolve(c.get("file").asText());
        var args = new ArrayList<>(List.of("preprocess", "--processor", processor(setting), "--exif", "ignore", "--image", image.toString(),
                "--out", tmp.resolve("out").toString()));
        if (!setting.endsWith("_hub")) { // the shared vectors' constructor bounds, given; the _hub settings are the defaults
            JsonNode bounds = manifest.get("settings").get(setting);
            args.addAll(List.of("--min-pixels", bounds.get("min_pixels").asText(), "--max-pixels", bounds.get("max_pixels").asText()));
        }
        var r = CliRunner.run(args.toArray(String[]::new));
        if (expected.has("expected_error")) {
            assertEquals(2, r.status(), r.err());
            assertTrue(r.err().contains(expected.get("expected_error").asText()), r.err());
            return;
        }
        assertEquals(0, r.status(), r.err());
        assertArrayEquals(longs(expected.get("pixel_values_shape")), NpyDigest.of(tmp.resolve("out/pixel_values.npy")).shape(), id);
        assertEquals(expected.get("pixel_values_sha256").asText(), NpyDigest.of(tmp.resolve("out/pixel_values.npy")).sha256(), id + " pixel_values");
        assertArrayEquals(longs(expected.get("image_grid_thw")), dev.stoker.core.Npy.read(tmp.resolve("out/image_grid_thw.npy")).asLongs());
    }

    static Stream<Arguments> chatCases() throws IOException {
        read();
        var out = new ArrayList<Arguments>();
        for (JsonNode c : manifest.get("chat_cases"))
            for (String family : List.of("qwen2_5vl", "qwen3vl"))
                for (boolean model : new boolean[] {false, true}) out.add(Arguments.of(c.get("id").asText(), family, model));
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1} model folder {2}")
    @MethodSource("chatCases")
    void encodeAtTheDefaultBoundsMatchesTheReference(String id, String family, boolean modelFolder) throws Exception {
        JsonNode c = find("chat_cases", id), expected = c.get("outputs").get(family);
        var mapper = new ObjectMapper();
        ObjectNode sample = mapper.createObjectNode().put("id", id);
        JsonNode messages = c.get("messages").deepCopy();
        for (JsonNode m : messages)
            if (m.get("content").isArray())
                for (JsonNode item : m.get("content"))
                    if (item.has("image")) {
                        Path img = root.resolve(find("image_cases", item.get("image").asText()).get("file").asText());
                        Files.copy(img, tmp.resolve(img.getFileName()), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                        ((ObjectNode) item).put("image", img.getFileName().toString());
                    }
        sample.set("messages", messages);
        Path file = tmp.resolve("sample.json");
        mapper.writeValue(file.toFile(), sample);
        String processor = family.equals("qwen3vl") ? "qwen3-vl" : "qwen2.5-vl";
        var args = new ArrayList<>(List.of("encode", "--exif", "ignore", "--max-seq-len", "0", "--sample", file.toString(), "--out",
                tmp.resolve("out").toString()));
        // the reference is the PIL processor's; a Qwen3-VL folder (transformers_version 4.57.0.dev0) would default to torchvision
        if (modelFolder) args.addAll(List.of("--model", ModelFolders.write(tmp.resolve("model"), processor).toString(), "--image-backend", "pil"));
        else args.addAll(List.of("--processor", processor));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        var ids = dev.stoker.core.Npy.read(tmp.resolve("out/input_ids.npy"));
        assertEquals(expected.get("seq_len").asLong(), ids.shape()[0]);
        assertEquals(expected.get("input_ids_sha256").asText(), NpyDigest.of(tmp.resolve("out/input_ids.npy")).sha256(), "input_ids");
        assertEquals(expected.get("labels_sha256").asText(), NpyDigest.of(tmp.resolve("out/labels.npy")).sha256(), "labels");
        var pos = NpyDigest.of(tmp.resolve("out/position_ids.npy"));
        assertArrayEquals(longs(expected.get("position_ids_shape")), pos.shape());
        assertEquals(expected.get("position_ids_sha256").asText(), pos.sha256(), "position_ids");
        var pv = NpyDigest.of(tmp.resolve("out/pixel_values.npy"));
        assertArrayEquals(longs(expected.get("pixel_values_shape")), pv.shape());
        assertEquals(expected.get("pixel_values_sha256").asText(), pv.sha256(), "pixel_values");
        var grids = new ArrayList<Long>();
        for (JsonNode g : expected.get("image_grid_thw")) for (JsonNode v : g) grids.add(v.asLong());
        assertArrayEquals(grids.stream().mapToLong(Long::longValue).toArray(), dev.stoker.core.Npy.read(tmp.resolve("out/image_grid_thw.npy")).asLongs());
    }

    private static JsonNode find(String list, String id) {
        for (JsonNode c : manifest.get(list)) if (c.get("id").asText().equals(id)) return c;
        throw new AssertionError("no case " + id);
    }

    private static long[] longs(JsonNode a) {
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) out[i] = a.get(i).asLong();
        return out;
    }

    /** A .npy file's shape and the SHA-256 of its data, streamed (the arrays here reach 300 MB). */
    record NpyDigest(long[] shape, String sha256) {
        static NpyDigest of(Path file) throws IOException {
            try (InputStream raw = Files.newInputStream(file); var in = new DataInputStream(new java.io.BufferedInputStream(raw, 1 << 16))) {
                byte[] magic = in.readNBytes(8);
                if (magic.length != 8 || magic[0] != (byte) 0x93 || magic[6] != 1) throw new IOException(file + ": not a version-1 .npy file");
                int headerLength = Short.toUnsignedInt(Short.reverseBytes(in.readShort()));
                String header = new String(in.readNBytes(headerLength), StandardCharsets.ISO_8859_1);
                var m = java.util.regex.Pattern.compile("'shape': \\(([0-9, ]*)\\)").matcher(header);
                if (!m.find()) throw new IOException(file + ": no shape in " + header);
                long[] shape = java.util.Arrays.stream(m.group(1).split(",")).map(String::strip).filter(s -> !s.isEmpty())
                        .mapToLong(Long::parseLong).toArray();
                var md = MessageDigest.getInstance("SHA-256");
                byte[] buf = new byte[1 << 16];
                for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
                return new NpyDigest(shape, HexFormat.of().formatHex(md.digest()));
            } catch (java.security.NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
