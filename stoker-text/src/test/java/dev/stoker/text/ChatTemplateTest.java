package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class ChatTemplateTest {
    private static final List<Message> CHAT = List.of(
            new Message(Role.USER, List.of(new Text("a "), new Image("x.jpg"), new Text(" b"))),
            Message.text(Role.ASSISTANT, "c"));

    @Test
    void qwen2InsertsDefaultSystemPrompt() {
        assertEquals("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                + "<|im_start|>user\na <|vision_start|><|image_pad|><|vision_end|> b<|im_end|>\n"
                + "<|im_start|>assistant\nc<|im_end|>\n", new ChatTemplate(ChatFamily.QWEN2_VL).render(CHAT));
    }

    @Test
    void qwen3HasNoDefaultSystemPrompt() {
        assertEquals("<|im_start|>user\na <|vision_start|><|image_pad|><|vision_end|> b<|im_end|>\n"
                + "<|im_start|>assistant\nc<|im_end|>\n", new ChatTemplate(ChatFamily.QWEN3_VL).render(CHAT));
    }

    @Test
    void explicitSystemReplacesTheDefaultAndLaterSystemTurnsRender() {
        var chat = List.of(Message.text(Role.SYSTEM, "S"), Message.text(Role.USER, "u"), Message.text(Role.SYSTEM, "T"),
                Message.text(Role.ASSISTANT, ""));
        var expected = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>system\nT<|im_end|>\n"
                + "<|im_start|>assistant\n<|im_end|>\n";
        assertEquals(expected, new ChatTemplate(ChatFamily.QWEN2_VL).render(chat));
        assertEquals(expected, new ChatTemplate(ChatFamily.QWEN3_VL).render(chat));
    }

    @Test
    void expandImagePadsWidensEachPlaceholderByItsGrid() {
        var text = "A<|image_pad|>B<|image_pad|>C";
        assertEquals("A" + "<|image_pad|>".repeat(6) + "B" + "<|image_pad|>".repeat(2) + "C",
                ChatTemplate.expandImagePads(text, List.of(new long[] {1, 4, 6}, new long[] {2, 2, 2}), 2));
        assertThrows(IllegalArgumentException.class, () -> ChatTemplate.expandImagePads(text, List.of(new long[] {1, 4, 6}), 2));
        assertThrows(IllegalArgumentException.class, () -> ChatTemplate.expandImagePads("A", List.of(new long[] {1, 4, 6}), 2));
        assertThrows(IllegalArgumentException.class, () -> ChatTemplate.imageTokens(new long[] {1, 3, 4}, 2));
        assertThrows(IllegalArgumentException.class, () -> ChatTemplate.imageTokens(new long[] {0, 2, 2}, 2));
    }
}
