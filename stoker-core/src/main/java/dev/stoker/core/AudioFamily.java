package dev.stoker.core;

/**
 * The three Qwen audio families' feature-extractor settings and their integer rules: how many log-mel frames a clip
 * of {@code n} samples at 16 kHz gets, how the Hugging Face processor pads it, and how many audio tokens those frames
 * become. Pure functions of sample counts, so that packing's cost model, {@code validate} and {@code plan} count
 * tokens from a clip's duration without decoding it.
 *
 * <p>Sources (transformers 5.18.0): {@code WhisperFeatureExtractor.__call__} (the mask is the sample mask taken every
 * {@code hop_length} samples, its last entry dropped when the padded length is not a multiple of the hop), and
 * {@code processing_qwen2_audio.py} (padding "max_length", 30 s), {@code processing_qwen2_5_omni.py} ("Support
 * 'max_length' padding only here", chunk_length 300 s), {@code processing_qwen3_omni_moe.py} ({@code padding=True},
 * {@code truncation=False}, {@code _get_feat_extract_output_lengths} with {@code n_window} 50). Python's {@code //}
 * floors, hence {@link Math#floorDiv} (a 100-frame multiple gives Qwen3-Omni's remainder term 0, not 1).
 */
public enum AudioFamily {
    /** Qwen2-Audio: every clip padded (and truncated) to 30 s; ≈ 25 tokens per second. */
    QWEN2_AUDIO("qwen2-audio", 30),
    /** Qwen2.5-Omni: every clip padded (and truncated) to 300 s; the same token rule as Qwen2-Audio. */
    QWEN2_5_OMNI("qwen2.5-omni", 300),
    /**
     * Qwen3-Omni: padded to the longest clip of the processor's call, never truncated; ≈ 13 tokens per second. A clip
     * alone (the processor called for one sample) is not padded at all.
     */
    QWEN3_OMNI("qwen3-omni", 300);

    /** {@code sampling_rate} (the same as stoker-audio's {@code AudioDecoder.SAMPLE_RATE_HZ}). */
    public static final int SAMPLE_RATE_HZ = 16_000;
    /** WhisperFeatureExtractor's {@code hop_length}: 100 frames per second at 16 kHz. */
    public static final int HOP_SAMPLES = 160;
    /** {@code feature_size}: mel bins in every family's preprocessor_config.json. */
    public static final int MEL_BINS = 128;
    /** {@code n_fft}. */
    public static final int N_FFT = 400;
    /** Qwen3-Omni's {@code n_window}: the encoder's windows are {@code 2·n_window} = 100 frames. */
    public static final int QWEN3_N_WINDOW = 50;

    /** The name {@code --processor} uses. */
    public final String processorName;
    /** {@code chunk_length} in seconds. */
    public final int chunkSeconds;

    AudioFamily(String processorName, int chunkSeconds) {
        this.processorName = processorName;
        this.chunkSeconds = chunkSeconds;
    }

    /** {@code n_samples}: {@code chunk_length · 16000}. */
    public long chunkSamples() { return (long) chunkSeconds * SAMPLE_RATE_HZ; }

    /** {@code nb_max_frames}: {@code n_samples / hop_length}. */
    public int maxFrames() { return (int) (chunkSamples() / HOP_SAMPLES); }

    /**
     * The samples the Hugging Face processor keeps of a clip of {@code samples}: Qwen2-Audio and Qwen2.5-Omni truncate
     * to their chunk ({@code truncation=True} by default), Qwen3-Omni keeps all.
     */
    public long keptSamples(long samples) {
        requireSamples(samples);
        return this == QWEN3_OMNI ? samples : Math.min(samples, chunkSamples());
    }

    /**
     * The length the processor pads a clip of {@code samples} to when it is alone in the call: the chunk for
     * Qwen2-Audio and Qwen2.5-Omni ("max_length"), the clip's own length for Qwen3-Omni ("longest").
     */
    public long paddedSamples(long samples) {
        requireSamples(samples);
        return this == QWEN3_OMNI ? samples : chunkSamples();
    }

    /**
     * As {@link #paddedSamples(long)} for a clip beside others in one processor call whose longest has
     * {@code longestInCall} samples: Qwen3-Omni pads to that longest ({@code padding=True}), the others to their chunk
     * as always.
     */
    public long paddedSamples(long samples, long longestInCall) {
        requireSamples(samples);
        if (longestInCall < samples) {
            throw new IllegalArgumentException("the call's longest clip (" + longestInCall + ") is shorter than this one (" + samples + ")");
        }
        return this == QWEN3_OMNI ? longestInCall : chunkSamples();
    }

