package dev.stoker.image.decode;

import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Decodes JPEG with libjpeg-turbo (DCT scaling, CMYK/YCCK as Pillow) and hands every other format to
 * {@link ImageIoDecoder}.
 *
 * <p>Threading: confined to the thread that created it (it owns that thread's {@link TurboJpeg.Session}).
 */
final class TurboJpegDecoder implements ImageDecoder {
    private final TurboJpeg.Session session = new TurboJpeg.Session();

    @Override
    public ImageInfo probe(byte[] data, String name) {
        return ImageIoDecoder.INSTANCE.probe(data, name);
    }

    @Override
    public RgbImage decode(byte[] data, String name, DecodeOptions opts) {
        session.checkOwner();
        try {
            Header header = HeaderReader.read(data);
            ImageIoDecoder.checkSize(header.info(), opts);
            RgbImage img = header.info().format() == ImageFormat.JPEG
                    ? decodeJpeg(data, opts.scaleDenominator())
                    : ImageIoDecoder.INSTANCE.decodePixels(data, header);
            return opts.exif() == ExifPolicy.APPLY ? Orientation.apply(img, header.info().exifOrientation()) : img;
        } catch (IOException | RuntimeException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, ImageIoDecoder.describe(e), e);
        }
    }

    private RgbImage decodeJpeg(byte[] data, int scale) {
        TurboJpeg.JpegHeader h = session.header(data);
        int width = (h.width() + scale - 1) / scale, height = (h.height() + scale - 1) / scale;
        boolean cmyk = h.colorspace() == TurboJpeg.TJCS_CMYK || h.colorspace() == TurboJpeg.TJCS_YCCK;
        int pixels = width * height;
        byte[] rgb = new byte[pixels * 3];
        if (!cmyk) {
            MemorySegment px = session.decompress(data.length, width, height, TurboJpeg.TJPF_RGB, 3);
            MemorySegment.copy(px, ValueLayout.JAVA_BYTE, 0, rgb, 0, rgb.length);
        } else {
            MemorySegment px = session.decompress(data.length, width, height, TurboJpeg.TJPF_CMYK, 4);
            byte[] samples = px.toArray(ValueLayout.JAVA_BYTE);
            Cmyk.invertedCmykToRgb(samples, rgb, pixels);
        }
        return new RgbImage(width, height, rgb);
    }
}
