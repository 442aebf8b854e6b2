package dev.stoker.image.qwenvl;

import dev.stoker.core.SampleException;
import dev.stoker.core.VisionConfig;

/**
 * The transformers {@code smart_resize} (spec §4): picks the factor-aligned target size whose area lies
 * within [min_pixels, max_pixels] while keeping the aspect ratio as close as possible.
 *
 * <p>Bit-identical to Python: {@code round()} is half-to-even ({@link Math#rint}), divisions keep
 * Python's left-to-right order ({@code h / beta / factor}), areas are computed in {@code long}.
 *
 * <p>As the current releases have it ({@code image_processing_qwen2_vl.py} in transformers 4.57.6 and
 * {@code image_processing_pil_qwen2_vl.py} in 5.18.0, checked by tools/hf-check): an image with a side
 * under the factor is not refused but resized up to {@code min_pixels} (the spec quotes older code,
 * which raised "height:… or width:… must be larger than factor:…"), and the shrinking branch keeps each
 * side at least one factor. Only an aspect ratio over {@link #MAX_ASPECT_RATIO} is refused.
 *
 * <p>Threading: stateless.
 */
public final class SmartResize {
    /** transformers' {@code MAX_RATIO}. */
    public static final int MAX_ASPECT_RATIO = 200;

    private SmartResize() {}

    /**
     * Returns {@code {resizedHeight, resizedWidth}} for a decoded image of {@code height × width} pixels.
     *
     * @throws SampleException (stage TRANSFORM, no sample id) when the image is too elongated, or would
     *                         resize to an image larger than a Java array holds
     */
    public static int[] compute(int height, int width, VisionConfig cfg) {
        int factor = cfg.factor();
        if (height <= 0 || width <= 0) throw error("height:" + height + " or width:" + width + " is not a positive size");
        if ((double) Math.max(height, width) / Math.min(height, width) > MAX_ASPECT_RATIO)
            throw error("absolute aspect ratio must be smaller than " + MAX_ASPECT_RATIO + ", got "
                    + (double) Math.max(height, width) / Math.min(height, width));
        long hBar = (long) Math.rint((double) height / factor) * factor;
        long wBar = (long) Math.rint((double) width / factor) * factor;
        long area = (long) height * width;
        if (hBar * wBar > cfg.maxPixels()) {
            double beta = Math.sqrt((double) area / cfg.maxPixels());
            hBar = Math.max(factor, (long) Math.floor(height / beta / factor) * factor);
            wBar = Math.max(factor, (long) Math.floor(width / beta / factor) * factor);
        } else if (hBar * wBar < cfg.minPixels()) {
            double beta = Math.sqrt((double) cfg.minPixels() / area);
            hBar = (long) Math.ceil(height * beta / factor) * factor;
            wBar = (long) Math.ceil(width * beta / factor) * factor;
        }
        if (hBar <= 0 || wBar <= 0)
            throw error("height:" + height + " or width:" + width + " resizes to " + hBar + "x" + wBar
                    + " (an empty image) with factor:" + factor + ", max_pixels:" + cfg.maxPixels());
        if (hBar > Integer.MAX_VALUE / 3 || wBar > Integer.MAX_VALUE / 3 || hBar * wBar * 3 > Integer.MAX_VALUE - 8)
            throw error("height:" + height + " or width:" + width + " resizes to " + hBar + "x" + wBar
                    + ", larger than a Java array can hold");
        return new int[] {(int) hBar, (int) wBar};
    }

    private static SampleException error(String message) {
        return new SampleException(null, SampleException.Stage.TRANSFORM, message);
    }
}
