package dev.stoker.image.decode;

import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;
import java.awt.image.BufferedImage;
import java.awt.image.ColorModel;
import java.awt.image.DataBuffer;
import java.awt.image.DataBufferByte;
import java.awt.image.IndexColorModel;
import java.awt.image.Raster;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import javax.imageio.ImageIO;
import javax.imageio.ImageReader;
import javax.imageio.event.IIOReadWarningListener;
import javax.imageio.stream.ImageInputStream;

/**
 * Decodes every format with {@code javax.imageio} (WebP through TwelveMonkeys) and converts the result to RGB the
 * way Pillow's {@code convert("RGB")} does: samples are read from the {@link Raster}, never through
 * {@code getRGB} (which applies a gray gamma curve); palettes are looked up with transparency ignored; alpha is
 * dropped without compositing; 16-bit RGB keeps the high byte and 16-bit gray is clamped to 255 (Pillow opens it as
 * mode "I" and {@code I -> RGB} clips). Reader warnings (a truncated JPEG is a warning in ImageIO) are errors.
 *
 * <p>Threading: stateless; safe on any thread.
 */
final class ImageIoDecoder implements ImageDecoder {
    static final ImageIoDecoder INSTANCE = new ImageIoDecoder();

    private static final IIOReadWarningListener FAIL_ON_WARNING = (reader, warning) -> {
        throw new BadImageException("ImageIO warning: " + warning);
    };

