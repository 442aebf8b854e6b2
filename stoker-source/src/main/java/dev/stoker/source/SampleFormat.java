package dev.stoker.source;

import java.io.IOException;
import java.util.ServiceLoader;

/**
 * A way to read a source's records other than a JSONL / JSON-array manifest: WebDataset tar shards,
 * Parquet files. A format is found by the source's URI ({@link #reads}); the first installed format
 * (by {@link ServiceLoader}, {@code META-INF/services/dev.stoker.source.SampleFormat}) that reads it
 * opens it, and a URI no format claims is a manifest ({@link ManifestRecords}).
 */
public interface SampleFormat {
    /** A short name for messages and docs ({@code webdataset}, {@code parquet}). */
    String name();

    /** Whether this format reads the source at {@code uri} (decided from the URI alone: no I/O). */
    boolean reads(String uri);

    /**
     * The records of {@code source} (its {@link ObjectSource#location()} names the data: one file, or a
     * pattern of them), named {@code name} in ids, indexed once and the index kept in {@code cache} when
     * large enough (null: none).
     */
    SampleRecords open(ObjectSource source, String name, ManifestRecords.IndexCache cache) throws IOException;

    /** The records of {@code source} in the format that reads its URI, else as a manifest. */
    static SampleRecords records(ObjectSource source, String name, ManifestRecords.IndexCache cache) throws IOException {
        String uri = source.location().manifestUri();
        for (var format : ServiceLoader.load(SampleFormat.class, SampleFormat.class.getClassLoader()))
            if (format.reads(uri)) return format.open(source, name, cache);
        return ManifestRecords.open(source, name, cache);
    }
}
