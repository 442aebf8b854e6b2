package dev.stoker.encode.audio;

import dev.stoker.core.AudioPreset;

/**
 * One sample's (or one batch's) audio inputs as a batch carries them (issue 32): {@code input_features} (clips, 128,
 * frames) float32 and {@code feature_attention_mask} (clips, frames) int32 0/1, row-major, clips in placeholder order
 * (a batch: its samples' clips one after another in batch order).
 *
 * @param inputFeatures clips · 128 · frames floats
 * @param clips         N, rows of {@code feature_attention_mask}
 * @param frames        T, the longest clip's frames (with {@code --audio-pad hf} the processor's padded length)
 * @param featureMask   clips · frames, 1 for a clip's valid frames then 0
 */
public record AudioTensors(float[] inputFeatures, int clips, int frames, int[] featureMask) {
    public AudioTensors {
        if (clips < 0 || frames < 0 || (long) clips * AudioPreset.MEL_BINS * frames != inputFeatures.length
                || (long) clips * frames != featureMask.length)
            throw new IllegalArgumentException("audio tensors of " + clips + " clips × " + frames + " frames have "
                    + inputFeatures.length + " feature values and " + featureMask.length + " mask values");
    }

    /** The audio tensors of {@code e}, or null when it has no clip. */
    public static AudioTensors of(OmniEncoder.Encoded e) {
        return e.clips() == 0 ? null : new AudioTensors(e.inputFeatures(), e.clips(), e.frames(), e.featureMask());
    }
}
