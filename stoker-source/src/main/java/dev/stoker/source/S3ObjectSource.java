package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.util.concurrent.CompletableFuture;

/**
 * An {@link ObjectSource} for a data set whose manifest is an S3 object; relative references are
 * keys under the manifest's prefix, resolved with path rules ({@code .}, {@code ..}, repeated
 * slashes) and refused when {@code ..} would climb above that prefix.
 *
 * <p>Threading: thread-safe.
 */
final class S3ObjectSource implements ObjectSource {
    private final DatasetLocation.S3 location;
    private final FetchContext ctx;

    S3ObjectSource(DatasetLocation.S3 location, FetchContext ctx) {
        this.location = location;
        this.ctx = ctx;
        ctx.s3();
    }

    @Override
    public DatasetLocation location() { return location; }

    @Override
    public CompletableFuture<byte[]> fetchManifest() {
        return ctx.s3().get(location.manifestUri(), location.bucket(), location.key(), SampleException.Stage.MANIFEST);
    }

    @Override
    public ManifestStat statManifest() throws java.io.IOException {
        return ctx.s3().stat(location.manifestUri(), location.bucket(), location.key());
    }

    @Override
    public java.io.InputStream openManifest() throws java.io.IOException {
        return ctx.s3().stream(location.manifestUri(), location.bucket(), location.key());
    }

    @Override
    public CompletableFuture<byte[]> fetchManifestRange(String sampleId, long offset, int length) {
        return ctx.s3().getRange(sampleId, location.bucket(), location.key(), offset, length);
    }

    @Override
    public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
        return ctx.fetchReference(sampleId, reference, location, null);
    }

    @Override
    public CompletableFuture<byte[]> fetchRange(String reference, long offset, int length) {
        return ctx.fetchRange(reference, location, null, offset, length);
    }

    @Override
    public ManifestStat stat(String reference) throws java.io.IOException { return ctx.stat(reference, location, null); }

    @Override
    public java.io.InputStream open(String reference) throws java.io.IOException { return ctx.open(reference, location, null); }

    /** ListObjectsV2 under the root's prefix, with the delimiter {@code /}. */
    @Override
    public java.util.List<String> list(String prefix) throws java.io.IOException {
        if (prefix.startsWith("/")) throw new java.io.IOException("absolute prefix '" + prefix + "' in an s3 data set");
        for (String segment : prefix.split("/", -1))
            if (segment.equals("..") || segment.equals("."))
                throw new java.io.IOException("prefix '" + prefix + "' has a '" + segment + "' segment");
        String root = location.rootPrefix();
        var names = new java.util.ArrayList<String>();
        for (String key : ctx.s3().list(location.bucket(), root + prefix)) names.add(key.substring(root.length()));
        names.sort(null);
        return names;
    }

    @Override
    public SourceMetrics metrics() { return ctx.metrics; }

    @Override
    public void close() { ctx.close(); }

    @Override
    public String toString() { return "S3ObjectSource[" + location.root() + "]"; }
}
