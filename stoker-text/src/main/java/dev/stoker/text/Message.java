package dev.stoker.text;

import java.util.List;
import java.util.Objects;

/**
 * One chat turn: a role and its content as an ordered list of text and image parts, rendered
 * back to back with no separator (spec §10).
 */
public record Message(Role role, List<Part> parts) {

    /** The roles the Qwen-VL templates render; other roles are rejected at parse time. */
    public enum Role {
        SYSTEM("system"), USER("user"), ASSISTANT("assistant");

        private final String wireName;

        Role(String wireName) { this.wireName = wireName; }

        /** The name written after {@code <|im_start|>} and used in HF {@code messages}. */
        public String wireName() { return wireName; }
    }

    /** A piece of message content. */
    public sealed interface Part permits Text, Image {}

    /** Text rendered verbatim. */
    public record Text(String text) implements Part {
        public Text { Objects.requireNonNull(text, "text"); }
    }

    /** An image, by the path or URL the record gave; rendered as one vision placeholder. */
    public record Image(String ref) implements Part {
        public Image { Objects.requireNonNull(ref, "ref"); }
    }

    public Message {
        Objects.requireNonNull(role, "role");
        parts = List.copyOf(parts);
    }

    public static Message text(Role role, String text) { return new Message(role, List.of(new Text(text))); }
}
