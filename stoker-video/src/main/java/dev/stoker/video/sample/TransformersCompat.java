package dev.stoker.video.sample;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * Which transformers release's video rules a plan follows where releases differ (the vectors' README, "Differences
 * between transformers 5.18.0 and 4.57.6"). For the plan they differ in two places: Qwen2.5-VL's
 * {@code second_per_grid_ts} (5.18: 2 / the sampled fps; 4.57: 2 / the fps passed, 2.0 when none) and Qwen3-VL frames
 * smaller than 32 px (5.18 scales them up, 4.57 raises). The encode module maps {@code --transformers} onto this.
 */
public enum TransformersCompat {
    /** transformers 5.18.0, the default: what a new install gets. */
    V5_18("5.18"),
    /** transformers 4.57.6. */
    V4_57("4.57");

    private final String version;

    TransformersCompat(String version) { this.version = version; }

    /** The version as {@code --transformers} spells it: {@code 5.18}, {@code 4.57}. */
    public String version() { return version; }

    /** Parses {@code 5.18} / {@code 4.57} (a patch level such as {@code 5.18.0} is accepted); the error lists both. */
    public static TransformersCompat fromName(String name) {
        for (var c : values()) if (c.version.equals(name) || name.startsWith(c.version + ".")) return c;
        throw new IllegalArgumentException("unknown transformers version '" + name + "' for the video rules; expected one of "
                + Arrays.stream(values()).map(TransformersCompat::version).collect(Collectors.joining(", ")));
    }

    @Override
    public String toString() { return version; }
}
