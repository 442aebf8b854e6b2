package dev.stoker.text;

import static dev.stoker.text.QwenTokenIds.ASSISTANT;
import static dev.stoker.text.QwenTokenIds.IGNORE_INDEX;
import static dev.stoker.text.QwenTokenIds.IMAGE_PAD;
import static dev.stoker.text.QwenTokenIds.IM_END;
import static dev.stoker.text.QwenTokenIds.IM_START;
import static dev.stoker.text.QwenTokenIds.VISION_END;
import static dev.stoker.text.QwenTokenIds.VISION_START;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.core.SampleException;
import dev.stoker.core.SampleException.Stage;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * Turns a {@link ChatSample} and its image grids into {@link TextFeatures}: template (§10, through a
 * {@link ChatRenderer}: the family's built-in {@link ChatTemplate} by default, or the model's own template), image
 * placeholder expansion (§8), tokenization (§9), labels (§11), attention mask and M-RoPE positions (§12.1),
 * then the length limit.
 *
 * <p>Expansion happens on ids, not text: the rendered chat is tokenized with one {@code <|image_pad|>}
 * per image and each is then widened to {@code t·h·w/merge²} ids while copying into the final array.
 * This gives the same ids as tokenizing the expanded text, because {@code <|image_pad|>} is an added
 * token that the tokenizer always splits out before normalization and BPE, and it avoids building and
 * tokenizing a string with thousands of copies. Each placeholder must come out of the tokenizer as
 * {@code <|vision_start|><|image_pad|><|vision_end|>}; text that spells out vision tokens itself is
 * rejected because it would shift images against their pixels.
 *
 * <p>Threading: immutable; safe to share when the tokenizer is (the bundled {@link QwenTokenizer} is).
 */
public final class TokenSequenceBuilder {
    private final QwenTokenizer tokenizer;
    private final ChatRenderer template;
    private final int mergeSize;
    private final int maxLength;
    private final TruncationPolicy policy;

    /**
     * @param maxLength most tokens a sample may have ({@code model_max_length}); {@link Integer#MAX_VALUE} for none
     */
    public TokenSequenceBuilder(QwenTokenizer tokenizer, ChatFamily family, int mergeSize, int maxLength, TruncationPolicy policy) {
        this(tokenizer, new ChatTemplate(family), mergeSize, maxLength, policy);
    }

    /**
     * A builder that renders chats with {@code template}; labels still follow the official rule on token ids (§11),
     * so a template must emit each turn as {@code <|im_start|>ROLE\n…<|im_end|>} for its assistant turns to be learned.
     *
     * @param maxLength most tokens a sample may have ({@code model_max_length}); {@link Integer#MAX_VALUE} for none
     */
    public TokenSequenceBuilder(QwenTokenizer tokenizer, ChatRenderer template, int mergeSize, int maxLength, TruncationPolicy policy) {
        this.tokenizer = Objects.requireNonNull(tokenizer, "tokenizer");
        this.template = Objects.requireNonNull(template, "template");
        this.policy = Objects.requireNonNull(policy, "policy");
        if (mergeSize < 1) throw new IllegalArgumentException("merge size must be positive, got " + mergeSize);
        if (maxLength < 1) throw new IllegalArgumentException("max length must be positive, got " + maxLength);
        this.mergeSize = mergeSize;
        this.maxLength = maxLength;
    }

    /** A builder for a preset's chat family and merge size. */
    public static TokenSequenceBuilder forPreset(QwenTokenizer tokenizer, ProcessorPreset preset, int maxLength, TruncationPolicy policy) {
        return new TokenSequenceBuilder(tokenizer, preset.chatFamily(), preset.vision().mergeSize(), maxLength, policy);
    }

    /** A builder for a preset's merge size that renders chats with {@code template} (for example a model's own). */
    public static TokenSequenceBuilder forPreset(QwenTokenizer tokenizer, ProcessorPreset preset, ChatRenderer template,
                                                 int maxLength, TruncationPolicy policy) {
        return new TokenSequenceBuilder(tokenizer, template, preset.vision().mergeSize(), maxLength, policy);
    }

