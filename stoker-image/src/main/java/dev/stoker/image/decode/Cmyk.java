package dev.stoker.image.decode;

/**
 * CMYK and YCCK JPEG samples to RGB, bit-exact with Pillow 9.4: Pillow opens every 4-component JPEG with rawmode
 * {@code "CMYK;I"} ("assume adobe conventions"), so it inverts the decoded samples, then {@code convert("RGB")}
 * computes {@code R = (255-K) - MULDIV255(C, 255-K)} per channel (Convert.c {@code cmyk2rgb}).
 */
final class Cmyk {
    private Cmyk() {}

    /** {@code src}: libjpeg's JCS_CMYK output (4 bytes per pixel, Adobe-inverted); {@code dst}: 3 bytes per pixel. */
    static void invertedCmykToRgb(byte[] src, byte[] dst, int pixels) {
        for (int p = 0, s = 0, d = 0; p < pixels; p++, s += 4, d += 3) {
            int nk = src[s + 3] & 0xFF;
            dst[d] = (byte) (nk - mulDiv255(255 - (src[s] & 0xFF), nk));
            dst[d + 1] = (byte) (nk - mulDiv255(255 - (src[s + 1] & 0xFF), nk));
            dst[d + 2] = (byte) (nk - mulDiv255(255 - (src[s + 2] & 0xFF), nk));
        }
    }

    private static int mulDiv255(int a, int b) {
        int t = a * b + 128;
        return ((t >> 8) + t) >> 8;
    }

    /**
     * Converts YCCK samples in place to CMYK as libjpeg's {@code ycck_cmyk_convert} does (jdcolor.c, integer
     * tables with 16 fraction bits), for decoders that hand back the undecoded colour space.
     */
    static void ycckToCmyk(byte[] px, int pixels) {
        for (int p = 0, i = 0; p < pixels; p++, i += 4) {
            int y = px[i] & 0xFF, cb = (px[i + 1] & 0xFF) - 128, cr = (px[i + 2] & 0xFF) - 128;
            int r = y + ((CR_R * cr + HALF) >> 16);
            int g = y + ((CB_G * cb + CR_G * cr + HALF) >> 16);
            int b = y + ((CB_B * cb + HALF) >> 16);
            px[i] = (byte) (255 - clamp(r));
            px[i + 1] = (byte) (255 - clamp(g));
            px[i + 2] = (byte) (255 - clamp(b));
        }
    }

    private static final int HALF = 1 << 15;
    private static final int CR_R = fix(1.40200);
    private static final int CB_B = fix(1.77200);
    private static final int CR_G = -fix(0.71414);
    private static final int CB_G = -fix(0.34414);

    private static int fix(double x) { return (int) (x * 65536 + 0.5); }

    private static int clamp(int v) { return v < 0 ? 0 : Math.min(v, 255); }
}
