package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The Jinja renderer: the environment transformers compiles chat templates in, the Python behaviour templates rely
 * on (expected values are what Jinja2 3.1.6 renders in transformers' environment; make_jinja2_renders.py builds it),
 * and errors that name what failed.
 */
@Timeout(60)
class JinjaChatRendererTest {
    private static final List<Message> CHAT = List.of(
            Message.text(Role.SYSTEM, "S"),
            new Message(Role.USER, List.of(new Text("a "), new Image("x.jpg"), new Text(" b"))),
            Message.text(Role.ASSISTANT, "c"));

    static String template(String name) {
        try (var in = JinjaChatRendererTest.class.getResourceAsStream("/dev/stoker/testkit/templates/" + name)) {
            if (in == null) throw new IllegalStateException("missing test template " + name);
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Renders {@code source} with {@code CHAT} as messages. */
    private static String render(String source) {
        return JinjaChatRenderer.compile(source).render(CHAT);
    }

    @Test
    void templatesSeeHfTypedMessagesAndTheSpecialTokens() {
        var out = render("{% for m in messages %}{{ m.role }}:{% for c in m['content'] %}[{{ c.type }}"
                + "{% if 'text' in c %}={{ c.text }}{% endif %}{% if 'image' in c %}!{% endif %}]{% endfor %};{% endfor %}"
                + "{{ 'G' if add_generation_prompt else 'noG' }} {{ eos_token }} {{ pad_token }} {{ 'T' if tools else 'noT' }}"
                + " {{ 'V' if add_vision_id else 'noV' }}");
        assertEquals("system:[text=S];user:[text=a ][image][text= b];assistant:[text=c];noG <|im_end|> <|endoftext|> noT noV", out);
        var own = new java.util.HashMap<String, Object>(Map.of("eos_token", "</s>"));
        own.put("bos_token", null);
        assertEquals("</s>|noB", JinjaChatRenderer.compile("{{ eos_token }}|{{ 'B' if bos_token else 'noB' }}", own).render(CHAT));
    }

    @Test
    void blocksAreTrimmedAndLeftStrippedAsTransformersCompilesThem() {
        // Jinja2 with trim_blocks=True, lstrip_blocks=True; the template's own final newline is dropped (keep_trailing_newline=False).
        assertEquals("x\ny", render("  {% if true %}\nx\n  {% endif %}\ny"));
        assertEquals("x  y", render("{% if true %}x{% endif %}\n  y"));
        assertEquals("ab", render("a\n  {{- 'b' }}"));
        assertEquals("<|im_start|>user\n", render("{%- for m in messages %}\n    {%- if m.role == 'user' %}\n"
                + "        {{- '<|im_start|>' + m.role + '\\n' }}\n    {%- endif %}\n{%- endfor %}\n"));
    }

    /** Template and what Jinja2 renders from it (trim_blocks and lstrip_blocks on, messages system/user/assistant). */
    private static final String[][] WHITESPACE = {
            {"{% for m in messages %}{{ m.role }} {% endfor %}", "system user assistant "},
            {"Picture {{ 1 }}: {% if true %}x{% endif %}", "Picture 1: x"},
            {"  {% if true %}\nx\n  {% endif %}\ny", "x\ny"},
            {"a\n  {% if true %}b{% endif %}", "a\nb"},
            {"ab  {% if true %}c{% endif %}", "ab  c"},
            {"{% if true %}\n  {% if true %}x{% endif %}\n{% endif %}", "x"},
            {"a\n  {# c #}\nb", "a\nb"},
            {"a  {# c #}b", "a  b"},
            {"{{ 'x' }}  {# c #}y", "x  y"},
            {"\t{% if true %}t{% endif %}", "t"},
            {"x {%- if true %}y{% endif %}", "xy"},
            {" {{ 'e' }}", " e"},
            {"{% if true %}a {% else %}b{% endif %}|{% if false %}a {% else %}b {% endif %}", "a |b "},
            {"{% for m in messages %}\n    {{ m.role }}: {% if loop.last %}end{% endif %}\n{% endfor %}", "    system:     user:     assistant: end"}};

    @Test
    void whitespaceAroundBlocksAndCommentsIsJinja2s() {
        for (var c : WHITESPACE) assertEquals(c[1], render(c[0]), c[0]);
    }

    @Test
    void chatTextIsNeverRenderedAgain() {
        var chat = List.of(Message.text(Role.USER, "{{ 7 * 7 }} {% if true %}x{% endif %} {# c #} <b>&amp;</b>"));
        var out = JinjaChatRenderer.compile("{{ messages[0].content[0].text }}").render(chat);
        assertEquals("{{ 7 * 7 }} {% if true %}x{% endif %} {# c #} <b>&amp;</b>", out);
    }

    /** Expressions written as in a template ({@code \\n} is a Jinja escape); newlines in the result shown as {@code \\n}. */
    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = ';', quoteCharacter = '`', value = {
            // expression ; what CPython's Jinja renders
            "'a</think>'.split('</think>')|length ; 2",
            "'a</think>'.split('</think>')[-1] == '' ; True",
            "'x.y.z'.split('.') ; ['x', 'y', 'z']",
            "'a..b'.split('.') ; ['a', '', 'b']",
            "'  a  b\\t\\nc  '.split() ; ['a', 'b', 'c']",
            "'a b c d'.split(' ', 2) ; ['a', 'b', 'c d']",
            "'  a  b  c  '.split(None, 1) ; ['a', 'b  c  ']",
            "'\\n\\nab\\n'.strip('\\n') ; ab",
            "'\\n\\nab\\n'.lstrip('\\n') ; ab\\n",
            "'\\n\\nab\\n'.rstrip('\\n') ; \\n\\nab",
            "'xyabyx'.strip('xy') ; ab",
            "'\u00a0 ab \u0085'.strip() == 'ab' ; True",
            "'<tool_response>x</tool_response>'.startswith('<tool_response>') ; True",
            "'<tool_response>x</tool_response>'.endswith('</tool_response>') ; True",
            "'abc'.startswith(('x', 'a')) ; True",
            "'abc'.endswith('b') ; False",
            "'a.b'.replace('.', '-') ; a-b",
    })
    void pythonStringMethods(String expression, String python) {
        // Jinja prints booleans as Python does (True/False), Jinjava as Java does: compare them through an if.
        var out = python.equals("True") || python.equals("False")
                ? render("{% if " + expression + " %}True{% else %}False{% endif %}")
                : render("{{ " + expression + " }}");
        assertEquals(python, out.replace("\n", "\\n"));
    }

    @Test
    void tojsonWritesWhatPythonJsonDumpsWrites() {
        var template = "{{ {'name': 'f', 'args': {'x': 1, 'y': [True, None, 2.5, 1e-05, 3.0]}, 'text': 'é\"\\\\\n\u0001'}|tojson }}";
        assertEquals("{\"name\": \"f\", \"args\": {\"x\": 1, \"y\": [true, null, 2.5, 1e-05, 3.0]}, \"text\": \"é\\\"\\\\\\n\\u0001\"}",
                render(template));
        assertEquals("{\n  \"a\": [\n    1,\n    2\n  ]\n}", render("{{ {'a': [1, 2]}|tojson(indent=2) }}"));
    }

    @Test
    void generationBlocksRenderTheirBody() {
        assertEquals("<|im_start|>assistant\nc<|im_end|>\n",
                render("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}<|im_start|>{{ m.role }}\n"
                        + "{{ m.content[0].text }}<|im_end|>\n{% endgeneration %}{% endif %}{% endfor %}"));
    }

    @Test
    void loopControlsAndNamespacesWork() {
        assertEquals("user 2", render("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}"
                + "{% endif %}{% set ns.n = ns.n + 1 %}{% if m.role == 'user' %}{{ m.role }}{% endif %}{% endfor %} {{ ns.n }}"));
        assertEquals("system", render("{% for m in messages %}{{ m.role }}{% break %}{% endfor %}"));
    }

    @Test
    void raiseExceptionFailsTheRenderWithTheTemplatesMessage() {
        var r = JinjaChatRenderer.compile("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok");
        var e = assertThrows(ChatTemplateException.class, () -> r.render(CHAT));
        assertTrue(e.getMessage().contains("System role not supported"), e.getMessage());
        assertEquals("ok", r.render(List.of(Message.text(Role.USER, "u"))));
    }

    @Test
    void sourcesThatDoNotParseAreRefusedAtCompile() {
        for (var bad : List.of("{% for m in messages %}{{ m.role }}", "{% if true %}x", "{{ messages[0] ", "{% frobnicate %}", "x{% endif %}")) {
            var e = assertThrows(ChatTemplateException.class, () -> JinjaChatRenderer.compile(bad), bad);
            assertTrue(e.getMessage().startsWith("chat template does not parse: "), e.getMessage());
        }
    }

    @Test
    void loopFormsJinjavaWouldMisrenderAreRefusedAtCompile() {
        var e = assertThrows(ChatTemplateException.class,
                () -> JinjaChatRenderer.compile("{% for m in messages if m.role == 'user' %}{{ m.role }}{% endfor %}"));
        assertTrue(e.getMessage().contains("filtered loop"), e.getMessage());
        e = assertThrows(ChatTemplateException.class,
                () -> JinjaChatRenderer.compile("{% for m in messages %}{{ m.role }}{% else %}none{% endfor %}"));
        assertTrue(e.getMessage().contains("else"), e.getMessage());
        // An if inside a string or the body is no loop filter.
        assertEquals("systemuserassistant", render("{% for m in messages|rejectattr('role', 'equalto', ' if ') %}{% if m %}{{ m.role }}{% endif %}{% endfor %}"));
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = ';', quoteCharacter = '`', value = {
            "{% for m in messages[::-1] %}{{ m.role }} {% endfor %} ; `assistant user system `",
            "{{ [1, 2, 3, 4, 5][1::2] }} ; [2, 4]",
            "{{ [1, 2, 3, 4][-2::-1] }} ; [3, 2, 1]",
            "{{ 'abcdef'[::-2] }} ; fdb",
            "{{ [1, 2, 3][1:] }} {{ [1, 2, 3][:-1] }} ; [2, 3] [1, 2]",
            "{% set ns = namespace(found=false, last=messages|length - 1) %}{{ ns.last }} ; 2",
            "{{ messages|length - 1 }} {{ (messages|length) * 2 }} ; 2 6",
    })
    void stepSlicesAndKeywordArgumentExpressionsAsInPython(String template, String python) {
        assertEquals(python, render(template));
    }

    @Test
    void whatJinjavaCannotEvaluateFailsTheRenderNamingIt() {
        var unknownMethod = JinjaChatRenderer.compile("{{ messages[0].role.title() }}");
        var e = assertThrows(ChatTemplateException.class, () -> unknownMethod.render(CHAT));
        assertTrue(e.getMessage().contains("title"), e.getMessage());
        var zeroStep = JinjaChatRenderer.compile("{{ messages[::0] }}");
        e = assertThrows(ChatTemplateException.class, () -> zeroStep.render(CHAT));
        assertTrue(e.getMessage().contains("step"), e.getMessage());
    }

    @Test
    void qwen3VlInstructTemplateRendersTheSpecsExample() {
        // Spec §10, vector c01 before expansion, Qwen3-VL version (no system line).
        var chat = List.of(
                new Message(Role.USER, List.of(new Image("p06"), new Text("What is shown in this picture? Answer briefly."))),
                Message.text(Role.ASSISTANT, "A mountain landscape; the left part is transparent."));
        assertEquals("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is shown in this picture? Answer briefly.<|im_end|>\n"
                        + "<|im_start|>assistant\nA mountain landscape; the left part is transparent.<|im_end|>\n",
                JinjaChatRenderer.compile(template("qwen3-vl-instruct.jinja")).render(chat));
    }

    @Test
    void oneCompiledTemplateRendersConcurrently() throws Exception {
        var renderer = JinjaChatRenderer.compile(template("qwen3-vl-instruct.jinja"));
        var builtIn = new ChatTemplate(dev.stoker.core.ProcessorPreset.ChatFamily.QWEN3_VL);
        var cases = TemplateCheck.cases();
        try (var pool = java.util.concurrent.Executors.newFixedThreadPool(4)) {
            var futures = new java.util.ArrayList<java.util.concurrent.Future<?>>();
            for (int t = 0; t < 4; t++) {
                int offset = t;
                futures.add(pool.submit(() -> {
                    for (int i = 0; i < 100; i++) {
                        var c = cases.get((i + offset) % cases.size());
                        assertEquals(builtIn.render(c.messages()), renderer.render(c.messages()), c.name());
                    }
                }));
            }
            for (var f : futures) f.get();
        }
    }
}
