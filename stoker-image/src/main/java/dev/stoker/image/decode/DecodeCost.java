package dev.stoker.image.decode;

/**
 * What decoding an image costs in memory, from its header alone, so that an image over the budget
 * ({@link DecodeOptions#maxDecodeBytes()}) is refused before any pixel memory is allocated (audit #10).
 *
 * <p>The estimate adds up, in bytes, what the decoders of this package allocate for one image (w x h is the stored
 * size; w' x h' the size after JPEG DCT scaling, else w x h):
 * <ul>
 *   <li>every path: the RGB result, 3·w'·h' (heap), and a second one when EXIF orientation is applied and not 1;</li>
 *   <li>JPEG through libjpeg-turbo: its native output, 3 (CMYK/YCCK: 4, plus a 4-byte heap copy) per scaled pixel; a
 *       progressive frame also keeps every DCT coefficient of the whole image until the last scan, 2 bytes for each of
 *       64 per 8x8 block of every component at full resolution whatever the scale (counted with each component at full
 *       resolution and the size rounded up to 16, an upper bound for any subsampling);</li>
 *   <li>JPEG through ImageIO: its raster, one byte per component and pixel (CMYK: plus a 4-byte copy), the same
 *       coefficient buffers when progressive (the JDK's libjpeg);</li>
 *   <li>still WebP through libwebp: its native output, 3 per pixel, and for a lossless or extended stream (VP8L, VP8X)
 *       the decoder's ARGB pixels and alpha plane, 5 per pixel; animated WebP and WebP through ImageIO: an ARGB canvas
 *       and a working copy, 8 per pixel;</li>
 *   <li>PNG (ImageIO): its raster, channels x bytes per sample (IHDR's colour type and bit depth);</li>
 *   <li>GIF: one byte per screen pixel for the frame's indices; BMP: 4 per pixel (up to 32-bit rasters).</li>
 * </ul>
 * Small buffers (rows, Huffman tables, the compressed input) are left out; the reusable buffers of the native decoder
 * grow with a little headroom (an eighth on the heap, a quarter natively), which is not counted either: the figure is
 * the working set of one image, as the error message says ("about").
 */
final class DecodeCost {
    private DecodeCost() {}

    /**
     * Bytes decoding {@code data} (whose header is {@code header}) takes with these options; {@code turboJpeg} and
     * {@code libWebp}: whether that format goes through the native library rather than ImageIO.
     */
    static long bytes(Header header, byte[] data, DecodeOptions opts, boolean turboJpeg, boolean libWebp) {
        try {
            return exactBytes(header, data, opts, turboJpeg, libWebp);
        } catch (ArithmeticException overflow) {
            // a header may claim 2^31 x 2^31 pixels: its cost is beyond any budget, never a negative number that passes one
            return Long.MAX_VALUE;
        }
    }

    /** {@link #bytes}, in arithmetic that throws rather than wraps. */
    private static long exactBytes(Header header, byte[] data, DecodeOptions opts, boolean turboJpeg, boolean libWebp) {
        ImageInfo info = header.info();
        long w = info.width(), h = info.height(), pixels = Math.multiplyExact(w, h);
        int scale = info.format() == ImageFormat.JPEG && turboJpeg ? opts.scaleDenominator() : 1;
        long outPixels = Math.multiplyExact((w + scale - 1) / scale, (h + scale - 1) / scale);
        long rgb = Math.multiplyExact(3, outPixels);
        long total = rgb;
        if (opts.exif() == ExifPolicy.APPLY && info.exifOrientation() != 1) total = Math.addExact(total, rgb);
        long raster = switch (info.format()) {
            case JPEG -> {
                boolean cmyk = header.jpegComponents() == 4;
                long out = turboJpeg ? Math.multiplyExact(cmyk ? 8 : 3, outPixels)
                        : Math.multiplyExact(cmyk ? 8 : header.jpegComponents(), pixels);
                if (header.jpegProgressive())
                    out = Math.addExact(out, Math.multiplyExact(2L * header.jpegComponents(), Math.multiplyExact(roundUp16(w), roundUp16(h))));
                yield out;
            }
            case WEBP -> {
                boolean animated = data.length > 20 && isChunk(data, 12, "VP8X") && (data[20] & 0x02) != 0;
                yield libWebp && !animated ? Math.multiplyExact(3 + (isChunk(data, 12, "VP8 ") ? 0 : 5), pixels) : Math.multiplyExact(8, pixels);
            }
            case PNG -> Math.multiplyExact(pngRasterBytesPerPixel(data), pixels);
            case GIF -> pixels;
            case BMP -> Math.multiplyExact(4, pixels);
        };
        return Math.addExact(total, raster);
    }

    /**
     * Refuses an image that needs more than the budget, naming its format, size, the bytes it needs and the bytes
     * allowed; returns what it needs otherwise.
     */
    static long check(Header header, byte[] data, DecodeOptions opts, boolean turboJpeg, boolean libWebp) {
        long need = bytes(header, data, opts, turboJpeg, libWebp);
        if (need > opts.maxDecodeBytes()) throw new BadImageException(overBudget(header, need, opts.maxDecodeBytes()));
        return need;
    }

    static String overBudget(Header header, long need, long allowed) {
        ImageInfo info = header.info();
        return "over the decode memory budget: " + (header.jpegProgressive() ? "progressive " : "") + info.format() + " of "
                + info.width() + "x" + info.height() + " needs about " + need + " bytes to decode, more than the " + allowed
                + " bytes allowed per thread (--decode-memory)";
    }

    private static long roundUp16(long n) { return (n + 15) & ~15L; }

    /** Raster bytes per pixel from IHDR: channels of the colour type times 2 for 16-bit samples (a palette: 1). */
    private static long pngRasterBytesPerPixel(byte[] d) {
        int depth = d.length > 25 ? d[24] & 0xFF : 16, colourType = d.length > 25 ? d[25] & 0xFF : 6;
        int channels = switch (colourType) {
            case 0, 3 -> 1;
            case 2 -> 3;
            case 4 -> 2;
            default -> 4;
        };
        return colourType == 3 ? 1 : (long) channels * (depth == 16 ? 2 : 1);
    }

    private static boolean isChunk(byte[] d, int at, String fourcc) {
        if (at + 4 > d.length) return false;
        for (int i = 0; i < 4; i++) if (d[at + i] != fourcc.charAt(i)) return false;
        return true;
    }
}
