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

    /** The manifest's bytes. */
    CompletableFuture<byte[]> fetchManifest();

    /** The bytes of the object {@code reference} names; {@code sampleId} labels errors. */
    CompletableFuture<byte[]> fetch(String sampleId, String reference);

    SourceMetrics metrics();

    /** Releases connections and threads; fetches still running may fail. */
    @Override
    void close();
}
