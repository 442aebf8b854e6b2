package dev.stoker.text;

/**
 * Which trainer's rules the video tokens and positions follow (issue 29): the Qwen-VL processors and
 * {@code get_rope_index} changed between transformers releases, and the official qwen-vl-finetune code differs from
 * both. Each constant is the reference's {@code compat} level of the same name
 * ({@code shared/reference/ref_qwenvl_video.py}, checked bit for bit against transformers 5.18.0 and 4.57.6 and
 * against qwen-vl-finetune's {@code rope2d.get_rope_index_2/25/3}; {@code shared/vectors/qwen-vl-video/README.md}).
 *
 * <pre>
 *                          Qwen3 video text                       Qwen2.5 temporal position k   text after a block
 *  OFFICIAL / 4.57         groups replace VS&lt;|video_pad|&gt;VE      official: int(f32(f32(k·spg)·2))   max(block) + 1
 *                                                                 4.57: k · int(spg) · 2
 *  5.18                    VS groups VE (only the pad replaced)   int(f32(k · f32(2·spg)))        start + max(h, w)/merge
 * </pre>
 * A group is {@code <t seconds><|vision_start|>pads<|vision_end|>}; images are the same under all three. Without
 * {@code --transformers}, Stoker emits {@link #OFFICIAL} (the vectors' "contract" section).
 */
public enum VideoContract {
    /** qwen-vl-finetune (rope2d): 4.57's text and advance, the float product for Qwen2.5. Stoker's default. */
    OFFICIAL,
    /** transformers 4.57.6: Qwen2.5's {@code second_per_grid_t} truncated to an integer before the product. */
    TRANSFORMERS_4_57,
    /**
     * transformers 5.18.0: Qwen3 keeps the template's {@code <|vision_start|>…<|vision_end|>} around the groups (+2
     * tokens per video), and text after a vision block continues at {@code start + max(h, w)/merge}, ignoring the
     * temporal extent (a Qwen2/2.5 video's later frames then share positions with the text after it).
     */
    TRANSFORMERS_5_18;

    /**
     * The contract of a transformers release named by {@code --transformers} (MAJOR.MINOR; stoker-encode's
     * {@code TransformersVersion}): only the two releases the video vectors were checked against are mapped, 4.57 and
     * 5.18; any other is refused rather than guessed, because the rules changed between them at releases not yet
     * pinned down (the vectors' README lists the differences, not when each came).
     *
     * @throws IllegalArgumentException for a release other than 4.57.x or 5.18.x, saying which are known
     */
    public static VideoContract forTransformers(int major, int minor) {
        if (major == 4 && minor == 57) return TRANSFORMERS_4_57;
        if (major == 5 && minor == 18) return TRANSFORMERS_5_18;
        throw new IllegalArgumentException("video tokens are known for transformers 4.57 and 5.18 (vectors/qwen-vl-video), not "
                + major + (minor < 0 ? "" : "." + minor) + "; without --transformers Stoker follows qwen-vl-finetune (OFFICIAL)");
    }
}
