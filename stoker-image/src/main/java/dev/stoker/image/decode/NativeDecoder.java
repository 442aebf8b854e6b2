package dev.stoker.image.decode;

import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.ref.Reference;

/**
 * Decodes JPEG with libjpeg-turbo (DCT scaling, CMYK/YCCK as Pillow) and still WebP with libwebp when those libraries
 * load, and hands everything else (and animated WebP, which Pillow composites with libwebpdemux) to
 * {@link ImageIoDecoder}.
 *
 * <p>Pixels of JPEG and still WebP images go into one reusable heap buffer (grown with headroom, so usually longer
 * than {@code width·height·3}): a new multi-megabyte array per image would be zeroed by the allocator and, being
 * humongous to G1, bring on collections. An {@link RgbImage} returned by this decoder is therefore valid only until
 * the next {@code decode} on it (see {@link ImageDecoder#decode}).
 *
 * <p>Threading: confined to the thread that created it (it owns that thread's {@link TurboJpeg.Session} and
 * {@link LibWebp.Session}).
 */
final class NativeDecoder implements ImageDecoder {
    private final Thread owner = Thread.currentThread();
    private final TurboJpeg.Session jpeg;
    private final LibWebp.Session webp;
    private byte[] rgbBuffer = new byte[0];

    /** Either session may be null (its library did not load), not both. */
    NativeDecoder(boolean useTurboJpeg, boolean useLibWebp) {
        if (!useTurboJpeg && !useLibWebp) throw new IllegalArgumentException("no native library to decode with");
        jpeg = useTurboJpeg ? new TurboJpeg.Session() : null;
        webp = useLibWebp ? new LibWebp.Session() : null;
    }

    boolean decodesJpeg() { return jpeg != null; }

    boolean decodesWebp() { return webp != null; }

    @Override
    public ImageInfo probe(byte[] data, String name) {
        return ImageIoDecoder.INSTANCE.probe(data, name);
    }

    @Override
    public long decodeBytes(byte[] data, String name, DecodeOptions opts) {
        try {
            return DecodeCost.bytes(HeaderReader.read(data), data, opts, jpeg != null, webp != null);
        } catch (BadImageException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, e.getMessage(), e);
        }
    }

    @Override
    public RgbImage decode(byte[] data, String name, DecodeOptions opts) {
        if (Thread.currentThread() != owner)
            throw new IllegalStateException("native decoder of " + owner + " used from " + Thread.currentThread());
        try {
            Header header = HeaderReader.read(data);
            ImageIoDecoder.checkSize(header.info(), opts);
            DecodeCost.check(header, data, opts, jpeg != null, webp != null);
            ImageFormat format = header.info().format();
            RgbImage img;
            if (format == ImageFormat.JPEG && jpeg != null) img = decodeJpeg(data, opts.scaleDenominator());
            else if (format == ImageFormat.WEBP && webp != null) img = decodeWebp(data, header);
            else img = ImageIoDecoder.INSTANCE.decodePixels(data, header);
            return opts.exif() == ExifPolicy.APPLY ? Orientation.apply(img, header.info().exifOrientation()) : img;
        } catch (IOException | RuntimeException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, ImageIoDecoder.describe(e), e);
        } catch (OutOfMemoryError e) {
            throw ImageIoDecoder.outOfMemory(name, e);
        }
    }

    private RgbImage decodeJpeg(byte[] data, int scale) {
        TurboJpeg.JpegHeader h = jpeg.header(data);
        int width = (h.width() + scale - 1) / scale, height = (h.height() + scale - 1) / scale;
        boolean cmyk = h.colorspace() == TurboJpeg.TJCS_CMYK || h.colorspace() == TurboJpeg.TJCS_YCCK;
        int pixels = width * height;
        byte[] rgb = pixelBuffer(pixels * 3);
        if (!cmyk) {
            MemorySegment px = jpeg.decompress(data.length, width, height, TurboJpeg.TJPF_RGB, 3);
            MemorySegment.copy(px, ValueLayout.JAVA_BYTE, 0, rgb, 0, pixels * 3);
        } else {
            MemorySegment px = jpeg.decompress(data.length, width, height, TurboJpeg.TJPF_CMYK, 4);
            byte[] samples = px.toArray(ValueLayout.JAVA_BYTE);
            Cmyk.invertedCmykToRgb(samples, rgb, pixels);
        }
        Reference.reachabilityFence(this); // the session's native buffers live as long as this decoder, not the views
        return new RgbImage(width, height, rgb);
    }

    private RgbImage decodeWebp(byte[] data, Header header) throws IOException {
        ImageInfo info = header.info();
        LibWebp.Features f = webp.features(data);
        if (f.hasAnimation()) return ImageIoDecoder.INSTANCE.decodePixels(data, header);
        if (f.width() != info.width() || f.height() != info.height())
            throw new BadImageException("WebP bitstream is " + f.width() + "x" + f.height() + ", its header says "
                    + info.width() + "x" + info.height());
        MemorySegment px = webp.decodeRgb(data.length, info.width(), info.height());
        int bytes = info.width() * info.height() * 3;
        byte[] rgb = pixelBuffer(bytes);
        MemorySegment.copy(px, ValueLayout.JAVA_BYTE, 0, rgb, 0, bytes);
        Reference.reachabilityFence(this);
        return new RgbImage(info.width(), info.height(), rgb);
    }

    /** The reusable pixel buffer, at least {@code bytes} long; what it held before (the previous image) is lost. */
    private byte[] pixelBuffer(int bytes) {
        if (rgbBuffer.length < bytes) {
            rgbBuffer = new byte[0]; // let the old buffer go before allocating the larger one (and stay usable if that fails)
            rgbBuffer = new byte[(int) Math.min(Integer.MAX_VALUE - 8, bytes + (long) (bytes >> 3))];
        }
        return rgbBuffer;
    }
}
