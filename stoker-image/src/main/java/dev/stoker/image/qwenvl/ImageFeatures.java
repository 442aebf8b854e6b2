package dev.stoker.image.qwenvl;

/**
 * The model inputs of one image: {@code pixel_values} as a row-major {@code rows × rowLength} float32
 * matrix and its {@code image_grid_thw} row {@code {t, gh, gw}}.
 */
public record ImageFeatures(float[] pixelValues, long[] gridThw, int rowLength) {
    public int rows() { return pixelValues.length / rowLength; }
}
