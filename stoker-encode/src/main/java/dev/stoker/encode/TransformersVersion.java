package dev.stoker.encode;

import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.image.qwenvl.ImageBackend;
import java.util.regex.Pattern;

/**
 * A transformers release, as {@code --transformers} or a model's {@code config.json} ({@code transformers_version})
 * names it: {@code MAJOR[.MINOR[.PATCH]]}, optionally with a pre- or post-release suffix ({@code 4.57.0.dev0},
 * {@code 5.0.0rc1}, {@code 5.2.post1}). It decides the {@link InputContract} a job's batches follow: releases before
 * 5.3 take the official qwen-vl-finetune tensors, 5.3 and later also read {@code mm_token_type_ids}
 * (docs/model-inputs.md §3, §7).
 *
 * <p>Only MAJOR.MINOR decides: a suffix never moves a version across a boundary ({@code 5.3.0.dev0} is a 5.3), and a
 * version without a minor means that major's current releases ({@code 5} is a 5.3 or later, {@code 4} a 4.x).
 *
 * @param major  the major version
 * @param minor  the minor version, or -1 when not given
 * @param patch  the patch version, or -1 when not given
 * @param suffix the pre- or post-release suffix as written ({@code .dev0}, {@code rc1}), or "" for none
 */
public record TransformersVersion(int major, int minor, int patch, String suffix) {
    /** The first release whose {@code get_rope_index} reads {@code mm_token_type_ids} (transformers PR #43972). */
    public static final TransformersVersion MM_TOKEN_TYPES = new TransformersVersion(5, 3, 0, "");

    private static final Pattern VERSION = Pattern.compile("(\\d{1,4})(?:\\.(\\d{1,4})(?:\\.(\\d{1,4}))?)?((?:\\.?(?:dev|rc|a|b|post))\\d{1,4})?");

    public TransformersVersion {
        if (major < 0 || minor < -1 || patch < -1 || minor == -1 && patch != -1)
            throw new IllegalArgumentException("bad version " + major + "." + minor + "." + patch);
        java.util.Objects.requireNonNull(suffix, "suffix");
    }

    /**
     * Reads {@code text} strictly: {@code MAJOR[.MINOR[.PATCH]]} with an optional {@code dev}, {@code rc}, {@code a},
     * {@code b} or {@code post} suffix and its number; IllegalArgumentException says what is wrong.
     */
    public static TransformersVersion parse(String text) {
        var m = VERSION.matcher(text);
        if (!m.matches())
            throw new IllegalArgumentException("'" + text + "' is not a transformers version: expected MAJOR[.MINOR[.PATCH]], "
                    + "optionally with a suffix such as .dev0 or rc1 (e.g. 4.57.6, 5.18, 5)");
        return new TransformersVersion(Integer.parseInt(m.group(1)), m.group(2) == null ? -1 : Integer.parseInt(m.group(2)),
                m.group(3) == null ? -1 : Integer.parseInt(m.group(3)), m.group(4) == null ? "" : m.group(4));
    }

    /** Whether this release is {@code other}'s MAJOR.MINOR or later; a version without a minor is its major's latest. */
    public boolean atLeast(TransformersVersion other) {
        if (major != other.major) return major > other.major;
        return minor == -1 || minor >= Math.max(other.minor, 0);
    }

    /** The tensors a trainer on this release takes. */
    public InputContract inputContract() {
        return atLeast(MM_TOKEN_TYPES) ? InputContract.TRANSFORMERS_5_3 : InputContract.QWEN_VL_FINETUNE;
    }

    /**
     * The first release known to load the torchvision ("fast") Qwen2-VL image processor by default: 4.57.6's
     * {@code AutoImageProcessor} forces {@code Qwen2VLImageProcessorFast} for a model saved with the slow
     * {@code Qwen2VLImageProcessor} ({@code FORCE_FAST_IMAGE_PROCESSOR}, transformers PR #39591) when torchvision is
     * installed, and 5.x resolves {@code backend=None} to torchvision when installed. Releases before 4.57 were not
     * checked here and keep PIL (docs/model-inputs.md).
     */
    public static final TransformersVersion TORCHVISION_IMAGES = new TransformersVersion(4, 57, 0, "");

    /**
     * The image processor {@code AutoProcessor.from_pretrained} loads for Qwen2/2.5/3-VL on this release, torchvision
     * installed: TORCHVISION from 4.57, else PIL.
     */
    public ImageBackend imageBackend() {
        return atLeast(TORCHVISION_IMAGES) ? ImageBackend.TORCHVISION : ImageBackend.PIL;
    }

    /** The image backend of {@code version}, or PIL (Stoker's default) for none. */
    public static ImageBackend imageBackend(TransformersVersion version) {
        return version == null ? ImageBackend.PIL : version.imageBackend();
    }

    /** The contract of {@code version}, or the default one ({@link InputContract#QWEN_VL_FINETUNE}) for none. */
    public static InputContract inputContract(TransformersVersion version) {
        return version == null ? EncodeOptions.DEFAULT_INPUT_CONTRACT : version.inputContract();
    }

    /** The version as written: {@link #parse} reads it back to an equal one. */
    @Override
    public String toString() {
        return major + (minor < 0 ? "" : "." + minor) + (patch < 0 ? "" : "." + patch) + suffix;
    }
}
