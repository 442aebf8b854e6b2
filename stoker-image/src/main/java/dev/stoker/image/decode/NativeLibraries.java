package dev.stoker.image.decode;

import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;

/** Finds a system library by the first of its names that loads (soname first, then the dev symlink). */
final class NativeLibraries {
    private NativeLibraries() {}

    static SymbolLookup lookup(String... names) {
        IllegalArgumentException first = null;
        for (String name : names) {
            try {
                return SymbolLookup.libraryLookup(name, Arena.global());
            } catch (IllegalArgumentException e) {
                if (first == null) first = e;
                else first.addSuppressed(e);
            }
        }
        throw first;
    }
}
