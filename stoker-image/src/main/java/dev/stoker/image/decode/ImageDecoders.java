package dev.stoker.image.decode;

import java.lang.System.Logger.Level;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Hands out {@link ImageDecoder}s: libjpeg-turbo (through FFM) for JPEG when libturbojpeg loads, ImageIO for
 * every other format and for JPEG when it does not.
 *
 * <p>Threading: {@link #forCurrentThread()} keeps one decoder, and so one native TurboJPEG handle, per thread;
 * never pass it to another thread. {@link #imageIo()} is shared and thread-safe.
 */
public final class ImageDecoders {
    private static final System.Logger LOG = System.getLogger(ImageDecoders.class.getName());
    private static final AtomicBoolean FALLBACK_LOGGED = new AtomicBoolean();
    private static final ThreadLocal<ImageDecoder> PER_THREAD = ThreadLocal.withInitial(ImageDecoders::create);

    private ImageDecoders() {}

    /** This thread's decoder: TurboJPEG-backed for JPEG when available, else the ImageIO decoder (logged once). */
    public static ImageDecoder forCurrentThread() { return PER_THREAD.get(); }

    /** The pure ImageIO decoder (no DCT scaling), for comparison and as the fallback. */
    public static ImageDecoder imageIo() { return ImageIoDecoder.INSTANCE; }

    public static boolean turboJpegAvailable() { return TurboJpeg.available(); }

    private static ImageDecoder create() {
        if (TurboJpeg.available()) return new TurboJpegDecoder();
        if (FALLBACK_LOGGED.compareAndSet(false, true))
            LOG.log(Level.WARNING, "libturbojpeg not usable, decoding JPEG with ImageIO (slower, no DCT scaling): {0}",
                    TurboJpeg.unavailableReason());
        return ImageIoDecoder.INSTANCE;
    }
}
