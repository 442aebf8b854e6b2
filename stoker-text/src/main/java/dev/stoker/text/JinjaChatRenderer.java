package dev.stoker.text;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.JinjavaInterpreterResolver;
import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;
import com.hubspot.jinjava.tree.TextNode;
import com.hubspot.jinjava.tree.parse.TextToken;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.regex.Pattern;
import jinjava.javax.el.CompositeELResolver;

/**
 * A {@link ChatRenderer} that runs a model's own Jinja {@code chat_template} the way transformers'
 * {@code apply_chat_template} does for SFT, on <a href="https://github.com/HubSpot/jinjava">Jinjava</a>.
 *
 * <p><b>What the template sees</b> (transformers {@code render_jinja_template}): {@code messages} as HF typed content,
 * {@code [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "…"}]}, …]} (every message, system
 * and assistant included, as a list of items), {@code add_generation_prompt = false}, no {@code tools}, no
 * {@code documents}, {@code add_vision_id} unset, and the tokenizer's special-token strings ({@code eos_token},
 * {@code pad_token}, …; {@link #QWEN_SPECIAL_TOKENS} unless the caller gives the model's).
 *
 * <p><b>How it is compiled</b>: as transformers does, {@code ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])} with the globals {@code raise_exception} and the
 * filter {@code tojson} replaced. In Jinjava terms: trim and lstrip blocks on; nested interpretation off (Jinja never
 * renders the text of a variable again, so chat text that looks like a template stays text); read-only values (the
 * immutable sandbox); the Jinja-compatible {@link LegacyOverrides} on except {@code whitespaceRequiredWithinTokens},
 * which rejects the {@code {%- … %}} spelling these templates use. Any template error, even one Jinjava calls a
 * warning, fails the compile or the render with a {@link ChatTemplateException}: a template that half renders would
 * be trained on silently.
 *
 * <p><b>Extensions</b>, each through a Jinjava extension point and each what transformers or Python gives a template
 * that Jinjava does not:
 * <ul>
 *   <li>Python {@code str} methods {@code startswith}, {@code endswith}, {@code split}, {@code strip}, {@code lstrip},
 *       {@code rstrip} with Python's semantics ({@link PyStrMethods}, an EL resolver ahead of Jinjava's own). Jinjava
 *       otherwise calls the Java method of the same name where there is one, with other semantics ({@code split}
 *       takes a regex and drops trailing empty strings, {@code strip} takes no characters), and fails where there
 *       is none ({@code startswith}).</li>
 *   <li>{@code raise_exception(message)}: a global function that fails the render with the template's message.</li>
 *   <li>{@code tojson}: Python's {@code json.dumps(x, ensure_ascii=False)} layout ({@code ", "} and {@code ": "}
 *       separators, {@code indent=}), as transformers overrides it ({@link PyJson}); Jinjava's writes no spaces.</li>
 *   <li>{@code {% generation %}…{% endgeneration %}}: transformers' AssistantTracker tag, rendered as its body.</li>
 *   <li>Slices with a step ({@code messages[::-1]}) and keyword arguments whose value is a whole expression
 *       ({@code namespace(last_query_index=messages|length - 1)}), which the Qwen3-VL <i>Thinking</i> template uses
 *       ({@link PyishParser}: Jinjava's expression parser, subclassed and installed as Jinjava installs its own).</li>
 *   <li>Jinja's {@code lstrip_blocks}: Jinjava strips the spaces before every block or comment tag, Jinja only those
 *       that start a line; {@link #keepMidLineSpaces} puts the others back after parsing.</li>
 * </ul>
 * Refused at compile, because Jinjava accepts them but renders them unlike Jinja without an error: filtered loops
 * ({@code {% for m in messages if … %}}) and {@code {% for %}…{% else %}}. Not covered (the render fails, naming the
 * expression): {@code strftime_now}, slices with both a stop and a step ({@code xs[1:5:2]}), and Python {@code str}
 * methods other than the six above. Jinjava prints a boolean as {@code true} where Jinja prints {@code True}; no
 * Qwen-VL template prints one.
 *
 * <p>Threading: immutable; safe to share. The template is parsed once; each render runs in its own Jinjava interpreter
 * and context.
 */
public final class JinjaChatRenderer implements ChatRenderer {
    /** The special-token strings of the Qwen2/Qwen2.5/Qwen3-VL tokenizers (their {@code special_tokens_map}). */
    public static final Map<String, Object> QWEN_SPECIAL_TOKENS = Map.of("eos_token", "<|im_end|>", "pad_token", "<|endoftext|>");

    private static final Jinjava JINJAVA = newEngine();
    /** The engine's configuration less lstrip_blocks (see {@link #keepMidLineSpaces}). */
    private static final JinjavaConfig WITHOUT_LSTRIP = JinjavaConfig.newBuilder()
            .withTrimBlocks(true)
            .withLstripBlocks(false)
            .withNestedInterpretationEnabled(false)
            .withLegacyOverrides(JINJAVA.getGlobalConfig().getLegacyOverrides())
            .withElResolver(JINJAVA.getGlobalConfig().getElResolver())
            .build();

