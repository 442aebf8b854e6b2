package dev.stoker.encode.batch;

import dev.stoker.core.SampleException;

/**
 * A scheduled sample left out of its batch, and why.
 *
 * @param sampleId      the record's id, or {@code manifest:line} when the line did not parse
 * @param datasetIndex  0-based manifest index (non-blank lines)
 * @param stage         where it failed
 * @param cause         the error, one line
 * @param kind          broken ({@code ERROR}) or dropped by a limit the user set ({@code FILTERED})
 * @param reason        the cause's class ({@link SampleException#reason()})
 */
public record SkippedSample(String sampleId, int datasetIndex, SampleException.Stage stage, String cause, SampleException.Kind kind,
                            String reason) {
    /** A broken sample, its reason derived from {@code cause}. */
    public SkippedSample(String sampleId, int datasetIndex, SampleException.Stage stage, String cause) {
        this(sampleId, datasetIndex, stage, cause, SampleException.Kind.ERROR, SampleException.reasonOf(cause));
    }
}
