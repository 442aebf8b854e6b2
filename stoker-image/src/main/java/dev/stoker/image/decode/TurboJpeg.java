package dev.stoker.image.decode;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.ref.Cleaner;

/**
 * Binds the TurboJPEG 2.x C API of libturbojpeg through FFM (no JNI glue) and keeps, per thread, one decompressor
 * handle with reusable native input and output buffers.
 *
 * <p>Pixels: default flags only (accurate integer "islow" IDCT, fancy upsampling), the settings Pillow's libjpeg
 * decoder uses, so output is bit-exact with Pillow; {@code TJFLAG_FASTDCT}/{@code TJFLAG_FASTUPSAMPLE} would change
 * pixels. {@code TJFLAG_STOPONWARNING} makes libjpeg warnings (a truncated file, corrupt entropy data) fail at once.
 *
 * <p>Threading: a {@link Session} belongs to one thread; the library itself is thread-safe across handles.
 */
final class TurboJpeg {
    static final int TJPF_RGB = 0;
    static final int TJPF_CMYK = 11;
    static final int TJCS_CMYK = 3;
    static final int TJCS_YCCK = 4;
    static final int TJFLAG_STOPONWARNING = 8192;

    private static final MethodHandle INIT_DECOMPRESS;
    private static final MethodHandle DECOMPRESS_HEADER3;
    private static final MethodHandle DECOMPRESS2;
    private static final MethodHandle GET_ERROR_STR2;
    private static final MethodHandle GET_ERROR_CODE;
    private static final MethodHandle DESTROY;
    private static final String UNAVAILABLE_REASON;
    private static final Cleaner CLEANER = Cleaner.create();

    static {
        MethodHandle init = null, header = null, decompress = null, errorStr = null, errorCode = null, destroy = null;
        String reason = null;
        try {
            SymbolLookup lib = load();
            Linker linker = Linker.nativeLinker();
            var ptr = ValueLayout.ADDRESS;
            var i32 = ValueLayout.JAVA_INT;
            var u64 = ValueLayout.JAVA_LONG;
            init = linker.downcallHandle(lib.findOrThrow("tjInitDecompress"), FunctionDescriptor.of(ptr));
            header = linker.downcallHandle(lib.findOrThrow("tjDecompressHeader3"),
                    FunctionDescriptor.of(i32, ptr, ptr, u64, ptr, ptr, ptr, ptr));
            decompress = linker.downcallHandle(lib.findOrThrow("tjDecompress2"),
                    FunctionDescriptor.of(i32, ptr, ptr, u64, ptr, i32, i32, i32, i32, i32));
            errorStr = linker.downcallHandle(lib.findOrThrow("tjGetErrorStr2"), FunctionDescriptor.of(ptr, ptr));
            errorCode = linker.downcallHandle(lib.findOrThrow("tjGetErrorCode"), FunctionDescriptor.of(i32, ptr));
            destroy = linker.downcallHandle(lib.findOrThrow("tjDestroy"), FunctionDescriptor.of(i32, ptr));
        } catch (RuntimeException | LinkageError e) {
            reason = e.toString();
        }
        INIT_DECOMPRESS = init;
        DECOMPRESS_HEADER3 = header;
        DECOMPRESS2 = decompress;
        GET_ERROR_STR2 = errorStr;
        GET_ERROR_CODE = errorCode;
        DESTROY = destroy;
        UNAVAILABLE_REASON = reason;
    }

    private TurboJpeg() {}

    private static SymbolLookup load() {
        return dev.stoker.core.io.NativeLibraries.lookup("libturbojpeg.so.0", "libturbojpeg.so");
    }

    static boolean available() { return UNAVAILABLE_REASON == null; }

    /** Why the library could not be bound, or null when it is available. */
    static String unavailableReason() { return UNAVAILABLE_REASON; }

    /** What tjDecompressHeader3 reports. */
    record JpegHeader(int width, int height, int subsampling, int colorspace) {}

    /**
     * One thread's decompressor: a tjhandle plus native buffers that grow to the largest image seen and are reused.
     * The handle is destroyed and the buffers freed when the session becomes unreachable (its thread ended).
     */
    static final class Session {
        private final long[] handleAddress = new long[1];
        private MemorySegment handle;
        private final MemorySegment ints;
        private final NativeScratch inputBuffer = new NativeScratch();
        private final NativeScratch outputBuffer = new NativeScratch();
        private MemorySegment input = MemorySegment.NULL;

