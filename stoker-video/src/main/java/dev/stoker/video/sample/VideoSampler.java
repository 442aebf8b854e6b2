package dev.stoker.video.sample;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The frame sampling and resizing rules Stoker reproduces, by the name {@code --video-sampler} takes.
 */
public enum VideoSampler {
    /**
     * The family's Hugging Face video processor with {@code do_sample_frames=True}: Qwen2/2.5 the arange rule with a
     * per-frame pixel budget, Qwen3 the rounded-linspace rule with a budget over all frames.
     */
    HF("hf"),
    /** qwen-vl-utils 0.0.14 {@code fetch_video} (frame range, even frame count, its pixel budget) in front of the processor. */
    QWEN_VL_UTILS("qwen-vl-utils"),
    /**
     * LLaMA-Factory's Qwen-VL plugins ({@code Qwen2VLPlugin}/{@code Qwen3VLPlugin} in {@code mm_plugin.py}): frames
     * picked from the header's frame count and duration, each frame first shrunk to {@code video_max_pixels} with
     * Pillow, then the family's processor with sampling off.
     */
    LLAMAFACTORY("llamafactory");

    private final String cliName;

    VideoSampler(String cliName) { this.cliName = cliName; }

    public String cliName() { return cliName; }

    /** Parses {@code hf} / {@code qwen-vl-utils}; the error lists the accepted names. */
    public static VideoSampler fromName(String name) {
        for (var s : values()) if (s.cliName.equalsIgnoreCase(name)) return s;
        throw new IllegalArgumentException("unknown video sampler '" + name + "'; expected one of "
                + Arrays.stream(values()).map(VideoSampler::cliName).collect(Collectors.joining(", ")));
    }

    @Override
    public String toString() { return cliName; }
}
