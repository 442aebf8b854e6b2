package dev.stoker.text;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.el.ExtendedSyntaxBuilder;
import com.hubspot.jinjava.el.TruthyTypeConverter;
import com.hubspot.jinjava.el.ext.AdditionOperator;
import com.hubspot.jinjava.el.ext.AstRangeBracket;
import com.hubspot.jinjava.el.ext.ExtendedParser;
import java.util.ArrayList;
import java.util.List;
import jinjava.de.odysseus.el.ExpressionFactoryImpl;
import jinjava.de.odysseus.el.tree.Bindings;
import jinjava.de.odysseus.el.tree.TreeStore;
import jinjava.de.odysseus.el.tree.impl.Builder;
import jinjava.de.odysseus.el.tree.impl.Cache;
import jinjava.de.odysseus.el.tree.impl.Parser;
import jinjava.de.odysseus.el.tree.impl.Parser.ExtensionPoint;
import jinjava.de.odysseus.el.tree.impl.Scanner.ScanException;
import jinjava.de.odysseus.el.tree.impl.Scanner.Symbol;
import jinjava.de.odysseus.el.tree.impl.ast.AstBinary;
import jinjava.de.odysseus.el.tree.impl.ast.AstIdentifier;
import jinjava.de.odysseus.el.tree.impl.ast.AstNode;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELException;
import jinjava.javax.el.ExpressionFactory;

/**
 * Jinjava's expression parser with two pieces of Python syntax that chat templates use and Jinjava's parser lacks:
 * <ul>
 *   <li>slices with a step, {@code xs[::-1]} and {@code xs[i::2]} (Jinjava parses {@code [a:b]} only);</li>
 *   <li>keyword arguments whose value is a whole expression, {@code namespace(i=messages|length - 1)} (Jinjava binds
 *       {@code i=messages|length} first and then subtracts from the keyword argument).</li>
 * </ul>
 * Installed the way Jinjava installs its own parser: a syntax builder that creates it, in the expression factory of a
 * {@link Jinjava} subclass ({@link #engine}). Everything else is Jinjava's {@link ExtendedParser}.
 */
final class PyishParser extends ExtendedParser {

    /** The step just parsed at a slice's second colon, for the {@link #createAstRangeBracket} call that follows. */
    private AstNode pendingStep;

    PyishParser(Builder context, String input) {
        super(context, input);
    }

    /** A Jinjava whose expressions are parsed by {@link PyishParser}. */
    static Jinjava engine(JinjavaConfig config) {
        var features = new Builder.Feature[] {Builder.Feature.METHOD_INVOCATIONS, Builder.Feature.VARARGS};
        var factory = new ExpressionFactoryImpl(new TreeStore(new SyntaxBuilder(features), new Cache(1000)), new TruthyTypeConverter());
        return new Jinjava(config) {
            @Override
            public ExpressionFactory getExpressionFactory() { return factory; }
        };
    }

    /**
     * At the second colon of {@code [::step]} or {@code [start::step]} (where Jinjava asks for the slice's stop and
     * finds a colon) the step follows; otherwise Jinjava's own parsing.
     */
    @Override
    protected AstNode expr(boolean required) throws ScanException, ParseException {
        if (!required && getToken().getSymbol() == Symbol.COLON && colonBeforeCurrentToken()) {
            consumeToken();
            AstNode step = expr(true);
            pendingStep = step;
            return null; // no stop: Jinjava expects ']' next and creates the range bracket
        }
        return super.expr(required);
    }

    /** Whether the character before the current token (a colon), spaces skipped, is a colon. */
    private boolean colonBeforeCurrentToken() {
        String input = scanner.getInput();
        int i = scanner.getPosition() - 1; // the scanner's position is where the current token starts
        while (i >= 0 && Character.isWhitespace(input.charAt(i))) i--;
        return i >= 0 && input.charAt(i) == ':';
    }

