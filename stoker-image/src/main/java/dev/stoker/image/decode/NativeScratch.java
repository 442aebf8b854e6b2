package dev.stoker.image.decode;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.ref.Cleaner;

/**
 * A growable native buffer for a decoder session: {@code malloc}ed without zeroing (the libraries only read bytes that
 * were written before), the old block freed as soon as it grows, the last one freed when the buffer becomes unreachable.
 * {@code Arena.ofAuto().allocate} would zero every new block (tens of MB for a large image) and keep each outgrown
 * block alive until a GC. The segments it returns are views: their memory lives as long as this object, so the
 * owner must stay reachable while it uses them.
 *
 * <p>Threading: confined to the thread of the session that owns it.
 */
final class NativeScratch {
    private static final MethodHandle MALLOC;
    private static final MethodHandle FREE;
    private static final Cleaner CLEANER = Cleaner.create();

    static {
        Linker linker = Linker.nativeLinker();
        var lookup = linker.defaultLookup();
        MALLOC = linker.downcallHandle(lookup.findOrThrow("malloc"), FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
        FREE = linker.downcallHandle(lookup.findOrThrow("free"), FunctionDescriptor.ofVoid(ValueLayout.ADDRESS));
    }

    /** The block's address, shared with the cleaning action (which must not reach {@code this}). */
    private final long[] address = new long[1];
    private MemorySegment segment = MemorySegment.NULL;

    NativeScratch() {
        long[] a = address;
        CLEANER.register(this, () -> free(a[0]));
    }

    /** A segment of at least {@code bytes} bytes, valid until the next call; its contents are undefined after growth. */
    MemorySegment ensure(long bytes) {
        if (segment.byteSize() >= bytes) return segment;
        long capacity = Math.max(1 << 16, bytes + (bytes >> 2));
        MemorySegment block;
        try {
            block = (MemorySegment) MALLOC.invokeExact(capacity);
        } catch (Throwable t) {
            throw new IllegalStateException("malloc call failed", t);
        }
        if (block.equals(MemorySegment.NULL)) throw new OutOfMemoryError("malloc(" + capacity + ") failed");
        free(address[0]);
        address[0] = block.address();
        segment = block.reinterpret(capacity);
        return segment;
    }

    private static void free(long address) {
        if (address == 0) return;
        try {
            FREE.invokeExact(MemorySegment.ofAddress(address));
        } catch (Throwable t) {
            throw new IllegalStateException("free call failed", t);
        }
    }
}
