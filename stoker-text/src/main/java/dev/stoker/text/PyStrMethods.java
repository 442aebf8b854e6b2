package dev.stoker.text;

import java.beans.FeatureDescriptor;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELResolver;

/**
 * Python {@code str} methods for Jinjava templates: {@code s.startswith(p)}, {@code s.endswith(p)} ({@code p} a
 * string or a tuple of strings; Jinjava makes tuples lists, so a list is taken too where Python would raise), {@code s.split(sep=None, maxsplit=-1)}, {@code s.strip(chars=None)},
 * {@code s.lstrip(chars=None)}, {@code s.rstrip(chars=None)}, with CPython's semantics. Put ahead of Jinjava's
 * resolvers, it answers only these calls on strings and leaves every other lookup to them.
 *
 * <p>Whitespace is Python's {@code str.isspace()}: Java's {@link Character#isWhitespace} plus the no-break spaces
 * and U+0085 that Java leaves out.
 */
final class PyStrMethods extends ELResolver {

    @Override
    public Object invoke(ELContext context, Object base, Object method, Class<?>[] paramTypes, Object[] params) {
        if (!(base instanceof String s) || !(method instanceof String name)) return null;
        Object[] args = params == null ? new Object[0] : params;
        Object result = switch (name) {
            case "startswith" -> args.length == 1 ? affix(s, args[0], true) : null;
            case "endswith" -> args.length == 1 ? affix(s, args[0], false) : null;
            case "split" -> args.length <= 2 ? split(s, arg(args, 0), args.length == 2 ? toInt(args[1]) : -1) : null;
            case "strip" -> args.length <= 1 ? strip(s, chars(args), true, true) : null;
            case "lstrip" -> args.length <= 1 ? strip(s, chars(args), true, false) : null;
            case "rstrip" -> args.length <= 1 ? strip(s, chars(args), false, true) : null;
            default -> null;
        };
        if (result != null) context.setPropertyResolved(true);
        return result;
    }

    private static Object arg(Object[] args, int i) { return i < args.length ? args[i] : null; }

    private static String chars(Object[] args) {
        Object c = arg(args, 0);
        if (c != null && !(c instanceof String)) throw new IllegalArgumentException("strip arg must be None or str, got " + c);
        return (String) c;
    }

    private static int toInt(Object o) {
        if (o instanceof Number n) return n.intValue();
        throw new IllegalArgumentException("maxsplit must be an integer, got " + o);
    }

    static Boolean affix(String s, Object affixes, boolean prefix) {
        if (affixes instanceof String a) return prefix ? s.startsWith(a) : s.endsWith(a);
        if (affixes instanceof Iterable<?> list) {
            for (Object a : list) {
                if (!(a instanceof String str)) throw new IllegalArgumentException("tuple for startswith/endswith must only contain str, got " + a);
                if (prefix ? s.startsWith(str) : s.endsWith(str)) return true;
            }
            return false;
        }
        throw new IllegalArgumentException((prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, got " + affixes);
    }

    /** {@code str.split}: on {@code sep} exactly (empty strings kept), or with {@code sep=None} on whitespace runs. */
    static List<String> split(String s, Object sep, int maxsplit) {
        var out = new ArrayList<String>();
        if (sep == null) {
            int i = 0, n = s.length(), splits = 0;
            while (true) {
                while (i < n && isSpace(s.charAt(i))) i++;
                if (i == n) return out;
                if (maxsplit >= 0 && splits == maxsplit) {
                    out.add(s.substring(i)); // the remainder keeps its trailing whitespace, as in CPython
                    return out;
                }
                int j = i;
                while (j < n && !isSpace(s.charAt(j))) j++;
                out.add(s.substring(i, j));
                splits++;
                i = j;
            }
        }
        if (!(sep instanceof String d)) throw new IllegalArgumentException("must be str or None, not " + sep);
        if (d.isEmpty()) throw new IllegalArgumentException("empty separator");
        int from = 0;
        for (int at = s.indexOf(d); at >= 0 && (maxsplit < 0 || out.size() < maxsplit); at = s.indexOf(d, from)) {
            out.add(s.substring(from, at));
            from = at + d.length();
        }
        out.add(s.substring(from));
        return out;
    }

    /** {@code str.strip}/{@code lstrip}/{@code rstrip}: drops leading and/or trailing code points in {@code chars} (whitespace when null). */
    static String strip(String s, String chars, boolean left, boolean right) {
        int start = 0, end = s.length();
        if (left) {
            while (start < end) {
                int cp = s.codePointAt(start);
                if (!strippable(cp, chars)) break;
                start += Character.charCount(cp);
            }
        }
        if (right) {
            while (end > start) {
                int cp = s.codePointBefore(end);
                if (!strippable(cp, chars)) break;
                end -= Character.charCount(cp);
            }
        }
        return s.substring(start, end);
    }

    private static boolean strippable(int cp, String chars) {
        return chars == null ? isSpace(cp) : chars.indexOf(cp) >= 0;
    }

    /** Python's {@code str.isspace()} for one code point. */
    static boolean isSpace(int cp) {
        return Character.isWhitespace(cp) || cp == 0x85 || cp == 0xA0 || cp == 0x2007 || cp == 0x202F;
    }

    @Override
    public Object getValue(ELContext context, Object base, Object property) { return null; }

    @Override
    public Class<?> getType(ELContext context, Object base, Object property) { return null; }

    @Override
    public void setValue(ELContext context, Object base, Object property, Object value) {}

    @Override
    public boolean isReadOnly(ELContext context, Object base, Object property) { return true; }

    @Override
    public Iterator<FeatureDescriptor> getFeatureDescriptors(ELContext context, Object base) { return null; }

    @Override
    public Class<?> getCommonPropertyType(ELContext context, Object base) { return null; }
}
