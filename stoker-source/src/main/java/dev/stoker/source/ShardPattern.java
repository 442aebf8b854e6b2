package dev.stoker.source;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The shard names one pattern (the last segment of a source's URI) stands for, as WebDataset writes them:
 * <ul>
 *   <li>brace groups, expanded like a shell's: a numeric range {@code {000..099}} (ascending or descending,
 *       zero-padded to the wider bound when either bound has a leading zero) or a comma list {@code {a,b,c}};
 *       several groups multiply ({@code {a,b}-{0..2}}: six names, the last group varying fastest). A group with
 *       neither {@code ..} nor a comma is taken literally; an unbalanced or nested brace is refused.</li>
 *   <li>globs: {@code *} (any run of characters) and {@code ?} (one character), matched against the names
 *       of the folder's listing.</li>
 * </ul>
 * A pattern with no glob names its shards itself (in the order of expansion, duplicates dropped); one with a glob
 * names those of the listing that match, sorted by name.
 *
 * <p>Threading: stateless.
 */
final class ShardPattern {
    /** The most names a brace pattern may expand to. */
    static final int MAX_SHARDS = 1_000_000;

    private ShardPattern() { }

    /** The names {@code pattern}'s brace groups expand to; IllegalArgumentException when malformed or too many. */
    static List<String> expandBraces(String pattern) {
        List<String> out = new ArrayList<>();
        out.add("");
        int i = 0;
        StringBuilder literal = new StringBuilder();
        while (i < pattern.length()) {
            char c = pattern.charAt(i);
            if (c == '}') throw new IllegalArgumentException("unbalanced '}' at " + i + " in " + pattern);
            if (c != '{') {
                literal.append(c);
                i++;
                continue;
            }
            int close = pattern.indexOf('}', i + 1);
            if (close < 0) throw new IllegalArgumentException("unbalanced '{' at " + i + " in " + pattern);
            String body = pattern.substring(i + 1, close);
            if (body.indexOf('{') >= 0) throw new IllegalArgumentException("nested braces at " + i + " in " + pattern);
            List<String> choices = choices(body, pattern);
            if (choices == null) { // taken literally
                literal.append('{').append(body).append('}');
            } else {
                out = product(out, literal.toString(), choices, pattern);
                literal.setLength(0);
            }
            i = close + 1;
        }
        var done = new LinkedHashSet<String>();
        for (String s : out) done.add(s + literal);
        return List.copyOf(done);
    }

    private static final Pattern RANGE = Pattern.compile("(-?\\d{1,18})\\.\\.(-?\\d{1,18})");

    /** A group's alternatives, or null when it is neither a range nor a list (taken literally). */
    private static List<String> choices(String body, String pattern) {
        var m = RANGE.matcher(body);
        if (m.matches()) {
            String a = m.group(1), b = m.group(2);
            long from = Long.parseLong(a), to = Long.parseLong(b);
            long count = Math.abs(to - from) + 1;
            if (count > MAX_SHARDS)
                throw new IllegalArgumentException("{" + body + "} in " + pattern + " names " + count + " shards, more than " + MAX_SHARDS);
            int width = padded(a) || padded(b) ? Math.max(digits(a), digits(b)) : 0;
            var list = new ArrayList<String>((int) count);
            long step = from <= to ? 1 : -1;
            for (long v = from; ; v += step) {
                String digits = Long.toString(Math.abs(v));
                String pad = digits.length() < width ? "0".repeat(width - digits.length()) : "";
                list.add((v < 0 ? "-" : "") + pad + digits);
                if (v == to) break;
            }
            return list;
        }
        if (body.indexOf(',') >= 0) return List.of(body.split(",", -1));
        if (body.contains("..")) throw new IllegalArgumentException("{" + body + "} in " + pattern + " is not a numeric range (like {000..099})");
        return null;
    }

    private static boolean padded(String n) {
        String d = n.startsWith("-") ? n.substring(1) : n;
        return d.length() > 1 && d.charAt(0) == '0';
    }

    private static int digits(String n) { return n.startsWith("-") ? n.length() - 1 : n.length(); }

    private static List<String> product(List<String> heads, String literal, List<String> choices, String pattern) {
        long n = (long) heads.size() * choices.size();
        if (n > MAX_SHARDS) throw new IllegalArgumentException(pattern + " names more than " + MAX_SHARDS + " shards");
        var out = new ArrayList<String>((int) n);
        for (String h : heads)
            for (String c : choices) out.add(h + literal + c);
        return out;
    }

    /** Whether {@code name} has a glob character ({@code *} or {@code ?}). */
    static boolean hasGlob(String name) { return name.indexOf('*') >= 0 || name.indexOf('?') >= 0; }

    /** Whether the segment is a pattern at all (braces or globs). */
    static boolean isPattern(String segment) { return hasGlob(segment) || segment.indexOf('{') >= 0; }

    /** The glob {@code name} as a regex over whole names: {@code *} any run of characters but {@code /}, {@code ?} one. */
    static Pattern glob(String name) {
        var sb = new StringBuilder();
        var lit = new StringBuilder();
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (c == '*' || c == '?') {
                if (!lit.isEmpty()) sb.append(Pattern.quote(lit.toString()));
                lit.setLength(0);
                sb.append(c == '*' ? "[^/]*" : "[^/]");
            } else {
                lit.append(c);
            }
        }
        if (!lit.isEmpty()) sb.append(Pattern.quote(lit.toString()));
        return Pattern.compile(sb.toString(), Pattern.DOTALL);
    }

    /** The part of {@code name} before its first glob character. */
    static String literalPrefix(String name) {
        int i = 0;
        while (i < name.length() && name.charAt(i) != '*' && name.charAt(i) != '?') i++;
        return name.substring(0, i);
    }

    /** The longest prefix the strings share. */
    static String commonPrefix(List<String> names) {
        if (names.isEmpty()) return "";
        String p = names.getFirst();
        for (String n : names) {
            int k = 0;
            while (k < p.length() && k < n.length() && p.charAt(k) == n.charAt(k)) k++;
            p = p.substring(0, k);
        }
        return p;
    }
}
