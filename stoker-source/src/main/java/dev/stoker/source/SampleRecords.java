package dev.stoker.source;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The records of one source, by index: a JSONL or JSON-array manifest ({@link ManifestRecords}), a
 * list of WebDataset tar shards, a Parquet data set. Each record is a JSON value in one of the layouts
 * the parser reads, and, where the source carries its images itself (a tar's image members, a Parquet
 * image column), those images' bytes in the order the record's placeholders take them.
 *
 * <p>Indices are 0-based and dense, {@code [0, size())}, in the source's own order (a manifest's
 * lines, the shards in their listed order and the members in each, the rows of each file in turn).
 *
 * <p>Threading: implementations are thread-safe; reads may complete on any thread and never block the caller.
 */
public interface SampleRecords {
    /** The source's short name in ids and messages ({@code train.jsonl}, {@code shard-{000..009}.tar}). */
    String name();

    int size();

    /** Record {@code i}'s id until its own {@code "id"} field is read ({@code train.jsonl:17}, {@code shard-003.tar:key}). */
    String id(int i);

    /** Record {@code i}: its JSON and its embedded images. A failure completes exceptionally (a {@code SampleException} keeps its stage). */
    CompletableFuture<Record> record(int i);

    /** A digest of the source's content (or of its identity: names, sizes and versions), for a job's fingerprint. */
    byte[] digest();

    /**
     * Whether a record of this source may hold a video, as far as the source can tell without reading its records
     * (issue 29, {@code --video auto}): a manifest that spells "video" somewhere, a shard with a video member, a column of
     * videos. False by default: a source that cannot tell serves images; {@code --video on} reads videos anyway.
     */
    default boolean mayHoldVideo() { return false; }

    /**
     * One record. {@code images} empty: the record names its images by reference, fetched from the source; {@code videos}
     * empty: likewise for its videos (opened through the feed source by reference, {@code FeedSource#openVideo});
     * {@code audios} empty: likewise for its audio clips (issue 32; carried ones are read whole with the record).
     */
    record Record(byte[] json, List<Embedded> images, List<EmbeddedVideo> videos, List<Embedded> audios) {
        public Record {
            images = List.copyOf(images);
            videos = List.copyOf(videos);
            audios = List.copyOf(audios);
        }

        /** A record whose source carries images and videos, and no audio. */
        public Record(byte[] json, List<Embedded> images, List<EmbeddedVideo> videos) { this(json, images, videos, List.of()); }

        /** A record whose source carries images and no video. */
        public Record(byte[] json, List<Embedded> images) { this(json, images, List.of()); }

        public static Record of(byte[] json) { return new Record(json, List.of(), List.of()); }

        /** Whether the source carries any of the record's media (else the record names them all by reference). */
        public boolean carriesMedia() { return !images.isEmpty() || !videos.isEmpty() || !audios.isEmpty(); }

        /** The carried audio clips' names, in order (issue 32: a tar's audio members, a Parquet audio column). */
        public List<String> audioNames() { return audios.stream().map(Embedded::name).toList(); }

        /** The carried images' names, in order. */
        public List<String> imageNames() { return images.stream().map(Embedded::name).toList(); }

        /** The carried videos' names, in order. */
        public List<String> videoNames() { return videos.stream().map(EmbeddedVideo::name).toList(); }
    }

    /**
     * An image (or an audio clip) the source carries: {@code name} unique within its record (a tar member's name, a Parquet
     * struct's path or {@code row#k}), {@code bytes} the encoded file (JPEG, PNG, WebP; WAV, FLAC, MP3, …).
     */
    record Embedded(String name, byte[] bytes) {}

    /**
     * A video the source carries (issue 29): {@code name} unique among the record's videos (a tar member's name, a
     * Parquet struct's path or {@code row#vk}), {@code sizeBytes} its container's length (-1 when unknown: a path opened by
     * reference), {@code bytes} how to read it.
     * Not read when the record is: a tar member is opened where the video is demuxed and read in ranges of its shard
     * ({@link RangedObjectBytes#range}), so a seek in a large member fetches the blocks around it, never the member; a
     * Parquet cell is already in memory ({@link dev.stoker.core.io.SeekableByteSource#of(String, byte[])}).
     */
    record EmbeddedVideo(String name, long sizeBytes, Opener bytes) {
        public EmbeddedVideo {
            java.util.Objects.requireNonNull(name, "name");
            java.util.Objects.requireNonNull(bytes, "bytes");
        }

        /** Opens the video's bytes for one demuxer (the caller closes them). Blocking: called on the thread that demuxes. */
        public dev.stoker.core.io.SeekableByteSource open() throws java.io.IOException { return bytes.open(); }

        /** A video whose bytes are in memory already (a Parquet cell). */
        public static EmbeddedVideo inMemory(String name, byte[] bytes) {
            return new EmbeddedVideo(name, bytes.length, () -> dev.stoker.core.io.SeekableByteSource.of(name, bytes));
        }
    }

    /** Opens a carried video's bytes. */
    @FunctionalInterface
    interface Opener {
        dev.stoker.core.io.SeekableByteSource open() throws java.io.IOException;
    }
}
