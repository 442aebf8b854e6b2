package dev.stoker.encode.audio;

import dev.stoker.core.AudioPreset;
import java.util.Objects;

/**
 * How the audio clips of samples become model inputs (issue 32): the audio family ({@code --processor qwen2-audio |
 * qwen2.5-omni | qwen3-omni}) and how much of each clip's log-mel features a sample carries ({@code --audio-pad}).
 *
 * @param preset the family: its template, special ids, token rule and positions
 * @param pad    VALID (the default): each clip's valid frames only, 100 per second, with an all-ones
 *               {@code feature_attention_mask}; HF: every frame the Hugging Face processor computes for the clip alone,
 *               padding included (Qwen2-Audio to 30 s, Qwen2.5-Omni to 300 s, Qwen3-Omni to the clip itself), with its mask
 * @param useAudioInVideo the default of {@code use_audio_in_video} for a video whose item and record do not say
 *               ({@code --use-audio-in-video}): its audio track is read and interleaved with its frames
 */
public record AudioEncoding(AudioPreset preset, Pad pad, boolean useAudioInVideo) {
    /** How many frames of a clip's features are carried. */
    public enum Pad { VALID, HF }

    public AudioEncoding {
        Objects.requireNonNull(preset, "preset");
        Objects.requireNonNull(pad, "pad");
        if (useAudioInVideo && !preset.hasVision())
            throw new IllegalArgumentException("--use-audio-in-video: " + preset + " takes no video");
    }

    /** The family's encoding with {@code pad} and no video audio by default. */
    public AudioEncoding(AudioPreset preset, Pad pad) { this(preset, pad, false); }
}
