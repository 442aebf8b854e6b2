package dev.stoker.core;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The three audio-capable model families (issue 32), as {@link ProcessorPreset} holds the Qwen-VL ones: each preset's
 * special tokens (string and id), chat-template pieces, Whisper feature-extractor settings and position rules are those
 * of the family's published processor and model. The one type of the three families: it also holds the Whisper
 * feature extractor's frame rules and the audio token rules ({@link #melFrames}, {@link #tokens}), which packing's cost
 * model, {@code validate} and {@code encode} share.
 *
 * <p>Sources. Token ids: {@code Qwen/Qwen3-Omni-30B-A3B-Instruct} {@code config.json} ({@code audio_token_id} 151675,
 * {@code audio_start_token_id} 151669, {@code audio_end_token_id} 151670, {@code image_token_id} 151655,
 * {@code video_token_id} 151656, {@code vision_start_token_id} 151652, {@code position_id_per_seconds} 13); Qwen2.5-Omni's
 * {@code added_tokens.json} ({@code <|AUDIO|>} 151646, {@code <|audio_bos|>} 151647, {@code <|audio_eos|>} 151648,
 * {@code <|vision_bos|>} 151652, {@code <|vision_eos|>} 151653, {@code <|IMAGE|>} 151655, {@code <|VIDEO|>} 151656), the same
 * three audio ids for Qwen2-Audio ({@code audio_token_index} 151646). Feature extractors and padding: audio.md §5's table
 * ({@code preprocessor_config.json} copies; transformers 5.18.0 {@code processing_qwen2_audio.py} forces
 * {@code padding="max_length"} at 30 s, {@code processing_qwen2_5_omni.py} at 300 s, {@code processing_qwen3_omni_moe.py}
 * pads to the longest clip without truncation). Templates: Qwen2-Audio's is transformers 5.18.0's
 * {@code Qwen2AudioProcessor.default_chat_template}; Qwen2.5-Omni's is the one of transformers' processor test
 * ({@code tests/models/qwen2_5_omni/test_processor_qwen2_5_omni.py}), which third-party copies of the model folder's
 * {@code chat_template.json} match. Qwen3-Omni's published template was not found in the reference material: its
 * built-in rendering is the Qwen3-VL one with the audio item added and is NOT checked (use the folder's template).
 *
 * <p>Frame rules (transformers 5.18.0): {@code WhisperFeatureExtractor.__call__} (the mask is the sample mask taken every
 * {@code hop_length} samples, its last entry dropped when the padded length is not a multiple of the hop), and
 * {@code processing_qwen2_audio.py} (padding "max_length", 30 s), {@code processing_qwen2_5_omni.py} ("Support
 * 'max_length' padding only here", chunk_length 300 s), {@code processing_qwen3_omni_moe.py} ({@code padding=True},
 * {@code truncation=False}, {@code _get_feat_extract_output_lengths} with {@code n_window} 50). Python's {@code //}
 * floors, hence {@link Math#floorDiv} (a 100-frame multiple gives Qwen3-Omni's remainder term 0, not 1).
 */
public enum AudioPreset {
    QWEN2_AUDIO("qwen2-audio", PositionRule.TEXT_1D, AudioTokenRule.STRIDE_4, 30,
            "<|AUDIO|>", 151646, "<|audio_bos|>", 151647, "<|audio_eos|>", 151648,
            null, -1, null, -1, null, -1, null, -1,
            "You are a helpful assistant.", true, 0, 0, 0),
    QWEN2_5_OMNI("qwen2.5-omni", PositionRule.QWEN2_5_OMNI, AudioTokenRule.STRIDE_4, 300,
            "<|AUDIO|>", 151646, "<|audio_bos|>", 151647, "<|audio_eos|>", 151648,
            "<|IMAGE|>", 151655, "<|VIDEO|>", 151656, "<|vision_bos|>", 151652, "<|vision_eos|>", 151653,
            "You are a helpful assistant.", false, 25, 2.0, 2.0),
    QWEN3_OMNI("qwen3-omni", PositionRule.QWEN3_OMNI, AudioTokenRule.QWEN3_WINDOWED, 300,
            "<|audio_pad|>", 151675, "<|audio_start|>", 151669, "<|audio_end|>", 151670,
            "<|image_pad|>", 151655, "<|video_pad|>", 151656, "<|vision_start|>", 151652, "<|vision_end|>", 151653,
            null, false, 13, 2.0, 1.0);

    /** How a family numbers the positions of its tokens. */
    public enum PositionRule {
        /** Plain 1-D positions (Qwen2-Audio: a Qwen2 language model without M-RoPE). */
        TEXT_1D,
        /** Qwen2.5-Omni's integer 3-D M-RoPE, audio-in-video in 2 s chunks ({@code get_rope_index}, thinker). */
        QWEN2_5_OMNI,
        /** Qwen3-Omni's float 3-D M-RoPE, audio-in-video interleaved by time stamp ({@code get_rope_index}, thinker). */
        QWEN3_OMNI
    }

    /** How many LLM tokens a clip of L valid mel frames becomes. */
    public enum AudioTokenRule {
        /** {@code ((L-1)//2 + 1 - 2)//2 + 1} (two stride-2 convolutions then a stride-2 pool), about 25 per second. */
        STRIDE_4,
        /** Qwen3-Omni's windowed rule: 13 per full 100-frame window plus the remainder's stride-8 count, about 13 per second. */
        QWEN3_WINDOWED
    }

    /** Whisper log-mel settings all three share: 16 kHz, 128 mel bins, n_fft 400, hop 160 (100 frames per second). */
    public static final int SAMPLING_RATE = 16_000;
    public static final int MEL_BINS = 128;
    public static final int N_FFT = 400;
    public static final int HOP_LENGTH = 160;
    /** Qwen3-Omni's {@code n_window}: the encoder's windows are {@code 2·n_window} = 100 frames. */
    public static final int QWEN3_N_WINDOW = 50;

    private final String cliName;
    private final PositionRule positionRule;
    private final AudioTokenRule audioTokenRule;
    private final int chunkSeconds;
    private final String audioToken, audioStart, audioEnd, imageToken, videoToken, visionStart, visionEnd;
    private final long audioTokenId, audioStartId, audioEndId, imageTokenId, videoTokenId, visionStartId, visionEndId;
    private final String defaultSystem;
    private final boolean numberedAudio;
    private final int positionIdPerSecond;
    private final double secondsPerChunk;
    private final double defaultVideoFps;

    AudioPreset(String cliName, PositionRule positionRule, AudioTokenRule audioTokenRule, int chunkSeconds,
                String audioToken, long audioTokenId, String audioStart, long audioStartId, String audioEnd, long audioEndId,
                String imageToken, long imageTokenId, String videoToken, long videoTokenId,
                String visionStart, long visionStartId, String visionEnd, long visionEndId,
                String defaultSystem, boolean numberedAudio, int positionIdPerSecond, double secondsPerChunk, double defaultVideoFps) {
        this.cliName = cliName;
        this.positionRule = positionRule;
        this.audioTokenRule = audioTokenRule;
        this.chunkSeconds = chunkSeconds;
        this.audioToken = audioToken;
        this.audioTokenId = audioTokenId;
        this.audioStart = audioStart;
        this.audioStartId = audioStartId;
        this.audioEnd = audioEnd;
        this.audioEndId = audioEndId;
        this.imageToken = imageToken;
        this.imageTokenId = imageTokenId;
        this.videoToken = videoToken;
        this.videoTokenId = videoTokenId;
        this.visionStart = visionStart;
        this.visionStartId = visionStartId;
        this.visionEnd = visionEnd;
        this.visionEndId = visionEndId;
        this.defaultSystem = defaultSystem;
        this.numberedAudio = numberedAudio;
        this.positionIdPerSecond = positionIdPerSecond;
        this.secondsPerChunk = secondsPerChunk;
        this.defaultVideoFps = defaultVideoFps;
    }

    public String cliName() { return cliName; }

    public PositionRule positionRule() { return positionRule; }

    public AudioTokenRule audioTokenRule() { return audioTokenRule; }

    /** Whether the family takes images and videos too (the Omni families) or audio only (Qwen2-Audio). */
    public boolean hasVision() { return imageToken != null; }

    /**
     * Seconds the Hugging Face processor pads (and truncates) every clip to ({@code padding="max_length"}): 30 for
     * Qwen2-Audio, 300 for Qwen2.5-Omni; 0 for Qwen3-Omni, which pads to the longest clip of the call and never truncates.
     */
    public int hfPadSeconds() { return this == QWEN3_OMNI ? 0 : chunkSeconds; }

    /** {@code chunk_length} in seconds of the feature extractor (300 for Qwen3-Omni too, which does not pad to it). */
    public int chunkSeconds() { return chunkSeconds; }

    /** Most valid mel frames one clip keeps under the HF processor: {@code hfPadSeconds·100}, or none (Long.MAX_VALUE). */
    public long maxMelFrames() { return hfPadSeconds() == 0 ? Long.MAX_VALUE : hfPadSeconds() * (long) (SAMPLING_RATE / HOP_LENGTH); }

    /** The audio pad token the template writes once per clip and the processor widens: {@code <|AUDIO|>} / {@code <|audio_pad|>}. */
    public String audioToken() { return audioToken; }
    public long audioTokenId() { return audioTokenId; }
    public String audioStart() { return audioStart; }
    public long audioStartId() { return audioStartId; }
    public String audioEnd() { return audioEnd; }
    public long audioEndId() { return audioEndId; }

    /** The image pad token, or null for Qwen2-Audio (no vision). */
    public String imageToken() { return imageToken; }
    public long imageTokenId() { return requireVision(imageTokenId); }
    public String videoToken() { return videoToken; }
    public long videoTokenId() { return requireVision(videoTokenId); }
    public String visionStart() { return visionStart; }
    public long visionStartId() { return requireVision(visionStartId); }
    public String visionEnd() { return visionEnd; }
    public long visionEndId() { return requireVision(visionEndId); }

    /** The system turn the template inserts when the first message is not one, or null for none. */
    public String defaultSystem() { return defaultSystem; }

    /** Whether the template writes {@code Audio N: } before each clip and a newline after it (Qwen2-Audio). */
    public boolean numberedAudio() { return numberedAudio; }

    /** Temporal positions per second of media ({@code position_id_per_seconds}): 25 (Qwen2.5-Omni), 13 (Qwen3-Omni); 0 for 1-D. */
    public int positionIdPerSecond() { return positionIdPerSecond; }

    /** Seconds per audio/video chunk when a video's audio is interleaved ({@code seconds_per_chunk}, Qwen2.5-Omni: 2). */
    public double secondsPerChunk() { return secondsPerChunk; }

    /**
     * The frame rate the processor assumes for {@code video_second_per_grid = temporal_patch_size / fps} when the caller
     * passes none: 2.0 for Qwen2.5-Omni (hard-coded), 1.0 for Qwen3-Omni (its silent default, audio.md's trap).
     */
    public double defaultVideoFps() { return defaultVideoFps; }

    // ---- the Whisper feature extractor's frame rules and the token rules (pure functions of sample counts, so that
    // packing's cost model, validate and plan count tokens from a clip's duration without decoding it)

    /** {@code n_samples}: {@code chunk_length · 16000}. */
    public long chunkSamples() { return (long) chunkSeconds * SAMPLING_RATE; }

    /** {@code nb_max_frames}: {@code n_samples / hop_length}. */
    public int maxFrames() { return (int) (chunkSamples() / HOP_LENGTH); }

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
        return (int) Math.min(ceilDiv(samples, HOP_LENGTH), paddedSamples / HOP_LENGTH);
    }

    /** The frames the feature extractor computes for a padded length: {@code floor(padded/160)}. */
    public static int totalFrames(long paddedSamples) {
        requireSamples(paddedSamples);
        return (int) (paddedSamples / HOP_LENGTH);
    }

    /**
     * The audio tokens {@code melFrames} valid frames become (the {@code <|AUDIO|>} / {@code <|audio_pad|>} count):
     * Qwen2-Audio and Qwen2.5-Omni {@code ((L-1)//2+1-2)//2+1}; Qwen3-Omni
     * {@code (((L%100-1)//2+1-1)//2+1-1)//2+1 + 13·(L//100)}.
     */
    public int tokens(int melFrames) {
        if (melFrames < 0) throw new IllegalArgumentException("melFrames " + melFrames);
        return audioTokenRule == AudioTokenRule.QWEN3_WINDOWED ? qwen3OmniTokens(melFrames) : qwen2AudioTokens(melFrames);
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
        return Math.round(seconds * SAMPLING_RATE);
    }

    /** {@link #melFrames} of a clip known by its duration only: {@code melFrames(samplesForSeconds(seconds))}. */
    public int melFramesForSeconds(double seconds) { return melFrames(samplesForSeconds(seconds)); }

    private long requireVision(long id) {
        if (id < 0) throw new IllegalStateException(cliName + " takes no images or videos");
        return id;
    }

    /** Parses a CLI name such as {@code qwen2.5-omni}; the error lists the accepted names. */
    public static AudioPreset fromName(String name) {
        for (var p : values()) if (p.cliName.equalsIgnoreCase(name) || p.name().equalsIgnoreCase(name)) return p;
        throw new IllegalArgumentException("unknown audio processor '" + name + "'; expected one of "
                + Arrays.stream(values()).map(AudioPreset::cliName).collect(Collectors.joining(", ")));
    }

    /** The preset of a model folder's {@code config.json} {@code model_type}, or null when it is none of the three. */
    public static AudioPreset ofModelType(String modelType) {
        if (modelType == null) return null;
        return switch (modelType) {
            case "qwen2_audio" -> QWEN2_AUDIO;
            case "qwen2_5_omni", "qwen2_5_omni_thinker" -> QWEN2_5_OMNI;
            case "qwen3_omni_moe", "qwen3_omni_moe_thinker" -> QWEN3_OMNI;
            default -> null;
        };
    }

    private static long ceilDiv(long a, long b) { return -Math.floorDiv(-a, b); }

    private static void requireSamples(long samples) {
        if (samples < 1) throw new IllegalArgumentException("a clip has at least one sample: " + samples);
    }

    @Override
    public String toString() { return cliName; }
}
