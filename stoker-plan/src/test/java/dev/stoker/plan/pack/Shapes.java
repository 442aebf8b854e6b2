package dev.stoker.plan.pack;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/** Synthetic shape indexes for the planner's tests (and the feed's accounting of packed steps, in other packages). */
public final class Shapes {
    /** The dummy image of a Qwen2-VL job: a 56×56 image, 16 patches, its 4 merged tokens between two markers. */
    public static final SampleShape DUMMY = SampleShape.of(6, 16);

    private Shapes() { }

    /**
     * Like the reference data set (make_dataset.py, max_pixels 451584): tokens 100 … 1400, of them an image of 64 …
     * 2304 patches (its patches/4 tokens plus two markers); {@code textOnlyPercent} of the samples have no image.
     */
    public static ShapeIndex referenceLike(int n, long seed, int textOnlyPercent) {
        var rnd = new SplittableRandom(seed);
        List<SampleShape> shapes = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            if (rnd.nextInt(100) < textOnlyPercent) {
                shapes.add(SampleShape.of(100 + rnd.nextInt(1301)));
                continue;
            }
            int patches = 4 * (16 + rnd.nextInt(561));
            int imageTokens = patches / 4 + 2;
            int text = Math.max(100 - imageTokens, 0) + rnd.nextInt(Math.max(1, 1400 - Math.max(100, imageTokens) + 1));
            shapes.add(SampleShape.of(Math.min(1400, imageTokens + text), patches));
        }
        return ShapeIndex.of(shapes);
    }

    /** {@code n} copies of one shape. */
    public static ShapeIndex same(int n, SampleShape shape) {
        List<SampleShape> shapes = new ArrayList<>(n);
        for (int i = 0; i < n; i++) shapes.add(shape);
        return ShapeIndex.of(shapes);
    }
}
