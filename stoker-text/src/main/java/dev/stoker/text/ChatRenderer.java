package dev.stoker.text;

import java.util.List;

/**
 * Renders a chat as a model's chat template does for SFT ({@code add_generation_prompt=False}, no tools, no
 * vision ids): one {@code <|vision_start|><|image_pad|><|vision_end|>} per image, before placeholder expansion.
 * {@link TokenSequenceBuilder} tokenizes what it renders and labels it by the official rule on token ids.
 *
 * <p>Two implementations: {@link ChatTemplate}, the built-in renderer of a Qwen-VL family (the fast default), and
 * {@link JinjaChatRenderer}, which runs a model's own Jinja {@code chat_template} as transformers'
 * {@code apply_chat_template} does. {@link TemplateCheck} tells whether the two agree for a model.
 *
 * <p>Threading: implementations are safe to share between threads.
 */
public interface ChatRenderer {

    /**
     * Appends the rendered chat to {@code out}.
     *
     * @throws ChatTemplateException if a model's template fails on this chat (it raised, or used what the engine lacks)
     */
    void render(List<Message> messages, StringBuilder out);

    /** The rendered chat as a string. */
    default String render(List<Message> messages) {
        var sb = new StringBuilder(256);
        render(messages, sb);
        return sb.toString();
    }
}
