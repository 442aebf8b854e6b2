package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException;
import dev.stoker.encode.batch.SkippedSample;

/**
 * One skipped sample: which one, where in the schedule, the stage that refused it and why.
 *
 * @param sampleId      the record's id, or {@code manifest:line} when the line did not parse
 * @param datasetIndex  0-based manifest line index (non-blank lines)
 * @param kind          broken ({@code ERROR}) or dropped by a limit the user set ({@code FILTERED})
 * @param reason        the cause's class, which counts are grouped by ({@link SampleException#reason()})
 */
public record FeedError(String sampleId, int datasetIndex, long epoch, long step, int rank,
                        SampleException.Stage stage, String cause, SampleException.Kind kind, String reason) {

    /** {@code s}, skipped from rank {@code rank}'s batch of (epoch, step). */
    public static FeedError of(long epoch, long step, int rank, SkippedSample s) {
        return new FeedError(s.sampleId(), s.datasetIndex(), epoch, step, rank, s.stage(), s.cause(), s.kind(), s.reason());
    }

    public String describe() {
        return sampleId + " (index " + datasetIndex + ", epoch " + epoch + " step " + step + " rank " + rank + "): "
                + stage.name().toLowerCase() + (kind == SampleException.Kind.FILTERED ? " (filtered)" : "") + ": " + cause;
    }
}