    @Override
    public ImageInfo probe(byte[] data, String name) {
        try {
            return HeaderReader.read(data).info();
        } catch (BadImageException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, e.getMessage(), e);
        }
    }

    @Override
    public long decodeBytes(byte[] data, String name, DecodeOptions opts) {
        try {
            return DecodeCost.bytes(HeaderReader.read(data), data, opts, false, false);
        } catch (BadImageException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, e.getMessage(), e);
        }
    }

    @Override
    public RgbImage decode(byte[] data, String name, DecodeOptions opts) {
        try {
            Header header = HeaderReader.read(data);
            checkSize(header.info(), opts);
            DecodeCost.check(header, data, opts, false, false);
            RgbImage img = decodePixels(data, header);
            return opts.exif() == ExifPolicy.APPLY ? Orientation.apply(img, header.info().exifOrientation()) : img;
        } catch (IOException | RuntimeException e) {
            throw new SampleException(name, SampleException.Stage.DECODE, describe(e), e);
        } catch (OutOfMemoryError e) {
            throw outOfMemory(name, e);
        }
    }

    /**
     * An OutOfMemoryError while decoding one image, as that image's error: what failed to allocate is garbage as soon
     * as this frame is left, so the thread goes on with the next image (audit #10: it used to fail the rank's stream).
     */
    static SampleException outOfMemory(String name, OutOfMemoryError e) {
        return new SampleException(name, SampleException.Stage.DECODE, "out of memory: " + e.getMessage()
                + " (decoding one image; --decode-memory bounds what one image may take)", e);
    }

    static void checkSize(ImageInfo info, DecodeOptions opts) {
        if (info.pixelCount() > opts.maxSourcePixels())
            throw new BadImageException(info.format() + " of " + info.width() + "x" + info.height() + " = " + info.pixelCount()
                    + " pixels exceeds maxSourcePixels " + opts.maxSourcePixels());
        if (info.pixelCount() > MAX_ARRAY_PIXELS)
            throw new BadImageException(info.format() + " of " + info.width() + "x" + info.height() + " does not fit a Java array");
    }

    /** Largest image whose CMYK samples (4 bytes per pixel) still fit one Java array. */
    private static final long MAX_ARRAY_PIXELS = (Integer.MAX_VALUE - 64) / 4;

    static String describe(Throwable e) {
        if (e instanceof BadImageException) return e.getMessage();
        return e.getClass().getSimpleName() + (e.getMessage() == null ? "" : ": " + e.getMessage());
    }

    RgbImage decodePixels(byte[] data, Header header) throws IOException {
        ImageInfo info = header.info();
        ImageReader reader = reader(info.format());
        try (ImageInputStream in = ImageIO.createImageInputStream(new ByteArrayInputStream(data))) {
            reader.setInput(in, true, true);
            reader.addIIOReadWarningListener(FAIL_ON_WARNING);
            if (info.format() == ImageFormat.JPEG && header.jpegComponents() == 4) return cmykJpeg(reader, info);
            BufferedImage img = reader.read(0);
            if (info.format() == ImageFormat.GIF) return gifFirstFrame(img, info, header.gifFrame());
            if (img.getWidth() != info.width() || img.getHeight() != info.height())
                throw new BadImageException("decoder gave " + img.getWidth() + "x" + img.getHeight() + " for a header of "
                        + info.width() + "x" + info.height());
            byte[] rgb = new byte[info.width() * info.height() * 3];
            toRgb(img, rgb, 0, 0, info.width());
            return new RgbImage(info.width(), info.height(), rgb);
        } finally {
            reader.dispose();
        }
    }

    private static ImageReader reader(ImageFormat format) {
        var readers = ImageIO.getImageReadersByFormatName(format.name().toLowerCase());
        if (!readers.hasNext()) throw new BadImageException("no ImageIO reader for " + format);
        return readers.next();
    }

    /** JDK's reader refuses CMYK images; its raster read returns the undecoded CMYK or YCCK samples. */
    private static RgbImage cmykJpeg(ImageReader reader, ImageInfo info) throws IOException {
        Raster raster = reader.readRaster(0, null);
        int w = info.width(), h = info.height(), n = w * h;
        byte[] px = new byte[n * 4];
        int[] row = new int[w * 4];
        for (int y = 0; y < h; y++) {
            raster.getPixels(0, y, w, 1, row);
            for (int i = 0; i < row.length; i++) px[y * w * 4 + i] = (byte) row[i];
        }
        if (isYcck(reader)) Cmyk.ycckToCmyk(px, n);
        byte[] rgb = new byte[n * 3];
        Cmyk.invertedCmykToRgb(px, rgb, n);
        return new RgbImage(w, h, rgb);
    }

    private static boolean isYcck(ImageReader reader) throws IOException {
        var tree = reader.getImageMetadata(0).getAsTree("javax_imageio_jpeg_image_1.0");
        for (var n = tree.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (!n.getNodeName().equals("markerSequence")) continue;
            for (var m = n.getFirstChild(); m != null; m = m.getNextSibling()) {
                if (m.getNodeName().equals("app14Adobe")) {
                    var t = m.getAttributes().getNamedItem("transform");
                    return t != null && t.getNodeValue().equals("2");
                }
            }
        }
        return false;
    }

    /**
     * Pillow's frame 0 of a GIF: a canvas of the logical screen filled with the transparent index (else index 0),
     * the frame pasted at its offset, all looked up in the frame's palette.
     */
    private static RgbImage gifFirstFrame(BufferedImage img, ImageInfo info, Header.GifFrame frame) {
        int w = info.width(), h = info.height();
        byte[] rgb = new byte[w * h * 3];
        if (img.getWidth() == w && img.getHeight() == h) {
            toRgb(img, rgb, 0, 0, w);
            return new RgbImage(w, h, rgb);
        }
        if (!(img.getColorModel() instanceof IndexColorModel icm))
            throw new BadImageException("GIF frame without a palette");
        int fill = Math.max(frame.transparentIndex(), 0);
        int fillRgb = fill < icm.getMapSize() ? icm.getRGB(fill) : 0;
        for (int i = 0; i < w * h; i++) {
            rgb[i * 3] = (byte) (fillRgb >> 16);
            rgb[i * 3 + 1] = (byte) (fillRgb >> 8);
            rgb[i * 3 + 2] = (byte) fillRgb;
        }
        if (frame.left() + img.getWidth() > w || frame.top() + img.getHeight() > h)
            throw new BadImageException("GIF first frame lies outside its logical screen");
        toRgb(img, rgb, frame.left(), frame.top(), w);
        return new RgbImage(w, h, rgb);
    }

    /** Writes {@code img} as RGB into {@code dst} (an image {@code dstWidth} wide) with its top-left at (x0, y0). */
    static void toRgb(BufferedImage img, byte[] dst, int x0, int y0, int dstWidth) {
        int w = img.getWidth(), h = img.getHeight();
        Raster raster = img.getRaster();
        ColorModel cm = img.getColorModel();
        if (img.getType() == BufferedImage.TYPE_3BYTE_BGR && x0 == 0 && y0 == 0 && dstWidth == w
                && raster.getDataBuffer() instanceof DataBufferByte db && db.getNumBanks() == 1
                && raster.getSampleModelTranslateX() == 0 && raster.getSampleModelTranslateY() == 0) {
            byte[] bgr = db.getData();
            for (int i = 0, n = w * h * 3; i < n; i += 3) {
                dst[i] = bgr[i + 2];
                dst[i + 1] = bgr[i + 1];
                dst[i + 2] = bgr[i];
            }
            return;
        }
        int bands = raster.getNumBands();
        int[] row = new int[w * bands];
        if (cm instanceof IndexColorModel icm) {
            int size = icm.getMapSize();
            int entries = Math.max(size, 256);
            byte[] r = new byte[entries], g = new byte[entries], b = new byte[entries];
            icm.getReds(r);
            icm.getGreens(g);
            icm.getBlues(b);
            for (int y = 0; y < h; y++) {
                raster.getSamples(0, y, w, 1, 0, row);
                int o = ((y0 + y) * dstWidth + x0) * 3;
                for (int x = 0; x < w; x++, o += 3) {
                    int idx = row[x];
                    if (idx >= size) idx = 0;
                    dst[o] = r[idx];
                    dst[o + 1] = g[idx];
                    dst[o + 2] = b[idx];
                }
            }
            return;
        }
        boolean gray = cm.getNumColorComponents() == 1;
        if (!gray && cm.getNumColorComponents() != 3)
            throw new BadImageException("unsupported colour model with " + cm.getNumColorComponents() + " colour components");
        int bits = cm.getComponentSize(0);
        boolean wide = raster.getTransferType() == DataBuffer.TYPE_USHORT || bits > 8;
        int maxValue = (1 << Math.min(bits, 8)) - 1;
        for (int y = 0; y < h; y++) {
            raster.getPixels(0, y, w, 1, row);
            int o = ((y0 + y) * dstWidth + x0) * 3;
            for (int x = 0, s = 0; x < w; x++, o += 3, s += bands) {
                if (gray) {
                    int v = row[s];
                    v = wide ? Math.min(v, 255) : maxValue == 255 ? v : v * 255 / maxValue;
                    dst[o] = dst[o + 1] = dst[o + 2] = (byte) v;
                } else if (wide) {
                    dst[o] = (byte) (row[s] >> 8);
                    dst[o + 1] = (byte) (row[s + 1] >> 8);
                    dst[o + 2] = (byte) (row[s + 2] >> 8);
                } else {
                    dst[o] = (byte) row[s];
                    dst[o + 1] = (byte) row[s + 1];
                    dst[o + 2] = (byte) row[s + 2];
                }
            }
        }
    }
}
