package dev.stoker.core.io;

import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;

/**
 * Finds a system library for an FFM binding (libjpeg-turbo, libwebp, FFmpeg, libzstd) by the first of its names that
 * loads: the soname first, then the development symlink. Loaded into the global arena: bindings live as long as the JVM.
 */
public final class NativeLibraries {
    private NativeLibraries() {}

    /**
     * The lookup of the first of {@code names} that loads.
     *
     * @throws IllegalArgumentException when none does (the first name's failure, the others' suppressed)
     */
    public static SymbolLookup lookup(String... names) {
        IllegalArgumentException first = null;
        for (String name : names) {
            try {
                return SymbolLookup.libraryLookup(name, Arena.global());
            } catch (IllegalArgumentException e) {
                if (first == null) first = e;
                else first.addSuppressed(e);
            }
        }
        if (first == null) throw new IllegalArgumentException("no library name given");
        throw first;
    }
}