        Session() {
            if (!available()) throw new IllegalStateException("libturbojpeg unavailable: " + UNAVAILABLE_REASON);
            handle = newHandle();
            handleAddress[0] = handle.address();
            ints = Arena.ofAuto().allocate(ValueLayout.JAVA_INT, 4);
            long[] address = handleAddress;
            CLEANER.register(this, () -> destroy(address[0]));
        }

        private static MemorySegment newHandle() {
            MemorySegment h;
            try {
                h = (MemorySegment) INIT_DECOMPRESS.invokeExact();
            } catch (Throwable t) {
                throw new IllegalStateException("tjInitDecompress failed", t);
            }
            if (h.equals(MemorySegment.NULL)) throw new IllegalStateException("tjInitDecompress returned NULL");
            return h;
        }

        private static void destroy(long address) {
            try {
                int ignored = (int) DESTROY.invokeExact(MemorySegment.ofAddress(address));
            } catch (Throwable ignored) {
                // Nothing to report to: the owning thread is gone.
            }
        }

        /**
         * TurboJPEG 2.1 returns from an error without aborting the libjpeg decompressor (tjDecompressHeader3 leaves
         * it mid-header), and the next image then fails with the previous one's error; replacing the handle after any
         * error resets it (BadInputTest covers the decoder staying usable).
         */
        private void replaceHandle() {
            MemorySegment fresh = newHandle();
            destroy(handleAddress[0]);
            handle = fresh;
            handleAddress[0] = fresh.address();
        }

        /** Copies {@code jpeg} into the native input buffer and reads its header. */
        JpegHeader header(byte[] jpeg) {
            input = inputBuffer.ensure(jpeg.length);
            MemorySegment.copy(jpeg, 0, input, ValueLayout.JAVA_BYTE, 0, jpeg.length);
            int rc;
            try {
                rc = (int) DECOMPRESS_HEADER3.invokeExact(handle, input, (long) jpeg.length, ints,
                        ints.asSlice(4), ints.asSlice(8), ints.asSlice(12));
            } catch (Throwable t) {
                throw new IllegalStateException("tjDecompressHeader3 call failed", t);
            }
            if (rc != 0) throw error("tjDecompressHeader3");
            return new JpegHeader(ints.getAtIndex(ValueLayout.JAVA_INT, 0), ints.getAtIndex(ValueLayout.JAVA_INT, 1),
                    ints.getAtIndex(ValueLayout.JAVA_INT, 2), ints.getAtIndex(ValueLayout.JAVA_INT, 3));
        }

        /**
         * Decompresses the JPEG last given to {@link #header} at {@code width x height} (a TJSCALED size) into the
         * native output buffer and returns a view of the packed pixels.
         */
        MemorySegment decompress(int jpegLength, int width, int height, int pixelFormat, int bytesPerPixel) {
            long bytes = (long) width * height * bytesPerPixel;
            MemorySegment output = outputBuffer.ensure(bytes);
            int rc;
            try {
                rc = (int) DECOMPRESS2.invokeExact(handle, input, (long) jpegLength, output, width, 0, height,
                        pixelFormat, TJFLAG_STOPONWARNING);
            } catch (Throwable t) {
                throw new IllegalStateException("tjDecompress2 call failed", t);
            }
            if (rc != 0) throw error("tjDecompress2");
            return output.asSlice(0, bytes);
        }

        private BadImageException error(String function) {
            BadImageException e;
            try {
                var str = (MemorySegment) GET_ERROR_STR2.invokeExact(handle);
                int code = (int) GET_ERROR_CODE.invokeExact(handle);
                String message = str.equals(MemorySegment.NULL) ? "unknown error" : str.reinterpret(1024).getString(0);
                e = new BadImageException("libjpeg-turbo " + function + ": " + message + (code == 0 ? " (warning, treated as an error)" : ""));
            } catch (Throwable t) {
                e = new BadImageException("libjpeg-turbo " + function + " failed", t);
            }
            replaceHandle();
            return e;
        }
    }
}