    private final String source;
    /** The parsed template; rendering reads it and keeps its state in each render's own interpreter. */
    private final Node root;
    private final Map<String, Object> specialTokens;

    private JinjaChatRenderer(String source, Node root, Map<String, Object> specialTokens) {
        this.source = source;
        this.root = root;
        this.specialTokens = specialTokens;
    }

    /** {@link #compile(String, Map)} with {@link #QWEN_SPECIAL_TOKENS}. */
    public static JinjaChatRenderer compile(String source) {
        return compile(source, QWEN_SPECIAL_TOKENS);
    }

    /**
     * Parses a {@code chat_template} source.
     *
     * @param specialTokens variables the template may read beside {@code messages}, such as {@code eos_token}; entries
     *                      whose value is null are left out, as transformers leaves unset special tokens out
     * @throws ChatTemplateException if the source does not parse, or uses a loop form Jinjava would render wrongly
     */
    public static JinjaChatRenderer compile(String source, Map<String, ?> specialTokens) {
        Objects.requireNonNull(source, "source");
        Node root = parse(source, JINJAVA.getGlobalConfig());
        keepMidLineSpaces(root, parse(source, WITHOUT_LSTRIP));
        refuseMisrendered(root);
        var tokens = new LinkedHashMap<String, Object>();
        specialTokens.forEach((k, v) -> {
            if (v != null) tokens.put(k, v);
        });
        return new JinjaChatRenderer(source, root, Map.copyOf(tokens));
    }

    private static Node parse(String source, JinjavaConfig config) {
        var interpreter = new JinjavaInterpreter(JINJAVA, JINJAVA.getGlobalContextCopy(), config);
        Node root;
        try (var _ = JinjavaInterpreter.closeablePushCurrent(interpreter).get()) {
            root = interpreter.parse(source);
        } catch (RuntimeException e) {
            throw new ChatTemplateException("chat template does not parse: " + e.getMessage(), e);
        }
        if (!interpreter.getErrors().isEmpty())
            throw new ChatTemplateException("chat template does not parse: " + describe(interpreter.getErrors()));
        return root;
    }

    /**
     * Jinja's {@code lstrip_blocks} removes the spaces and tabs between the start of a line and a block or comment tag;
     * Jinjava's removes the spaces and tabs before any such tag, so {@code Picture {{ n }}: {% endif %}} loses the
     * space after the colon. Walking the tree parsed with Jinjava's rule beside the one parsed without it, this puts
     * back the text of every text node whose stripped spaces did not start a line.
     */
    private static void keepMidLineSpaces(Node stripped, Node plain) {
        var a = stripped.getChildren().listIterator();
        var b = plain.getChildren().iterator();
        while (a.hasNext() && b.hasNext()) {
            Node s = a.next();
            Node p = b.next();
            if (s.getClass() != p.getClass()) throw unlikeJinja(s);
            if (s instanceof TextNode && !s.getMaster().getImage().equals(p.getMaster().getImage()) && !strippedFromLineStart(p)) {
                var token = s.getMaster();
                var restored = new TextToken(p.getMaster().getImage(), token.getLineNumber(), token.getStartPosition(), token.getSymbols());
                restored.setLeftTrim(token.isLeftTrim());
                restored.setRightTrim(token.isRightTrim());
                var node = new TextNode(restored);
                node.setParent(stripped);
                a.set(node);
            }
            keepMidLineSpaces(s, p);
        }
        if (a.hasNext() || b.hasNext()) throw unlikeJinja(stripped);
    }

    private static ChatTemplateException unlikeJinja(Node at) {
        return new ChatTemplateException("chat template's lstrip_blocks whitespace near line " + at.getLineNumber()
                + " cannot be rendered as Jinja renders it by the template engine");
    }

    /**
     * Whether the spaces Jinjava stripped from the end of this text ran from the start of a line: the text after its
     * last newline is all spaces and tabs, and either there is a newline or the text itself starts a line (Jinjava's
     * column is 1 at the start of the template and 2 after a newline, one that trim_blocks removed included).
     */
    private static boolean strippedFromLineStart(Node text) {
        String image = text.getMaster().getImage();
        int nl = image.lastIndexOf('\n');
        for (int i = nl + 1; i < image.length(); i++) {
            char c = image.charAt(i);
            if (c != ' ' && c != '\t') return false;
        }
        return nl >= 0 || text.getStartPosition() == 1 || text.getStartPosition() == 2;
    }

    /**
     * Refuses the loop forms Jinjava accepts but renders unlike Jinja, without an error: a filtered loop
     * ({@code for x in xs if cond}, which Jinjava renders as an empty loop) and {@code for … else} (whose else branch
     * Jinjava renders on every iteration instead of only for an empty sequence).
     */
    private static void refuseMisrendered(Node node) {
        for (var child : node.getChildren()) {
            if (child instanceof TagNode tag && tag.getName().equals("for")) {
                if (LOOP_FILTER.matcher(withoutStringLiterals(tag.getHelpers())).find())
                    throw new ChatTemplateException("chat template uses a filtered loop '{% for " + tag.getHelpers().strip()
                            + " %}' (line " + tag.getLineNumber() + "), which the template engine does not support");
                for (var inner : tag.getChildren())
                    if (inner instanceof TagNode t && t.getName().equals("else"))
                        throw new ChatTemplateException("chat template uses '{% for … %}…{% else %}' (line " + t.getLineNumber()
                                + "), which the template engine does not support");
            }
            refuseMisrendered(child);
        }
    }

