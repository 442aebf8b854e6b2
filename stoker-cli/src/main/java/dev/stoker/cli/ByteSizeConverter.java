package dev.stoker.cli;

import java.util.Locale;
import picocli.CommandLine.ITypeConverter;

/** Parses a byte count with an optional binary suffix: {@code 512M}, {@code 4G}, {@code 65536}. */
final class ByteSizeConverter implements ITypeConverter<Long> {
    @Override
    public Long convert(String value) {
        String v = value.trim().toUpperCase(Locale.ROOT);
        if (v.endsWith("B")) v = v.substring(0, v.length() - 1);
        if (v.endsWith("I")) v = v.substring(0, v.length() - 1);
        int shift = 0;
        if (!v.isEmpty()) {
            switch (v.charAt(v.length() - 1)) {
                case 'K' -> shift = 10;
                case 'M' -> shift = 20;
                case 'G' -> shift = 30;
                case 'T' -> shift = 40;
                default -> { }
            }
        }
        if (shift > 0) v = v.substring(0, v.length() - 1);
        try {
            long n = Long.parseLong(v.trim());
            if (n < 0 || n > (Long.MAX_VALUE >> shift)) throw new NumberFormatException();
            return n << shift;
        } catch (NumberFormatException e) {
            throw new picocli.CommandLine.TypeConversionException("'" + value + "' is not a byte count (e.g. 65536, 512M, 4G)");
        }
    }
}
