package dev.stoker.video.sample;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Collections;
import java.util.EnumMap;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * The per-item video options of one sample's video item ({@code {"type": "video", "video": "a.mp4", "fps": 1,
 * "max_pixels": 50176}}), as qwen-vl-utils spells them: an immutable map from {@link VideoKey} to a checked number.
 * They override the command-level {@link VideoOptions} for that item; which keys a sampler accepts is the
 * {@link VideoPlanner}'s business (the {@code hf} sampler refuses those its processor has no parameter for).
 *
 * @param values the keys given and their values (numbers only, each within its key's bounds)
 */
public record VideoItemOptions(Map<VideoKey, Double> values) {
    /** An item without video options. */
    public static final VideoItemOptions NONE = new VideoItemOptions(Map.of());

    /** Fields of a video item that are not video options: the item's type and its media. */
    static final Set<String> ITEM_FIELDS = Set.of("type", "video", "video_url", "path", "url");

    public VideoItemOptions {
        var copy = new EnumMap<VideoKey, Double>(VideoKey.class);
        for (var e : values.entrySet()) copy.put(e.getKey(), e.getKey().check("video item", e.getValue()));
        values = Collections.unmodifiableMap(copy);
    }

    /**
     * Reads the video options of a video item object: every field named as a {@link VideoKey} must be a number within
     * its bounds; the item's own fields ({@code type}, {@code video}, …) are skipped; any other field is refused, since
     * qwen-vl-utils would silently ignore a misspelt option.
     *
     * @param where names the sample and the item in errors
     * @throws IllegalArgumentException naming {@code where} and the field
     */
    public static VideoItemOptions fromJson(JsonNode item, String where) {
        if (item == null || !item.isObject()) throw new IllegalArgumentException(where + ": a video item must be a JSON object");
        var map = new EnumMap<VideoKey, Double>(VideoKey.class);
        for (var e : item.properties()) {
            String name = e.getKey();
            if (ITEM_FIELDS.contains(name)) continue;
            VideoKey key = VideoKey.ofJsonName(name);
            if (key == null)
                throw new IllegalArgumentException(where + ": unknown video option '" + name + "' (known: " + known() + ")");
            JsonNode v = e.getValue();
            if (v == null || !v.isNumber())
                throw new IllegalArgumentException(where + ": " + name + " is " + v + ", not a number");
            map.put(key, key.check(where, v.asDouble()));
        }
        return new VideoItemOptions(map);
    }

    /** The same from plain values, as a JSON object's values read elsewhere give them. */
    public static VideoItemOptions of(Map<String, ? extends Number> raw, String where) {
        var map = new EnumMap<VideoKey, Double>(VideoKey.class);
        for (var e : raw.entrySet()) {
            VideoKey key = VideoKey.ofJsonName(e.getKey());
            if (key == null)
                throw new IllegalArgumentException(where + ": unknown video option '" + e.getKey() + "' (known: " + known() + ")");
            if (e.getValue() == null) throw new IllegalArgumentException(where + ": " + e.getKey() + " is null, not a number");
            map.put(key, key.check(where, e.getValue().doubleValue()));
        }
        return new VideoItemOptions(map);
    }

    public boolean has(VideoKey key) { return values.containsKey(key); }

    public OptionalDouble get(VideoKey key) {
        Double v = values.get(key);
        return v == null ? OptionalDouble.empty() : OptionalDouble.of(v);
    }

    public boolean isEmpty() { return values.isEmpty(); }

    private static String known() {
        return java.util.Arrays.stream(VideoKey.values()).map(VideoKey::jsonName).collect(Collectors.joining(", "));
    }
}
