package dev.stoker.text;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import java.util.Map;

/**
 * Python's {@code json.dumps(x, ensure_ascii=False, indent=None)}, the {@code tojson} transformers gives chat
 * templates: {@code ", "} and {@code ": "} separators (newlines and {@code ","} with an indent), keys in insertion
 * order, non-ASCII text as is, control characters escaped as Python escapes them.
 */
final class PyJson {
    private PyJson() {}

    /** The {@code tojson} filter: {@code x|tojson} or {@code x|tojson(indent=2)}. */
    static final class Filter implements com.hubspot.jinjava.lib.filter.Filter {
        @Override
        public String getName() { return "tojson"; }

        @Override
        public Object filter(Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
            Object indent = kwargs.containsKey("indent") ? kwargs.get("indent") : args.length > 0 ? args[0] : null;
            for (var key : kwargs.keySet())
                if (!key.equals("indent")) throw new IllegalArgumentException("tojson: unsupported argument '" + key + "'");
            if (indent != null && !(indent instanceof Number)) throw new IllegalArgumentException("tojson: indent must be an integer, got " + indent);
            return dumps(var, indent == null ? -1 : ((Number) indent).intValue());
        }

        @Override
        public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
            return dumps(var, args.length > 0 && args[0] != null ? Integer.parseInt(args[0]) : -1);
        }
    }

    /** {@code json.dumps(value, ensure_ascii=False, indent=indent)}; {@code indent < 0} for none. */
    static String dumps(Object value, int indent) {
        var sb = new StringBuilder();
        write(sb, value, indent, 0);
        return sb.toString();
    }

    private static void write(StringBuilder sb, Object v, int indent, int depth) {
        switch (v) {
            case null -> sb.append("null");
            case String s -> string(sb, s);
            case Boolean b -> sb.append(b ? "true" : "false");
            case Integer _, Long _, Short _, Byte _, java.math.BigInteger _ -> sb.append(v);
            case Double d -> sb.append(number(d));
            case Float f -> sb.append(number(f.doubleValue()));
            case Map<?, ?> m -> {
                if (m.isEmpty()) {
                    sb.append("{}");
                    return;
                }
                sb.append('{');
                boolean first = true;
                for (var e : m.entrySet()) {
                    if (!first) sb.append(indent >= 0 ? "," : ", ");
                    first = false;
                    newline(sb, indent, depth + 1);
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(": ");
                    write(sb, e.getValue(), indent, depth + 1);
                }
                newline(sb, indent, depth);
                sb.append('}');
            }
            case Iterable<?> list -> {
                var it = list.iterator();
                if (!it.hasNext()) {
                    sb.append("[]");
                    return;
                }
                sb.append('[');
                boolean first = true;
                while (it.hasNext()) {
                    if (!first) sb.append(indent >= 0 ? "," : ", ");
                    first = false;
                    newline(sb, indent, depth + 1);
                    write(sb, it.next(), indent, depth + 1);
                }
                newline(sb, indent, depth);
                sb.append(']');
            }
            default -> throw new IllegalArgumentException("Object of type " + v.getClass().getSimpleName() + " is not JSON serializable");
        }
    }

    private static void newline(StringBuilder sb, int indent, int depth) {
        if (indent < 0) return;
        sb.append('\n').repeat(' ', indent * depth);
    }

    /** Python's {@code repr(float)}: the shortest round-trip digits, fixed for exponents -4..15, else {@code 1e+16} style. */
    static String number(double d) {
        if (Double.isNaN(d)) return "NaN";
        if (Double.isInfinite(d)) return d > 0 ? "Infinity" : "-Infinity";
        if (d == 0) return 1 / d < 0 ? "-0.0" : "0.0";
        var bd = new java.math.BigDecimal(Double.toString(d)).stripTrailingZeros();
        String digits = bd.unscaledValue().abs().toString();
        int exp = digits.length() - 1 - bd.scale();
        String sign = d < 0 ? "-" : "";
        if (exp >= -4 && exp < 16) {
            String plain = bd.abs().toPlainString();
            return sign + (plain.indexOf('.') < 0 ? plain + ".0" : plain);
        }
        String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
        int e = Math.abs(exp);
        return sign + mantissa + "e" + (exp < 0 ? "-" : "+") + (e < 10 ? "0" : "") + e;
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                case '\b' -> sb.append("\\b");
                case '\f' -> sb.append("\\f");
                default -> {
                    if (c < 0x20) sb.append("\\u00").append(Character.forDigit(c >> 4, 16)).append(Character.forDigit(c & 0xF, 16));
                    else sb.append(c);
                }
            }
        }
        sb.append('"');
    }
}
