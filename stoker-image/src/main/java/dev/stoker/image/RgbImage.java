package dev.stoker.image;

/**
 * An 8-bit RGB image in row-major HWC order ({@code data[(y*width + x)*3 + c]}), what Pillow's
 * {@code np.asarray(img.convert("RGB"))} holds. Decoders produce it; the Qwen-VL transform reads it.
 */
public record RgbImage(int width, int height, byte[] data) {
    public RgbImage {
        if (width <= 0 || height <= 0) throw new IllegalArgumentException("empty image " + width + "x" + height);
        if (data.length < (long) width * height * 3)
            throw new IllegalArgumentException("buffer of " + data.length + " bytes is too small for " + width + "x" + height);
    }

    public int pixelCount() { return width * height; }

    /** Channel {@code c} of pixel (x, y), unsigned. */
    public int sample(int x, int y, int c) { return data[(y * width + x) * 3 + c] & 0xFF; }
}
