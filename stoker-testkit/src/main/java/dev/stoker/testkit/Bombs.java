package dev.stoker.testkit;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;
import java.util.zip.Deflater;
import java.util.zip.DeflaterOutputStream;

/**
 * Decompression bombs made for tests: real, valid images of a huge size that compress to almost nothing, and fixtures
 * whose header was rewritten to claim a huge size.
 */
public final class Bombs {
    private Bombs() {}

    /**
     * A valid 8-bit RGB PNG of {@code width x height} black pixels: every row is filter 0 and zeros, deflated (a
     * 13000x13000 one is about 0.5 MB and decodes to 507 MB of pixels).
     */
    public static byte[] blackPng(int width, int height) {
        try {
            var idat = new ByteArrayOutputStream();
            var deflater = new Deflater(Deflater.BEST_COMPRESSION);
            try (var z = new DeflaterOutputStream(idat, deflater, 1 << 16)) {
                byte[] row = new byte[1 + width * 3];
                for (int y = 0; y < height; y++) z.write(row);
            } finally {
                deflater.end();
            }
            var out = new ByteArrayOutputStream();
            out.write(new byte[] {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'});
            var ihdr = java.nio.ByteBuffer.allocate(13).putInt(width).putInt(height).put((byte) 8).put((byte) 2)
                    .put((byte) 0).put((byte) 0).put((byte) 0).array();
            chunk(out, "IHDR", ihdr);
            chunk(out, "IDAT", idat.toByteArray());
            chunk(out, "IEND", new byte[0]);
            return out.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void chunk(ByteArrayOutputStream out, String type, byte[] body) throws IOException {
        byte[] t = type.getBytes(StandardCharsets.US_ASCII);
        out.write(java.nio.ByteBuffer.allocate(4).putInt(body.length).array());
        out.write(t);
        out.write(body);
        var crc = new CRC32();
        crc.update(t);
        crc.update(body);
        out.write(java.nio.ByteBuffer.allocate(4).putInt((int) crc.getValue()).array());
    }

    /** {@code jpeg} with the size of its first frame header (SOFn) rewritten to {@code width x height}. */
    public static byte[] resizedJpegHeader(byte[] jpeg, int width, int height) {
        byte[] d = jpeg.clone();
        for (int i = 2; i + 9 < d.length; i++) {
            int m = d[i + 1] & 0xFF;
            if ((d[i] & 0xFF) == 0xFF && m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
                d[i + 5] = (byte) (height >> 8);
                d[i + 6] = (byte) height;
                d[i + 7] = (byte) (width >> 8);
                d[i + 8] = (byte) width;
                return d;
            }
        }
        throw new IllegalArgumentException("no SOF marker");
    }

    /** A lossless WebP (simple VP8L) with the size in its stream header rewritten to {@code width x height} (at most 16384). */
    public static byte[] resizedVp8lHeader(byte[] webp, int width, int height) {
        byte[] d = webp.clone();
        if (d[12] != 'V' || d[13] != 'P' || d[14] != '8' || d[15] != 'L') throw new IllegalArgumentException("not a simple VP8L WebP");
        long bits = (d[21] & 0xFFL) | (d[22] & 0xFFL) << 8 | (d[23] & 0xFFL) << 16 | (d[24] & 0xFFL) << 24;
        bits = (bits & ~((1L << 28) - 1)) | (width - 1) | (long) (height - 1) << 14;
        for (int k = 0; k < 4; k++) d[21 + k] = (byte) (bits >> (8 * k));
        return d;
    }
}
