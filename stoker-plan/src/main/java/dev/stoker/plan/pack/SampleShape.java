package dev.stoker.plan.pack;

import java.util.Arrays;

/**
 * A sample's size as known before decoding, which is all the pack planner needs: its {@code input_ids} length as the
 * feed makes it, and per image its patch count {@code t·h·w} (its {@code pixel_values} rows). The planner reads
 * shapes from a {@link ShapeIndex} (built from {@code stoker validate}'s length index or from image headers), so
 * planning a step never decodes an image.
 *
 * @param kind         {@link Kind#OK}, or what the shape index knows about a record that will not be fed:
 *                     {@link Kind#ERROR} (the record is an error) or {@link Kind#FILTERED} (a limit filters it)
 * @param tokens       input_ids length, image-pad runs included; {@code >= 0}
 * @param imagePatches per image, in the sample's order, its patch count; each {@code >= 0} (an empty array: text only)
 */
public record SampleShape(Kind kind, int tokens, int[] imagePatches) {
    /** Whether the record is fed ({@code OK}), or skipped because the shape index marks it an error or filtered. */
    public enum Kind { OK, ERROR, FILTERED }

    private static final int[] NO_IMAGES = new int[0];

    public SampleShape {
        if (kind == null) throw new IllegalArgumentException("sample shape needs a kind");
        if (tokens < 0) throw new IllegalArgumentException("sample shape: tokens must be >= 0, got " + tokens);
        imagePatches = imagePatches == null || imagePatches.length == 0 ? NO_IMAGES : imagePatches.clone();
        for (int i = 0; i < imagePatches.length; i++)
            if (imagePatches[i] < 0) throw new IllegalArgumentException("sample shape: image " + i + " has " + imagePatches[i] + " patches");
    }

    /** A fed sample of {@code tokens} tokens and the given images' patch counts. */
    public static SampleShape of(int tokens, int... imagePatches) { return new SampleShape(Kind.OK, tokens, imagePatches); }

    /** Σ imagePatches: the sample's {@code pixel_values} rows (saturating at {@link Integer#MAX_VALUE}). */
    public int patches() {
        long sum = 0;
        for (int p : imagePatches) sum += p;
        return (int) Math.min(Integer.MAX_VALUE, sum);
    }

    /** Whether the sample holds at least one image. */
    public boolean hasImage() { return imagePatches.length > 0; }

    /** A copy of the per-image patch counts (the record's own array is never handed out). */
    @Override
    public int[] imagePatches() { return imagePatches.clone(); }

    /** Patches of image {@code i} without copying the array. */
    public int imagePatches(int i) { return imagePatches[i]; }

    /** Number of images. */
    public int images() { return imagePatches.length; }

    @Override
    public boolean equals(Object o) {
        return o instanceof SampleShape s && s.kind == kind && s.tokens == tokens && Arrays.equals(s.imagePatches, imagePatches);
    }

    @Override
    public int hashCode() { return (kind.hashCode() * 31 + tokens) * 31 + Arrays.hashCode(imagePatches); }

    @Override
    public String toString() { return kind + "(" + tokens + " tokens, patches " + Arrays.toString(imagePatches) + ")"; }
}
