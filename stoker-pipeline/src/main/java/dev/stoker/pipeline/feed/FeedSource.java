package dev.stoker.pipeline.feed;

import dev.stoker.source.ObjectSource;
import java.util.concurrent.CompletableFuture;

/**
 * Where a feed gets its bytes: the manifest once at start, then each image by the reference a
 * sample names (relative to the manifest's folder). An object store's client adapts to it.
 *
 * <p>Threading: called from pipeline threads concurrently; futures may complete on any thread and
 * must not block it. Failures complete the future exceptionally (a {@code SampleException} keeps its stage).
 */
public interface FeedSource {
    CompletableFuture<byte[]> fetchManifest();

    CompletableFuture<byte[]> fetch(String sampleId, String reference);

    /** A short name for reports and manifest line ids, e.g. {@code train.jsonl}. */
    String manifestName();

    /** {@code source} seen as a feed source; the manifest's name is the last segment of its URI. */
    static FeedSource of(ObjectSource source) {
        String uri = source.location().manifestUri();
        String name = uri.substring(uri.lastIndexOf('/') + 1);
        return new FeedSource() {
            @Override
            public CompletableFuture<byte[]> fetchManifest() { return source.fetchManifest(); }

            @Override
            public CompletableFuture<byte[]> fetch(String sampleId, String reference) { return source.fetch(sampleId, reference); }

            @Override
            public String manifestName() { return name; }
        };
    }
}
