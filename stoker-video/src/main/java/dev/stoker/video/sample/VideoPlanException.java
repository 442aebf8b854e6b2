package dev.stoker.video.sample;

/**
 * A video whose plan cannot be made the way the reference implementations make it (they raise, or would index past
 * the end): the message names the video and the cause, so the sample is refused with one line, not a stack trace.
 */
public final class VideoPlanException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;
    private final String video;

    public VideoPlanException(String video, String cause) {
        super("video " + video + ": " + cause);
        this.video = video;
    }

    /** The video's name as the caller gave it (file, URI or sample-relative path). */
    public String video() { return video; }
}
