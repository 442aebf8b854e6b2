package dev.stoker.core;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The model families Stoker prepares data for (spec §2, §13): the three Qwen-VL families, and the three audio families
 * of issue 32 ({@link #audio()}), whose image and video half is a Qwen-VL family's ({@link #visionFamily()}). Each preset's pixel bounds,
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
    QWEN3_VL("qwen3-vl", 16, VisionConfig.HALF, VisionConfig.HALF, ChatFamily.QWEN3_VL, 256L * 256, 4096L * 4096),
    /**
     * Qwen2-Audio (issue 32): audio and text only; its vision fields are Qwen2.5-VL's placeholders, never used (a record
     * with an image or a video is refused under it).
     */
    QWEN2_AUDIO("qwen2-audio", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL, 56L * 56, 28L * 28 * 16384),
    /** Qwen2.5-Omni (issue 32): audio, and images and videos through Qwen2.5-VL's image processor (the same published settings). */
    QWEN2_5_OMNI("qwen2.5-omni", 14, VisionConfig.CLIP_MEAN, VisionConfig.CLIP_STD, ChatFamily.QWEN2_VL, 56L * 56, 28L * 28 * 16384),
    /**
     * Qwen3-Omni (issue 32): audio, and images and videos through {@code Qwen2VLImageProcessor} and
     * {@code Qwen2VLVideoProcessor} with patch 16 (transformers 5.18.0 {@code image_processing_auto.py} and
     * {@code video_processing_auto.py} map {@code qwen3_omni_moe} to those classes). The published settings, Hub
     * {@code Qwen/Qwen3-Omni-30B-A3B-Instruct} {@code preprocessor_config.json} (revision 26291f79; the Thinking and
     * Captioner folders hold the same; no {@code video_preprocessor_config.json}, so the video processor reads this file
     * too): {@code image_processor_type} Qwen2VLImageProcessor, {@code patch_size} 16, {@code temporal_patch_size} 2,
     * {@code merge_size} 2, {@code image_mean}/{@code image_std} [0.5, 0.5, 0.5], {@code min_pixels} 3,136,
     * {@code max_pixels} 12,845,056. Its videos' rules: {@link #videoFamily()}.
     */
    QWEN3_OMNI("qwen3-omni", 16, VisionConfig.HALF, VisionConfig.HALF, ChatFamily.QWEN3_VL, 56L * 56, 28L * 28 * 16384);

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

    /**
     * The audio family this processor is ({@link AudioPreset}: Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni), or null for the
     * Qwen-VL processors, which take no audio.
     */
    public AudioPreset audio() {
        return switch (this) {
            case QWEN2_AUDIO -> AudioPreset.QWEN2_AUDIO;
            case QWEN2_5_OMNI -> AudioPreset.QWEN2_5_OMNI;
            case QWEN3_OMNI -> AudioPreset.QWEN3_OMNI;
            case QWEN2_VL, QWEN2_5_VL, QWEN3_VL -> null;
        };
    }

    /**
     * The Qwen-VL family whose image and video rules this processor's images and videos follow: itself for a Qwen-VL
     * processor; Qwen2.5-VL for Qwen2.5-Omni (the same {@code Qwen2VLImageProcessor} settings and video sampling); for
     * Qwen2-Audio a placeholder (Qwen2.5-VL) that no image or video reaches; for Qwen3-Omni Qwen3-VL, whose image code is
     * the same {@code Qwen2VLImageProcessor} math at patch 16 (its own {@link #vision()} settings are carried over it),
     * but whose video rules it does not share ({@link #videoFamily()}).
     */
    public ProcessorPreset visionFamily() {
        return switch (this) {
            case QWEN2_AUDIO, QWEN2_5_OMNI -> QWEN2_5_VL;
            case QWEN3_OMNI -> QWEN3_VL;
            case QWEN2_VL, QWEN2_5_VL, QWEN3_VL -> this;
        };
    }

    /**
     * The family whose video rules this processor's videos follow ({@code VideoPlanner}): {@link #visionFamily()} but for
     * the Omni families, which are their own: Qwen2.5-VL's sampling and per-frame resize ({@code Qwen2VLVideoProcessor},
     * Qwen3-Omni with patch 16), the per-frame pixel bounds their processors pass at every call
     * ({@code Qwen2_5OmniProcessorKwargs._defaults} {@code size} 128·28·28 … 768·28·28,
     * {@code Qwen3OmniMoeProcessorKwargs._defaults} 128·32·32 … 768·32·32, over the folder's), and
     * {@code video_second_per_grid} = 2 / the fps passed to the processor (2.0 when none is for Qwen2.5-Omni, 1.0 for
     * Qwen3-Omni).
     */
    public ProcessorPreset videoFamily() { return this == QWEN3_OMNI || this == QWEN2_5_OMNI ? this : visionFamily(); }

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