    private static final Pattern LOOP_FILTER = Pattern.compile("\\bin\\b.*\\bif\\b", Pattern.DOTALL);

    private static String withoutStringLiterals(String expression) {
        return expression.replaceAll("'(?:[^'\\\\]|\\\\.)*'|\"(?:[^\"\\\\]|\\\\.)*\"", "''");
    }

    /** The template source as given. */
    public String source() { return source; }

    @Override
    public void render(List<Message> messages, StringBuilder out) {
        var bindings = new HashMap<String, Object>(specialTokens);
        bindings.put("messages", hfMessages(messages));
        bindings.put("add_generation_prompt", false);
        // What Jinjava.renderForResult does, on the tree parsed once by compile().
        var config = JINJAVA.getGlobalConfig();
        var interpreter = new JinjavaInterpreter(JINJAVA, new Context(JINJAVA.getGlobalContextCopy(), bindings, config.getDisabled()), config);
        String output;
        try (var _ = JinjavaInterpreter.closeablePushCurrent(interpreter).get()) {
            output = interpreter.render(root, false);
        } catch (RuntimeException e) {
            var raised = raised(e);
            throw new ChatTemplateException("chat template failed: " + (raised != null ? raised.getMessage() : e.getMessage()), e);
        }
        if (!interpreter.getErrors().isEmpty())
            throw new ChatTemplateException("chat template failed: " + describe(interpreter.getErrors()));
        out.append(output);
    }

    /** The messages as transformers hands them to a template: HF typed content, an item list per message. */
    static List<Map<String, Object>> hfMessages(List<Message> messages) {
        var list = new ArrayList<Map<String, Object>>(messages.size());
        for (var m : messages) {
            var content = new ArrayList<Map<String, Object>>(m.parts().size());
            for (var p : m.parts()) {
                var item = new LinkedHashMap<String, Object>(4);
                switch (p) {
                    case Message.Text t -> {
                        item.put("type", "text");
                        item.put("text", t.text());
                    }
                    case Message.Image _ -> item.put("type", "image");
                    case Message.Video _ -> item.put("type", "video");
                    case Message.Audio a -> {
                        item.put("type", "audio");
                        item.put("audio", a.ref());
                    }
                }
                content.add(item);
            }
            var message = new LinkedHashMap<String, Object>(4);
            message.put("role", m.role().wireName());
            message.put("content", content);
            list.add(message);
        }
        return list;
    }

    private static String describe(List<TemplateError> errors) {
        var sb = new StringBuilder();
        for (var e : errors) {
            if (!sb.isEmpty()) sb.append("; ");
            sb.append(raised(e.getException()) instanceof ChatTemplateException raised ? raised.getMessage() : e.getMessage());
            if (e.getLineno() > 0) sb.append(" (line ").append(e.getLineno()).append(')');
        }
        return sb.toString();
    }

    /** The {@code raise_exception} failure behind a template error, if that is what it was. */
    private static Throwable raised(Throwable t) {
        for (int depth = 0; t != null && depth < 16; t = t.getCause(), depth++)
            if (t instanceof ChatTemplateException) return t;
        return null;
    }

    private static Jinjava newEngine() {
        var overrides = LegacyOverrides.newBuilder()
                .withEvaluateMapKeys(true)
                .withIterateOverMapKeys(true)
                .withUsePyishObjectMapper(true)
                .withUseSnakeCasePropertyNaming(true)
                .withUseNaturalOperatorPrecedence(true)
                .withParseWhitespaceControlStrictly(true)
                .withAllowAdjacentTextNodes(true)
                .withUseTrimmingForNotesAndExpressions(true)
                .withKeepNullableLoopValues(true)
                .build();
        var resolver = new CompositeELResolver();
        resolver.add(new PyStrMethods());
        resolver.add(JinjavaInterpreterResolver.DEFAULT_RESOLVER_READ_ONLY);
        var config = JinjavaConfig.newBuilder()
                .withTrimBlocks(true)
                .withLstripBlocks(true)
                .withNestedInterpretationEnabled(false)
                .withLegacyOverrides(overrides)
                .withElResolver(resolver)
                .build();
        var jinjava = PyishParser.engine(config);
        jinjava.registerFunction(new ELFunctionDefinition("", "raise_exception", JinjaChatRenderer.class, "raiseException", String.class));
        jinjava.registerFilter(new PyJson.Filter());
        jinjava.registerTag(new GenerationTag());
        return jinjava;
    }

    /** transformers' {@code raise_exception}: fails the render with the template's own message. */
    static Object raiseException(String message) {
        throw new ChatTemplateException("raise_exception: " + message);
    }
}