    /**
     * As {@link #melFrames(long)} for a clip beside others in one processor call: under Qwen3-Omni a clip shorter
     * than the call's longest is zero-padded and keeps {@code ceil(n/160)} frames, alone {@code floor(n/160)}.
     */
    public int melFrames(long samples, long longestInCall) {
        return maskFrames(keptSamples(samples), paddedSamples(samples, longestInCall));
    }

    /**
     * The frames of a clip of {@code samples} that the processor marks valid ({@code feature_attention_mask.sum()})
     * when it is alone in the call: {@link #maskFrames} of its kept samples in its padded length. This is the
     * {@code L} the token rule takes, and the frames Stoker serves.
     */
    public int melFrames(long samples) {
        return maskFrames(keptSamples(samples), paddedSamples(samples));
    }

    /**
     * WhisperFeatureExtractor's valid-frame count for {@code samples} real samples padded to {@code paddedSamples}:
     * the sample mask taken every 160 samples ({@code ceil(samples/160)} ones), cut to {@code floor(padded/160)}
     * frames. So a clip padded by the processor has {@code ceil(n/160)} valid frames, a clip not padded
     * {@code floor(n/160)}.
     */
    public static int maskFrames(long samples, long paddedSamples) {
        requireSamples(samples);
        if (paddedSamples < samples) throw new IllegalArgumentException("padded " + paddedSamples + " < " + samples);
        return (int) Math.min(ceilDiv(samples, HOP_SAMPLES), paddedSamples / HOP_SAMPLES);
    }

    /** The frames the feature extractor computes for a padded length: {@code floor(padded/160)}. */
    public static int totalFrames(long paddedSamples) {
        requireSamples(paddedSamples);
        return (int) (paddedSamples / HOP_SAMPLES);
    }

    /**
     * The audio tokens {@code melFrames} valid frames become (the {@code <|AUDIO|>} / {@code <|audio_pad|>} count):
     * Qwen2-Audio and Qwen2.5-Omni {@code ((L-1)//2+1-2)//2+1}; Qwen3-Omni
     * {@code (((L%100-1)//2+1-1)//2+1-1)//2+1 + 13·(L//100)}.
     */
    public int tokens(int melFrames) {
        if (melFrames < 0) throw new IllegalArgumentException("melFrames " + melFrames);
        return this == QWEN3_OMNI ? qwen3OmniTokens(melFrames) : qwen2AudioTokens(melFrames);
    }

    /** The tokens of a clip of {@code samples} alone in the processor's call: {@code tokens(melFrames(samples))}. */
    public int tokensForSamples(long samples) { return tokens(melFrames(samples)); }

    /** Qwen2-Audio's and Qwen2.5-Omni's rule (two stride-2 steps). */
    public static int qwen2AudioTokens(int melFrames) {
        int afterConv = Math.floorDiv(melFrames - 1, 2) + 1;
        return Math.floorDiv(afterConv - 2, 2) + 1;
    }

    /** Qwen3-Omni's {@code _get_feat_extract_output_lengths} with {@code n_window} 50. */
    public static int qwen3OmniTokens(int melFrames) {
        int chunk = QWEN3_N_WINDOW * 2;
        int leave = melFrames % chunk;
        int feat = Math.floorDiv(leave - 1, 2) + 1;
        return Math.floorDiv(Math.floorDiv(feat - 1, 2) + 1 - 1, 2) + 1 + (melFrames / chunk) * 13;
    }

    /**
     * The 16 kHz samples of a clip of {@code seconds} as known before decoding (a header's duration):
     * {@code round(seconds·16000)}, an estimate; the decoded count is the exact one (the resamplers' output lengths
     * differ by a sample or two).
     */
    public static long samplesForSeconds(double seconds) {
        if (!(seconds >= 0) || Double.isInfinite(seconds)) throw new IllegalArgumentException("seconds " + seconds);
        return Math.round(seconds * SAMPLE_RATE_HZ);
    }

    /** {@link #melFrames} of a clip known by its duration only: {@code melFrames(samplesForSeconds(seconds))}. */
    public int melFramesForSeconds(double seconds) { return melFrames(samplesForSeconds(seconds)); }

    /** The family {@code --processor NAME} names, or null. */
    public static AudioFamily byProcessorName(String name) {
        for (AudioFamily f : values()) if (f.processorName.equals(name)) return f;
        return null;
    }

    private static long ceilDiv(long a, long b) { return -Math.floorDiv(-a, b); }

    private static void requireSamples(long samples) {
        if (samples < 1) throw new IllegalArgumentException("a clip has at least one sample: " + samples);
    }
}
