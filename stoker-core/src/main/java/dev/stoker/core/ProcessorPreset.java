package dev.stoker.core;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The three model families Stoker prepares data for (spec §2, §13). Each preset's pixel bounds,
 * mean and std are those of the family's published processor ({@code preprocessor_config.json} on
 * the Hugging Face Hub, what {@code AutoProcessor.from_pretrained} gives): 3,136 … 12,845,056
 * pixels for Qwen2-VL and Qwen2.5-VL, 65,536 … 16,777,216 for Qwen3-VL. Every run may override
 * them with --min-pixels/--max-pixels, or take them from a model folder (--model).
 *
 * <p>Before, every family defaulted to the processor class's constructor defaults (3,136 …
 * 1,003,520, {@link #CONSTRUCTOR_MIN_PIXELS}/{@link #CONSTRUCTOR_MAX_PIXELS}), which the
 * conformance vectors' {@code qwen2vl_p14}/{@code qwen3vl_p16} settings use but no published model
 * does: a large image was downscaled where the user's own processor keeps it.
 */
public enum ProcessorPreset {
    QWEN2_VL("qwen2-vl", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL, 56L * 56, 28L * 28 * 16384),
    QWEN2_5_VL("qwen2.5-vl", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL, 56L * 56, 28L * 28 * 16384),
    QWEN3_VL("qwen3-vl", 16, VisionConfig.HALF, VisionConfig.HALF, ChatFamily.QWEN3_VL, 256L * 256, 4096L * 4096);

    /** Which chat template a family renders with (§10): Qwen2-VL and 2.5-VL share one. */
    public enum ChatFamily { QWEN2_VL, QWEN3_VL }

    /** The processor class's constructor defaults ({@code Qwen2VLImageProcessor()}), which no published model uses. */
    public static final long CONSTRUCTOR_MIN_PIXELS = 56L * 56;
    public static final long CONSTRUCTOR_MAX_PIXELS = 28L * 28 * 1280;

    private final String cliName;
    private final int patchSize;
    private final double[] mean;
    private final double[] std;
    private final ChatFamily chatFamily;
    private final long minPixels;
    private final long maxPixels;

    ProcessorPreset(String cliName, int patchSize, double[] mean, double[] std, ChatFamily chatFamily, long minPixels, long maxPixels) {
        this.cliName = cliName;
        this.patchSize = patchSize;
        this.mean = mean;
        this.std = std;
        this.chatFamily = chatFamily;
        this.minPixels = minPixels;
        this.maxPixels = maxPixels;
    }

    public String cliName() { return cliName; }

    public ChatFamily chatFamily() { return chatFamily; }

    /** The published processor's lower pixel bound (its {@code min_pixels}, or {@code size.shortest_edge}). */
    public long defaultMinPixels() { return minPixels; }

    /** The published processor's upper pixel bound (its {@code max_pixels}, or {@code size.longest_edge}). */
    public long defaultMaxPixels() { return maxPixels; }

    /** The published processor's vision config: this family's geometry, mean, std and pixel bounds. */
    public VisionConfig vision() { return vision(minPixels, maxPixels); }

    public VisionConfig vision(long minPixels, long maxPixels) {
        return new VisionConfig(patchSize, 2, 2, mean, std, minPixels, maxPixels);
    }

    /** Parses a CLI name such as {@code qwen2.5-vl}; the error lists the accepted names. */
    public static ProcessorPreset fromName(String name) {
        for (var p : values()) if (p.cliName.equalsIgnoreCase(name) || p.name().equalsIgnoreCase(name)) return p;
        throw new IllegalArgumentException("unknown processor '" + name + "'; expected one of "
                + Arrays.stream(values()).map(ProcessorPreset::cliName).collect(Collectors.joining(", ")));
    }

    @Override
    public String toString() { return cliName; }
}
