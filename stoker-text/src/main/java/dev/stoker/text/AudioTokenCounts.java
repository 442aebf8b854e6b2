package dev.stoker.text;

import dev.stoker.core.AudioPreset;

/**
 * LLM tokens of one audio clip from its valid mel-frame count L (audio.md §5's table). Ported from transformers 5.18.0:
 * {@code Qwen2AudioProcessor._process_audio} and {@code Qwen2_5OmniProcessor.__call__} ({@code ((L-1)//2+1-2)//2+1}),
 * {@code processing_qwen3_omni_moe._get_feat_extract_output_lengths} ({@code n_window} 50); fixtures made by
 * {@code tools/hf-check/audio_text_check.py} hold them.
 *
 * <p>A package-private copy: branch audiofeat puts the same formulas in stoker-audio as public static methods; once
 * both are merged this class should call those (or go).
 */
final class AudioTokenCounts {
    /** Qwen3-Omni's audio encoder window, in mel frames ({@code n_window·2}, {@code n_window} 50). */
    static final int QWEN3_WINDOW_FRAMES = 100;

    private AudioTokenCounts() {}

    /** Tokens of a clip of {@code melFrames} valid frames under {@code preset}'s rule. */
    static long tokens(AudioPreset preset, long melFrames) {
        if (melFrames < 1) throw new IllegalArgumentException("an audio clip needs at least one mel frame, got " + melFrames);
        return switch (preset.audioTokenRule()) {
            case STRIDE_4 -> stride4(melFrames);
            case QWEN3_WINDOWED -> qwen3Windowed(melFrames);
        };
    }

    /** {@code ((L-1)//2 + 1 - 2)//2 + 1}, Python floor division (L = 1 or 2 gives 0: floor of a negative half). */
    static long stride4(long melFrames) {
        long afterConv = Math.floorDiv(melFrames - 1, 2) + 1;
        return Math.floorDiv(afterConv - 2, 2) + 1;
    }

    /** {@code ((((L%100)-1)//2+1 - 1)//2+1 - 1)//2+1 + (L//100)·13}, Python floor division. */
    static long qwen3Windowed(long melFrames) {
        long rest = melFrames % QWEN3_WINDOW_FRAMES;
        long feat = Math.floorDiv(rest - 1, 2) + 1;
        long out = Math.floorDiv(Math.floorDiv(feat - 1, 2) + 1 - 1, 2) + 1;
        return out + (melFrames / QWEN3_WINDOW_FRAMES) * 13;
    }
}
