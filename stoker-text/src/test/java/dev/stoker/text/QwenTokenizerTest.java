package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.Executors;
import java.util.zip.GZIPInputStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(60)
class QwenTokenizerTest {
    private static QwenTokenizer tok;

    @BeforeAll
    static void load() { tok = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tok.close(); }

    @Test
    void publishedIds() {
        assertArrayEquals(new long[] {9707, 1879}, tok.encode("Hello world"));
        assertArrayEquals(new long[] {21927, 1879}, tok.encode(" Hello world"));
        assertArrayEquals(new long[] {3838, 374, 220, 17, 5519, 220, 17, 30}, tok.encode("What is 2 plus 2?"));
        assertArrayEquals(new long[] {151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198,
                151652, 151655, 151655},
                tok.encode("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|>"));
    }

    @Test
    void usefulIdsAndNoSpecialTokensAdded() {
        assertArrayEquals(new long[] {QwenTokenIds.IM_START, 8948, 198}, tok.encode("<|im_start|>system\n"));
        assertArrayEquals(new long[] {872}, tok.encode("user"));
        assertArrayEquals(new long[] {QwenTokenIds.ASSISTANT}, tok.encode("assistant"));
        assertArrayEquals(new long[] {QwenTokenIds.NEWLINE}, tok.encode("\n"));
        assertArrayEquals(new long[0], tok.encode(""));
        assertArrayEquals(new long[] {QwenTokenIds.VISION_START, QwenTokenIds.IMAGE_PAD, QwenTokenIds.VISION_END, QwenTokenIds.IM_END},
                tok.encode("<|vision_start|><|image_pad|><|vision_end|><|im_end|>"));
    }

    @Test
    void nfcNormalizesPlainText() {
        assertArrayEquals(tok.encode("caf\u00e9 \u00c5ngstr\u00f6m"), tok.encode("cafe\u0301 \u212bngstro\u0308m"));
    }

    @Test
    void doesNotTruncateLongInput() {
        var text = "The quick brown fox jumps over the lazy dog. ".repeat(300);
        var ids = tok.encode(text);
        assertTrue(ids.length > 1000, "expected > 1000 tokens, got " + ids.length);
        assertEquals(300 * 10 + 1, ids.length);
        assertEquals(text, tok.decode(ids));
        var expanded = ChatTemplate.expandImagePads("<|vision_start|><|image_pad|><|vision_end|>",
                List.of(new long[] {1, 64, 64}), 2);
        assertEquals(1024 + 2, tok.encode(expanded).length);
    }

    @Test
    void djlDefaultsWouldTruncateAt512() throws Exception {
        var text = "The quick brown fox jumps over the lazy dog. ".repeat(300);
        try (var in = new GZIPInputStream(QwenTokenizer.class.getResourceAsStream(QwenTokenizer.BUNDLED_RESOURCE));
             var defaults = HuggingFaceTokenizer.newInstance(in, Map.of())) {
            assertEquals(512, defaults.encode(text).getIds().length);
        }
    }

    @Test
    void matchesPythonReferenceBpe() throws Exception {
        var json = new ObjectMapper();
        int n = 0;
        try (var in = getClass().getResourceAsStream("bpe_cases.jsonl");
             var reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
             var gz = new GZIPInputStream(QwenTokenizer.class.getResourceAsStream(QwenTokenizer.BUNDLED_RESOURCE));
             var djl = HuggingFaceTokenizer.newInstance(gz, QwenTokenizer.OPTIONS)) {
            for (String line; (line = reader.readLine()) != null; n++) {
                var c = json.readTree(line);
                var text = c.get("text").asText();
                var expected = new long[c.get("ids").size()];
                for (int i = 0; i < expected.length; i++) expected[i] = c.get("ids").get(i).asLong();
                assertArrayEquals(expected, tok.encode(text), "case " + n + ": " + json.writeValueAsString(text));
                assertArrayEquals(expected, djl.encode(text).getIds(), "DJL encode(), case " + n);
            }
        }
        assertTrue(n >= 300, "only " + n + " cases");
    }

    @Test
    void concurrentEncodesGiveTheSameIds() throws Exception {
        var json = new ObjectMapper();
        var texts = new ArrayList<String>();
        try (var in = getClass().getResourceAsStream("bpe_cases.jsonl");
             var reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            for (String line; (line = reader.readLine()) != null; ) texts.add(json.readTree(line).get("text").asText());
        }
        var expected = new ArrayList<long[]>();
        for (var t : texts) expected.add(tok.encode(t));
        var tasks = new ArrayList<Callable<Integer>>();
        for (int w = 0; w < 16; w++) {
            int seed = w;
            tasks.add(() -> {
                for (int round = 0; round < 4; round++)
                    for (int i = 0; i < texts.size(); i++) {
                        int k = (i * 31 + seed * 7 + round) % texts.size();
                        assertArrayEquals(expected.get(k), tok.encode(texts.get(k)));
                    }
                return 0;
            });
        }
        try (var pool = Executors.newFixedThreadPool(16)) {
            for (var f : pool.invokeAll(tasks)) f.get();
        }
    }

    @Test
    void loadsPlainAndGzipFilesAndRejectsUseAfterClose(@TempDir Path dir) throws Exception {
        var gz = dir.resolve("tokenizer.json.gz");
        try (var in = QwenTokenizer.class.getResourceAsStream(QwenTokenizer.BUNDLED_RESOURCE)) {
            Files.copy(in, gz);
        }
        var plain = dir.resolve("tokenizer.json");
        try (var in = new GZIPInputStream(Files.newInputStream(gz))) {
            Files.copy(in, plain);
        }
        for (var file : List.of(gz, plain, dir)) {
            var t = QwenTokenizer.load(file);
            assertArrayEquals(new long[] {9707, 1879}, t.encode("Hello world"), file.toString());
            t.close();
            t.close();
            assertThrows(IllegalStateException.class, () -> t.encode("Hello"));
        }
        var broken = Files.writeString(dir.resolve("broken.json"), "{\"model\": 1}");
        assertThrows(java.io.IOException.class, () -> QwenTokenizer.load(broken));
    }
}
