package dev.stoker.text;

import dev.stoker.core.ProcessorPreset.ChatFamily;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * The built-in {@link ChatRenderer} of a Qwen-VL family: renders a chat as the Hub {@code chat_template} of the
 * family does for SFT ({@code add_generation_prompt=False}, no tools, no vision ids; spec §10), without a
 * template engine.
 *
 * <p>Qwen2-VL / Qwen2.5-VL insert {@code "You are a helpful assistant."} as a system turn when the
 * first message is not a system message; Qwen3-VL-Instruct has no default. For the three roles the
 * parser admits, both templates then emit every message as
 * {@code <|im_start|>ROLE\nCONTENT<|im_end|>\n}, where an image part is
 * {@code <|vision_start|><|image_pad|><|vision_end|>}, a video part {@code <|vision_start|><|video_pad|><|vision_end|>}
 * (the templates' video item, as transformers renders it) and parts are concatenated without separator.
 *
 * <p>Threading: stateless; safe to share.
 */
public final class ChatTemplate implements ChatRenderer {
    public static final String IM_START = "<|im_start|>";
    public static final String IM_END = "<|im_end|>";
    public static final String VISION_START = "<|vision_start|>";
    public static final String VISION_END = "<|vision_end|>";
    public static final String IMAGE_PAD = "<|image_pad|>";
    public static final String IMAGE_PLACEHOLDER = VISION_START + IMAGE_PAD + VISION_END;
    public static final String VIDEO_PAD = "<|video_pad|>";
    public static final String VIDEO_PLACEHOLDER = VISION_START + VIDEO_PAD + VISION_END;
    public static final String QWEN2_VL_DEFAULT_SYSTEM = "You are a helpful assistant.";

    private final ChatFamily family;

    public ChatTemplate(ChatFamily family) {
        this.family = Objects.requireNonNull(family, "family");
    }

    public ChatFamily family() { return family; }

    /** The rendered chat, one placeholder per image, before expansion and before NFC. */
    @Override
    public String render(List<Message> messages) {
        var sb = new StringBuilder(256);
        render(messages, sb);
        return sb.toString();
    }

    /** Appends the rendered chat to {@code out}. */
    @Override
    public void render(List<Message> messages, StringBuilder out) {
        if (family == ChatFamily.QWEN2_VL && (messages.isEmpty() || messages.getFirst().role() != Message.Role.SYSTEM))
            out.append(IM_START).append("system\n").append(QWEN2_VL_DEFAULT_SYSTEM).append(IM_END).append('\n');
        for (var m : messages) {
            out.append(IM_START).append(m.role().wireName()).append('\n');
            for (var p : m.parts()) {
                switch (p) {
                    case Message.Text t -> out.append(t.text());
                    case Message.Image _ -> out.append(IMAGE_PLACEHOLDER);
                    case Message.Video _ -> out.append(VIDEO_PLACEHOLDER);
                    case Message.Audio a -> throw new IllegalArgumentException("audio " + a.ref()
                            + ": the Qwen-VL templates have no audio item; audio needs an audio-capable processor (OmniPreset)");
                }
            }
            out.append(IM_END).append('\n');
        }
    }

    /**
     * The processor's placeholder expansion on text (spec §8): the k-th {@code <|image_pad|>} becomes
     * {@code t·h·w / merge²} copies. {@link TokenSequenceBuilder} does the same on token ids, which gives
     * identical ids because {@code <|image_pad|>} is an added token that always splits the text.
     *
     * @throws IllegalArgumentException if the number of placeholders differs from the number of grids
     */
    public static String expandImagePads(String text, List<long[]> grids, int mergeSize) {
        int found = 0;
        long extraChars = 0;
        for (int i = text.indexOf(IMAGE_PAD); i >= 0; i = text.indexOf(IMAGE_PAD, i + IMAGE_PAD.length())) {
            if (found < grids.size()) extraChars += (imageTokens(grids.get(found), mergeSize) - 1) * IMAGE_PAD.length();
            found++;
        }
        if (found != grids.size())
            throw new IllegalArgumentException(found + " " + IMAGE_PAD + " placeholder(s) but " + grids.size() + " image grid(s)");
        var sb = new StringBuilder(Math.toIntExact(text.length() + extraChars));
        int pos = 0;
        for (int k = 0; k < found; k++) {
            int i = text.indexOf(IMAGE_PAD, pos);
            sb.append(text, pos, i);
            sb.repeat(IMAGE_PAD, Math.toIntExact(imageTokens(grids.get(k), mergeSize)));
            pos = i + IMAGE_PAD.length();
        }
        return sb.append(text, pos, text.length()).toString();
    }

    /** LLM tokens of one image: {@code t·h·w / merge²}, after checking the grid is well formed. */
    public static long imageTokens(long[] grid, int mergeSize) {
        if (grid.length != 3 || grid[0] < 1 || grid[1] < 1 || grid[2] < 1 || mergeSize < 1
                || grid[1] % mergeSize != 0 || grid[2] % mergeSize != 0)
            throw new IllegalArgumentException("bad image grid " + Arrays.toString(grid) + " for merge size " + mergeSize);
        return grid[0] * grid[1] * grid[2] / ((long) mergeSize * mergeSize);
    }
}
