package dev.stoker.text;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * Tells whether a model's own chat template renders chats as the built-in {@link ChatTemplate} of its family does:
 * both render each of the {@linkplain #cases() template cases} and the first case whose texts differ is reported,
 * with the first differing character. Run at start-up: equal means the built-in renderer encodes exactly what
 * transformers would with the model's template; a difference is a reason to refuse (or to render with the model's
 * template, {@link JinjaChatRenderer}).
 *
 * <p>The cases ({@code template-cases.jsonl} beside this class, one HF typed {@code messages} record per line, its
 * {@code id} the case name) cover what {@link SampleParser} admits and the Qwen-VL templates render alike: with and
 * without a system message, text only, one and several images, an image between texts, several text parts,
 * multi-turn, consecutive user turns, a chat that starts with the assistant or ends with the user, empty text,
 * surrounding whitespace, Unicode, and text that looks like template syntax or special tokens. Left out, because
 * the published Qwen3-VL-Instruct template renders them unlike its Thinking sibling and the spec's reference: a system
 * message after the first turn (the Instruct template drops it) and images in system or assistant turns (it drops
 * them).
 *
 * <p>Threading: stateless; safe to call from any thread.
 */
public final class TemplateCheck {
    private static final String CASES_RESOURCE = "template-cases.jsonl";
    private static final String AUDIO_CASES_RESOURCE = "omni-template-cases.jsonl";
    /** Characters of context each side of a difference in {@link Difference#message()}. */
    private static final int EXCERPT_CHARS = 24;

    private TemplateCheck() {}

    /** One chat of the check, named by its {@code id} in the resource. */
    public record TemplateCase(String name, List<Message> messages) {
        public TemplateCase {
            Objects.requireNonNull(name, "name");
            messages = List.copyOf(messages);
        }
    }

    /**
     * The first place where the model's template and the built-in renderer disagree.
     *
     * @param caseName the template case
     * @param index    the index (UTF-16 chars) of the first differing character in both rendered texts
     * @param builtIn  the built-in renderer's text around {@code index}, as {@code …"before" | "after"…}
     * @param model    the model's template's text around {@code index}, likewise
     */
    public record Difference(String caseName, int index, String builtIn, String model) {
        /** One line for an error: the case, the index, and both excerpts with newlines and the like escaped. */
        public String message() {
            return "template case '" + caseName + "' differs at character " + index + ": built-in renders " + builtIn
                    + ", the model's template " + model;
        }

        @Override
        public String toString() { return message(); }
    }

    /** The template cases, in file order. */
    public static List<TemplateCase> cases() { return Cases.ALL; }

    /**
     * Compiles {@code jinjaSource} (with the Qwen special tokens) and compares it with {@code family}'s built-in renderer.
     *
     * @return empty if every case renders the same
     * @throws ChatTemplateException if the template does not parse or fails on a case (naming the case)
     */
    public static Optional<Difference> compare(String jinjaSource, ChatFamily family) {
        return compare(JinjaChatRenderer.compile(jinjaSource), family);
    }

    /** {@link #compare(String, ChatFamily)} for an already compiled template (to keep it for encoding when equal). */
    public static Optional<Difference> compare(ChatRenderer model, ChatFamily family) {
        return compare(model, new ChatTemplate(family), cases());
    }

    /**
     * An audio family's check ({@code --model DIR} of Qwen2-Audio, Qwen2.5-Omni or Qwen3-Omni): {@code model} (the folder's
     * template, compiled) against the family's built-in {@link OmniTemplate} over the audio template cases
     * ({@code omni-template-cases.jsonl}: clips before, after and between texts, several clips, a given system turn, several
     * turns, text only, an empty text, and for the families that take them an image and a video beside a clip).
     *
     * @return empty if every case the family admits renders the same
     * @throws ChatTemplateException if the template fails on a case (naming the case)
     */
    public static Optional<Difference> compare(ChatRenderer model, AudioPreset family) {
        var cases = family.hasVision() ? audioCases() : audioCases().stream().filter(c -> !holdsVision(c)).toList();
        return compare(model, new OmniTemplate(family), cases);
    }

    /** The audio families' template cases, in file order. */
    public static List<TemplateCase> audioCases() { return Cases.AUDIO; }

    private static boolean holdsVision(TemplateCase c) {
        return c.messages().stream().flatMap(m -> m.parts().stream()).anyMatch(p -> p instanceof Message.Image || p instanceof Message.Video);
    }

    static Optional<Difference> compare(ChatRenderer model, ChatRenderer builtIn, List<TemplateCase> cases) {
        for (var c : cases) {
            String expected = builtIn.render(c.messages());
            String actual;
            try {
                actual = model.render(c.messages());
            } catch (ChatTemplateException e) {
                throw new ChatTemplateException("template case '" + c.name() + "': " + e.getMessage(), e);
            }
            int at = firstDifference(expected, actual);
            if (at >= 0) return Optional.of(new Difference(c.name(), at, excerpt(expected, at), excerpt(actual, at)));
        }
        return Optional.empty();
    }

    /** The index of the first differing char, the shorter length if one is a prefix of the other, or -1 if equal. */
    static int firstDifference(String a, String b) {
        int n = Math.min(a.length(), b.length());
        for (int i = 0; i < n; i++) if (a.charAt(i) != b.charAt(i)) return i;
        return a.length() == b.length() ? -1 : n;
    }

    /**
     * {@code …"before" | "after"…} around {@code at}: the text up to the differing character and from it on, each
     * quoted and escaped so that the excerpt stays on one line ({@code "after"} is {@code <end>} past the end).
     */
    static String excerpt(String s, int at) {
        int from = Math.max(0, at - EXCERPT_CHARS);
        int to = Math.min(s.length(), at + EXCERPT_CHARS);
        var sb = new StringBuilder();
        if (from > 0) sb.append('…');
        sb.append('"');
        escape(sb, s, from, at);
        sb.append("\" | ");
        if (at >= s.length()) return sb.append("<end>").toString();
        sb.append('"');
        escape(sb, s, at, to);
        sb.append('"');
        if (to < s.length()) sb.append('…');
        return sb.toString();
    }

    private static void escape(StringBuilder sb, String s, int from, int to) {
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                default -> {
                    if (Character.isISOControl(c) || c == '\u2028' || c == '\u2029') sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
    }

    /** The cases, parsed once by the product's own parser (so they are chats it admits). */
    private static final class Cases {
        static final List<TemplateCase> ALL = load(CASES_RESOURCE, new SampleParser());
        /** The audio families' cases, read by the audio parser (clips, and images and videos for the families that take them). */
        static final List<TemplateCase> AUDIO = load(AUDIO_CASES_RESOURCE,
                new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT));

        private static List<TemplateCase> load(String resource, SampleParser parser) {
            byte[] bytes;
            try (var in = TemplateCheck.class.getResourceAsStream(resource)) {
                if (in == null) throw new IllegalStateException("missing resource " + resource);
                bytes = in.readAllBytes();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            var cases = new ArrayList<TemplateCase>();
            int lineNo = 0;
            for (var line : new String(bytes, StandardCharsets.UTF_8).split("\n")) {
                lineNo++;
                if (line.isBlank()) continue;
                var sample = parser.parseLine(line.getBytes(StandardCharsets.UTF_8), resource + ":" + lineNo);
                cases.add(new TemplateCase(sample.id(), sample.messages()));
            }
            return List.copyOf(cases);
        }
    }
}
