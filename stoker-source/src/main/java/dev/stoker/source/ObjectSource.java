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

    /** The bytes of the object {@code reference} names; {@code sampleId} labels errors. */
    CompletableFuture<byte[]> fetch(String sampleId, String reference);

    /**
     * {@code length} bytes at {@code offset} of the object {@code reference} names (resolved as image references are:
     * relative to the root), inside the in-flight bound like every fetch, retried as fetches are; a length over
     * {@link SourceConfig#maxObjectBytes()} is refused, an object that ends before the range fails. Failures complete
     * the future with a {@link dev.stoker.core.SampleException} (stage MANIFEST: what is read is records) labelled with the reference.
     */
    CompletableFuture<byte[]> fetchRange(String reference, long offset, int length);

    /** The size and version of the object {@code reference} names (as {@link #statManifest()} for the manifest). */
    ManifestStat stat(String reference) throws java.io.IOException;

    /** The bytes of the object {@code reference} names as a stream from its start; the caller closes it. */
    java.io.InputStream open(String reference) throws java.io.IOException;

    /**
     * The objects directly in the folder that {@code prefix} lies in (the root, or the folder up to its last
     * {@code /}; no deeper) whose references start with {@code prefix}, as references relative to the root, sorted by
     * name (local: the folder's regular files; S3: ListObjectsV2 on the prefix with the delimiter {@code /}). At most
     * {@value #MAX_LISTED} objects: more is refused.
     */
    java.util.List<String> list(String prefix) throws java.io.IOException;

    /** The most objects {@link #list} returns. */
    int MAX_LISTED = 1_000_000;

    SourceMetrics metrics();

    /** Releases connections and threads; fetches still running may fail. */
    @Override
    void close();
}
