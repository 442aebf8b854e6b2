package dev.stoker.text;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.List;
import java.util.regex.Pattern;

/**
 * What the token side needs of one video of a sample (issue 29), computed by the video sampler: its
 * {@code video_grid_thw} row ({@code t} temporal patches, {@code h × w} spatial patches, before merging), for
 * Qwen2.5-VL its {@code second_per_grid_t} (the float32 the processor returns; {@code NaN} for other families) and for
 * Qwen3-VL one timestamp text per temporal patch ({@code "<0.2 seconds>"}; empty for other families).
 * {@link TokenSequenceBuilder} expands the video's {@code <|video_pad|>} and places its M-RoPE positions from these.
 *
 * <p>Timestamps are formatted as Python's {@code f"<{t:.1f} seconds>"} does (the exact binary value rounded half to
 * even: 0.25 → "0.2", 0.35 → "0.3", where {@link String#format} gives "0.3" and "0.4"), {@link #timestampText};
 * reference {@code format_seconds} in {@code shared/reference/ref_qwenvl_video.py} (correction 9 of the vectors).
 *
 * @param t               temporal patches ({@code ceil(frames / temporal_patch_size)})
 * @param h               patch rows
 * @param w               patch columns
 * @param secondPerGridT  seconds per temporal patch (Qwen2.5-VL), NaN where the family has none
 * @param timestampTexts  Qwen3-VL: {@code t} texts {@code <S.D seconds>}, one per temporal patch; else empty
 */
public record VideoTokens(long t, long h, long w, float secondPerGridT, List<String> timestampTexts) {
    /** Most temporal patches of one video: a sampler's most frames (768) over the temporal patch size, with room. */
    public static final long MAX_T = 1 << 16;
    private static final Pattern TIMESTAMP = Pattern.compile("<\\d{1,9}\\.\\d seconds>");

    public VideoTokens {
        if (t < 1 || h < 1 || w < 1 || t > MAX_T || h > 1 << 16 || w > 1 << 16)
            throw new IllegalArgumentException("bad video grid [" + t + ", " + h + ", " + w + "]");
        timestampTexts = List.copyOf(timestampTexts);
        if (!timestampTexts.isEmpty() && timestampTexts.size() != t)
            throw new IllegalArgumentException(timestampTexts.size() + " timestamp texts for " + t + " temporal patches");
        for (var s : timestampTexts)
            if (!TIMESTAMP.matcher(s).matches())
                throw new IllegalArgumentException("timestamp text '" + s + "' is not of the form <S.D seconds>");
    }

    /** A Qwen2-VL video. */
    public static VideoTokens qwen2(long t, long h, long w) { return new VideoTokens(t, h, w, Float.NaN, List.of()); }

    /** A Qwen2.5-VL video with its {@code second_per_grid_t}. */
    public static VideoTokens qwen25(long t, long h, long w, float secondPerGridT) {
        if (!(secondPerGridT > 0) || Float.isInfinite(secondPerGridT))
            throw new IllegalArgumentException("second_per_grid_t must be positive and finite, got " + secondPerGridT);
        return new VideoTokens(t, h, w, secondPerGridT, List.of());
    }

    /** A Qwen3-VL video with the timestamp, in seconds, of each temporal patch (the mean of its frames' times). */
    public static VideoTokens qwen3(long t, long h, long w, double[] timestampsSeconds) {
        var texts = new String[timestampsSeconds.length];
        for (int i = 0; i < texts.length; i++) texts[i] = timestampText(timestampsSeconds[i]);
        return new VideoTokens(t, h, w, Float.NaN, List.of(texts));
    }

    /** {@code f"<{seconds:.1f} seconds>"} exactly as Python writes it: half to even on the exact binary value. */
    public static String timestampText(double seconds) {
        if (!(seconds >= 0) || Double.isInfinite(seconds) || seconds >= 1e9)
            throw new IllegalArgumentException("a video timestamp must be in [0, 1e9) seconds, got " + seconds);
        return "<" + new BigDecimal(seconds).setScale(1, RoundingMode.HALF_EVEN).toPlainString() + " seconds>";
    }

    /** LLM tokens of the whole video, {@code t·h·w / merge²}. */
    public long tokens(int mergeSize) { return t * (h / mergeSize) * (w / mergeSize); }
}
