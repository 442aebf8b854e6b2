package dev.stoker.core;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The three model families Stoker prepares data for (spec §2, §13). Pixel bounds default to the
 * HF processor constructor defaults (56² … 28²·1280), which the conformance vectors use; every
 * run may override them with --min-pixels/--max-pixels.
 */
public enum ProcessorPreset {
    QWEN2_VL("qwen2-vl", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL),
    QWEN2_5_VL("qwen2.5-vl", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL),
    QWEN3_VL("qwen3-vl", 16, VisionConfig.HALF, VisionConfig.HALF, ChatFamily.QWEN3_VL);

    /** Which chat template a family renders with (§10): Qwen2-VL and 2.5-VL share one. */
    public enum ChatFamily { QWEN2_VL, QWEN3_VL }

    public static final long DEFAULT_MIN_PIXELS = 56L * 56;
    public static final long DEFAULT_MAX_PIXELS = 28L * 28 * 1280;

    private final String cliName;
    private final int patchSize;
    private final double[] mean;
    private final double[] std;
    private final ChatFamily chatFamily;

    ProcessorPreset(String cliName, int patchSize, double[] mean, double[] std, ChatFamily chatFamily) {
        this.cliName = cliName;
        this.patchSize = patchSize;
        this.mean = mean;
        this.std = std;
        this.chatFamily = chatFamily;
    }

    public String cliName() { return cliName; }

    public ChatFamily chatFamily() { return chatFamily; }

    public VisionConfig vision() { return vision(DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS); }

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
