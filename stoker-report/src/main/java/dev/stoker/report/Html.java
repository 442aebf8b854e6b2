package dev.stoker.report;

import java.util.Locale;

/** HTML escaping and number formatting for the report. */
final class Html {
    private Html() {}

    /** Escapes text for element content and quoted attribute values. */
    static String esc(String s) {
        if (s == null) return "";
        var sb = new StringBuilder(s.length() + 16);
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '&' -> sb.append("&amp;");
                case '<' -> sb.append("&lt;");
                case '>' -> sb.append("&gt;");
                case '"' -> sb.append("&quot;");
                case '\'' -> sb.append("&#39;");
                default -> {
                    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') sb.append(' ');
                    else sb.append(c);
                }
            }
        }
        return sb.toString();
    }

    static String num(double v, int decimals) {
        if (!Double.isFinite(v)) return "–";
        return String.format(Locale.ROOT, "%,." + decimals + "f", v);
    }

    /** A duration in milliseconds, with a unit that suits its size. */
    static String ms(double millis) {
        if (!Double.isFinite(millis)) return "–";
        if (millis >= 1000) return num(millis / 1000, 2) + " s";
        if (millis >= 10) return num(millis, 0) + " ms";
        if (millis >= 1) return num(millis, 1) + " ms";
        return num(millis * 1000, 0) + " µs";
    }
}
