package dev.stoker.image.decode;

import java.lang.System.Logger.Level;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Hands out {@link ImageDecoder}s: libjpeg-turbo for JPEG and libwebp for WebP (both through FFM) when those libraries
 * load, ImageIO for every other format and for JPEG or WebP when its library does not.
 *
 * <p>Threading: {@link #forCurrentThread()} keeps one decoder, and so one native TurboJPEG handle and libwebp buffer
 * set, per thread; never pass it to another thread. {@link #imageIo()} is shared and thread-safe.
 */
public final class ImageDecoders {
    private static final System.Logger LOG = System.getLogger(ImageDecoders.class.getName());
    private static final AtomicBoolean JPEG_FALLBACK_LOGGED = new AtomicBoolean();
    private static final AtomicBoolean WEBP_FALLBACK_LOGGED = new AtomicBoolean();
    private static final ThreadLocal<ImageDecoder> PER_THREAD = ThreadLocal.withInitial(ImageDecoders::create);

    private ImageDecoders() {}

    /** This thread's decoder: native for JPEG and WebP where available, else the ImageIO decoder (each fallback logged once). */
    public static ImageDecoder forCurrentThread() { return PER_THREAD.get(); }

    /** The pure ImageIO decoder (no DCT scaling, TwelveMonkeys WebP), for comparison and as the fallback. */
    public static ImageDecoder imageIo() { return ImageIoDecoder.INSTANCE; }

    public static boolean turboJpegAvailable() { return TurboJpeg.available(); }

    /** Whether WebP is decoded by libwebp (bit-exact with Pillow) rather than by TwelveMonkeys (lossy WebP differs). */
    public static boolean libWebpAvailable() { return LibWebp.available(); }

    private static ImageDecoder create() {
        boolean jpeg = TurboJpeg.available(), webp = LibWebp.available();
        if (!jpeg && JPEG_FALLBACK_LOGGED.compareAndSet(false, true))
            LOG.log(Level.WARNING, "libturbojpeg not usable, decoding JPEG with ImageIO (slower, no DCT scaling): {0}",
                    TurboJpeg.unavailableReason());
        if (!webp && WEBP_FALLBACK_LOGGED.compareAndSet(false, true))
            LOG.log(Level.WARNING, "libwebp not usable, decoding WebP with ImageIO (lossy WebP pixels differ from Pillow): {0}",
                    LibWebp.unavailableReason());
        return jpeg || webp ? new NativeDecoder(jpeg, webp) : ImageIoDecoder.INSTANCE;
    }
}
