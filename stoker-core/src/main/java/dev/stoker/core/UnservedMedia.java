package dev.stoker.core;

import java.util.List;
import java.util.Locale;

/**
 * The media kinds Stoker does not serve, and every way a record or a WebDataset sample shows one: a record that
 * carries one is refused (an error at stage MANIFEST naming where it was found), never trained as a text-only sample
 * with the medium dropped and its placeholder tokenized as text. The readers (the record parser, the WebDataset index,
 * the Parquet rows) all ask this table, so that serving a medium is removing its row.
 *
 * <p>Audio is here because the Qwen-VL processors take none (their chat templates have no audio item); a parser made for
 * an audio-capable processor ({@link AudioPreset}, stoker-text's {@code SampleParser.Audios.ACCEPT}) takes its row out
 * (issue 32). Video stays here, refused as before, until Stoker emits {@code pixel_values_videos}.
 */
public enum UnservedMedia {
    AUDIO("audio", " by the Qwen-VL processors", List.of("audio", "audios"), List.of("audio", "input_audio", "audio_url"),
            List.of("wav", "mp3", "flac", "ogg", "opus", "m4a", "aac")),
    VIDEO("video", "", List.of("video", "videos"), List.of("video"),
            List.of("mp4", "webm", "mkv", "avi", "mov"));

    private final String kind;
    private final String why;
    private final List<String> fields;
    private final List<String> items;
    private final List<String> suffixes;

    UnservedMedia(String kind, String why, List<String> fields, List<String> items, List<String> suffixes) {
        this.kind = kind;
        this.why = why;
        this.fields = fields;
        this.items = items;
        this.suffixes = suffixes;
    }

    /** The medium's name in messages: {@code audio}. */
    public String kind() { return kind; }

    /** The placeholder trainers read in text for it: {@code <audio>}. */
    public String placeholder() { return "<" + kind + ">"; }

    /** The top-level record fields (and Parquet columns) that list it: {@code audio}, {@code audios}. */
    public List<String> fields() { return fields; }

    /** The typed content items that hold it: a {@code type} of one of these, or a key of one of these. */
    public List<String> itemTypes() { return items; }

    /** The member suffixes (lower case, without the dot) of a WebDataset member holding it: {@code wav}, {@code mp3}, … */
    public List<String> memberSuffixes() { return suffixes; }

    /** The cause, for a message: {@code audio is not supported by the Qwen-VL processors}. */
    public String notSupported() { return kind + " is not supported" + why; }

    /** The cause for a typed content item: {@code audio content is not supported by the Qwen-VL processors}. */
    public String contentNotSupported() { return kind + " content is not supported" + why; }

    /** The medium a WebDataset member suffix ({@code 0.wav}, {@code MP4}) holds, by its last dot-part; null for any other. */
    public static UnservedMedia ofMemberSuffix(String suffix) {
        String ext = suffix.substring(suffix.lastIndexOf('.') + 1).toLowerCase(Locale.ROOT);
        for (var m : values()) if (m.suffixes.contains(ext)) return m;
        return null;
    }
}
