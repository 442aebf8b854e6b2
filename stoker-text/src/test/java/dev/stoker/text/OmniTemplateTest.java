package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.AudioPreset;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The built-in audio templates and their tokenization against the fixture's chats ({@code omni/omni-fixtures.json}, made by
 * {@code tools/hf-check/audio_text_check.py}): the published templates ({@code omni/*.jinja}) rendered by transformers 5.18.0's
 * {@code render_jinja_template} and tokenized by a {@code tokenizers} 0.23 Tokenizer holding the family's added tokens. The
 * chats are HF typed records read by the audio parser, so the whole path from a record to pre-expansion ids is held.
 */
@Timeout(60)
class OmniTemplateTest {
    private static JsonNode fixture;
    private static QwenTokenizer tokenizer;
    private static final SampleParser PARSER = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT);
    private static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll
    static void load() throws IOException {
        try (var in = OmniTemplateTest.class.getResourceAsStream("omni/omni-fixtures.json")) {
            fixture = JSON.readTree(in);
        }
        tokenizer = QwenTokenizer.bundled();
    }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static String template(AudioPreset preset) throws IOException {
        try (var in = OmniTemplateTest.class.getResourceAsStream("omni/" + preset.cliName() + ".jinja")) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void builtInTemplatesAndTokensEqualThePublishedOnes() throws IOException {
        int n = 0;
        for (var c : fixture.get("chats")) {
            var preset = AudioPreset.fromName(c.get("family").asText());
            var record = JSON.createObjectNode().set("messages", c.get("messages"));
            var sample = PARSER.parse(record, "chat" + n);
            var text = c.get("text").asText();
            assertEquals(text, new OmniTemplate(preset).render(sample.messages()), preset + " chat " + n);
            assertEquals(text, JinjaChatRenderer.compile(template(preset)).render(sample.messages()), preset + " chat " + n + " (Jinja)");
            assertArrayEquals(OmniFixturesTest.longs(c.get("ids")), new OmniTemplate(preset).tokenize(text, tokenizer), preset + " chat " + n + " ids");
            n++;
        }
        assertEquals(5, n);
    }

    /**
     * The model-folder check of the audio families ({@code TemplateCheck.compare(renderer, family)}, what {@code --model DIR}
     * runs): the published templates render every audio case as the built-in ones (Qwen2-Audio the cases without an image or
     * a video, which its template would drop); one with another default system prompt differs in the first case, named.
     */
    @Test
    void publishedTemplatesPassTheModelFolderCheckAndAnAlteredOneIsNamed() throws IOException {
        assertEquals(9, TemplateCheck.audioCases().size());
        for (var preset : List.of(AudioPreset.QWEN2_AUDIO, AudioPreset.QWEN2_5_OMNI)) {
            assertEquals(java.util.Optional.empty(), TemplateCheck.compare(JinjaChatRenderer.compile(template(preset)), preset), preset.cliName());
            var altered = JinjaChatRenderer.compile(template(preset).replace("You are a helpful assistant.", "You are Qwen."));
            var d = TemplateCheck.compare(altered, preset).orElseThrow();
            assertEquals("audio_then_text", d.caseName());
            assertEquals("<|im_start|>system\nYou are ".length(), d.index());
        }
        // Qwen2-Audio's template drops images: had the check run the vision cases for it, the built-in one would throw
        assertThrows(IllegalArgumentException.class, () -> new OmniTemplate(AudioPreset.QWEN2_AUDIO).render(
                TemplateCheck.audioCases().stream().filter(c -> c.name().equals("image_and_audio")).findFirst().orElseThrow().messages()));
    }

    @Test
    void refusals() {
        var image = List.of(new Message(Message.Role.USER, List.of(new Message.Image("x.jpg"), new Message.Text("?"))));
        assertEquals("image x.jpg: qwen2-audio takes audio and text only (its template has no image or video item)",
                assertThrows(IllegalArgumentException.class, () -> new OmniTemplate(AudioPreset.QWEN2_AUDIO).render(image)).getMessage());
        var e = assertThrows(IllegalArgumentException.class,
                () -> new OmniTemplate(AudioPreset.QWEN2_5_OMNI).tokenize("<|im_start|>user\nsee <|object_ref_start|> here<|im_end|>\n", tokenizer));
        assertTrue(e.getMessage().contains("holds token id 151646, which is qwen2.5-omni's <|AUDIO|>"), e.getMessage());
    }

    @Test
    void qwen3OmniRendersItsOwnTokens() {
        var chat = List.of(new Message(Message.Role.USER, List.of(Message.Audio.of("a.wav"), new Message.Image("b.jpg"), new Message.Text("Hi"))),
                Message.text(Message.Role.ASSISTANT, "Ok"));
        var t = new OmniTemplate(AudioPreset.QWEN3_OMNI);
        var text = t.render(chat);
        assertEquals("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|><|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n"
                + "<|im_start|>assistant\nOk<|im_end|>\n", text);
        long[] ids = t.tokenize(text, tokenizer);
        assertArrayEquals(new long[] {151644, 872, 198, 151669, 151675, 151670, 151652, 151655, 151653}, java.util.Arrays.copyOf(ids, 9));
    }
}
