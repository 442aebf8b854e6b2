package dev.stoker.text;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.tag.Tag;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;

/**
 * transformers' {@code {% generation %}…{% endgeneration %}} (its AssistantTracker extension, which marks assistant
 * text for {@code return_assistant_tokens_mask}): rendered as its body, which is what transformers outputs.
 */
final class GenerationTag implements Tag {
    private static final long serialVersionUID = 1L;

    @Override
    public String getName() { return "generation"; }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
        var sb = new StringBuilder();
        for (Node child : tagNode.getChildren()) sb.append(child.render(interpreter));
        return sb.toString();
    }
}
