package dev.stoker.image.decode;

/**
 * Parses container headers without decoding pixels: format from magic bytes, stored size, EXIF orientation (JPEG
 * APP1, PNG eXIf, WebP EXIF) and, for GIF, the first frame's placement. Rejects empty, unknown and zero-sized
 * images with {@link BadImageException}.
 */
final class HeaderReader {
    private HeaderReader() {}

    static Header read(byte[] d) {
        if (d.length == 0) throw new BadImageException("empty file (0 bytes)");
        if (startsWith(d, 0, 0xFF, 0xD8, 0xFF)) return jpeg(d);
        if (startsWith(d, 0, 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n')) return png(d);
        if (startsWith(d, 0, 'G', 'I', 'F', '8') && d.length >= 6 && (d[4] == '7' || d[4] == '9') && d[5] == 'a') return gif(d);
        if (startsWith(d, 0, 'B', 'M')) return bmp(d);
        if (startsWith(d, 0, 'R', 'I', 'F', 'F') && startsWith(d, 8, 'W', 'E', 'B', 'P')) return webp(d);
        if (startsWith(d, 0, 'I', 'I', 42, 0) || startsWith(d, 0, 'M', 'M', 0, 42))
            throw new BadImageException("unsupported format: TIFF");
        // no byte of the file in the message: it goes to the errors file and the logs, and the file may be any file the
        // service can read (audit #23)
        throw new BadImageException("unknown image format (" + d.length + " bytes, not JPEG, PNG, GIF, BMP or WebP)");
    }

    // ---- JPEG: markers up to the first SOS; size from the first SOFn, orientation from the first Exif APP1.

    private static Header jpeg(byte[] d) {
        int pos = 2, orientation = 1, width = -1, height = -1, components = 0;
        boolean exifSeen = false, progressive = false;
        while (true) {
            while (pos < d.length && u8(d, pos) != 0xFF) pos++;
            while (pos < d.length && u8(d, pos) == 0xFF) pos++;
            if (pos >= d.length) throw new BadImageException("JPEG header truncated before the first scan");
            int marker = u8(d, pos++);
            if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
            if (marker == 0xD9) throw new BadImageException("JPEG ends (EOI) before any scan");
            if (pos + 2 > d.length) throw new BadImageException("JPEG header truncated in marker 0xFF" + Integer.toHexString(marker));
            int length = u16be(d, pos);
            if (length < 2 || pos + length > d.length)
                throw new BadImageException("JPEG header truncated or corrupt in marker 0xFF" + Integer.toHexString(marker));
            int body = pos + 2, bodyLength = length - 2;
            if (marker == 0xDA) break;
            if (marker == 0xE1 && !exifSeen && bodyLength >= 6 && startsWith(d, body, 'E', 'x', 'i', 'f', 0, 0)) {
                exifSeen = true;
                orientation = exifOrientation(d, body + 6, body + bodyLength);
            } else if (isSof(marker) && width < 0) {
                if (bodyLength < 6) throw new BadImageException("JPEG SOF segment too short");
                height = u16be(d, body + 1);
                width = u16be(d, body + 3);
                components = u8(d, body + 5);
                progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
            }
            pos += length;
        }
        if (width < 0) throw new BadImageException("JPEG has no frame header (SOF) before its first scan");
        if (components != 1 && components != 3 && components != 4)
            throw new BadImageException("JPEG with " + components + " components is not supported");
        return new Header(info(ImageFormat.JPEG, width, height, orientation), components, null, progressive);
    }

    private static boolean isSof(int m) {
        return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    }

    // ---- PNG: IHDR first; eXIf anywhere in the chunk list (Pillow reads it before and after IDAT).

    private static Header png(byte[] d) {
        if (d.length < 33 || !startsWith(d, 12, 'I', 'H', 'D', 'R')) throw new BadImageException("PNG without an IHDR chunk");
        long width = u32be(d, 16), height = u32be(d, 20);
        if (width > Integer.MAX_VALUE || height > Integer.MAX_VALUE)
            throw new BadImageException("PNG size " + width + "x" + height + " out of range");
        int orientation = 1;
        long pos = 8;
        while (pos + 12 <= d.length) {
            long length = u32be(d, (int) pos);
            int type = (int) pos + 4;
            if (startsWith(d, type, 'e', 'X', 'I', 'f') && pos + 8 + length <= d.length) {
                int start = type + 4;
                if (length >= 6 && startsWith(d, start, 'E', 'x', 'i', 'f', 0, 0)) start += 6;
                orientation = exifOrientation(d, start, (int) (type + 4 + length));
                break;
            }
            if (startsWith(d, type, 'I', 'E', 'N', 'D')) break;
            pos += 12 + length;
        }
        return new Header(info(ImageFormat.PNG, (int) width, (int) height, orientation), 0, null);
    }

    // ---- GIF: logical screen size is the image size (as Pillow); the first image descriptor places frame 0.

    private static Header gif(byte[] d) {
        if (d.length < 13) throw new BadImageException("GIF header truncated");
        int width = u16le(d, 6), height = u16le(d, 8);
        ImageInfo info = info(ImageFormat.GIF, width, height, 1);
        int pos = 13, transparent = -1;
        if ((u8(d, 10) & 0x80) != 0) pos += 3 << ((u8(d, 10) & 7) + 1);
        while (pos < d.length) {
            int block = u8(d, pos);
            if (block == 0x2C) {
                if (pos + 10 > d.length) break;
                var frame = new Header.GifFrame(u16le(d, pos + 1), u16le(d, pos + 3), u16le(d, pos + 5), u16le(d, pos + 7), transparent);
                if ((long) frame.width() * frame.height() > (long) width * height)
                    throw new BadImageException("GIF first frame " + frame.width() + "x" + frame.height() + " is larger than its screen " + width + "x" + height);
                return new Header(info, 0, frame);
            }
            if (block != 0x21 || pos + 2 > d.length) break;
            int label = u8(d, pos + 1);
            pos += 2;
            if (label == 0xF9 && pos + 5 <= d.length && u8(d, pos) == 4) {
                transparent = (u8(d, pos + 1) & 1) != 0 ? u8(d, pos + 4) : -1;
            }
            while (pos < d.length && u8(d, pos) != 0) pos += 1 + u8(d, pos);
            pos++;
        }
        throw new BadImageException("GIF without an image descriptor (truncated?)");
    }

    // ---- BMP: BITMAPCOREHEADER (OS/2, 16-bit sizes) or BITMAPINFOHEADER and later (signed 32-bit sizes).

    private static Header bmp(byte[] d) {
        if (d.length < 26) throw new BadImageException("BMP header truncated");
        long dibSize = u32le(d, 14);
        if (dibSize == 12) return new Header(info(ImageFormat.BMP, u16le(d, 18), u16le(d, 20), 1), 0, null);
        int width = (int) u32le(d, 18), height = (int) u32le(d, 22);
        if (height == Integer.MIN_VALUE) throw new BadImageException("BMP height out of range");
        return new Header(info(ImageFormat.BMP, width, Math.abs(height), 1), 0, null);
    }

    // ---- WebP: VP8 (lossy), VP8L (lossless) or VP8X (extended: canvas size, EXIF chunk).

    private static Header webp(byte[] d) {
        if (d.length < 30) throw new BadImageException("WebP header truncated");
        long riffBytes = u32le(d, 4) + 8, firstChunkBytes = u32le(d, 16) + 20;
        if (riffBytes > d.length || firstChunkBytes > d.length)
            throw new BadImageException("WebP truncated: its RIFF header gives " + Math.max(riffBytes, firstChunkBytes)
                    + " bytes, the file has " + d.length);
        int width, height, orientation = 1;
        if (startsWith(d, 12, 'V', 'P', '8', ' ')) {
            if (!startsWith(d, 23, 0x9D, 0x01, 0x2A)) throw new BadImageException("WebP VP8 frame without a start code");
            width = u16le(d, 26) & 0x3FFF;
            height = u16le(d, 28) & 0x3FFF;
        } else if (startsWith(d, 12, 'V', 'P', '8', 'L')) {
            if (u8(d, 20) != 0x2F) throw new BadImageException("WebP VP8L stream without its signature");
            long bits = u32le(d, 21);
            width = (int) (bits & 0x3FFF) + 1;
            height = (int) ((bits >>> 14) & 0x3FFF) + 1;
        } else if (startsWith(d, 12, 'V', 'P', '8', 'X')) {
            width = u24le(d, 24) + 1;
            height = u24le(d, 27) + 1;
            long pos = 12;
            boolean exifSeen = false, frameSeen = false;
            while (pos + 8 <= d.length && !(exifSeen && frameSeen)) {
                long size = u32le(d, (int) pos + 4);
                if (!exifSeen && startsWith(d, (int) pos, 'E', 'X', 'I', 'F') && pos + 8 + size <= d.length) {
                    int start = (int) pos + 8;
                    if (size >= 6 && startsWith(d, start, 'E', 'x', 'i', 'f', 0, 0)) start += 6;
                    orientation = exifOrientation(d, start, (int) (pos + 8 + size));
                    exifSeen = true;
                } else if (!frameSeen && (startsWith(d, (int) pos, 'V', 'P', '8', ' ') || startsWith(d, (int) pos, 'V', 'P', '8', 'L'))) {
                    checkFrameFitsCanvas(d, (int) pos, width, height);
                    frameSeen = true;
                }
                pos += 8 + size + (size & 1);
            }
        } else {
            throw new BadImageException("WebP with unknown first chunk " + hex(d, 16).substring(24));
        }
        return new Header(info(ImageFormat.WEBP, width, height, orientation), 0, null);
    }

    /**
     * The image frame of a still VP8X file (its first top-level VP8 or VP8L chunk, at {@code chunk}) must have the
     * canvas's size, as libwebp requires. ImageIO's WebP reader would otherwise decode the frame at the size its own
     * header claims: a 37x23 canvas holding a 16383x16383 frame took it 10 s of CPU and the memory of the large size,
     * past the decode budget that the canvas was checked against (the image fuzzer's finding). An animation's frames
     * are in ANMF chunks, not here.
     */
    private static void checkFrameFitsCanvas(byte[] d, int chunk, int canvasWidth, int canvasHeight) {
        int payload = chunk + 8, frameWidth, frameHeight;
        if (startsWith(d, chunk, 'V', 'P', '8', ' ')) {
            if (payload + 10 > d.length || !startsWith(d, payload + 3, 0x9D, 0x01, 0x2A))
                throw new BadImageException("WebP VP8 frame without a start code");
            frameWidth = u16le(d, payload + 6) & 0x3FFF;
            frameHeight = u16le(d, payload + 8) & 0x3FFF;
        } else {
            if (payload + 5 > d.length || u8(d, payload) != 0x2F) throw new BadImageException("WebP VP8L stream without its signature");
            long bits = u32le(d, payload + 1);
            frameWidth = (int) (bits & 0x3FFF) + 1;
            frameHeight = (int) ((bits >>> 14) & 0x3FFF) + 1;
        }
        if (frameWidth != canvasWidth || frameHeight != canvasHeight)
            throw new BadImageException("WebP frame of " + frameWidth + "x" + frameHeight + " differs from its canvas of "
                    + canvasWidth + "x" + canvasHeight);
    }

    /**
     * Tag 0x0112 of IFD0 in the TIFF structure at {@code [start, end)}, or 1 when absent, out of 1..8 or
     * malformed (a bad EXIF block never fails the image, as in Pillow's {@code exif_transpose}).
     */
    static int exifOrientation(byte[] d, int start, int end) {
        if (end > d.length || end - start < 8) return 1;
        boolean le;
        if (startsWith(d, start, 'I', 'I', 42, 0)) le = true;
        else if (startsWith(d, start, 'M', 'M', 0, 42)) le = false;
        else return 1;
        long ifd = start + (le ? u32le(d, start + 4) : u32be(d, start + 4));
        if (ifd + 2 > end) return 1;
        int count = le ? u16le(d, (int) ifd) : u16be(d, (int) ifd);
        for (int i = 0; i < count; i++) {
            int e = (int) ifd + 2 + 12 * i;
            if (e + 12 > end) return 1;
            int tag = le ? u16le(d, e) : u16be(d, e);
            if (tag != 0x0112) continue;
            int type = le ? u16le(d, e + 2) : u16be(d, e + 2);
            long value = switch (type) {
                case 3 -> le ? u16le(d, e + 8) : u16be(d, e + 8);
                case 4 -> le ? u32le(d, e + 8) : u32be(d, e + 8);
                default -> 1;
            };
            return value >= 1 && value <= 8 ? (int) value : 1;
        }
        return 1;
    }

    private static ImageInfo info(ImageFormat format, int width, int height, int orientation) {
        if (width <= 0 || height <= 0) throw new BadImageException(format + " header gives an empty image: " + width + "x" + height);
        return new ImageInfo(format, width, height, orientation);
    }

    private static boolean startsWith(byte[] d, int at, int... magic) {
        if (at < 0 || at + magic.length > d.length) return false;
        for (int i = 0; i < magic.length; i++) if (u8(d, at + i) != (magic[i] & 0xFF)) return false;
        return true;
    }

    private static String hex(byte[] d, int n) {
        var sb = new StringBuilder();
        for (int i = 0; i < Math.min(n, d.length); i++) sb.append(String.format("%02x", d[i]));
        return sb.toString();
    }

    private static int u8(byte[] d, int i) { return d[i] & 0xFF; }

    private static int u16be(byte[] d, int i) { return u8(d, i) << 8 | u8(d, i + 1); }

    private static int u16le(byte[] d, int i) { return u8(d, i) | u8(d, i + 1) << 8; }

    private static int u24le(byte[] d, int i) { return u16le(d, i) | u8(d, i + 2) << 16; }

    private static long u32be(byte[] d, int i) { return (long) u16be(d, i) << 16 | u16be(d, i + 2); }

    private static long u32le(byte[] d, int i) { return u16le(d, i) | (long) u16le(d, i + 2) << 16; }
}
