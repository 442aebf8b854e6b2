package dev.stoker.cli;

import dev.stoker.node.ConfigKey;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.TypeConversionException;

/** A benchmark option's byte count, read as every setting's is ({@link ConfigKey#parseBytes}): {@code 512M}, {@code 4G}, {@code 65536}. */
final class ByteSizeConverter implements ITypeConverter<Long> {
    @Override
    public Long convert(String value) {
        try {
            return ConfigKey.parseBytes(value);
        } catch (IllegalArgumentException e) {
            throw new TypeConversionException(e.getMessage());
        }
    }
}
