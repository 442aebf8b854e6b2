package dev.stoker.text;

import static dev.stoker.text.JinjaChatRendererTest.template;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The start-up check of a model's template against the built-in renderer, on the published templates and altered ones. */
@Timeout(60)
class TemplateCheckTest {

    @ParameterizedTest(name = "{0}")
    @CsvSource({"qwen2-vl-instruct.jinja, QWEN2_VL", "qwen2.5-vl-instruct.jinja, QWEN2_VL", "qwen3-vl-instruct.jinja, QWEN3_VL"})
    void publishedTemplatesRenderEveryCaseAsTheBuiltInRendererOfTheirFamily(String file, ChatFamily family) {
        var model = JinjaChatRenderer.compile(template(file));
        var builtIn = new ChatTemplate(family);
        for (var c : TemplateCheck.cases())
            assertEquals(builtIn.render(c.messages()), model.render(c.messages()), c.name());
        assertEquals(Optional.empty(), TemplateCheck.compare(template(file), family));
    }

    @Test
    void aTemplateOfTheOtherFamilyDiffersAtTheDefaultSystemPrompt() {
        var d = TemplateCheck.compare(template("qwen2-vl-instruct.jinja"), ChatFamily.QWEN3_VL).orElseThrow();
        assertEquals(TemplateCheck.cases().getFirst().name(), d.caseName());
        assertEquals("<|im_start|>".length(), d.index(), d.message());
        assertEquals("\"<|im_start|>\" | \"user\\nWhat is the capital\"…", d.builtIn());
        assertEquals("\"<|im_start|>\" | \"system\\nYou are a helpful\"…", d.model());
    }

    @Test
    void aChangedDefaultSystemPromptIsReportedAtItsFirstChangedCharacter() {
        var altered = template("qwen2-vl-instruct.jinja").replace("You are a helpful assistant.", "You are a helpful AI assistant.");
        var d = TemplateCheck.compare(altered, ChatFamily.QWEN2_VL).orElseThrow();
        assertEquals("text_only", d.caseName(), "the first case without a system message");
        assertEquals("<|im_start|>system\nYou are a helpful ".length(), d.index());
        assertEquals("…\"ystem\\nYou are a helpful \" | \"assistant.<|im_end|>\\n<|i\"…", d.builtIn());
        assertEquals("…\"ystem\\nYou are a helpful \" | \"AI assistant.<|im_end|>\\n\"…", d.model());
        assertEquals("template case 'text_only' differs at character 37: built-in renders " + d.builtIn()
                + ", the model's template " + d.model(), d.message());
    }

    @Test
    void anExtraNewlineAfterAssistantTurnsIsReportedWhereItStarts() {
        var source = template("qwen3-vl-instruct.jinja");
        var assistantEnd = "            {%- endfor %}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}";
        assertTrue(source.contains(assistantEnd));
        var altered = source.replace(assistantEnd, assistantEnd.replace("'<|im_end|>\\n'", "'<|im_end|>\\n\\n'"));
        var d = TemplateCheck.compare(altered, ChatFamily.QWEN3_VL).orElseThrow();
        assertEquals("text_only", d.caseName());
        var expected = new ChatTemplate(ChatFamily.QWEN3_VL).render(TemplateCheck.cases().getFirst().messages());
        assertEquals(expected.length(), d.index(), "the built-in text ends where the model's has its extra newline");
        assertTrue(d.builtIn().endsWith("\" | <end>"), d.builtIn());
        assertTrue(d.model().endsWith("\" | \"\\n\""), d.model());
    }

    @Test
    void aDifferenceDeepInsideACaseNamesThatCase() {
        // Only image placeholders change: the two text-only cases agree, the first case with an image differs.
        var altered = template("qwen2-vl-instruct.jinja").replace("<|vision_start|><|image_pad|><|vision_end|>", "<|vision_start|><|image_pad|><|vision_end|>\n");
        var d = TemplateCheck.compare(altered, ChatFamily.QWEN2_VL).orElseThrow();
        assertEquals("image_then_text", d.caseName());
        var expected = new ChatTemplate(ChatFamily.QWEN2_VL).render(TemplateCheck.cases().get(2).messages());
        assertEquals(expected.indexOf("<|vision_end|>") + "<|vision_end|>".length(), d.index());
    }

    @Test
    void theThinkingTemplateIsNotTakenForTheInstructOne() {
        var d = TemplateCheck.compare(template("qwen3-vl-thinking.jinja"), ChatFamily.QWEN3_VL).orElseThrow();
        assertEquals("text_only", d.caseName());
        assertEquals("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n".length(), d.index());
        assertEquals("…\">\\n<|im_start|>assistant\\n\" | \"Paris.<|im_end|>\\n\"", d.builtIn());
        assertEquals("…\">\\n<|im_start|>assistant\\n\" | \"<think>\\n\\n</think>\\n\\nParis\"…", d.model());
    }

    @Test
    void aTemplateThatRaisesFailsNamingTheCaseAndItsMessage() {
        var source = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                + "<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
                + "{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}";
        var e = assertThrows(ChatTemplateException.class, () -> TemplateCheck.compare(source, ChatFamily.QWEN3_VL));
        assertEquals("template case 'system_and_text': chat template failed: raise_exception: System role not supported (line 1)", e.getMessage());
    }

