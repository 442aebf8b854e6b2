package dev.stoker.cache;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Zstandard through FFM on the system's libzstd (Debian's {@code libzstd1}, 1.5.4 on Debian 12, which dpkg itself
 * needs, so every Debian host has it): the simple one-shot API only ({@code ZSTD_compress}, {@code ZSTD_decompress},
 * {@code ZSTD_getFrameContentSize}), with the codec's own frame checksum left off because every cache entry carries a
 * CRC-32C of its stored bytes. No JNI: the same binding style as libjpeg-turbo, libwebp and FFmpeg. Why not zstd-jni:
 * the code that runs is the same C library either way; FFM adds no dependency with bundled binaries and works on
 * {@link MemorySegment}s, so an entry decompresses straight from its mapped file into native memory.
 *
 * <p>{@link #available()} is false where the library does not load; the cache then stores entries uncompressed.
 */
public final class Zstd {
    private static final MethodHandle COMPRESS, DECOMPRESS, BOUND, IS_ERROR, ERROR_NAME, CONTENT_SIZE;
    private static final String UNAVAILABLE;

    static {
        MethodHandle c = null, d = null, b = null, ie = null, en = null, cs = null;
        String why = null;
        try {
            SymbolLookup lib = dev.stoker.core.io.NativeLibraries.lookup("libzstd.so.1", "libzstd.so");
            Linker l = Linker.nativeLinker();
            var size = ValueLayout.JAVA_LONG; // size_t on LP64
            c = l.downcallHandle(lib.findOrThrow("ZSTD_compress"), FunctionDescriptor.of(size, ValueLayout.ADDRESS, size,
                    ValueLayout.ADDRESS, size, ValueLayout.JAVA_INT));
            d = l.downcallHandle(lib.findOrThrow("ZSTD_decompress"), FunctionDescriptor.of(size, ValueLayout.ADDRESS, size,
                    ValueLayout.ADDRESS, size));
            b = l.downcallHandle(lib.findOrThrow("ZSTD_compressBound"), FunctionDescriptor.of(size, size));
            ie = l.downcallHandle(lib.findOrThrow("ZSTD_isError"), FunctionDescriptor.of(ValueLayout.JAVA_INT, size));
            en = l.downcallHandle(lib.findOrThrow("ZSTD_getErrorName"), FunctionDescriptor.of(ValueLayout.ADDRESS, size));
            cs = l.downcallHandle(lib.findOrThrow("ZSTD_getFrameContentSize"), FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                    ValueLayout.ADDRESS, size));
        } catch (RuntimeException | LinkageError e) {
            why = "libzstd did not load: " + e.getMessage();
        }
        COMPRESS = c; DECOMPRESS = d; BOUND = b; IS_ERROR = ie; ERROR_NAME = en; CONTENT_SIZE = cs;
        UNAVAILABLE = why;
    }

    private Zstd() {}

    /** Whether libzstd loaded. */
    public static boolean available() { return UNAVAILABLE == null; }

    /** Why libzstd is not available (null when it is). */
    public static String unavailableReason() { return UNAVAILABLE; }

    /** The largest compressed size of {@code n} bytes. */
    public static long compressBound(long n) {
        try {
            return (long) BOUND.invokeExact(n);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * Compresses {@code src} into {@code dst} (at least {@link #compressBound} of the source's size) at {@code level};
     * returns the compressed size.
     */
    public static long compress(MemorySegment dst, MemorySegment src, int level) {
        require();
        try {
            long n = (long) COMPRESS.invokeExact(dst, dst.byteSize(), src, src.byteSize(), level);
            return check(n, "compress");
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * Decompresses the one frame in {@code src} into {@code dst}, which must be exactly the frame's declared content
     * size; a frame that does not declare it, declares another, or is damaged is refused with an {@link
     * java.io.IOException}-like {@link IllegalStateException} naming the cause (the caller counts it as a corrupt entry).
     */
    public static void decompressExact(MemorySegment dst, MemorySegment src) {
        require();
        try {
            long declared = (long) CONTENT_SIZE.invokeExact(src, src.byteSize());
            if (declared != dst.byteSize())
                throw new IllegalStateException("zstd frame declares " + (declared < 0 ? "no or an unreadable size" : declared + " bytes")
                        + ", expected " + dst.byteSize());
            long n = (long) DECOMPRESS.invokeExact(dst, dst.byteSize(), src, src.byteSize());
            if (check(n, "decompress") != dst.byteSize())
                throw new IllegalStateException("zstd frame decompressed to " + n + " bytes, expected " + dst.byteSize());
        } catch (IllegalStateException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    private static long check(long code, String what) throws Throwable {
        if ((int) IS_ERROR.invokeExact(code) != 0) {
            var name = ((MemorySegment) ERROR_NAME.invokeExact(code)).reinterpret(256).getString(0);
            throw new IllegalStateException("zstd " + what + " failed: " + name);
        }
        return code;
    }

    private static void require() {
        if (!available()) throw new IllegalStateException(UNAVAILABLE);
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) return r;
        if (t instanceof Error e) throw e;
        return new IllegalStateException(t);
    }
}
