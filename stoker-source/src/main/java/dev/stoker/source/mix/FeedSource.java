package dev.stoker.source.mix;

import dev.stoker.source.ManifestRecords;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SampleRecords;
import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Where a feed gets its bytes: the manifest once at start, then each image by the reference a
 * sample names (relative to the manifest's folder). An object store's client adapts to it.
 *
 * <p>Threading: called from pipeline threads concurrently; futures may complete on any thread and
 * must not block it. Failures complete the future exceptionally (a {@code SampleException} keeps its stage).
 */
public interface FeedSource {
    CompletableFuture<byte[]> fetchManifest();

    /**
     * The manifest's records, indexed: by default from its bytes, all fetched at once (a small source); an object
     * store's source reads each record where its index says ({@link ManifestRecords#open}).
     */
    default SampleRecords records() throws IOException {
        return ManifestRecords.inMemory(manifestName(), readManifest(this));
    }

    /** How long a source may take to give its manifest. */
    long MANIFEST_TIMEOUT_SECONDS = 300;

    /** The manifest's bytes, read within {@link #MANIFEST_TIMEOUT_SECONDS}. */
    static byte[] readManifest(FeedSource source) throws IOException {
        try {
            return source.fetchManifest().get(MANIFEST_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            throw new IOException("cannot read manifest " + source.manifestName() + ": " + e.getCause(), e.getCause());
        } catch (TimeoutException e) {
            throw new IOException("manifest " + source.manifestName() + " not read within " + MANIFEST_TIMEOUT_SECONDS + " s", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while reading manifest " + source.manifestName(), e);
        }
    }

    CompletableFuture<byte[]> fetch(String sampleId, String reference);

    /** An image of record {@code record} (numbered as {@link #records()} numbers them): a mix fetches it from the record's source. */
    default CompletableFuture<byte[]> fetch(int record, String sampleId, String reference) { return fetch(sampleId, reference); }

    /** A short name for reports and manifest line ids, e.g. {@code train.jsonl}. */
    String manifestName();

    /** How long one ranged read of a video may take ({@link #openVideo}). */
    long VIDEO_READ_TIMEOUT_NANOS = dev.stoker.source.RangedObjectBytes.READ_TIMEOUT_NANOS;

    /**
     * A video of record {@code record} by the reference its sample names, read in ranges as the demuxer asks (issue 29: a
     * seek in a large file fetches the blocks around it, not the file). Blocking: called on a CPU thread.
     *
     * @throws IOException when the video cannot be found or read; by default, a source that cannot read videos
     */
    default dev.stoker.core.io.SeekableByteSource openVideo(int record, String sampleId, String reference) throws IOException {
        throw new IOException("the source " + manifestName() + " cannot read videos");
    }

    /** {@code source} seen as a feed source; the manifest's name is the last segment of its URI. */
    static FeedSource of(ObjectSource source) { return of(source, ManifestRecords.IndexCache.defaults(System.getenv())); }

    /** {@link #of(ObjectSource)} keeping the indexes of large manifests in {@code cache} (null: none). */
    static FeedSource of(ObjectSource source, ManifestRecords.IndexCache cache) {
        String uri = source.location().manifestUri();
        String name = uri.substring(uri.lastIndexOf('/') + 1);
        return new FeedSource() {
            @Override
            public CompletableFuture<byte[]> fetchManifest() { return source.fetchManifest(); }

            @Override
            public SampleRecords records() throws IOException { return SampleFormat.records(source, name, cache); }

            @Override
            public CompletableFuture<byte[]> fetch(String sampleId, String reference) { return source.fetch(sampleId, reference); }

            @Override
            public String manifestName() { return name; }

            @Override
            public dev.stoker.core.io.SeekableByteSource openVideo(int record, String sampleId, String reference) throws IOException {
                return dev.stoker.source.RangedObjectBytes.of(source, reference, VIDEO_READ_TIMEOUT_NANOS);
            }
        };
    }
}
