package dev.stoker.text;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * One chat turn: a role and its content as an ordered list of text, image, video and audio parts, rendered
 * back to back with no separator (spec §10).
 */
public record Message(Role role, List<Part> parts) {

    /** The roles the Qwen-VL templates render; other roles are rejected at parse time. */
    public enum Role {
        SYSTEM("system"), USER("user"), ASSISTANT("assistant");

        private final String wireName;

        Role(String wireName) { this.wireName = wireName; }

        /** The name written after {@code <|im_start|>} and used in HF {@code messages}. */
        public String wireName() { return wireName; }
    }

    /** A piece of message content. */
    public sealed interface Part permits Text, Image, Video, Audio {}

    /** Text rendered verbatim. */
    public record Text(String text) implements Part {
        public Text { Objects.requireNonNull(text, "text"); }
    }

    /** An image, by the path or URL the record gave; rendered as one vision placeholder. */
    public record Image(String ref) implements Part {
        public Image { Objects.requireNonNull(ref, "ref"); }
    }

    /**
     * A video (issue 29): a file by the path or URL the record gave ({@code ref}), or a list of frame images
     * ({@code frames}, in order; {@code ref} is then null), with the record's per-item keys ({@code fps},
     * {@code nframes}, {@code video_start}, …) as given, in the record's order. This type only carries the keys;
     * what they mean is the video sampler's business. Values are {@link Long} (integral JSON numbers),
     * {@link Double} (other JSON numbers, finite) or {@link String}, and {@link Boolean} for the one boolean key a
     * parser that reads audio admits ({@code use_audio_in_video}, issue 32). Rendered as one vision placeholder.
     */
    public record Video(String ref, List<String> frames, Map<String, Object> options) implements Part {
        public Video {
            frames = List.copyOf(frames);
            if ((ref == null) == frames.isEmpty())
                throw new IllegalArgumentException("a video is a file reference or a non-empty frame list, not "
                        + (ref == null ? "neither" : "both"));
            for (var e : options.entrySet()) {
                Objects.requireNonNull(e.getKey(), "option key");
                var v = e.getValue();
                if (!(v instanceof Long || v instanceof String || v instanceof Boolean || v instanceof Double d && Double.isFinite(d)))
                    throw new IllegalArgumentException("video option '" + e.getKey() + "': expected a Long, a finite Double, a Boolean or a String, got " + v);
            }
            options = Collections.unmodifiableMap(new LinkedHashMap<>(options));
        }

        /** A video file with no per-item keys. */
        public static Video of(String ref) { return new Video(Objects.requireNonNull(ref, "ref"), List.of(), Map.of()); }

        /** Whether this video is a list of frame images rather than a file. */
        public boolean isFrameList() { return ref == null; }

        /**
         * Whether the video's own audio track is fed to the model too ({@code use_audio_in_video}, Qwen2.5-Omni and
         * Qwen3-Omni): its audio tokens are then interleaved with the video's (issue 32). False when the key is absent.
         */
        public boolean useAudioInVideo() { return Boolean.TRUE.equals(options.get(USE_AUDIO_IN_VIDEO)); }
    }

    /** The per-item (and per-record) key that asks for a video's audio track: {@code use_audio_in_video}. */
    public static final String USE_AUDIO_IN_VIDEO = "use_audio_in_video";

    /**
     * An audio clip (issue 32): a file by the path or URI the record gave, with the record's per-item keys (such as
     * qwen-omni-utils' {@code audio_start}/{@code audio_end}) as given, in the record's order; values as for
     * {@link Video}'s options, booleans excepted. What they mean is the audio decoder's business. Rendered as one audio
     * placeholder ({@code <|audio_bos|><|AUDIO|><|audio_eos|>} in the Omni templates).
     */
    public record Audio(String ref, Map<String, Object> options) implements Part {
        public Audio {
            Objects.requireNonNull(ref, "ref");
            for (var e : options.entrySet()) {
                Objects.requireNonNull(e.getKey(), "option key");
                var v = e.getValue();
                if (!(v instanceof Long || v instanceof String || v instanceof Double d && Double.isFinite(d)))
                    throw new IllegalArgumentException("audio option '" + e.getKey() + "': expected a Long, a finite Double or a String, got " + v);
            }
            options = Collections.unmodifiableMap(new LinkedHashMap<>(options));
        }

        /** An audio file with no per-item keys. */
        public static Audio of(String ref) { return new Audio(ref, Map.of()); }
    }

    public Message {
        Objects.requireNonNull(role, "role");
        parts = List.copyOf(parts);
    }

    public static Message text(Role role, String text) { return new Message(role, List.of(new Text(text))); }
}
