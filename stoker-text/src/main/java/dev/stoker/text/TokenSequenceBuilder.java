package dev.stoker.text;

import static dev.stoker.text.QwenTokenIds.ASSISTANT;
import static dev.stoker.text.QwenTokenIds.IGNORE_INDEX;
import static dev.stoker.text.QwenTokenIds.IMAGE_PAD;
import static dev.stoker.text.QwenTokenIds.IM_END;
import static dev.stoker.text.QwenTokenIds.IM_START;
import static dev.stoker.text.QwenTokenIds.VIDEO_PAD;
import static dev.stoker.text.QwenTokenIds.VISION_END;
import static dev.stoker.text.QwenTokenIds.VISION_START;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.core.SampleException;
import dev.stoker.core.SampleException.Stage;
import java.util.ArrayList;
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
 * <p><b>Videos</b> (issue 29) follow the rules of one {@link VideoContract} for one model ({@link #withVideo}; a
 * builder {@link #forPreset} follows {@link VideoContract#OFFICIAL}), from a {@link VideoTokens} per video. Qwen2-VL
 * and Qwen2.5-VL widen the video's {@code <|video_pad|>} to {@code t·h·w/merge²} as for an image. Qwen3-VL writes
 * one group {@code <S.D seconds><|vision_start|><|video_pad|><|vision_end|>} per temporal patch into the rendered
 * text (around or instead of the template's {@code <|vision_start|>…<|vision_end|>}, by contract), tokenizes that,
 * and widens each group's pad to {@code h·w/merge²}: the timestamp text is tokenized in its context, as the
 * processor does. Positions: {@link #positionIds(long[], List, List, ProcessorPreset, VideoContract, int)}. Labels
 * as for images (video tokens sit in user turns and are masked). Truncation treats a video as an image: a cut that
 * would fall inside it (Qwen3: from its first timestamp, or the outer {@code <|vision_start|>}, through its last
 * {@code <|vision_end|>}) moves before it, and it and later videos are dropped ({@link TextFeatures#videosKept()}).
 * Ported from {@code expand_placeholders}, {@code _block}, {@code _t_positions} and {@code rope_index} of
 * {@code shared/reference/ref_qwenvl_video.py}, which equal transformers 5.18.0 / 4.57.6 and qwen-vl-finetune
 * (README of {@code shared/vectors/qwen-vl-video}).
 *
 * <p>Threading: immutable; safe to share when the tokenizer is (the bundled {@link QwenTokenizer} is).
 */
public final class TokenSequenceBuilder {
    private final QwenTokenizer tokenizer;
    private final ChatRenderer template;
    private final int mergeSize;
    private final int maxLength;
    private final TruncationPolicy policy;
    /** The model whose video rules apply (Qwen2 / 2.5 / 3 differ), or null: samples with videos are refused. */
    private final ProcessorPreset videoModel;
    private final VideoContract videoContract;

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
        this(tokenizer, template, mergeSize, maxLength, policy, null, VideoContract.OFFICIAL);
    }

    private TokenSequenceBuilder(QwenTokenizer tokenizer, ChatRenderer template, int mergeSize, int maxLength, TruncationPolicy policy,
                                 ProcessorPreset videoModel, VideoContract videoContract) {
        this.videoModel = videoModel;
        this.videoContract = Objects.requireNonNull(videoContract, "videoContract");
        if (videoModel != null && videoModel.vision().mergeSize() != mergeSize)
            throw new IllegalArgumentException("merge size " + mergeSize + " but " + videoModel + " merges " + videoModel.vision().mergeSize());
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
        return new TokenSequenceBuilder(tokenizer, preset.chatFamily(), preset.vision().mergeSize(), maxLength, policy)
                .withVideo(preset, VideoContract.OFFICIAL);
    }

    /**
     * This builder with videos placed by {@code model}'s rules under {@code contract}. Without it (the constructors),
     * a sample with a video is refused; {@link #forPreset} sets its preset under {@link VideoContract#OFFICIAL}.
     */
    public TokenSequenceBuilder withVideo(ProcessorPreset model, VideoContract contract) {
        Objects.requireNonNull(model, "model");
        if (template instanceof ChatTemplate t && t.family() != model.chatFamily())
            throw new IllegalArgumentException(model + " renders as " + model.chatFamily() + ", this builder as " + t.family());
        return new TokenSequenceBuilder(tokenizer, template, mergeSize, maxLength, policy, model, contract);
    }

    /** The model whose video rules apply, or null when videos are refused. */
    public ProcessorPreset videoModel() { return videoModel; }

    public VideoContract videoContract() { return videoContract; }

    /** A builder for a preset's merge size that renders chats with {@code template} (for example a model's own). */
    public static TokenSequenceBuilder forPreset(QwenTokenizer tokenizer, ProcessorPreset preset, ChatRenderer template,
                                                 int maxLength, TruncationPolicy policy) {
        return new TokenSequenceBuilder(tokenizer, template, preset.vision().mergeSize(), maxLength, policy)
                .withVideo(preset, VideoContract.OFFICIAL);
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
        return build(sample, grids, List.of());
    }

    /**
     * @param grids  one {@code {t, h, w}} per image of the sample, in image order (the rows of {@code image_grid_thw})
     * @param videos one per video of the sample, in video order (the rows of {@code video_grid_thw})
     * @throws SampleException (stage TEXT) if grids or videos and the sample disagree, (stage TOKENIZE,
     *                         {@link SampleException.Kind#FILTERED}) if the sample is too long under REJECT
     * @throws IllegalStateException if the sample has videos and this builder has no video rules ({@link #withVideo})
     */
    public TextFeatures build(ChatSample sample, List<long[]> grids, List<VideoTokens> videos) {
        Measured m = measure(sample, grids, videos);
        int n = m.length();
        var ids = new long[n];
        int out = 0;
        int k = 0;
        long[] compact = m.compact;
        for (int i = 0; i < compact.length && out < n; i++) {
            if (compact[i] == IMAGE_PAD || compact[i] == VIDEO_PAD) {
                int run = (int) Math.min(m.padTokens[k++], n - out);
                Arrays.fill(ids, out, out + run, compact[i]);
                out += run;
            } else {
                ids[out++] = compact[i];
            }
        }

        var mask = new long[n];
        Arrays.fill(mask, 1L);
        var keptGrids = grids.subList(0, m.imagesKept());
        long[] positions = videos.isEmpty()
                ? positionIds(ids, keptGrids, mergeSize)
                : positionIds(ids, keptGrids, videos.subList(0, m.videosKept()), videoModel, videoContract, mergeSize);
        return new TextFeatures(ids, labels(ids), mask, positions, m.imagesKept(), m.videosKept());
    }

    /**
     * What {@link #build} would make of the sample, without its arrays: the length of its {@code input_ids} (after
     * truncation under TRUNCATE) and the images kept; refuses exactly what {@link #build} refuses, with the same
     * exceptions. For a check of a whole data set ({@code stoker validate}), where labels and positions are not needed.
     */
    public Measured measure(ChatSample sample, List<long[]> grids) {
        return measure(sample, grids, List.of());
    }

    /** {@link #measure(ChatSample, List)} for a sample that may hold videos. */
    public Measured measure(ChatSample sample, List<long[]> grids, List<VideoTokens> videos) {
        int images = sample.imagePaths().size();
        if (grids.size() != images)
            throw new SampleException(sample.id(), Stage.TEXT, images + " image(s) in the chat but " + grids.size() + " image grid(s)");
        int nv = sample.videos().size();
        if (videos.size() != nv)
            throw new SampleException(sample.id(), Stage.TEXT, nv + " video(s) in the chat but " + videos.size() + " video token record(s)");
        if (nv > 0 && videoModel == null)
            throw new IllegalStateException("sample " + sample.id() + " has " + nv + " video(s) but this builder has no video rules (withVideo)");
        boolean qwen3 = videoModel != null && videoModel.chatFamily() == ChatFamily.QWEN3_VL;
        var imageTokens = new long[images];
        for (int k = 0; k < images; k++) {
            try {
                imageTokens[k] = ChatTemplate.imageTokens(grids.get(k), mergeSize);
            } catch (IllegalArgumentException e) {
                throw new SampleException(sample.id(), Stage.TEXT, "image " + k + ": " + e.getMessage());
            }
        }
        for (int v = 0; v < nv; v++) checkVideo(sample.id(), v, videos.get(v));

        String rendered;
        try {
            rendered = template.render(sample.messages());
        } catch (ChatTemplateException e) {
            throw new SampleException(sample.id(), Stage.TEXT, "chat template failed: " + e.getMessage(), e);
        }
        boolean[] wrapped = new boolean[nv];
        if (nv > 0 || rendered.contains(ChatTemplate.VIDEO_PAD)) rendered = writeVideos(sample.id(), rendered, videos, qwen3, wrapped);
        long[] compact;
        try {
            compact = tokenizer.encode(rendered);
        } catch (RuntimeException e) {
            throw new SampleException(sample.id(), Stage.TOKENIZE, "tokenizer failed: " + e.getMessage(), e);
        }

        // Every pad in compact ids, in order, with the tokens it widens to; each medium's first and last compact index.
        int pads = images + (qwen3 ? groups(videos) : nv);
        var padTokens = new long[pads];
        var padAt = new int[pads];
        var media = new ArrayList<Span>(images + nv);
        int p = 0, k = 0, v = 0, g = 0;
        for (int i = 0; i < compact.length; i++) {
            boolean image = compact[i] == IMAGE_PAD;
            if (!image && compact[i] != VIDEO_PAD) continue;
            if ((image ? k == images : v == nv) || i == 0 || i + 1 == compact.length
                    || compact[i - 1] != VISION_START || compact[i + 1] != VISION_END)
                throw new SampleException(sample.id(), Stage.TEXT,
                        "message text contains vision special tokens (<|image_pad|>, <|video_pad|>, <|vision_start|>, <|vision_end|>)");
            padAt[p] = i;
            if (image) {
                padTokens[p] = imageTokens[k];
                media.add(new Span(false, i - 1, i + 1));
                k++;
            } else if (!qwen3) {
                padTokens[p] = videos.get(v).tokens(mergeSize);
                media.add(new Span(true, i - 1, i + 1));
                v++;
            } else {
                var vt = videos.get(v);
                padTokens[p] = (vt.h() / mergeSize) * (vt.w() / mergeSize);
                if (g == 0) media.add(new Span(true, -1, -1));   // bounds found only when truncating
                media.getLast().lastGroupEnd = i + 1;
                media.getLast().firstGroupStart = g == 0 ? i - 1 : media.getLast().firstGroupStart;
                media.getLast().index = v;
                if (++g == vt.t()) { g = 0; v++; }
            }
            p++;
        }
        if (k != images)
            throw new SampleException(sample.id(), Stage.TEXT, "expected " + images + " image placeholder(s) after tokenization, found " + k);
        if (v != nv || g != 0)
            throw new SampleException(sample.id(), Stage.TEXT, "expected " + nv + " video placeholder(s) after tokenization, found " + v);
        long length = compact.length;
        for (long t : padTokens) length += t - 1;

        long cut = length;
        int keptImages = images, keptVideos = nv;
        if (length > maxLength) {
            if (policy == TruncationPolicy.REJECT)
                throw SampleException.filtered(sample.id(), Stage.TOKENIZE, "over --max-seq-len", "sequence has " + length
                        + " tokens, over the limit of " + maxLength + " (" + images + " image(s)" + (nv > 0 ? ", " + nv + " video(s)" : "") + ")");
            cut = maxLength;
            for (var s : media) {
                if (qwen3 && s.video && s.start < 0) videoBounds(sample.id(), s, compact, videos.get(s.index), wrapped[s.index]);
                long start = expanded(s.start, padAt, padTokens), end = expanded(s.end, padAt, padTokens);
                if (start < cut && cut <= end) cut = start;
            }
            keptImages = 0;
            keptVideos = 0;
            for (var s : media) {
                if (expanded(s.end, padAt, padTokens) >= cut) break;
                if (s.video) keptVideos++;
                else keptImages++;
            }
        }
        return new Measured((int) cut, keptImages, keptVideos, compact, padTokens);
    }

    /** One image or video in compact ids: from its first token ({@code <|vision_start|>}, Qwen3: see videoBounds) to its last. */
    private static final class Span {
        final boolean video;
        int start, end;
        int firstGroupStart, lastGroupEnd, index;

        Span(boolean video, int start, int end) {
            this.video = video;
            this.start = start;
            this.end = end;
        }
    }

    /** Index in the expanded ids of compact index {@code c}: each pad before it widens by its tokens less one. */
    private static long expanded(int c, int[] padAt, long[] padTokens) {
        long e = c;
        for (int j = 0; j < padAt.length && padAt[j] < c; j++) e += padTokens[j] - 1;
        return e;
    }

    /**
     * A Qwen3 video's first and last compact index: its first group's timestamp text begins it (under 5.18, with the
     * template's {@code <|vision_start|>} before it and {@code <|vision_end|>} after the last group). The timestamp was
     * tokenized in context (under 4.57 / official its first token may hold text before it, such as a space), so its
     * start is found by decoding back from the first group's {@code <|vision_start|>} until the text covers it.
     */
    private void videoBounds(String id, Span s, long[] compact, VideoTokens vt, boolean wrapped) {
        int vs = s.firstGroupStart;
        int textChars = vt.timestampTexts().getFirst().length();
        int j = vs;
        while (j > 0 && tokenizer.decode(Arrays.copyOfRange(compact, j, vs)).length() < textChars) j--;
        s.start = j;
        s.end = s.lastGroupEnd;
        if (videoContract == VideoContract.TRANSFORMERS_5_18 && wrapped) {
            if (j == 0 || compact[j - 1] != VISION_START || s.end + 1 >= compact.length || compact[s.end + 1] != VISION_END)
                throw new SampleException(id, Stage.TEXT, "video " + s.index + ": its groups are not inside <|vision_start|>…<|vision_end|> after tokenization");
            s.start = j - 1;
            s.end = s.lastGroupEnd + 1;
        }
    }

    private static int groups(List<VideoTokens> videos) {
        long n = 0;
        for (var v : videos) n += v.t();
        return Math.toIntExact(n);
    }

    private void checkVideo(String id, int index, VideoTokens v) {
        String why = null;
        if (v.h() % mergeSize != 0 || v.w() % mergeSize != 0) why = "grid [" + v.t() + ", " + v.h() + ", " + v.w() + "] is not divisible by the merge size " + mergeSize;
        else if (videoModel == ProcessorPreset.QWEN2_5_VL && (!(v.secondPerGridT() > 0) || Float.isInfinite(v.secondPerGridT())))
            why = "Qwen2.5-VL needs a positive second_per_grid_t, got " + v.secondPerGridT();
        else if (videoModel.chatFamily() == ChatFamily.QWEN3_VL && v.timestampTexts().size() != v.t())
            why = "Qwen3-VL needs one timestamp per temporal patch: " + v.timestampTexts().size() + " for t = " + v.t();
        if (why != null) throw new SampleException(id, Stage.TEXT, "video " + index + ": " + why);
    }

    /**
     * The rendered chat with each video's placeholder in its final text form, pads not yet widened: Qwen2/2.5 keep
     * the template's {@code <|vision_start|><|video_pad|><|vision_end|>}; Qwen3 gets its groups (reference
     * {@code expand_placeholders}; {@code wrapped[v]} says whether the template wrapped the pad). A count of
     * {@code <|video_pad|>} other than the videos' means the text spells one out, which would misplace the frames.
     */
    private String writeVideos(String id, String text, List<VideoTokens> videos, boolean qwen3, boolean[] wrapped) {
        final String pad = ChatTemplate.VIDEO_PAD, vs = ChatTemplate.VISION_START, ve = ChatTemplate.VISION_END;
        int found = 0;
        for (int i = text.indexOf(pad); i >= 0; i = text.indexOf(pad, i + pad.length())) found++;
        if (found != videos.size())
            throw new SampleException(id, Stage.TEXT, "the rendered chat has " + found + " " + pad + " for " + videos.size()
                    + " video(s): message text contains vision special tokens");
        if (!qwen3) return text;
        var out = new StringBuilder(text.length() + 64 * groups(videos));
        int pos = 0;
        for (int v = 0; v < videos.size(); v++) {
            int b = text.indexOf(pad, pos);
            boolean wrap = text.startsWith(vs, b - vs.length()) && b - vs.length() >= pos && text.startsWith(ve, b + pad.length());
            wrapped[v] = wrap;
            boolean whole = wrap && videoContract != VideoContract.TRANSFORMERS_5_18;
            out.append(text, pos, whole ? b - vs.length() : b);
            for (var ts : videos.get(v).timestampTexts()) out.append(ts).append(vs).append(pad).append(ve);
            pos = whole ? b + pad.length() + ve.length() : b + pad.length();
        }
        return out.append(text, pos, text.length()).toString();
    }

    /** A sample measured by {@link #measure}: its {@code input_ids} length and the images and videos kept (all but under TRUNCATE). */
    public static final class Measured {
        private final int length;
        private final int imagesKept;
        private final int videosKept;
        private final long[] compact;
        private final long[] padTokens;

        private Measured(int length, int imagesKept, int videosKept, long[] compact, long[] padTokens) {
            this.length = length;
            this.imagesKept = imagesKept;
            this.videosKept = videosKept;
            this.compact = compact;
            this.padTokens = padTokens;
        }

        public int length() { return length; }

        public int imagesKept() { return imagesKept; }

        public int videosKept() { return videosKept; }
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
     * M-RoPE position ids of a sample with images and videos, 3×L row-major: reference {@code rope_index} of
     * {@code shared/reference/ref_qwenvl_video.py}. Each maximal run of {@code <|image_pad|>} or {@code <|video_pad|>}
     * takes the next image grid or video (Qwen3: the next temporal patch of the video, a run of its own); its tokens
     * get (temporal, row, column) offsets from the position where the run starts; text continues by one per token.
     * Temporal offsets ({@code _t_positions}): Qwen2.5 videos from {@code second_per_grid_t} at
     * {@code tokens_per_second} 2 (correction 10 of the vectors) under {@code contract}'s arithmetic, else the patch
     * index (0 for a Qwen3 group). After a run, text continues at {@code start + max(h, w)/merge} under
     * {@link VideoContract#TRANSFORMERS_5_18}, else at the run's largest position plus one.
     *
     * @param grids  the grids of the images present in {@code ids}, in order
     * @param videos the videos present in {@code ids}, in order
     */
    public static long[] positionIds(long[] ids, List<long[]> grids, List<VideoTokens> videos, ProcessorPreset model,
                                     VideoContract contract, int mergeSize) {
        int n = ids.length;
        var pos = new long[3 * n];
        boolean qwen3 = model.chatFamily() == ChatFamily.QWEN3_VL;
        long next = 0;
        int k = 0, v = 0, g = 0;
        int i = 0;
        while (i < n) {
            long id = ids[i];
            int j = i;
            while (j < n && ids[j] == id) j++;
            if (id != IMAGE_PAD && id != VIDEO_PAD) {
                for (int x = i; x < j; x++, next++) {
                    pos[x] = next;
                    pos[n + x] = next;
                    pos[2 * n + x] = next;
                }
                i = j;
                continue;
            }
            long lt, lh, lw;
            long[] tpos;
            if (id == IMAGE_PAD) {
                if (k == grids.size()) throw new IllegalArgumentException("more image runs in the ids than the " + grids.size() + " grids");
                var gr = grids.get(k++);
                lt = gr[0];
                lh = gr[1] / mergeSize;
                lw = gr[2] / mergeSize;
                tpos = arange(lt);
            } else {
                if (v == videos.size()) throw new IllegalArgumentException("more video runs in the ids than the " + videos.size() + " videos");
                var vt = videos.get(v);
                lh = vt.h() / mergeSize;
                lw = vt.w() / mergeSize;
                if (qwen3) {
                    lt = 1;
                    tpos = new long[] {0};
                    if (++g == vt.t()) { g = 0; v++; }
                } else {
                    lt = vt.t();
                    tpos = temporalPositions(model, vt, contract);
                    v++;
                }
            }
            if (lt * lh * lw != j - i)
                throw new IllegalArgumentException("vision run of " + (j - i) + " tokens at " + i + " != grid " + lt + "x" + lh + "x" + lw);
            long base = next;
            long max = 0;
            int x = i;
            for (int t = 0; t < lt; t++)
                for (long h = 0; h < lh; h++)
                    for (long w = 0; w < lw; w++, x++) {
                        pos[x] = base + tpos[t];
                        pos[n + x] = base + h;
                        pos[2 * n + x] = base + w;
                    }
            for (long t : tpos) max = Math.max(max, t);
            next = contract == VideoContract.TRANSFORMERS_5_18 ? base + Math.max(lh, lw)
                    : base + Math.max(max, Math.max(lh, lw) - 1) + 1;
            i = j;
        }
        if (k != grids.size() || v != videos.size())
            throw new IllegalArgumentException("the ids hold " + k + " image and " + v + " video run(s) for " + grids.size()
                    + " grid(s) and " + videos.size() + " video(s)");
        return pos;
    }

    /**
     * Temporal offsets of a video's patches (reference {@code _t_positions}). Qwen2.5-VL: 5.18
     * {@code (arange(t) * f32(2·spg)).long()}; 4.57 {@code arange(t) * int(spg) * 2} (truncated first); official rope2d
     * {@code (k · spg · 2)} in float32, truncated. Others: the patch index.
     */
    static long[] temporalPositions(ProcessorPreset model, VideoTokens v, VideoContract contract) {
        int t = Math.toIntExact(v.t());
        if (model != ProcessorPreset.QWEN2_5_VL) return arange(t);
        float spg = v.secondPerGridT();
        var out = new long[t];
        switch (contract) {
            case TRANSFORMERS_5_18 -> {
                float interval = 2.0f * spg;
                for (int k = 0; k < t; k++) out[k] = (long) ((float) k * interval);
            }
            case TRANSFORMERS_4_57 -> {
                long whole = (long) spg;
                for (int k = 0; k < t; k++) out[k] = k * whole * 2;
            }
            case OFFICIAL -> {
                for (int k = 0; k < t; k++) out[k] = (long) (((float) k * spg) * 2.0f);
            }
        }
        return out;
    }

    private static long[] arange(long t) {
        var out = new long[Math.toIntExact(t)];
        for (int k = 0; k < out.length; k++) out[k] = k;
        return out;
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
