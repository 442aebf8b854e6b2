package dev.stoker.text;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.SampleException.Stage;
import java.util.List;
import java.util.Objects;

/**
 * One sample of an audio family from its parsed chat to its token-side inputs (issue 32), as stoker-encode's
 * {@code OmniEncoder} calls it for {@code encode} and {@code validate}. Renders the chat ({@link OmniTemplate}, or a model's own
 * {@link ChatRenderer}), tokenizes it with the family's special ids, widens the pads to each item's size
 * ({@link OmniTokens#expand}), labels it by the official rule ({@link TokenSequenceBuilder#labels}) and numbers its
 * positions ({@link OmniPositions}). The sizes come from the media stages: each clip's valid mel frames, each image's and
 * video's grid, each video's seconds per grid and, when the sample uses a video's audio, that track's mel frames.
 *
 * <p>Not done here: the length limit (the caller's: {@code OmniEncoder} filters an over-long sample, and nothing truncates
 * one, since a cut inside an interleaved video would have to drop the video and its audio together); Qwen3-Omni's
 * positions come out as float32 ({@link Features#floatPositions()}), which {@code encode} writes as they are.
 *
 * <p>Threading: immutable; safe to share when the tokenizer and renderer are.
 */
public final class OmniSequence {
    private final AudioPreset preset;
    private final OmniTemplate tokens;
    private final ChatRenderer renderer;
    private final QwenTokenizer tokenizer;

    /** A builder rendering with the family's built-in template. */
    public OmniSequence(AudioPreset preset, QwenTokenizer tokenizer) {
        this(preset, tokenizer, new OmniTemplate(preset));
    }

    /** A builder rendering with {@code renderer} (a model folder's own template, through {@link JinjaChatRenderer}). */
    public OmniSequence(AudioPreset preset, QwenTokenizer tokenizer, ChatRenderer renderer) {
        this.preset = Objects.requireNonNull(preset, "preset");
        this.tokens = new OmniTemplate(preset);
        this.tokenizer = Objects.requireNonNull(tokenizer, "tokenizer");
        this.renderer = Objects.requireNonNull(renderer, "renderer");
    }

    /**
     * The token-side inputs of one sample: {@code positions} is 3×L row-major as longs for Qwen2-Audio and Qwen2.5-Omni
     * ({@code floatPositions} null), {@code floatPositions} as float32 for Qwen3-Omni ({@code positions} null).
     */
    public record Features(long[] inputIds, long[] labels, long[] positions, float[] floatPositions) {
        public int length() { return inputIds.length; }
    }

    /**
     * Builds one sample. {@code sizes} follow {@code sample.media()} one to one, in order.
     *
     * @throws SampleException at stage TEXT naming the sample when the sizes do not match its media, or the chat cannot be
     *         rendered or expanded for this family (an image under Qwen2-Audio, a clip too short for a token, …)
     */
    public Features build(ChatSample sample, List<OmniTokens.Media> sizes) {
        try {
            check(sample, sizes);
            long[] ids = OmniTokens.expand(tokens.tokenize(renderer.render(sample.messages()), tokenizer), preset, sizes);
            long[] labels = TokenSequenceBuilder.labels(ids);
            int n = ids.length;
            if (preset.positionRule() == AudioPreset.PositionRule.QWEN3_OMNI) {
                var p = OmniPositions.float32(ids, preset, sizes);
                var flat = new float[3 * n];
                for (int r = 0; r < 3; r++) System.arraycopy(p[r], 0, flat, r * n, n);
                return new Features(ids, labels, null, flat);
            }
            var p = OmniPositions.integer(ids, preset, sizes);
            var flat = new long[3 * n];
            for (int r = 0; r < 3; r++) System.arraycopy(p[r], 0, flat, r * n, n);
            return new Features(ids, labels, flat, null);
        } catch (IllegalArgumentException e) {
            throw new SampleException(sample.id(), Stage.TEXT, preset + ": " + e.getMessage(), e);
        }
    }

    private static void check(ChatSample sample, List<OmniTokens.Media> sizes) {
        var media = sample.media();
        if (media.size() != sizes.size())
            throw new IllegalArgumentException("the sample has " + media.size() + " media item(s) but " + sizes.size() + " size(s) were given");
        for (int k = 0; k < media.size(); k++) {
            var part = media.get(k);
            var size = sizes.get(k);
            boolean ok = switch (part) {
                case Message.Audio _ -> size instanceof OmniTokens.AudioClip;
                case Message.Image _ -> size instanceof OmniTokens.ImageGrid;
                case Message.Video v -> size instanceof OmniTokens.VideoGrid g && g.hasAudio() == v.useAudioInVideo();
                case Message.Text _ -> false;
            };
            if (!ok)
                throw new IllegalArgumentException("media item " + (k + 1) + " is " + describe(part) + " but its size is " + size);
        }
    }

    private static String describe(Message.Part part) {
        return switch (part) {
            case Message.Audio a -> "audio " + a.ref();
            case Message.Image i -> "image " + i.ref();
            case Message.Video v -> "video " + (v.isFrameList() ? "of " + v.frames().size() + " frames" : v.ref())
                    + (v.useAudioInVideo() ? " with its audio" : "");
            case Message.Text _ -> "text";
        };
    }
}
