package dev.stoker.cache;

import java.lang.foreign.MemorySegment;

/**
 * Entries of known length read and written by key: a node's own {@link SampleCache}, or one that asks the entry's home
 * node first ({@link AffineCache}). A read is exact or a miss, never another entry's bytes; a write may be dropped (the
 * cache is an optimization).
 */
public interface CacheEntries {
    /** Reads entry {@code key} into {@code dst}, exactly its length: true on a hit; false on a miss (nothing usable read). */
    boolean read(CacheKey key, MemorySegment dst);

    /** {@link #read(CacheKey, MemorySegment)} into {@code dst[offset, offset + length)}. */
    default boolean read(CacheKey key, byte[] dst, int offset, int length) {
        return read(key, MemorySegment.ofArray(dst).asSlice(offset, length));
    }

    /**
     * Entry {@code key}, exactly {@code rawLength} bytes, handed to {@code view} while it can be read (only during the
     * call): true on a hit (after {@code view} returned), false on a miss (then {@code view} is not called). Where the
     * entry's bytes can be read in place (a node's own uncompressed entry, mapped) they are not copied; else they are read
     * into {@code fallback}'s segment (asked for only then, of {@code rawLength} bytes) and that is handed over. What
     * {@code view} throws is thrown.
     */
    default boolean readView(CacheKey key, long rawLength, java.util.function.Supplier<MemorySegment> fallback,
                             java.util.function.Consumer<MemorySegment> view) {
        MemorySegment dst = fallback.get();
        if (dst.byteSize() != rawLength) throw new IllegalArgumentException("a fallback of " + dst.byteSize() + " bytes for " + rawLength);
        if (!read(key, dst)) return false;
        view.accept(dst);
        return true;
    }

    /** Stores {@code raw} as entry {@code key}; false when it was not kept. */
    boolean write(CacheKey key, MemorySegment raw);

    /** {@link #write(CacheKey, MemorySegment)} of {@code src[offset, offset + length)}. */
    default boolean write(CacheKey key, byte[] src, int offset, int length) {
        return write(key, MemorySegment.ofArray(src).asSlice(offset, length));
    }
}
