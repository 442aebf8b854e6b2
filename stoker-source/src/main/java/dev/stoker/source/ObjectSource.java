package dev.stoker.source;

import java.util.concurrent.CompletableFuture;

/**
 * Fetches a data set's manifest and the objects its records reference, wherever they are stored
 * (local files, S3), asynchronously and within a bound on fetches in flight.
 *
 * <p>References: a relative path resolves against {@link DatasetLocation#root()} and is refused if
 * it leaves it (through {@code ..} segments, or a symlink for local files); {@code s3://bucket/key}
 * and {@code file:///path} URIs are taken as given.
 *
 * <p>Failures complete the future with {@link dev.stoker.core.SampleException} (stage FETCH, or
 * MANIFEST for the manifest) naming the sample and the object; nothing is thrown by the calls.
 *
 * <p>Threading: thread-safe; calls never block (a fetch that finds every slot taken waits without
 * a thread). Futures complete on the source's I/O threads: move CPU work elsewhere.
 */
public interface ObjectSource extends AutoCloseable {

    DatasetLocation location();

    /** The manifest's bytes (all of them: small manifests and tests; {@link #openManifest()} for an index). */
    CompletableFuture<byte[]> fetchManifest();

    /**
     * The manifest's size and version without its bytes (local: size and modification time; S3: content length and
     * ETag): what a cached index of it is keyed by.
     */
    ManifestStat statManifest() throws java.io.IOException;

    /** The manifest's bytes as a stream from its start, read once to index it; the caller closes it. */
    java.io.InputStream openManifest() throws java.io.IOException;

    /**
     * {@code length} bytes of the manifest at {@code offset} (one record, found by an index), inside the in-flight
     * bound like every fetch; a length over {@link SourceConfig#maxObjectBytes()} is refused. {@code sampleId} labels
     * errors (stage MANIFEST).
     */
    CompletableFuture<byte[]> fetchManifestRange(String sampleId, long offset, int length);

    /**
     * {@code length} bytes at {@code offset} of the object {@code reference} names (resolved against the root as image
     * references are: a Parquet file's footer or row group, a tar member), inside the in-flight bound like every fetch;
     * a length over {@link SourceConfig#maxObjectBytes()} is refused. Errors (stage MANIFEST) are labelled with the
     * reference.
     */
    CompletableFuture<byte[]> fetchRange(String reference, long offset, int length);

    /**
     * The size and version of the object {@code reference} names (local: size and modification time; S3: content
     * length and ETag), without its bytes; blocks the caller.
     */
    ManifestStat stat(String reference) throws java.io.IOException;

    /** The bytes of the object {@code reference} names; {@code sampleId} labels errors. */
    CompletableFuture<byte[]> fetch(String sampleId, String reference);

    SourceMetrics metrics();

    /** Releases connections and threads; fetches still running may fail. */
    @Override
    void close();
}
