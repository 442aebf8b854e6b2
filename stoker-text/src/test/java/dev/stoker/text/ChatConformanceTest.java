package dev.stoker.text;

import org.junit.jupiter.api.Timeout;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.testkit.Vectors;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Chat vectors c01/c02 (spec §15): rendered text, ids, labels, mask and M-RoPE positions match the reference exactly. */
@Timeout(60)
class ChatConformanceTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static QwenTokenizer tokenizer;

    @BeforeAll
    static void load() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static ChatFamily family(String name) {
        return switch (name) {
            case "qwen2_5vl" -> ProcessorPreset.QWEN2_5_VL.chatFamily();
            case "qwen3vl" -> ProcessorPreset.QWEN3_VL.chatFamily();
            default -> throw new IllegalArgumentException(name);
        };
    }

    private static List<long[]> grids(JsonNode outputs) {
        var grids = new ArrayList<long[]>();
        for (var row : outputs.get("image_grid_thw")) grids.add(new long[] {row.get(0).asLong(), row.get(1).asLong(), row.get(2).asLong()});
        return grids;
    }

    private static long[] npy(JsonNode outputs, String key) throws Exception {
        var rel = outputs.get("files").get(key).asText();
        return Npy.read(Vectors.get().file(rel).orElseThrow(() -> new AssertionError("missing vector file " + rel))).asLongs();
    }

    private static String expectedText(JsonNode outputs) throws Exception {
        var rel = outputs.get("text_file").asText();
        return Files.readString(Vectors.get().file(rel).orElseThrow(() -> new AssertionError("missing " + rel)), StandardCharsets.UTF_8);
    }

    private static ChatSample manifestSample(JsonNode chatCase) {
        ObjectNode record = JSON.createObjectNode();
        record.put("id", chatCase.get("id").asText());
        record.set("messages", chatCase.get("messages"));
        return new SampleParser().parse(record, "manifest");
    }

    @ParameterizedTest(name = "{0} {1}")
    @CsvSource({"c01_vqa_single_image, qwen2_5vl", "c01_vqa_single_image, qwen3vl",
                "c02_multiturn_two_images, qwen2_5vl", "c02_multiturn_two_images, qwen3vl"})
    void matchesReference(String caseId, String familyName) throws Exception {
        var chat = Vectors.get().chatCase(caseId);
        var outputs = chat.get("outputs").get(familyName);
        var sample = manifestSample(chat);
        var builder = new TokenSequenceBuilder(tokenizer, family(familyName), 2, 8192, TruncationPolicy.REJECT);

        assertEquals(expectedText(outputs), builder.template().render(sample.messages()));

        var f = builder.build(sample, grids(outputs));
        var ids = npy(outputs, "input_ids");
        assertEquals(outputs.get("seq_len").asInt(), f.length());
        assertArrayEquals(ids, f.inputIds());
        assertEquals(outputs.get("input_ids_sha256").asText(), Vectors.sha256(f.inputIds()));
        assertArrayEquals(npy(outputs, "labels"), f.labels());
        assertEquals(outputs.get("labels_sha256").asText(), Vectors.sha256(f.labels()));
        assertEquals(outputs.get("num_supervised").asInt(), f.supervisedCount());
        assertArrayEquals(npy(outputs, "attention_mask"), f.attentionMask());
        assertArrayEquals(npy(outputs, "position_ids"), f.positionIds());
        assertEquals(outputs.get("rope_delta").asLong(), f.ropeDelta());
        assertEquals(grids(outputs).size(), f.imagesKept());
        var gridFile = npy(outputs, "image_grid_thw");
        assertArrayEquals(gridFile, grids(outputs).stream().flatMapToLong(java.util.Arrays::stream).toArray());

        var expanded = ChatTemplate.expandImagePads(expectedText(outputs), grids(outputs), 2);
        assertArrayEquals(ids, tokenizer.encode(expanded), "tokenizing the text-expanded chat gives the same ids");
    }

    @ParameterizedTest(name = "{0} {1}")
    @CsvSource({"c01_vqa_single_image, qwen2_5vl", "c01_vqa_single_image, qwen3vl",
                "c02_multiturn_two_images, qwen2_5vl", "c02_multiturn_two_images, qwen3vl"})
    void llavaAndHfFormatsRenderLikeTheManifest(String caseId, String familyName) throws Exception {
        var chat = Vectors.get().chatCase(caseId);
        var expected = expectedText(chat.get("outputs").get(familyName));
        var template = new ChatTemplate(family(familyName));
        var parser = new SampleParser();

        var hf = parser.parseLine(hfRecord(caseId).getBytes(StandardCharsets.UTF_8), "hf.jsonl:1");
        assertEquals(expected, template.render(hf.messages()));
        assertEquals(manifestSample(chat).imagePaths(), hf.imagePaths());

        // The official LLaVA conversion strip()s the text around <image>, so c02's
        // "this one: <image> Which" loses both spaces; c01 has none to lose.
        var llava = parser.parseLine(llavaRecord(caseId).getBytes(StandardCharsets.UTF_8), "llava.jsonl:1");
        var llavaExpected = expected.replace("this one: <|vision_start|>", "this one:<|vision_start|>")
                .replace("<|vision_end|> Which", "<|vision_end|>Which");
        assertEquals(llavaExpected, template.render(llava.messages()));
        assertEquals(manifestSample(chat).imagePaths(), llava.imagePaths());
        assertEquals(caseId, llava.id());
    }

    /**
     * LLaMA-Factory / ms-swift records keep the text around {@code <image>} as it is, so unlike LLaVA's they
     * reproduce the reference exactly: same rendered text and, through the encoding path, the same ids.
     */
    @ParameterizedTest(name = "{0} {1}")
    @CsvSource({"c01_vqa_single_image, qwen2_5vl", "c01_vqa_single_image, qwen3vl",
                "c02_multiturn_two_images, qwen2_5vl", "c02_multiturn_two_images, qwen3vl"})
    void sharegptAndMessagesWithImagesEncodeLikeTheReference(String caseId, String familyName) throws Exception {
        var chat = Vectors.get().chatCase(caseId);
        var outputs = chat.get("outputs").get(familyName);
        var builder = new TokenSequenceBuilder(tokenizer, family(familyName), 2, 8192, TruncationPolicy.REJECT);
        var parser = new SampleParser();
        var ids = npy(outputs, "input_ids");
        for (var record : List.of(sharegptRecord(caseId), swiftRecord(caseId))) {
            var sample = parser.parseLine(record.getBytes(StandardCharsets.UTF_8), "llamafactory.jsonl:1");
            assertEquals(manifestSample(chat).messages(), sample.messages(), record);
            assertEquals(expectedText(outputs), builder.template().render(sample.messages()));
            var f = builder.build(sample, grids(outputs));
            assertArrayEquals(ids, f.inputIds());
            assertArrayEquals(npy(outputs, "labels"), f.labels());
            assertArrayEquals(npy(outputs, "position_ids"), f.positionIds());
        }
    }

    /**
     * The model's own template, rendered by {@link JinjaChatRenderer}, encodes the vectors exactly as the built-in
     * renderer does: same text, and ids, labels (the official rule on ids) and positions equal to the reference.
     */
    @ParameterizedTest(name = "{0} {1} {2}")
    @CsvSource({"c01_vqa_single_image, qwen2_5vl, qwen2.5-vl-instruct.jinja", "c01_vqa_single_image, qwen2_5vl, qwen2-vl-instruct.jinja",
                "c01_vqa_single_image, qwen3vl, qwen3-vl-instruct.jinja",
                "c02_multiturn_two_images, qwen2_5vl, qwen2.5-vl-instruct.jinja", "c02_multiturn_two_images, qwen2_5vl, qwen2-vl-instruct.jinja",
                "c02_multiturn_two_images, qwen3vl, qwen3-vl-instruct.jinja"})
    void theModelsOwnTemplateEncodesLikeTheBuiltInOne(String caseId, String familyName, String templateFile) throws Exception {
        var chat = Vectors.get().chatCase(caseId);
        var outputs = chat.get("outputs").get(familyName);
        var sample = manifestSample(chat);
        var model = new TokenSequenceBuilder(tokenizer, JinjaChatRenderer.compile(JinjaChatRendererTest.template(templateFile)), 2, 8192,
                TruncationPolicy.REJECT);
        var builtIn = new TokenSequenceBuilder(tokenizer, family(familyName), 2, 8192, TruncationPolicy.REJECT);

        assertEquals(expectedText(outputs), model.template().render(sample.messages()));
        var f = model.build(sample, grids(outputs));
        var b = builtIn.build(sample, grids(outputs));
        assertArrayEquals(npy(outputs, "input_ids"), f.inputIds());
        assertArrayEquals(npy(outputs, "labels"), f.labels());
        assertArrayEquals(npy(outputs, "position_ids"), f.positionIds());
        assertArrayEquals(b.inputIds(), f.inputIds());
        assertArrayEquals(b.labels(), f.labels());
        assertArrayEquals(b.attentionMask(), f.attentionMask());
        assertArrayEquals(b.positionIds(), f.positionIds());
        assertEquals(b.ropeDelta(), f.ropeDelta());
    }

    /** LLaMA-Factory's sharegpt layout: {@code conversations} with from/value and a top-level {@code images} list. */
    private static String sharegptRecord(String caseId) {
        return switch (caseId) {
            case "c01_vqa_single_image" -> """
                {"id": "c01_vqa_single_image", "images": ["p06_rgba_alpha_300x200"], "conversations": [
                  {"from": "human", "value": "<image>What is shown in this picture? Answer briefly."},
                  {"from": "gpt", "value": "A mountain landscape; the left part is transparent."}]}
                """.replace("\n", " ");
            case "c02_multiturn_two_images" -> """
                {"id": "c02_multiturn_two_images", "images": ["p07_halfround_400x294", "p03_small_40x36"], "conversations": [
                  {"from": "system", "value": "You are a meticulous visual assistant."},
                  {"from": "human", "value": "<image>Describe the pattern in this image."},
                  {"from": "gpt", "value": "Colour gradients with a checkerboard overlay in the blue channel."},
                  {"from": "human", "value": "Now compare it with this one: <image> Which one is larger?"},
                  {"from": "gpt", "value": "The first one: 400×294 pixels versus 40×36."}]}
                """.replace("\n", " ");
            default -> throw new IllegalArgumentException(caseId);
        };
    }

    /** The ms-swift / LLaMA-Factory openai-style layout: the same turns as {@code messages} with string content. */
    private static String swiftRecord(String caseId) {
        return sharegptRecord(caseId).replace("\"conversations\"", "\"messages\"")
                .replace("\"from\": \"human\"", "\"role\": \"user\"").replace("\"from\": \"gpt\"", "\"role\": \"assistant\"")
                .replace("\"from\": \"system\"", "\"role\": \"system\"").replace("\"value\"", "\"content\"");
    }

    private static String hfRecord(String caseId) {
        return switch (caseId) {
            case "c01_vqa_single_image" -> """
                {"id": "c01_vqa_single_image", "messages": [
                  {"role": "user", "content": [{"type": "image", "image": "p06_rgba_alpha_300x200"},
                                               {"type": "text", "text": "What is shown in this picture? Answer briefly."}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "A mountain landscape; the left part is transparent."}]}]}
                """.replace("\n", " ");
            case "c02_multiturn_two_images" -> """
                {"id": "c02_multiturn_two_images", "messages": [
                  {"role": "system", "content": "You are a meticulous visual assistant."},
                  {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "p07_halfround_400x294"}},
                                               {"text": "Describe the pattern in this image."}]},
                  {"role": "assistant", "content": "Colour gradients with a checkerboard overlay in the blue channel."},
                  {"role": "user", "content": [{"type": "text", "text": "Now compare it with this one: "},
                                               {"image": "p03_small_40x36"},
                                               {"type": "text", "text": " Which one is larger?"}]},
                  {"role": "assistant", "content": "The first one: 400×294 pixels versus 40×36."}]}
                """.replace("\n", " ");
            default -> throw new IllegalArgumentException(caseId);
        };
    }

    private static String llavaRecord(String caseId) {
        return switch (caseId) {
            case "c01_vqa_single_image" -> """
                {"id": "c01_vqa_single_image", "image": "p06_rgba_alpha_300x200", "conversations": [
                  {"from": "human", "value": "<image>\\nWhat is shown in this picture? Answer briefly."},
                  {"from": "gpt", "value": "A mountain landscape; the left part is transparent."}]}
                """.replace("\n", " ");
            case "c02_multiturn_two_images" -> """
                {"id": "c02_multiturn_two_images", "image": ["p07_halfround_400x294", "p03_small_40x36"], "conversations": [
                  {"from": "system", "value": "You are a meticulous visual assistant."},
                  {"from": "human", "value": "<image>\\nDescribe the pattern in this image."},
                  {"from": "gpt", "value": "Colour gradients with a checkerboard overlay in the blue channel."},
                  {"from": "human", "value": "Now compare it with this one: <image> Which one is larger?"},
                  {"from": "gpt", "value": "The first one: 400×294 pixels versus 40×36."}]}
                """.replace("\n", " ");
            default -> throw new IllegalArgumentException(caseId);
        };
    }
}