    @Override
    protected AstRangeBracket createAstRangeBracket(AstNode base, AstNode start, AstNode stop, boolean lvalue, boolean strict) {
        if (pendingStep != null) {
            var slice = new SteppedSlice(base, start, pendingStep, lvalue, strict);
            pendingStep = null;
            return slice;
        }
        return super.createAstRangeBracket(base, start, stop, lvalue, strict);
    }

    /** Jinjava's additive level, except that the value of a keyword argument ({@code name=…}) is a whole expression. */
    @Override
    protected AstNode add(boolean required) throws ScanException, ParseException {
        AstNode v = mul(required);
        if (v == null) return null;
        while (true) {
            switch (getToken().getSymbol()) {
                case PLUS -> {
                    consumeToken();
                    v = createAstBinary(v, mul(true), AdditionOperator.OP);
                }
                case MINUS -> {
                    consumeToken();
                    v = createAstBinary(v, mul(true), AstBinary.SUB);
                }
                case EXTENSION -> {
                    if (getExtensionHandler(getToken()).getExtensionPoint() != ExtensionPoint.ADD) return v;
                    boolean keyword = "=".equals(getToken().getImage()) && v instanceof AstIdentifier;
                    var handler = getExtensionHandler(consumeToken());
                    v = handler.createAstNode(v, keyword ? expr(true) : mul(true));
                }
                default -> {
                    return v;
                }
            }
        }
    }

    /** {@code base[start::step]} with Python's slice semantics (no stop), on sequences and strings. */
    private static final class SteppedSlice extends AstRangeBracket {
        private final AstNode step;

        SteppedSlice(AstNode base, AstNode start, AstNode step, boolean lvalue, boolean strict) {
            super(base, start, null, lvalue, strict, false);
            this.step = step;
        }

        @Override
        public Object eval(Bindings bindings, ELContext context) {
            Object base = prefix.eval(bindings, context);
            Object stepValue = step.eval(bindings, context);
            if (!(stepValue instanceof Number n) || n.longValue() == 0) throw new ELException("slice step must be a non-zero integer, got " + stepValue);
            int by = n.intValue();
            Object startValue = property == null ? null : property.eval(bindings, context);
            if (startValue != null && !(startValue instanceof Number)) throw new ELException("slice start must be an integer, got " + startValue);
            if (base instanceof String s) {
                var sb = new StringBuilder();
                for (int i : indices(s.length(), (Number) startValue, by)) sb.append(s.charAt(i));
                return sb.toString();
            }
            List<Object> items = new ArrayList<>();
            if (base instanceof Iterable<?> it) it.forEach(items::add);
            else if (base instanceof Object[] array) items.addAll(List.of(array));
            else throw new ELException("Property " + prefix + " is not a sequence.");
            var out = new ArrayList<>();
            for (int i : indices(items.size(), (Number) startValue, by)) out.add(items.get(i));
            return out;
        }

        /** The indices {@code range(len)[start::step]} selects, as CPython's slice.indices computes them. */
        static int[] indices(int len, Number start, int step) {
            int from;
            if (start == null) from = step > 0 ? 0 : len - 1;
            else {
                from = start.intValue();
                if (from < 0) from = Math.max(from + len, step > 0 ? 0 : -1);
                else from = Math.min(from, step > 0 ? len : len - 1);
            }
            int stop = step > 0 ? len : -1;
            int count = step > 0 ? Math.max(0, (stop - from + step - 1) / step) : Math.max(0, (from - stop - step - 1) / -step);
            var out = new int[count];
            for (int k = 0; k < count; k++) out[k] = from + k * step;
            return out;
        }

        @Override
        public String toString() { return "[::]"; }
    }

    /** Creates {@link PyishParser}s, as {@link ExtendedSyntaxBuilder} creates Jinjava's parser. */
    private static final class SyntaxBuilder extends ExtendedSyntaxBuilder {
        private static final long serialVersionUID = 1L;

        SyntaxBuilder(Feature... features) { super(features); }

        @Override
        protected Parser createParser(String expression) { return new PyishParser(this, expression); }
    }
}
