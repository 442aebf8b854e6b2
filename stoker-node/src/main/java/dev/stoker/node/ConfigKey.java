package dev.stoker.node;

import java.net.URI;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.function.Function;

/**
 * One setting of a {@link NodeConfig}: its name (the command line's long option without the dashes,
 * and the key in a config file), what it means, its default, and how its text is read and written.
 * Every setting is defined once, in {@link NodeConfig}'s table; the command line, config files and a
 * cluster job's configuration all go through {@link #parse} and {@link #format}, so that a value
 * means the same wherever it was given.
 *
 * @param name         {@code max-pixels}; the option is {@code --max-pixels}
 * @param group        which commands take it
 * @param label        what the value is, for help ({@code N}, {@code PATH})
 * @param kind         how a config file writes it
 * @param reader       text → value; IllegalArgumentException says what is wrong (without the name)
 * @param writer       value → text that {@code reader} reads back to the same value
 * @param defaultValue the default, or null when it is derived (then {@code defaultText} says how) or absent
 * @param defaultText  the default in words where it is not one value ("the number of cores"), else null
 * @param doc          one or two sentences for help
 */
public record ConfigKey<T>(String name, Group group, String label, Kind kind, Function<String, T> reader, Function<T, String> writer,
                           T defaultValue, String defaultText, String doc) {
    /** Which commands take a setting: {@code serve} takes every group, {@code node} MEMBER, feeding benchmarks the first three. */
    public enum Group { PROCESSOR, DATA, STORE, SERVE, CLUSTER, MEMBER }

    /** How a value is written in YAML: a plain scalar, a flag, or a list (a repeatable option, comma-separated on the command line). */
    public enum Kind { TEXT, NUMBER, FLAG, LIST }

    public ConfigKey {
        Objects.requireNonNull(name);
        Objects.requireNonNull(reader);
        Objects.requireNonNull(writer);
    }

    /** The command-line option, {@code --name}. */
    public String option() { return "--" + name; }

    /** Reads {@code text} as this setting's value; the exception names the option. */
    public T parse(String text) {
        try {
            return reader.apply(text.strip());
        } catch (IllegalArgumentException e) {
            throw new ConfigException(option() + ": " + e.getMessage());
        }
    }

    /** The text of {@code value}, as a config file or a job's configuration carries it. */
    @SuppressWarnings("unchecked")
    public String format(Object value) { return value == null ? null : writer.apply((T) value); }

    /** The default as help shows it: the value, the rule, or "none". */
    public String describeDefault() {
        if (defaultValue != null) return format(defaultValue);
        return defaultText != null ? defaultText : "none";
    }

    // ---- readers and writers shared by the table

    static Function<String, Integer> integer(int min, int max) {
        var asLong = longInt(min, max);
        return s -> (int) (long) asLong.apply(s);
    }

    static Function<String, Long> longInt(long min, long max) {
        return s -> {
            long v;
            try {
                v = Long.parseLong(s);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("'" + s + "' is not a whole number");
            }
            if (v < min || v > max)
                throw new IllegalArgumentException("must be " + (max == Long.MAX_VALUE || max == Integer.MAX_VALUE ? "at least " + min
                        : "between " + min + " and " + max) + ", got " + v);
            return v;
        };
    }

    static Function<String, Double> fraction() {
        return s -> {
            double v;
            try {
                v = Double.parseDouble(s);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("'" + s + "' is not a number");
            }
            if (!(v >= 0 && v <= 1)) throw new IllegalArgumentException("must be between 0 and 1, got " + s);
            return v;
        };
    }

    /** A positive finite number, plain or with an exponent ({@code 3087564800}, {@code 3.1e9}). */
    static Function<String, Double> positive() {
        return s -> {
            double v;
            try {
                v = Double.parseDouble(s);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("'" + s + "' is not a number");
            }
            if (!(v > 0) || Double.isInfinite(v)) throw new IllegalArgumentException("must be a positive number, got " + s);
            return v;
        };
    }

    /** A number as {@link #positive} reads it back: a whole one without exponent or fraction ({@code 3087564800}). */
    static String formatNumber(Double v) {
        return v == Math.rint(v) && Math.abs(v) < 1e18 ? String.valueOf(v.longValue()) : String.valueOf(v);
    }

    /** A byte count with an optional binary suffix ({@code 65536}, {@code 512M}, {@code 4G}); IllegalArgumentException says what is wrong. */
    public static long parseBytes(String text) { return bytes(0).apply(text.strip()); }

    /** A byte count with an optional binary suffix: {@code 65536}, {@code 512M}, {@code 4G}; at least {@code min}. */
    static Function<String, Long> bytes(long min) {
        return s -> {
            String v = s.toUpperCase(Locale.ROOT);
            if (v.endsWith("B")) v = v.substring(0, v.length() - 1);
            if (v.endsWith("I")) v = v.substring(0, v.length() - 1);
            int shift = v.isEmpty() ? 0 : switch (v.charAt(v.length() - 1)) {
                case 'K' -> 10;
                case 'M' -> 20;
                case 'G' -> 30;
                case 'T' -> 40;
                default -> 0;
            };
            if (shift > 0) v = v.substring(0, v.length() - 1);
            long n;
            try {
                n = Long.parseLong(v.strip());
            } catch (NumberFormatException e) {
                n = -1;
            }
            if (n < 0 || n > (Long.MAX_VALUE >> shift)) throw new IllegalArgumentException("'" + s + "' is not a byte count (e.g. 65536, 512M, 4G)");
            if ((n << shift) < min) throw new IllegalArgumentException("must be at least " + min + " bytes, got " + s);
            return n << shift;
        };
    }

    static Function<String, String> text() {
        return s -> {
            if (s.isEmpty()) throw new IllegalArgumentException("must not be empty");
            return s;
        };
    }

    static Function<String, Path> path() {
        return s -> {
            if (s.isEmpty()) throw new IllegalArgumentException("must not be empty");
            try {
                return Path.of(s);
            } catch (InvalidPathException e) {
                throw new IllegalArgumentException("not a path: " + e.getMessage());
            }
        };
    }

    static Function<String, URI> uri() {
        return s -> {
            try {
                return new URI(s);
            } catch (java.net.URISyntaxException e) {
                throw new IllegalArgumentException("not a URI: " + e.getMessage());
            }
        };
    }

    static Function<String, Boolean> flag() {
        return s -> switch (s.toLowerCase(Locale.ROOT)) {
            case "true", "yes", "on", "" -> true;
            case "false", "no", "off" -> false;
            default -> throw new IllegalArgumentException("expected true or false, got '" + s + "'");
        };
    }

    /** HOST:PORT with a port of 0–65535. */
    static Function<String, String> hostPort() {
        return s -> {
            HostPort.parse(s);
            return s;
        };
    }

    /** Comma-separated HOST:PORT addresses. */
    static Function<String, List<String>> hostPorts() {
        return s -> {
            var out = Arrays.stream(s.split(",")).map(String::strip).filter(x -> !x.isEmpty()).toList();
            for (String a : out) HostPort.parse(a);
            return out;
        };
    }

    /** An enum constant by its name written in lower case with '-' for '_' ({@code zero-copy}), case-insensitive. */
    static <E extends Enum<E>> Function<String, E> enumOf(Class<E> type) {
        return s -> {
            for (E e : type.getEnumConstants()) if (cliName(e).equalsIgnoreCase(s) || e.name().equalsIgnoreCase(s)) return e;
            throw new IllegalArgumentException("unknown value '" + s + "'; expected one of "
                    + String.join(", ", Arrays.stream(type.getEnumConstants()).map(ConfigKey::cliName).toList()));
        };
    }

    /** How an enum value is written in settings: its name in lower case, '-' for '_' ({@code zero-copy}). */
    public static String cliName(Enum<?> e) { return e.name().toLowerCase(Locale.ROOT).replace('_', '-'); }

    /** A "host:port" address. */
    public record HostPort(String host, int port) {
        /** Parses "host:port" (port 0–65535); IllegalArgumentException says what is wrong. */
        public static HostPort parse(String s) {
            int colon = s.lastIndexOf(':');
            if (colon <= 0 || colon == s.length() - 1) throw new IllegalArgumentException("expected HOST:PORT, got '" + s + "'");
            try {
                int port = Integer.parseInt(s.substring(colon + 1));
                if (port < 0 || port > 65535) throw new NumberFormatException();
                String host = s.substring(0, colon);
                if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
                return new HostPort(host, port);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("bad port in '" + s + "'");
            }
        }

    }
}