    @Test
    void aTemplateThatDoesNotParseFailsBeforeAnyCase() {
        var e = assertThrows(ChatTemplateException.class,
                () -> TemplateCheck.compare("{% for m in messages %}<|im_start|>{{ m.role }}\n", ChatFamily.QWEN3_VL));
        assertTrue(e.getMessage().startsWith("chat template does not parse: "), e.getMessage());
        assertTrue(e.getMessage().contains("endfor"), e.getMessage());
    }

    @Test
    void theCasesCoverWhatTheParserAdmits() {
        var cases = TemplateCheck.cases();
        var names = new HashSet<String>();
        for (var c : cases) assertTrue(names.add(c.name()), "duplicate case " + c.name());
        assertTrue(cases.stream().anyMatch(c -> c.messages().getFirst().role() == Role.SYSTEM), "with a system message");
        assertTrue(cases.stream().anyMatch(c -> c.messages().stream().noneMatch(m -> m.role() == Role.SYSTEM)), "without one");
        assertTrue(cases.stream().anyMatch(c -> images(c) == 0), "text only");
        assertTrue(cases.stream().anyMatch(c -> images(c) == 1), "one image");
        assertTrue(cases.stream().anyMatch(c -> images(c) >= 3), "several images");
        assertTrue(cases.stream().anyMatch(c -> c.messages().stream().anyMatch(TemplateCheckTest::imageBetweenTexts)), "an image between texts");
        assertTrue(cases.stream().anyMatch(c -> c.messages().stream().filter(m -> m.role() == Role.ASSISTANT).count() >= 2), "multi-turn");
        assertTrue(cases.stream().anyMatch(c -> c.messages().stream().flatMap(m -> m.parts().stream()).anyMatch(p -> p instanceof Text t && t.text().isEmpty())), "empty text");
        assertTrue(cases.stream().anyMatch(c -> text(c).codePoints().anyMatch(cp -> cp > 0xFFFF)), "text beyond the BMP");
        assertTrue(cases.stream().anyMatch(c -> text(c).contains("{{") && text(c).contains("{%") && text(c).contains("<|im_end|>")), "template-like text");
    }

    /** Shapes the parser admits on which the published Qwen3-VL-Instruct template and the built-in renderer part: kept out of the cases. */
    @Test
    void qwen3VlInstructDropsLaterSystemTurnsAndNonUserImages() {
        var instruct = JinjaChatRenderer.compile(template("qwen3-vl-instruct.jinja"));
        var builtIn = new ChatTemplate(ChatFamily.QWEN3_VL);
        var laterSystem = List.of(Message.text(Role.USER, "u"), Message.text(Role.SYSTEM, "s"), Message.text(Role.ASSISTANT, "a"));
        assertEquals("<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n", instruct.render(laterSystem));
        assertNotEquals(builtIn.render(laterSystem), instruct.render(laterSystem));
        var assistantImage = List.of(Message.text(Role.USER, "u"), new Message(Role.ASSISTANT, List.of(new Image("x.jpg"), new Text("a"))));
        assertEquals("<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n", instruct.render(assistantImage));
        var systemImage = List.of(new Message(Role.SYSTEM, List.of(new Image("x.jpg"), new Text("s"))), Message.text(Role.USER, "u"));
        assertEquals("<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n", instruct.render(systemImage));
        // Qwen2-VL renders all three as the built-in renderer does.
        var qwen2 = JinjaChatRenderer.compile(template("qwen2-vl-instruct.jinja"));
        for (var chat : List.of(laterSystem, assistantImage, systemImage))
            assertEquals(new ChatTemplate(ChatFamily.QWEN2_VL).render(chat), qwen2.render(chat));
    }

    @Test
    void theCheckAtStartTakesWellUnderASecond() {
        var source = template("qwen3-vl-instruct.jinja");
        long t0 = System.nanoTime();
        assertEquals(Optional.empty(), TemplateCheck.compare(source, ChatFamily.QWEN3_VL));
        long first = System.nanoTime() - t0;
        long best = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            t0 = System.nanoTime();
            assertEquals(Optional.empty(), TemplateCheck.compare(source, ChatFamily.QWEN3_VL));
            best = Math.min(best, System.nanoTime() - t0);
        }
        System.out.printf("template check, %d cases, compile included: first %.1f ms, then best of 5 %.1f ms%n",
                TemplateCheck.cases().size(), first / 1e6, best / 1e6);
        assertTrue(first < 1_000_000_000L, first + " ns");
    }

    private static long images(TemplateCheck.TemplateCase c) {
        return c.messages().stream().flatMap(m -> m.parts().stream()).filter(p -> p instanceof Image).count();
    }

    private static String text(TemplateCheck.TemplateCase c) {
        var sb = new StringBuilder();
        for (var m : c.messages()) for (var p : m.parts()) if (p instanceof Text t) sb.append(t.text());
        return sb.toString();
    }

    private static boolean imageBetweenTexts(Message m) {
        var parts = m.parts();
        for (int i = 1; i + 1 < parts.size(); i++)
            if (parts.get(i) instanceof Image && parts.get(i - 1) instanceof Text && parts.get(i + 1) instanceof Text) return true;
        return false;
    }
}
