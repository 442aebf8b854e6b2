package dev.stoker.core;

/**
 * A sample could not be turned into model inputs: names the sample (or file), the stage that
 * refused it and the cause, so that a bad record is reported, counted and skipped, never fatal.
 */
public class SampleException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Where in the per-sample path the failure happened. */
    public enum Stage { MANIFEST, FETCH, DECODE, TRANSFORM, TEXT, TOKENIZE }

    private final String sampleId;
    private final Stage stage;

    public SampleException(String sampleId, Stage stage, String message) {
        this(sampleId, stage, message, null);
    }

    public SampleException(String sampleId, Stage stage, String message, Throwable cause) {
        super(message, cause);
        this.sampleId = sampleId;
        this.stage = stage;
    }

    /** The sample id, file path or URI the error is about; may be null when not yet known. */
    public String sampleId() { return sampleId; }

    public Stage stage() { return stage; }

    /** Returns a copy that names {@code id} (used when a lower layer did not know the sample). */
    public SampleException withSampleId(String id) {
        if (id == null || id.equals(sampleId)) return this;
        var copy = new SampleException(id, stage, getMessage(), getCause());
        copy.setStackTrace(getStackTrace());
        return copy;
    }

    /** One line: {@code <sample>: <stage>: <cause>}. */
    public String describe() {
        return (sampleId == null ? "<unknown sample>" : sampleId) + ": " + stage.name().toLowerCase() + ": " + getMessage();
    }

    @Override
    public String toString() { return describe(); }
}
