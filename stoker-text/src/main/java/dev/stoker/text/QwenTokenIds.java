package dev.stoker.text;

/** Token ids of the Qwen2 vocabulary that the label and position rules look for (spec §9, §11). */
public final class QwenTokenIds {
    public static final long ENDOFTEXT = 151643;
    public static final long IM_START = 151644;
    public static final long IM_END = 151645;
    public static final long VISION_START = 151652;
    public static final long VISION_END = 151653;
    public static final long IMAGE_PAD = 151655;
    public static final long VIDEO_PAD = 151656;
    /** The word {@code assistant}. */
    public static final long ASSISTANT = 77091;
    public static final long NEWLINE = 198;
    /** Label of a position the loss ignores. */
    public static final long IGNORE_INDEX = -100;

    private QwenTokenIds() {}
}
