package dev.stoker.video.sample;

import java.util.Collections;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.Set;

/**
 * Command-level video options ({@code --video-fps}, {@code --video-min-frames}, {@code --video-max-frames},
 * {@code --video-min-pixels}, {@code --video-max-pixels}, {@code --video-total-pixels}): the defaults every video item
 * gets unless it sets the key itself. A key left out takes the sampler's and family's default (the vectors' README,
 * "The stoker encode contract": {@code hf} the Hub model folders', {@code qwen-vl-utils} its constants), or a model
 * folder's {@code video_preprocessor_config.json} ({@link VideoProcessorConfig#options()}) through
 * {@link #over(VideoOptions)}.
 *
 * @param values the keys given (only the six above) and their values, each within its key's bounds
 */
public record VideoOptions(Map<VideoKey, Double> values) {
    /** The keys a command may set. */
    public static final Set<VideoKey> KEYS = Collections.unmodifiableSet(EnumSet.of(VideoKey.FPS, VideoKey.MIN_FRAMES,
            VideoKey.MAX_FRAMES, VideoKey.MIN_PIXELS, VideoKey.MAX_PIXELS, VideoKey.TOTAL_PIXELS));
    /** No option given: every default applies. */
    public static final VideoOptions DEFAULTS = new VideoOptions(Map.of());

    public VideoOptions {
        var copy = new EnumMap<VideoKey, Double>(VideoKey.class);
        for (var e : values.entrySet()) {
            if (!KEYS.contains(e.getKey()))
                throw new IllegalArgumentException(e.getKey() + " is a per-item video option; no command-level flag sets it");
            copy.put(e.getKey(), e.getKey().check(e.getKey().flag(), e.getValue()));
        }
        values = Collections.unmodifiableMap(copy);
    }

    /** This with {@code key} set to {@code value} (checked). */
    public VideoOptions with(VideoKey key, double value) {
        var m = new EnumMap<VideoKey, Double>(VideoKey.class);
        m.putAll(values);
        m.put(key, value);
        return new VideoOptions(m);
    }

    /** These options, with {@code base}'s values for the keys these leave out (command line over model folder). */
    public VideoOptions over(VideoOptions base) {
        var m = new EnumMap<VideoKey, Double>(VideoKey.class);
        m.putAll(base.values);
        m.putAll(values);
        return new VideoOptions(m);
    }

    public boolean has(VideoKey key) { return values.containsKey(key); }

    public OptionalDouble get(VideoKey key) {
        Double v = values.get(key);
        return v == null ? OptionalDouble.empty() : OptionalDouble.of(v);
    }
}
