package dev.stoker.cli;

import org.junit.jupiter.api.Timeout;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.Npy;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The CLI contract against every conformance case, end to end through the real decoder:
 * {@code preprocess} for each image case and setting, {@code encode} for each chat case and family.
 */
@Timeout(60)
class ConformanceCliTest {
    private static final Vectors V = Vectors.get();
    @TempDir Path tmp;

    static Stream<Arguments> imageCases() {
        var out = new ArrayList<Arguments>();
        for (JsonNode c : V.manifest().get("image_cases"))
            c.get("outputs").fieldNames().forEachRemaining(s -> out.add(Arguments.of(c.get("id").asText(), s)));
        return out.stream();
    }

    static String[] processorArgs(String setting) {
        JsonNode s = V.manifest().get("settings").get(setting);
        String processor = s.get("patch_size").asInt() == 16 ? "qwen3-vl" : "qwen2-vl";
        return new String[] {"--processor", processor, "--min-pixels", s.get("min_pixels").asText(),
                "--max-pixels", s.get("max_pixels").asText()};
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("imageCases")
    void preprocessMatchesVector(String caseId, String setting) throws IOException {
        JsonNode expected = V.imageCase(caseId).get("outputs").get(setting);
        Path out = tmp.resolve("out");
        var args = new ArrayList<>(List.of("preprocess"));
        args.addAll(List.of(processorArgs(setting)));
        // The vectors were made from PIL.Image.open without EXIF transposition.
        args.addAll(List.of("--exif", "ignore", "--image", V.inputImage(caseId).toString(), "--out", out.toString()));
        var r = CliRunner.run(args.toArray(String[]::new));
        if (expected.has("expected_error")) {
            // The vectors expect the error older transformers raised for a side under the factor; current releases
            // (4.57.6, 5.18.0) resize such an image up, as Stoker does: testdata/qwen-vl-hub has those outputs.
            assertTrue(expected.get("expected_error").asText().contains("must be larger than factor"), expected.toString());
            expected = new ObjectMapper().readTree(Vectors.projectDir().resolve("testdata/qwen-vl-hub/manifest.json").toFile())
                    .get("image_cases").valueStream().filter(c -> c.get("id").asText().equals(caseId)).findFirst().orElseThrow()
                    .get("outputs").get(setting);
        }
        assertEquals(0, r.status(), r.err());
        var pv = Npy.read(out.resolve("pixel_values.npy"));
        var grid = Npy.read(out.resolve("image_grid_thw.npy"));
        assertEquals("<f4", pv.dtype());
        assertArrayEquals(toLongs(expected.get("pixel_values_shape")), pv.shape());
        assertEquals(expected.get("pixel_values_sha256").asText(), Vectors.sha256(pv.data()), "pixel_values bits");
        assertArrayEquals(new long[] {1, 3}, grid.shape());
        assertArrayEquals(toLongs(expected.get("image_grid_thw")), grid.asLongs());
    }

    static Stream<Arguments> chatCases() {
        var out = new ArrayList<Arguments>();
        for (JsonNode c : V.manifest().get("chat_cases"))
            for (String family : List.of("qwen2_5vl", "qwen3vl")) out.add(Arguments.of(c.get("id").asText(), family));
        return out.stream();
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("chatCases")
    void encodeMatchesVector(String caseId, String family) throws IOException {
        JsonNode chat = V.chatCase(caseId);
        JsonNode expected = chat.get("outputs").get(family);
        // The sample file uses HF messages; image refs become file names beside it.
        var mapper = new ObjectMapper();
        ObjectNode sample = mapper.createObjectNode();
        sample.put("id", caseId);
        JsonNode messages = chat.get("messages").deepCopy();
        for (JsonNode m : messages)
            if (m.get("content").isArray())
                for (JsonNode item : m.get("content"))
                    if (item.has("image")) {
                        String id = item.get("image").asText();
                        Path img = V.inputImage(id);
                        Files.copy(img, tmp.resolve(img.getFileName()), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                        ((ObjectNode) item).put("image", img.getFileName().toString());
                    }
        sample.set("messages", messages);
        Path file = tmp.resolve("sample.json");
        mapper.writeValue(file.toFile(), sample);

        String setting = expected.get("image_setting").asText();
        Path out = tmp.resolve("out");
        var args = new ArrayList<>(List.of("encode"));
        args.addAll(List.of(processorArgs(setting)));
        args.set(2, family.equals("qwen3vl") ? "qwen3-vl" : "qwen2.5-vl");
        args.addAll(List.of("--exif", "ignore", "--tokenizer", tokenizerPath().toString(), "--sample", file.toString(), "--out", out.toString()));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());

        for (String name : List.of("input_ids", "labels", "attention_mask", "position_ids", "image_grid_thw")) {
            var want = Npy.read(V.file(expected.get("files").get(name).asText()).orElseThrow());
            var got = Npy.read(out.resolve(name + ".npy"));
            assertArrayEquals(want.shape(), got.shape(), name + " shape");
            assertArrayEquals(want.asLongs(), got.asLongs(), name);
        }
        assertEquals(expected.get("input_ids_sha256").asText(), Vectors.sha256(Npy.read(out.resolve("input_ids.npy")).asLongs()));
        // pixel_values = the image cases' arrays in order: check each slice against its case's hash.
        var pv = Npy.read(out.resolve("pixel_values.npy"));
        byte[] all = pv.data();
        int offset = 0;
        for (JsonNode imgId : chat.get("images_used")) {
            JsonNode o = V.imageCase(imgId.asText()).get("outputs").get(setting);
            long rows = o.get("pixel_values_shape").get(0).asLong();
            long cols = o.get("pixel_values_shape").get(1).asLong();
            int len = (int) (rows * cols * 4);
            assertEquals(o.get("pixel_values_sha256").asText(), Vectors.sha256(Arrays.copyOfRange(all, offset, offset + len)),
                    "pixel rows of " + imgId.asText());
            offset += len;
        }
        assertEquals(all.length, offset, "no extra pixel rows");
    }

    /** The tokenizer a user passes with --tokenizer: ../shared's when present, else the bundled one unpacked. */
    private Path tokenizerPath() throws IOException {
        var shared = V.sharedDir().map(d -> d.resolve("../../tokenizers/qwen2/tokenizer.json").normalize());
        if (shared.isPresent() && Files.exists(shared.get())) return shared.get();
        Path gz = tmp.resolve("tokenizer.json.gz");
        try (var in = dev.stoker.text.QwenTokenizer.class.getResourceAsStream(dev.stoker.text.QwenTokenizer.BUNDLED_RESOURCE)) {
            Files.copy(in, gz);
        }
        return gz;
    }

    private static long[] toLongs(JsonNode arr) {
        long[] out = new long[arr.size()];
        for (int i = 0; i < out.length; i++) out[i] = arr.get(i).asLong();
        return out;
    }
}
