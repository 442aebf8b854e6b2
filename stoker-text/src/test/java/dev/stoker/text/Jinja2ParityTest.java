package dev.stoker.text;

import static dev.stoker.text.JinjaChatRendererTest.template;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * JinjaChatRenderer against Python's Jinja2 set up as transformers sets it up: {@code /dev/stoker/testkit/templates/jinja2-renders.jsonl} (stoker-testkit)
 * holds Jinja2 3.1.6's renders of each published template (the Qwen3-VL Thinking one included) on every template case,
 * on the shapes the cases leave out and on 60 random chats ({@code make_jinja2_renders.py} beside it writes it).
 */
@Timeout(60)
class Jinja2ParityTest {
    /** The chats of make_jinja2_renders.py's EXTRA, by name. */
    private static final Map<String, List<Message>> EXTRA = Map.of(
            "later_system_turn", List.of(Message.text(Role.USER, "u"), Message.text(Role.SYSTEM, "s"), Message.text(Role.ASSISTANT, "a")),
            "image_in_assistant_turn", List.of(Message.text(Role.USER, "u"), new Message(Role.ASSISTANT, List.of(new Image("x"), new Text("a")))),
            "image_in_system_turn", List.of(new Message(Role.SYSTEM, List.of(new Image("x"), new Text("s"))), Message.text(Role.USER, "u")));

    /** The random chats of make_jinja2_renders.py, by name, as written with their renders. */
    private static final Map<String, List<Message>> RANDOM = new LinkedHashMap<>();

    /** Jinja2's text per case name, for one template. */
    private static Map<String, String> jinja2(String templateFile) throws IOException {
        var out = new LinkedHashMap<String, String>();
        try (var in = Jinja2ParityTest.class.getResourceAsStream("/dev/stoker/testkit/templates/jinja2-renders.jsonl")) {
            var json = new ObjectMapper();
            for (var line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
                if (line.isBlank()) continue;
                var rec = json.readTree(line);
                if (!rec.get("template").asText().equals(templateFile)) continue;
                var name = rec.get("case").asText();
                out.put(name, rec.get("text").asText());
                if (rec.has("messages")) RANDOM.computeIfAbsent(name, _ -> messages(rec.get("messages")));
            }
        }
        return out;
    }

    private static List<Message> messages(JsonNode list) {
        var messages = new ArrayList<Message>();
        for (var m : list) {
            var parts = new ArrayList<Message.Part>();
            for (var item : m.get("content"))
                parts.add(item.get("type").asText().equals("image") ? new Image("x.jpg") : new Text(item.get("text").asText()));
            var role = switch (m.get("role").asText()) {
                case "system" -> Role.SYSTEM;
                case "user" -> Role.USER;
                default -> Role.ASSISTANT;
            };
            messages.add(new Message(role, parts));
        }
        return messages;
    }

    private static List<Message> chat(String name) {
        if (EXTRA.containsKey(name)) return EXTRA.get(name);
        if (RANDOM.containsKey(name)) return RANDOM.get(name);
        return TemplateCheck.cases().stream().filter(c -> c.name().equals(name)).findFirst().orElseThrow().messages();
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"qwen2-vl-instruct.jinja", "qwen2.5-vl-instruct.jinja", "qwen3-vl-instruct.jinja", "qwen3-vl-thinking.jinja"})
    void rendersWhatJinja2Renders(String templateFile) throws IOException {
        var expected = jinja2(templateFile);
        assertEquals(TemplateCheck.cases().size() + EXTRA.size() + 60, expected.size());
        var renderer = JinjaChatRenderer.compile(template(templateFile));
        for (var e : expected.entrySet())
            assertEquals(e.getValue(), renderer.render(chat(e.getKey())), templateFile + " " + e.getKey());
    }

    @Test
    void theBuiltInRendererIsJinja2sOnTheCasesAndPartsFromQwen3InstructOnlyOnTheLeftOutShapes() throws IOException {
        for (var file : List.of("qwen2-vl-instruct.jinja", "qwen3-vl-instruct.jinja")) {
            var builtIn = new ChatTemplate(file.startsWith("qwen3") ? ChatFamily.QWEN3_VL : ChatFamily.QWEN2_VL);
            for (var e : jinja2(file).entrySet()) {
                if (e.getKey().startsWith("random_")) continue;
                boolean leftOut = EXTRA.containsKey(e.getKey());
                boolean equal = e.getValue().equals(builtIn.render(chat(e.getKey())));
                assertEquals(!(leftOut && file.startsWith("qwen3")), equal, file + " " + e.getKey());
            }
        }
    }

    /** The Thinking template renders (as Jinja2 does, above) and differs from the built-in renderer where a case ends with an answer. */
    @Test
    void theThinkingTemplateDiffersWhereACaseEndsWithAnAnswer() throws IOException {
        var renderer = JinjaChatRenderer.compile(template("qwen3-vl-thinking.jinja"));
        var builtIn = new ChatTemplate(ChatFamily.QWEN3_VL);
        for (var c : TemplateCheck.cases()) {
            // It adds an empty think block to the last answer, unless the answer carries one as the template writes it.
            boolean differs = c.messages().getLast().role() == Role.ASSISTANT && !c.name().equals("think_tags_in_answer");
            assertEquals(differs, !renderer.render(c.messages()).equals(builtIn.render(c.messages())), c.name());
        }
    }
}
