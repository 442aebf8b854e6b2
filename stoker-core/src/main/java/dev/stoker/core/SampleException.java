package dev.stoker.core;

import java.util.Locale;
import java.util.regex.Pattern;

/**
 * A sample could not be turned into model inputs: names the sample (or file), the stage that
 * refused it and the cause, so that a bad record is reported, counted and skipped, never fatal.
 *
 * <p>A sample is either broken ({@link Kind#ERROR}: a missing image, a malformed line) or dropped by
 * a policy the user set ({@link Kind#FILTERED}: over {@code --max-seq-len}, over {@code --max-images}).
 * Both are left out of their batch; only errors count toward a feed's error rate. Each also carries a
 * {@link #reason()}: a short class of the cause, without the sample's own paths and numbers, that
 * counts of skipped samples are grouped by.
 */
public class SampleException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Where in the per-sample path the failure happened. */
    public enum Stage { MANIFEST, FETCH, DECODE, TRANSFORM, TEXT, TOKENIZE }

    /** Whether the sample is broken or was dropped by a limit the user set. */
    public enum Kind {
        /** The sample is broken: it counts toward the error rate. */
        ERROR,
        /** The sample is sound but a limit the user set drops it: counted apart, never toward the error rate. */
        FILTERED;

        /** The lower-case name used in files and metrics ({@code error}, {@code filtered}). */
        public String label() { return name().toLowerCase(Locale.ROOT); }
    }

    /** Longest {@link #reason()} derived from a message. */
    public static final int REASON_MAX_CHARS = 80;

    private static final Pattern PATHLIKE = Pattern.compile("\\S*[/\\\\]\\S*");
    private static final Pattern NUMBER = Pattern.compile("\\d+(?:\\.\\d+)?");
    private static final Pattern SPACES = Pattern.compile("\\s+");
    /** {@code video REF: cause}: a message naming one video (its reference without spaces) before its cause. */
    private static final Pattern VIDEO_NAMED = Pattern.compile("video \\S+: (.+)", Pattern.DOTALL);

    private final String sampleId;
    private final Stage stage;
    private final Kind kind;
    private final String reason;

    public SampleException(String sampleId, Stage stage, String message) {
        this(sampleId, stage, message, null);
    }

    public SampleException(String sampleId, Stage stage, String message, Throwable cause) {
        this(sampleId, stage, Kind.ERROR, reasonOf(message), message, cause);
    }

    private SampleException(String sampleId, Stage stage, Kind kind, String reason, String message, Throwable cause) {
        super(message, cause);
        this.sampleId = sampleId;
        this.stage = stage;
        this.kind = kind;
        this.reason = reason;
    }

    /** A sound sample a limit the user set drops; {@code reason} names the limit (e.g. {@code over --max-seq-len}). */
    public static SampleException filtered(String sampleId, Stage stage, String reason, String message) {
        return new SampleException(sampleId, stage, Kind.FILTERED, reason, message, null);
    }

    /** The sample id, file path or URI the error is about; may be null when not yet known. */
    public String sampleId() { return sampleId; }

    public Stage stage() { return stage; }

    public Kind kind() { return kind; }

    /** The cause's class: the same for every sample that failed the same way (e.g. {@code file not found}). */
    public String reason() { return reason; }

    /** Returns a copy that names {@code id}, of the same stage, kind and reason (used when a lower layer did not know the sample). */
    public SampleException withSampleId(String id) {
        if (id == null || id.equals(sampleId)) return this;
        var copy = new SampleException(id, stage, kind, reason, getMessage(), getCause());
        copy.setStackTrace(getStackTrace());
        return copy;
    }

    /**
     * The class of a cause from its message: the part before the first {@code ": "} (where messages put
     * what went wrong before the detail), with paths and URIs replaced by {@code …} and numbers by
     * {@code N}, at most {@link #REASON_MAX_CHARS} characters: {@code file not found: /data/x.jpg} is
     * {@code file not found}, {@code height:5 or width:5 must be larger than factor:28} is
     * {@code height:N or width:N must be larger than factor:N}. A message about one video, {@code video REF: cause…}
     * (issue 29: how the video path names the video first), is classed by its cause:
     * {@code video a/1.mp4: file not found: /data/a/1.mp4} is {@code video: file not found}, so that the videos that
     * failed the same way count together whatever their names.
     */
    public static String reasonOf(String message) {
        if (message == null || message.isBlank()) return "unknown";
        var video = VIDEO_NAMED.matcher(message.strip());
        if (video.matches()) {
            String r = "video: " + reasonOf(video.group(1));
            return r.length() > REASON_MAX_CHARS ? r.substring(0, REASON_MAX_CHARS - 1).strip() + "…" : r;
        }
        String s = message.strip();
        int colon = s.indexOf(": ");
        if (colon > 0) s = s.substring(0, colon);
        s = PATHLIKE.matcher(s).replaceAll("…");
        s = NUMBER.matcher(s).replaceAll("N");
        s = SPACES.matcher(s).replaceAll(" ").strip();
        if (s.length() > REASON_MAX_CHARS) s = s.substring(0, REASON_MAX_CHARS - 1).strip() + "…";
        return s.isEmpty() ? "unknown" : s;
    }

    /** One line: {@code <sample>: <stage>: <cause>}. */
    public String describe() {
        return (sampleId == null ? "<unknown sample>" : sampleId) + ": " + stage.name().toLowerCase() + ": " + getMessage();
    }

    @Override
    public String toString() { return describe(); }
}
