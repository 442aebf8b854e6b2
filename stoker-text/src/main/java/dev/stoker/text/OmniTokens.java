package dev.stoker.text;

import dev.stoker.core.AudioPreset;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * The audio families' placeholder expansion on token ids (issue 32): the template writes one pad per clip, image and video
 * ({@code <|audio_bos|><|AUDIO|><|audio_eos|>}, {@code <|vision_bos|><|IMAGE|><|vision_eos|>}, …) and this widens each pad to
 * the item's token count, and a video whose audio track is used ({@code use_audio_in_video}) to its video and audio tokens
 * interleaved: Qwen2.5-Omni in 2 s chunks (video chunk k, then audio chunk k), Qwen3-Omni token by token by time stamp.
 * Ported from transformers 5.18.0 {@code Qwen2_5OmniProcessor.replace_multimodal_special_tokens} /
 * {@code get_chunked_index} and {@code Qwen3OmniMoeProcessor.replace_multimodal_special_tokens}, whose float64 (numpy)
 * arithmetic for the video time stamps is kept (the model's positions use float32: {@link OmniPositions}); Qwen2-Audio's
 * {@code <|AUDIO|>} × n. Checked against those functions by {@code OmniFixturesTest} on fixtures made by
 * {@code tools/hf-check/audio_text_check.py}.
 *
 * <p>Why on ids: as {@link TokenSequenceBuilder} does for images, the pads are added tokens that the tokenizer always
 * splits out, so widening the ids equals tokenizing the widened text, without building a string of thousands of pads.
 *
 * <p>Threading: stateless.
 */
public final class OmniTokens {
    private OmniTokens() {}

    /** The size of one media item, in placeholder order: what the expansion and the positions need of it. */
    public sealed interface Media permits AudioClip, ImageGrid, VideoGrid {}

    /** An audio clip of {@code melFrames} valid mel frames (100 per second, after the HF processor's padding and truncation). */
    public record AudioClip(long melFrames) implements Media {
        public AudioClip {
            if (melFrames < 1) throw new IllegalArgumentException("an audio clip needs at least one mel frame, got " + melFrames);
        }
    }

    /** An image's {@code image_grid_thw} row (in patches, before the 2×2 merge). */
    public record ImageGrid(long t, long h, long w) implements Media {
        public ImageGrid { checkGrid(t, h, w); }
    }

    /**
     * A video's {@code video_grid_thw} row, its seconds per temporal patch ({@code video_second_per_grid}:
     * {@code temporal_patch_size / fps}, as a Python float) and, when its audio track is used, that track's valid mel
     * frames ({@code audioMelFrames} &gt; 0; 0: no audio).
     */
    public record VideoGrid(long t, long h, long w, double secondPerGrid, long audioMelFrames) implements Media {
        public VideoGrid {
            checkGrid(t, h, w);
            if (!(secondPerGrid > 0) || !Double.isFinite(secondPerGrid))
                throw new IllegalArgumentException("seconds per grid must be positive and finite, got " + secondPerGrid);
            if (audioMelFrames < 0) throw new IllegalArgumentException("audio mel frames must be >= 0, got " + audioMelFrames);
        }

        public boolean hasAudio() { return audioMelFrames > 0; }
    }

    private static void checkGrid(long t, long h, long w) {
        if (t < 1 || h < 2 || w < 2 || h % 2 != 0 || w % 2 != 0 || t > 1 << 20 || h > 1 << 16 || w > 1 << 16)
            throw new IllegalArgumentException("bad grid (" + t + ", " + h + ", " + w + "): t >= 1, h and w even and >= 2 (merge size 2)");
    }

    /** LLM tokens of a clip of {@code melFrames} valid frames under {@code preset} (audio.md §5's formulas). */
    public static long audioTokens(AudioPreset preset, long melFrames) {
        if (melFrames < 1) throw new IllegalArgumentException("an audio clip needs at least one mel frame, got " + melFrames);
        return preset.tokens(Math.toIntExact(melFrames));
    }

    /**
     * Valid mel frames the HF processor of {@code preset} keeps of a clip of {@code samples} samples at 16 kHz that is alone
     * in its processor call: {@link #melFrames(AudioPreset, long, long)} with the clip as the call's longest.
     */
    public static long melFrames(AudioPreset preset, long samples) {
        return melFrames(preset, samples, samples);
    }

    /**
     * Valid mel frames ({@code feature_attention_mask.sum()}) the HF processor of {@code preset} keeps of a clip of
     * {@code samples} samples at 16 kHz, when the longest clip of the same processor call (the sample's clips and its
     * videos' audio tracks, in SFT) has {@code longestInCall} samples. The feature extractor pads every clip to a length P
     * and masks {@code [::160]} of it, dropping the last entry when P is not a multiple of 160, so a clip keeps
     * {@code min(ceil(min(samples, P)/160), floor(P/160))} frames. Qwen2-Audio and Qwen2.5-Omni pad to
     * {@code max_length} (P = 30 s, 300 s; longer clips are truncated): {@code ceil(min(samples, P)/160)}. Qwen3-Omni pads
     * to the call's longest clip and never truncates (P = {@code longestInCall}): alone, a clip keeps
     * {@code floor(samples/160)}, but beside a longer clip {@code ceil(samples/160)}, so its token count depends on the
     * other clips of the call (transformers 5.18.0 and 4.57.6 alike); and a call whose longest clip has at most 200
     * samples is refused (torch.stft cannot reflect-pad it: transformers raises).
     */
    public static long melFrames(AudioPreset preset, long samples, long longestInCall) {
        if (samples < 1) throw new IllegalArgumentException("an audio clip needs at least one sample, got " + samples);
        if (longestInCall < samples)
            throw new IllegalArgumentException("the longest clip of the call (" + longestInCall + " samples) is shorter than this one (" + samples + ")");
        if (preset.hfPadSeconds() == 0 && longestInCall <= 200)
            throw new IllegalArgumentException("a call whose longest clip has " + longestInCall + " samples is too short for " + preset
                    + "'s feature extractor (at least 201)");
        return preset.melFrames(samples, longestInCall);
    }

    /**
     * Widens each pad of {@code ids} (one per media item, in order) to the item's tokens.
     *
     * @throws IllegalArgumentException naming the cause when the pads and {@code media} differ in number or kind, when a
     *         clip gives no token (too short: transformers would then number the next clip's tokens as this one's), when
     *         the family takes no vision, or when the videos of the sample disagree on using their audio
     */
    public static long[] expand(long[] ids, AudioPreset preset, List<Media> media) {
        Objects.requireNonNull(preset, "preset");
        boolean aiv = audioInVideo(preset, media);
        var out = new LongList(ids.length + 64);
        int k = 0;
        for (int i = 0; i < ids.length; i++) {
            long id = ids[i];
            if (id == preset.audioTokenId()) {
                var clip = next(media, k++, AudioClip.class, "audio pad", preset);
                out.repeat(id, clipTokens(preset, clip.melFrames(), k));
            } else if (preset.hasVision() && id == preset.imageTokenId()) {
                var g = next(media, k++, ImageGrid.class, "image pad", preset);
                out.repeat(id, g.t() * g.h() * g.w() / 4);
            } else if (preset.hasVision() && id == preset.videoTokenId()) {
                var v = next(media, k++, VideoGrid.class, "video pad", preset);
                if (!aiv) {
                    out.repeat(id, v.t() * v.h() * v.w() / 4);
                    continue;
                }
                if (out.size() == 0 || out.last() != preset.visionStartId() || i + 1 >= ids.length || ids[i + 1] != preset.visionEndId())
                    throw new IllegalArgumentException("video " + k + ": its pad is not wrapped as " + preset.visionStart() + preset.videoToken()
                            + preset.visionEnd() + ", which the processor needs to interleave the video's audio");
                out.add(preset.audioStartId());
                interleave(out, preset, v, clipTokens(preset, v.audioMelFrames(), k));
                out.add(preset.audioEndId());
            } else {
                out.add(id);
            }
        }
        if (k != media.size())
            throw new IllegalArgumentException("the text has " + k + " media pad(s) but " + media.size() + " media item(s) were given");
        return out.toArray();
    }

    /** Whether the sample's videos use their audio: all or none ({@code use_audio_in_video} is one flag per processor call). */
    static boolean audioInVideo(AudioPreset preset, List<Media> media) {
        Boolean aiv = null;
        int n = 0;
        for (var m : media) {
            if (!preset.hasVision() && !(m instanceof AudioClip))
                throw new IllegalArgumentException(preset + " takes audio only, not " + m);
            if (m instanceof VideoGrid v) {
                n++;
                if (aiv == null) aiv = v.hasAudio();
                else if (aiv != v.hasAudio())
                    throw new IllegalArgumentException("video " + n + (v.hasAudio() ? " uses" : " does not use") + " its audio but video 1 "
                            + (aiv ? "does" : "does not") + "; use_audio_in_video is one value per sample");
            }
        }
        return aiv != null && aiv;
    }

    private static long clipTokens(AudioPreset preset, long melFrames, int item) {
        long n = audioTokens(preset, melFrames);
        if (n < 1)
            throw new IllegalArgumentException("media item " + item + ": a clip of " + melFrames + " mel frame(s) gives no " + preset
                    + " audio token (at least " + (preset.audioTokenRule() == AudioPreset.AudioTokenRule.STRIDE_4 ? 3 : 1) + " frames)");
        if (n > 1 << 24) throw new IllegalArgumentException("media item " + item + ": " + n + " audio tokens, over the limit of " + (1 << 24));
        return n;
    }

    private static <T extends Media> T next(List<Media> media, int k, Class<T> kind, String what, AudioPreset preset) {
        if (k >= media.size())
            throw new IllegalArgumentException("the text's " + what + " is media item " + (k + 1) + " but only " + media.size() + " were given");
        var m = media.get(k);
        if (!kind.isInstance(m))
            throw new IllegalArgumentException("media item " + (k + 1) + " is " + m + " but the text has an " + what + " there (" + preset + ")");
        return kind.cast(m);
    }

    /** The interleaved video and audio tokens of one video, between its {@code <|audio_bos|>} and {@code <|audio_eos|>}. */
    private static void interleave(LongList out, AudioPreset preset, VideoGrid v, long audioLen) {
        long perFrame = (v.h() / 2) * (v.w() / 2);
        long videoLen = v.t() * perFrame;
        long video = preset.videoTokenId(), audio = preset.audioTokenId();
        if (preset.positionRule() == AudioPreset.PositionRule.QWEN2_5_OMNI) {
            // processor: video_token_indices = t · second_per_grid · 25 (float64); chunks of int(25 · 2.0) = 50
            long perChunk = (long) (preset.positionIdPerSecond() * preset.secondsPerChunk());
            long[] videoChunks = chunks(videoLen, j -> (double) (j / perFrame) * v.secondPerGrid() * preset.positionIdPerSecond(), perChunk);
            long[] audioChunks = chunks(audioLen, j -> (double) j, perChunk);
            int n = Math.max(videoChunks.length, audioChunks.length);
            for (int c = 0; c < n; c++) {
                if (c < videoChunks.length) out.repeat(video, videoChunks[c]);
                if (c < audioChunks.length) out.repeat(audio, audioChunks[c]);
            }
        } else {
            // Qwen3-Omni: video token j at t · second_per_grid · 13 (float64) goes before audio token a when <= a
            long vi = 0, ai = 0;
            double pps = preset.positionIdPerSecond();
            while (vi < videoLen && ai < audioLen) {
                double at = (double) (vi / perFrame) * v.secondPerGrid() * pps;
                if (at <= ai) { out.add(video); vi++; }
                else { out.add(audio); ai++; }
            }
            out.repeat(video, videoLen - vi);
            out.repeat(audio, audioLen - ai);
        }
    }

    /** {@code get_chunked_index}: lengths of the runs of an increasing sequence split at each multiple of {@code perChunk}. */
    static long[] chunks(long length, java.util.function.LongToDoubleFunction value, long perChunk) {
        var sizes = new LongList(8);
        long start = 0, current = 1;
        for (long i = 0; i < length; i++) {
            if (value.applyAsDouble(i) >= (double) (current * perChunk)) {
                sizes.add(i - start);
                start = i;
                current++;
            }
        }
        sizes.add(length - start);
        return sizes.toArray();
    }

    /** A growable long array. */
    static final class LongList {
        private long[] a;
        private int n;

        LongList(int capacity) { a = new long[Math.max(8, capacity)]; }

        void add(long v) {
            if (n == a.length) a = Arrays.copyOf(a, Math.multiplyExact(a.length, 2));
            a[n++] = v;
        }

        void repeat(long v, long count) {
            if (count < 0 || n + count > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("sequence too long: " + (n + count));
            int need = (int) (n + count);
            if (need > a.length) a = Arrays.copyOf(a, Math.max(need, a.length * 2));
            Arrays.fill(a, n, need, v);
            n = need;
        }

        long last() { return a[n - 1]; }

        int size() { return n; }

        long[] toArray() { return Arrays.copyOf(a, n); }
    }
}
