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
 * <p>Truncation ({@link #build(ChatSample, List, int)}): a sequence over the limit is cut there, but never inside a media
 * item's run — a clip's {@code <|audio_bos|>…<|audio_eos|>}, an image's or video's {@code <|vision_bos|>…<|vision_eos|>},
 * a video with its audio interleaved as one run — so a run the cut would split is dropped whole, with every item after
 * it (their features and pixels are the caller's to drop: {@link Features#keptMedia()}), as {@link TokenSequenceBuilder}
 * drops an image. Labels and positions are those of the ids as cut (the thinkers' {@code get_rope_index} numbers a token
 * from the tokens before it only, so they are the full sequence's positions' prefix). Qwen3-Omni's positions come out as float32
 * ({@link Features#floatPositions()}), which {@code encode} writes as they are.
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
    public record Features(long[] inputIds, long[] labels, long[] positions, float[] floatPositions, int keptMedia) {
        public int length() { return inputIds.length; }
    }

    /**
     * Builds one sample. {@code sizes} follow {@code sample.media()} one to one, in order.
     *
     * @throws SampleException at stage TEXT naming the sample when the sizes do not match its media, or the chat cannot be
     *         rendered or expanded for this family (an image under Qwen2-Audio, a clip too short for a token, …)
     */
    public Features build(ChatSample sample, List<OmniTokens.Media> sizes) { return build(sample, sizes, Integer.MAX_VALUE); }

    /**
     * {@link #build(ChatSample, List)} truncated to {@code maxLength} tokens: cut there, or before the media run the cut
     * would split; {@link Features#keptMedia()} says how many of the sample's media items (in order) stay.
     */
    public Features build(ChatSample sample, List<OmniTokens.Media> sizes, int maxLength) {
        try {
            check(sample, sizes);
            long[] ids = OmniTokens.expand(tokens.tokenize(renderer.render(sample.messages()), tokenizer), preset, sizes);
            int n = ids.length;
            var kept = sizes;
            if (n > maxLength) {
                int[][] runs = mediaRuns(ids);
                if (runs.length != sizes.size())
                    throw new IllegalArgumentException(runs.length + " media runs in the ids for " + sizes.size() + " media item(s)");
                int cut = maxLength, k = 0;
                for (int[] r : runs) if (r[0] < cut && cut <= r[1]) cut = r[0];
                while (k < runs.length && runs[k][1] < cut) k++;
                ids = java.util.Arrays.copyOf(ids, cut);
                kept = sizes.subList(0, k);
                n = cut;
            }
            // labels and positions of the ids as cut, as the model and the official label rule see them (an assistant
            // turn the cut leaves open gets no labels, as under TokenSequenceBuilder's truncation)
            long[] labels = TokenSequenceBuilder.labels(ids);
            if (preset.positionRule() == AudioPreset.PositionRule.QWEN3_OMNI) {
                var p = OmniPositions.float32(ids, preset, kept);
                var flat = new float[3 * n];
                for (int r = 0; r < 3; r++) System.arraycopy(p[r], 0, flat, r * n, n);
                return new Features(ids, labels, null, flat, kept.size());
            }
            var p = OmniPositions.integer(ids, preset, kept);
            var flat = new long[3 * n];
            for (int r = 0; r < 3; r++) System.arraycopy(p[r], 0, flat, r * n, n);
            return new Features(ids, labels, flat, null, kept.size());
        } catch (IllegalArgumentException e) {
            throw new SampleException(sample.id(), Stage.TEXT, preset + ": " + e.getMessage(), e);
        }
    }

    /**
     * Each media item's run in {@code ids}, in order, as {first, last} indices: from a start token ({@code <|audio_bos|>},
     * {@code <|vision_bos|>} or the family's spelling) at depth 0 to the end token that brings the depth back to 0, so that a
     * video's interleaved audio ({@code <|vision_bos|><|audio_bos|>…<|audio_eos|><|vision_eos|>}) is one run.
     */
    private int[][] mediaRuns(long[] ids) {
        var runs = new java.util.ArrayList<int[]>();
        int depth = 0, start = -1;
        boolean vision = preset.hasVision();
        for (int i = 0; i < ids.length; i++) {
            long id = ids[i];
            if (id == preset.audioStartId() || (vision && id == preset.visionStartId())) {
                if (depth++ == 0) start = i;
            } else if (id == preset.audioEndId() || (vision && id == preset.visionEndId())) {
                if (--depth < 0) throw new IllegalArgumentException("a media end token at " + i + " without its start");
                if (depth == 0) runs.add(new int[] {start, i});
            }
        }
        if (depth != 0) throw new IllegalArgumentException("a media run left open at the end of the ids");
        return runs.toArray(int[][]::new);
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
