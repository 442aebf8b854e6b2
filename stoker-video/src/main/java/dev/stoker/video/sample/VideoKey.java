package dev.stoker.video.sample;

/**
 * The video options a sample's video item may carry (qwen-vl-utils' spelling) and those a command sets for all
 * items, with the bounds Stoker accepts. The bounds keep every product the rules form (frames · height · width) below
 * 2^53, where double arithmetic equals Python's integer arithmetic, and refuse what no real video needs.
 */
public enum VideoKey {
    FPS("fps", "--video-fps", false, 1e-3, 1000),
    NFRAMES("nframes", null, true, 1, VideoKey.MAX_FRAMES_BOUND),
    MIN_FRAMES("min_frames", "--video-min-frames", true, 0, VideoKey.MAX_FRAMES_BOUND),
    MAX_FRAMES("max_frames", "--video-max-frames", true, 1, VideoKey.MAX_FRAMES_BOUND),
    MIN_PIXELS("min_pixels", "--video-min-pixels", false, 0, VideoKey.MAX_PIXELS_BOUND),
    MAX_PIXELS("max_pixels", "--video-max-pixels", false, 1, VideoKey.MAX_PIXELS_BOUND),
    TOTAL_PIXELS("total_pixels", "--video-total-pixels", false, 1, VideoKey.MAX_PIXELS_BOUND),
    VIDEO_START("video_start", null, false, 0, VideoKey.MAX_SECONDS),
    VIDEO_END("video_end", null, false, 0, VideoKey.MAX_SECONDS),
    RESIZED_HEIGHT("resized_height", null, true, 1, VideoKey.MAX_EDGE),
    RESIZED_WIDTH("resized_width", null, true, 1, VideoKey.MAX_EDGE),
    /** A frame list's frame rate as the processor sees it (qwen-vl-utils' {@code sample_fps}, default 2.0). */
    SAMPLE_FPS("sample_fps", null, false, 1e-3, 1000),
    /** A frame list's metadata fps (qwen-vl-utils' {@code raw_fps}, default {@code sample_fps}): Qwen3-VL's timestamps. */
    RAW_FPS("raw_fps", null, false, 1e-3, 1000);

    /** Most frames an option may ask for (2^20: 12 hours at 24 fps). */
    public static final int MAX_FRAMES_BOUND = 1 << 20;
    /** Largest pixel count an option may name (2^40). */
    public static final double MAX_PIXELS_BOUND = 1L << 40;
    /** Latest trim point, in seconds (about 116 days). */
    public static final double MAX_SECONDS = 1e7;
    /** Longest frame edge, in pixels, Stoker plans for (FFmpeg's own limit is about 16k for most codecs). */
    public static final int MAX_EDGE = 1 << 15;

    private final String jsonName;
    private final String flag;
    private final boolean whole;
    private final double min;
    private final double max;

    VideoKey(String jsonName, String flag, boolean whole, double min, double max) {
        this.jsonName = jsonName;
        this.flag = flag;
        this.whole = whole;
        this.min = min;
        this.max = max;
    }

    /** The key as a video item spells it ({@code min_pixels}). */
    public String jsonName() { return jsonName; }

    /** The command-level flag that sets its default for every item, or null where only an item may set it. */
    public String flag() { return flag; }

    /** Whether the value must be a whole number. */
    public boolean whole() { return whole; }

    /** The key whose item spelling is {@code name}, or null. */
    public static VideoKey ofJsonName(String name) {
        for (var k : values()) if (k.jsonName.equals(name)) return k;
        return null;
    }

    /**
     * Checks {@code value} for this key.
     *
     * @param where what to name in the error (the video item, or the flag)
     * @throws IllegalArgumentException naming {@code where}, the key and the bound
     */
    public double check(String where, double value) {
        if (Double.isNaN(value) || Double.isInfinite(value))
            throw new IllegalArgumentException(where + ": " + jsonName + " is " + value + ", not a finite number");
        if (whole && value != Math.rint(value))
            throw new IllegalArgumentException(where + ": " + jsonName + " is " + value + ", not a whole number");
        if (value < min || value > max)
            throw new IllegalArgumentException(where + ": " + jsonName + " is " + format(value) + ", outside " + format(min) + " … "
                    + format(max));
        return value;
    }

    static String format(double v) {
        return v == Math.rint(v) && Math.abs(v) < 1e15 ? Long.toString((long) v) : Double.toString(v);
    }

    @Override
    public String toString() { return jsonName; }
}
