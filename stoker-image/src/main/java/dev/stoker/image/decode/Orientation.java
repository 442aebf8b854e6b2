package dev.stoker.image.decode;

import dev.stoker.image.RgbImage;

/** Applies an EXIF orientation to pixels, as Pillow's {@code ImageOps.exif_transpose} maps 2..8 to a transpose. */
final class Orientation {
    private Orientation() {}

    /**
     * Returns the upright image: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270,
     * 7 TRANSVERSE, 8 ROTATE_90 (Pillow's rotations are counter-clockwise); 1 returns {@code src} itself.
     */
    static RgbImage apply(RgbImage src, int orientation) {
        if (orientation == 1) return src;
        int w = src.width(), h = src.height();
        boolean swap = orientation >= 5;
        int ow = swap ? h : w, oh = swap ? w : h;
        byte[] in = src.data(), out = new byte[ow * oh * 3];
        int o = 0;
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++, o += 3) {
                int sx, sy;
                switch (orientation) {
                    case 2 -> { sx = w - 1 - x; sy = y; }
                    case 3 -> { sx = w - 1 - x; sy = h - 1 - y; }
                    case 4 -> { sx = x; sy = h - 1 - y; }
                    case 5 -> { sx = y; sy = x; }
                    case 6 -> { sx = y; sy = h - 1 - x; }
                    case 7 -> { sx = w - 1 - y; sy = h - 1 - x; }
                    case 8 -> { sx = w - 1 - y; sy = x; }
                    default -> throw new IllegalArgumentException("EXIF orientation " + orientation);
                }
                int i = (sy * w + sx) * 3;
                out[o] = in[i];
                out[o + 1] = in[i + 1];
                out[o + 2] = in[i + 2];
            }
        }
        return new RgbImage(ow, oh, out);
    }
}
