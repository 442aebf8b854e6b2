package dev.stoker.plan.pack;

import java.util.Arrays;

/**
 * A sample's size as known before decoding, which is all the pack planner needs: its {@code input_ids} length as the
 * feed makes it, per image its patch count {@code t·h·w} (its {@code pixel_values} rows), and per video its patch
 * count {@code t·h·w} (its {@code pixel_values_videos} rows) with its temporal groups {@code t}. The planner reads
 * shapes from a {@link ShapeIndex} (built from {@code stoker validate}'s length index or from image headers and video
 * frame indexes), so planning a step never decodes an image or a video.
 *
 * <p>Why a video keeps {@code t}: the vision tower attends inside each temporal group of {@code h·w} patches, not over
 * the whole clip ({@code get_vision_cu_seqlens} of transformers 5.18.0's {@code vision_utils.py}: one segment of
 * {@code h·w} per group, {@code t} segments per video; 4.57.6's {@code modeling_qwen2_vl.py} writes the same
 * {@code repeat_interleave}), so its attention cost is {@code t·(h·w)²}, which {@link PackCost#videoFlops} needs.
 *
 * @param kind         {@link Kind#OK}, or what the shape index knows about a record that will not be fed:
 *                     {@link Kind#ERROR} (the record is an error) or {@link Kind#FILTERED} (a limit filters it)
 * @param tokens       input_ids length, image- and video-pad runs included; {@code >= 0}
 * @param imagePatches per image, in the sample's order, its patch count; each {@code >= 0} (an empty array: no image)
 * @param videoPatches per video kept, in the sample's order, its patch count {@code t·h·w}; each {@code >= 1} and a
 *                     multiple of its {@code videoGroups} entry (an empty array: no video)
 * @param videoGroups  per video kept, its temporal groups {@code t} (grid_thw's first column); each {@code >= 1}
 * @param clipFrames   an audio family's sample (issue 32): per clip, in placeholder order, the log-mel frames its row of
 *                     {@code input_features} is as the sample's {@code encode} makes it under the job's {@code --audio-pad}
 *                     (from the clip's header duration, as its tokens are); each {@code >= 1} (an empty array: no clip).
 *                     A start-up scan and {@code stoker validate}'s length index (format 4) know them
 */
public record SampleShape(Kind kind, int tokens, int[] imagePatches, int[] videoPatches, int[] videoGroups, int[] clipFrames) {
    /** Whether the record is fed ({@code OK}), or skipped because the shape index marks it an error or filtered. */
    public enum Kind { OK, ERROR, FILTERED }

    private static final int[] NONE = new int[0];

    /** A sample without audio clips. */
    public SampleShape(Kind kind, int tokens, int[] imagePatches, int[] videoPatches, int[] videoGroups) {
        this(kind, tokens, imagePatches, videoPatches, videoGroups, null);
    }

    public SampleShape {
        if (kind == null) throw new IllegalArgumentException("sample shape needs a kind");
        clipFrames = clipFrames == null || clipFrames.length == 0 ? NONE : clipFrames.clone();
        for (int i = 0; i < clipFrames.length; i++)
            if (clipFrames[i] < 1) throw new IllegalArgumentException("sample shape: clip " + i + " has " + clipFrames[i] + " frames");
        if (tokens < 0) throw new IllegalArgumentException("sample shape: tokens must be >= 0, got " + tokens);
        imagePatches = imagePatches == null || imagePatches.length == 0 ? NONE : imagePatches.clone();
        for (int i = 0; i < imagePatches.length; i++)
            if (imagePatches[i] < 0) throw new IllegalArgumentException("sample shape: image " + i + " has " + imagePatches[i] + " patches");
        videoPatches = videoPatches == null || videoPatches.length == 0 ? NONE : videoPatches.clone();
        videoGroups = videoGroups == null || videoGroups.length == 0 ? NONE : videoGroups.clone();
        if (videoPatches.length != videoGroups.length)
            throw new IllegalArgumentException("sample shape: " + videoPatches.length + " video patch counts but " + videoGroups.length
                    + " temporal group counts");
        for (int i = 0; i < videoPatches.length; i++)
            if (videoGroups[i] < 1 || videoPatches[i] < videoGroups[i] || videoPatches[i] % videoGroups[i] != 0)
                throw new IllegalArgumentException("sample shape: video " + i + " has " + videoPatches[i] + " patches in " + videoGroups[i]
                        + " temporal groups (needs t >= 1 and t·h·w a multiple of t)");
    }

