package dev.stoker.image.decode;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Binds the still-image decoding API of libwebp ({@code libwebp.so.7}, the library Pillow's {@code _webp} module
 * links) through FFM and keeps, per thread, native input and output buffers that are reused.
 *
 * <p>Pixels: Pillow 9.4 decodes through {@code WebPAnimDecoderNew(data, NULL)}, i.e. {@code WebPDecode} into a
 * zero-filled canvas with default options (fancy upsampling, no dithering, non-premultiplied {@code MODE_RGBA}),
 * and {@code convert("RGB")} drops the alpha channel. {@code WebPDecodeRGBInto} uses the same default options and
 * its {@code MODE_RGB} output is not premultiplied, so it equals the RGB channels of that RGBA output byte for byte
 * (make_fixtures.py asserts this for every WebP fixture, with and without alpha).
 *
 * <p>Threading: a {@link Session} belongs to one thread; libwebp keeps no global decoder state.
 */
final class LibWebp {
    private static final int VP8_STATUS_OK = 0;
    /** {@code WEBP_DECODER_ABI_VERSION} of libwebp 1.2 ({@code decode.h}); only its major byte is checked. */
    private static final int DECODER_ABI_VERSION = 0x0209;
    private static final String[] STATUS_NAMES = {"OK", "OUT_OF_MEMORY", "INVALID_PARAM", "BITSTREAM_ERROR",
            "UNSUPPORTED_FEATURE", "SUSPENDED", "USER_ABORT", "NOT_ENOUGH_DATA"};
    /** {@code WebPBitstreamFeatures}: width, height, has_alpha, has_animation, format, then five padding words. */
    private static final int FEATURES_INTS = 10;

    private static final MethodHandle GET_FEATURES;
    private static final MethodHandle DECODE_RGB_INTO;
    private static final MethodHandle GET_DECODER_VERSION;
    private static final String UNAVAILABLE_REASON;

    static {
        MethodHandle features = null, decode = null, version = null;
        String reason = null;
        try {
            SymbolLookup lib = load();
            Linker linker = Linker.nativeLinker();
            var ptr = ValueLayout.ADDRESS;
            var i32 = ValueLayout.JAVA_INT;
            var u64 = ValueLayout.JAVA_LONG;
            features = linker.downcallHandle(lib.findOrThrow("WebPGetFeaturesInternal"),
                    FunctionDescriptor.of(i32, ptr, u64, ptr, i32));
            decode = linker.downcallHandle(lib.findOrThrow("WebPDecodeRGBInto"),
                    FunctionDescriptor.of(ptr, ptr, u64, ptr, u64, i32));
            version = linker.downcallHandle(lib.findOrThrow("WebPGetDecoderVersion"), FunctionDescriptor.of(i32));
            int v = (int) version.invokeExact();
            if (v >> 16 != 1) throw new UnsupportedOperationException("libwebp " + versionString(v) + " is not 1.x");
        } catch (Throwable e) {
            reason = e.toString();
        }
        GET_FEATURES = features;
        DECODE_RGB_INTO = decode;
        GET_DECODER_VERSION = version;
        UNAVAILABLE_REASON = reason;
    }

    private LibWebp() {}

    private static SymbolLookup load() {
        return dev.stoker.core.io.NativeLibraries.lookup("libwebp.so.7", "libwebp.so");
    }

    static boolean available() { return UNAVAILABLE_REASON == null; }

    /** Why the library could not be bound, or null when it is available. */
    static String unavailableReason() { return UNAVAILABLE_REASON; }

    /** The loaded library's version, e.g. "1.2.4". */
    static String version() {
        if (!available()) throw new IllegalStateException("libwebp unavailable: " + UNAVAILABLE_REASON);
        try {
            return versionString((int) GET_DECODER_VERSION.invokeExact());
        } catch (Throwable t) {
            throw new IllegalStateException("WebPGetDecoderVersion call failed", t);
        }
    }

    private static String versionString(int v) {
        return (v >> 16) + "." + (v >> 8 & 0xFF) + "." + (v & 0xFF);
    }

    private static String statusName(int status) {
        return status >= 0 && status < STATUS_NAMES.length ? "VP8_STATUS_" + STATUS_NAMES[status] : "status " + status;
    }

    /** What WebPGetFeatures reports about a bitstream. */
    record Features(int width, int height, boolean hasAnimation) {}

    /** One thread's native buffers, grown to the largest image seen and reused; freed when the session is unreachable. */
    static final class Session {
        private final MemorySegment features;
        private final NativeScratch inputBuffer = new NativeScratch();
        private final NativeScratch outputBuffer = new NativeScratch();
        private MemorySegment input = MemorySegment.NULL;

        Session() {
            if (!available()) throw new IllegalStateException("libwebp unavailable: " + UNAVAILABLE_REASON);
            features = Arena.ofAuto().allocate(ValueLayout.JAVA_INT, FEATURES_INTS);
        }

        /** Copies {@code webp} into the native input buffer and reads its features. */
        Features features(byte[] webp) {
            input = inputBuffer.ensure(webp.length);
            MemorySegment.copy(webp, 0, input, ValueLayout.JAVA_BYTE, 0, webp.length);
            int status;
            try {
                status = (int) GET_FEATURES.invokeExact(input, (long) webp.length, features, DECODER_ABI_VERSION);
            } catch (Throwable t) {
                throw new IllegalStateException("WebPGetFeaturesInternal call failed", t);
            }
            if (status != VP8_STATUS_OK) throw new BadImageException("libwebp WebPGetFeatures: " + statusName(status));
            return new Features(features.getAtIndex(ValueLayout.JAVA_INT, 0), features.getAtIndex(ValueLayout.JAVA_INT, 1),
                    features.getAtIndex(ValueLayout.JAVA_INT, 3) != 0);
        }

        /**
         * Decodes the WebP last given to {@link #features} ({@code webpLength} bytes) as packed RGB of
         * {@code width x height} into the native output buffer and returns a view of it.
         */
        MemorySegment decodeRgb(int webpLength, int width, int height) {
            long bytes = (long) width * height * 3;
            MemorySegment output = outputBuffer.ensure(bytes);
            MemorySegment result;
            try {
                result = (MemorySegment) DECODE_RGB_INTO.invokeExact(input, (long) webpLength, output, bytes, width * 3);
            } catch (Throwable t) {
                throw new IllegalStateException("WebPDecodeRGBInto call failed", t);
            }
            if (result.equals(MemorySegment.NULL))
                throw new BadImageException("libwebp WebPDecodeRGBInto failed: corrupt or truncated " + width + "x" + height + " bitstream");
            return output.asSlice(0, bytes);
        }
    }
}