    /** The renderer chats are rendered with. */
    public ChatRenderer template() { return template; }

    public int maxLength() { return maxLength; }

    public TruncationPolicy policy() { return policy; }

    /**
     * @param grids one {@code {t, h, w}} per image of the sample, in image order (the rows of {@code image_grid_thw})
     * @throws SampleException (stage TEXT) if grids and images disagree, (stage TOKENIZE, {@link SampleException.Kind#FILTERED}) if the sample is too long under REJECT
     */
    public TextFeatures build(ChatSample sample, List<long[]> grids) {
        Measured m = measure(sample, grids);
        int n = m.length();
        var ids = new long[n];
        int out = 0;
        int k = 0;
        long[] compact = m.compact;
        for (int i = 0; i < compact.length && out < n; i++) {
            if (compact[i] == IMAGE_PAD) {
                int run = (int) Math.min(m.imageTokens[k++], n - out);
                Arrays.fill(ids, out, out + run, IMAGE_PAD);
                out += run;
            } else {
                ids[out++] = compact[i];
            }
        }

        var mask = new long[n];
        Arrays.fill(mask, 1L);
        return new TextFeatures(ids, labels(ids), mask, positionIds(ids, grids.subList(0, m.imagesKept()), mergeSize), m.imagesKept());
    }

    /**
     * What {@link #build} would make of the sample, without its arrays: the length of its {@code input_ids} (after
     * truncation under TRUNCATE) and the images kept; refuses exactly what {@link #build} refuses, with the same
     * exceptions. For a check of a whole data set ({@code stoker validate}), where labels and positions are not needed.
     */
    public Measured measure(ChatSample sample, List<long[]> grids) {
        int images = sample.imagePaths().size();
        if (grids.size() != images)
            throw new SampleException(sample.id(), Stage.TEXT, images + " image(s) in the chat but " + grids.size() + " image grid(s)");
        var imageTokens = new long[images];
        for (int k = 0; k < images; k++) {
            try {
                imageTokens[k] = ChatTemplate.imageTokens(grids.get(k), mergeSize);
            } catch (IllegalArgumentException e) {
                throw new SampleException(sample.id(), Stage.TEXT, "image " + k + ": " + e.getMessage());
            }
        }

        String rendered;
        try {
            rendered = template.render(sample.messages());
        } catch (ChatTemplateException e) {
            throw new SampleException(sample.id(), Stage.TEXT, "chat template failed: " + e.getMessage(), e);
        }
        long[] compact;
        try {
            compact = tokenizer.encode(rendered);
        } catch (RuntimeException e) {
            throw new SampleException(sample.id(), Stage.TOKENIZE, "tokenizer failed: " + e.getMessage(), e);
        }

        // Expanded index of each image's <|vision_start|>; its run ends imageTokens[k] + 1 later at <|vision_end|>.
        var visionStart = new long[images];
        long length = compact.length;
        int k = 0;
        for (int i = 0; i < compact.length; i++) {
            if (compact[i] != IMAGE_PAD) continue;
            if (k == images || i == 0 || i + 1 == compact.length || compact[i - 1] != VISION_START || compact[i + 1] != VISION_END)
                throw new SampleException(sample.id(), Stage.TEXT,
                        "message text contains vision special tokens (<|image_pad|>, <|vision_start|>, <|vision_end|>)");
            visionStart[k] = length - compact.length + i - 1;
            length += imageTokens[k] - 1;
            k++;
        }
        if (k != images)
            throw new SampleException(sample.id(), Stage.TEXT, "expected " + images + " image placeholder(s) after tokenization, found " + k);

        long cut = length;
        int kept = images;
        if (length > maxLength) {
            if (policy == TruncationPolicy.REJECT)
                throw SampleException.filtered(sample.id(), Stage.TOKENIZE, "over --max-seq-len", "sequence has " + length
                        + " tokens, over the limit of " + maxLength + " (" + images + " image(s))");
            cut = maxLength;
            for (int j = 0; j < images; j++) {
                long end = visionStart[j] + imageTokens[j] + 1;
                if (visionStart[j] < cut && cut <= end) cut = visionStart[j];
            }
            kept = 0;
            while (kept < images && visionStart[kept] + imageTokens[kept] + 1 < cut) kept++;
        }
        return new Measured((int) cut, kept, compact, imageTokens);
    }

