package dev.stoker.pipeline.batch;

import dev.stoker.core.SampleException;

/**
 * A scheduled sample left out of its batch, and why.
 *
 * @param sampleId      the record's id, or {@code manifest:line} when the line did not parse
 * @param datasetIndex  0-based manifest index (non-blank lines)
 * @param stage         where it failed
 * @param cause         the error, one line
 */
public record SkippedSample(String sampleId, int datasetIndex, SampleException.Stage stage, String cause) {}