    /** A sample without video: {@code kind}, {@code tokens} and its images' patch counts. */
    public SampleShape(Kind kind, int tokens, int[] imagePatches) { this(kind, tokens, imagePatches, null, null); }

    /** A fed sample of {@code tokens} tokens and the given images' patch counts (no video). */
    public static SampleShape of(int tokens, int... imagePatches) { return new SampleShape(Kind.OK, tokens, imagePatches); }

    /**
     * A fed sample of {@code tokens} tokens, its images' patch counts, and per video its patch count {@code t·h·w} and
     * temporal groups {@code t} (the two arrays of one length).
     */
    public static SampleShape of(int tokens, int[] imagePatches, int[] videoPatches, int[] videoGroups) {
        return new SampleShape(Kind.OK, tokens, imagePatches, videoPatches, videoGroups);
    }

    /** This shape with {@code frames} as its clips' frames ({@link #clipFrames}). */
    public SampleShape withClips(int[] frames) { return new SampleShape(kind, tokens, imagePatches, videoPatches, videoGroups, frames); }

    /** The sample's audio clips. */
    public int clips() { return clipFrames.length; }

    /** The frames of its {@code input_features} (its longest clip's row); 0 without a clip. */
    public int audioFrames() {
        int max = 0;
        for (int f : clipFrames) max = Math.max(max, f);
        return max;
    }

    /**
     * Σ imagePatches + Σ videoPatches: the sample's {@code pixel_values} and {@code pixel_values_videos} rows together,
     * what {@code --pack-patches} bounds (saturating at {@link Integer#MAX_VALUE}).
     */
    public int patches() {
        long sum = 0;
        for (int p : imagePatches) sum += p;
        for (int p : videoPatches) sum += p;
        return (int) Math.min(Integer.MAX_VALUE, sum);
    }

    /** Σ videoPatches: the sample's {@code pixel_values_videos} rows (saturating at {@link Integer#MAX_VALUE}). */
    public int videoRows() {
        long sum = 0;
        for (int p : videoPatches) sum += p;
        return (int) Math.min(Integer.MAX_VALUE, sum);
    }

    /** Whether the sample holds at least one image. */
    public boolean hasImage() { return imagePatches.length > 0; }

    /** Whether the sample holds at least one video. */
    public boolean hasVideo() { return videoPatches.length > 0; }

    /**
     * Whether the sample runs the vision tower (an image or a video): a pack with such a sample needs no dummy image,
     * and a step with one needs the vision tower on every rank.
     */
    public boolean hasVision() { return imagePatches.length > 0 || videoPatches.length > 0; }

    /** A copy of the per-image patch counts (the record's own array is never handed out). */
    @Override
    public int[] imagePatches() { return imagePatches.clone(); }

    /** A copy of the per-video patch counts. */
    @Override
    public int[] videoPatches() { return videoPatches.clone(); }

    /** A copy of the per-video temporal group counts. */
    @Override
    public int[] videoGroups() { return videoGroups.clone(); }

    /** Patches of image {@code i} without copying the array. */
    public int imagePatches(int i) { return imagePatches[i]; }

    /** Patches (t·h·w) of video {@code i} without copying the array. */
    public int videoPatches(int i) { return videoPatches[i]; }

    /** Temporal groups (t) of video {@code i} without copying the array. */
    public int videoGroups(int i) { return videoGroups[i]; }

    /** Number of images. */
    public int images() { return imagePatches.length; }

    /** Number of videos. */
    public int videos() { return videoPatches.length; }

    @Override
    public boolean equals(Object o) {
        return o instanceof SampleShape s && s.kind == kind && s.tokens == tokens && Arrays.equals(s.imagePatches, imagePatches)
                && Arrays.equals(s.videoPatches, videoPatches) && Arrays.equals(s.videoGroups, videoGroups) && Arrays.equals(s.clipFrames, clipFrames);
    }

    @Override
    public int hashCode() {
        return (((kind.hashCode() * 31 + tokens) * 31 + Arrays.hashCode(imagePatches)) * 31 + Arrays.hashCode(videoPatches)) * 31
                + Arrays.hashCode(videoGroups) * 7 + Arrays.hashCode(clipFrames);
    }

    @Override
    public String toString() {
        return kind + "(" + tokens + " tokens, patches " + Arrays.toString(imagePatches)
                + (videoPatches.length == 0 ? "" : ", video patches " + Arrays.toString(videoPatches) + " in groups " + Arrays.toString(videoGroups))
                + (clipFrames.length == 0 ? "" : ", clip frames " + Arrays.toString(clipFrames)) + ")";
    }
}