    /** A sample measured by {@link #measure}: its {@code input_ids} length and the images kept (all but under TRUNCATE). */
    public static final class Measured {
        private final int length;
        private final int imagesKept;
        private final long[] compact;
        private final long[] imageTokens;

        private Measured(int length, int imagesKept, long[] compact, long[] imageTokens) {
            this.length = length;
            this.imagesKept = imagesKept;
            this.compact = compact;
            this.imageTokens = imageTokens;
        }

        public int length() { return length; }

        public int imagesKept() { return imagesKept; }
    }

    /**
     * The official label rule (spec §11): everything {@code -100} except, after each
     * {@code <|im_start|>assistant}, the tokens from two past {@code assistant} through the next
     * {@code <|im_end|>} and the token after it. An assistant turn without {@code <|im_end|>} stays masked.
     */
    public static long[] labels(long[] ids) {
        int n = ids.length;
        var labels = new long[n];
        Arrays.fill(labels, IGNORE_INDEX);
        for (int pos = 1; pos < n; pos++) {
            if (ids[pos] != ASSISTANT || ids[pos - 1] != IM_START) continue;
            int start = pos + 2;
            int end = start;
            while (end < n && ids[end] != IM_END) end++;
            if (end < n) {
                int stop = Math.min(end + 2, n);
                if (start < stop) System.arraycopy(ids, start, labels, start, stop - start);
                pos = end;
            }
        }
        return labels;
    }

    /**
     * M-RoPE position ids (spec §12.1), 3×L row-major. Text advances all three rows together; the
     * {@code t·(h/m)·(w/m)} tokens of image k get {@code (t, h, w)} grid coordinates offset by the
     * position where the image starts, and text after it continues from the largest of them plus one.
     *
     * @param grids the grids of the images present in {@code ids}, in order
     */
    public static long[] positionIds(long[] ids, List<long[]> grids, int mergeSize) {
        int n = ids.length;
        var pos = new long[3 * n];
        long next = 0;
        int st = 0;
        for (var g : grids) {
            int ed = st;
            while (ed < n && ids[ed] != IMAGE_PAD) ed++;
            if (ed == n) throw new IllegalArgumentException("fewer image runs in the ids than the " + grids.size() + " grids");
            for (int i = st; i < ed; i++) {
                long p = next + (i - st);
                pos[i] = p;
                pos[n + i] = p;
                pos[2 * n + i] = p;
            }
            long base = next + (ed - st);
            int lt = (int) g[0];
            int lh = (int) (g[1] / mergeSize);
            int lw = (int) (g[2] / mergeSize);
            int tokens = lt * lh * lw;
            if (ed + tokens > n) throw new IllegalArgumentException("image run at " + ed + " is cut short");
            int j = ed;
            for (int t = 0; t < lt; t++)
                for (int h = 0; h < lh; h++)
                    for (int w = 0; w < lw; w++, j++) {
                        pos[j] = base + t;
                        pos[n + j] = base + h;
                        pos[2 * n + j] = base + w;
                    }
            next = base + Math.max(lt, Math.max(lh, lw));
            st = ed + tokens;
        }
        for (int i = st; i < n; i++) {
            long p = next + (i - st);
            pos[i] = p;
            pos[n + i] = p;
            pos[2 * n + i] = p;
        }
        return pos;
    }
}
