package dev.stoker.encode.video;

import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.source.SampleRecords;
import java.io.IOException;
import java.util.List;

/**
 * Where a record's videos are read when its source carries them (issue 29: a WebDataset shard's video members, a
 * Parquet video column): the {@link VideoPreprocessor.VideoSource} of that record, which opens each video by the name
 * the parser placed in the sample ({@code SampleParser#parseRecord} with the record's video names) from the record's
 * {@link SampleRecords.EmbeddedVideo}s — a tar member read in ranges of its shard, a Parquet cell from memory — and
 * never falls back to a reference lookup for them: a name not carried is an error naming it.
 *
 * <p>Threading: the source returned is as thread-safe as the record's openers (each open is a new reader).
 */
public final class EmbeddedVideos {
    private EmbeddedVideos() {}

    /**
     * The videos of a record: {@code carried} by name when the record carries any, else {@code byReference} (the feed
     * source's {@code openVideo}, for a record that names its videos by path; may be null where there is none).
     */
    public static VideoPreprocessor.VideoSource over(List<SampleRecords.EmbeddedVideo> carried, VideoPreprocessor.VideoSource byReference) {
        if (carried.isEmpty()) return byReference;
        var videos = List.copyOf(carried);
        return (sampleId, reference) -> open(videos, sampleId, reference);
    }

    private static SeekableByteSource open(List<SampleRecords.EmbeddedVideo> videos, String sampleId, String reference) throws IOException {
        for (var v : videos) if (v.name().equals(reference)) return v.open();
        throw new IOException("video " + reference + " is not among the " + videos.size() + " video(s) the source carries for "
                + sampleId + " (" + String.join(", ", videos.stream().map(SampleRecords.EmbeddedVideo::name).limit(8).toList()) + ")");
    }
}
