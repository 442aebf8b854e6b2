package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;

/**
 * An {@link ObjectSource} for a data set whose manifest is a local file; relative references are
 * files under the manifest's folder, symlinks leading out of it are refused.
 *
 * <p>Threading: thread-safe.
 */
final class LocalObjectSource implements ObjectSource {
    private final DatasetLocation.Local location;
    private final FetchContext ctx;
    private final Path realRoot;

    LocalObjectSource(DatasetLocation.Local location, FetchContext ctx) {
        this.location = location;
        this.ctx = ctx;
        Path real;
        try {
            real = location.rootDir().toRealPath();
        } catch (IOException e) {
            real = location.rootDir();
        }
        this.realRoot = real;
        ctx.local();
    }

    @Override
    public DatasetLocation location() { return location; }

    @Override
    public CompletableFuture<byte[]> fetchManifest() {
        return ctx.local().read(location.manifestUri(), location.manifest(), null, SampleException.Stage.MANIFEST);
    }

    @Override
    public ManifestStat statManifest() throws java.io.IOException {
        var a = java.nio.file.Files.readAttributes(location.manifest(), java.nio.file.attribute.BasicFileAttributes.class);
        if (!a.isRegularFile()) throw new java.io.IOException("manifest " + location.manifest() + " is not a regular file");
        return new ManifestStat(a.size(), Long.toString(a.lastModifiedTime().to(java.util.concurrent.TimeUnit.NANOSECONDS)));
    }

    @Override
    public java.io.InputStream openManifest() throws java.io.IOException {
        return java.nio.file.Files.newInputStream(location.manifest());
    }

    @Override
    public CompletableFuture<byte[]> fetchManifestRange(String sampleId, long offset, int length) {
        return ctx.local().readRange(sampleId, location.manifest(), offset, length);
    }

    @Override
    public CompletableFuture<byte[]> fetchRange(String reference, long offset, int length) {
        return ctx.fetchRange(reference, offset, length, location, realRoot);
    }

    @Override
    public ManifestStat stat(String reference) throws java.io.IOException {
        return ctx.stat(reference, location, realRoot);
    }

    @Override
    public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
        return ctx.fetchReference(sampleId, reference, location, realRoot);
    }

    @Override
    public SourceMetrics metrics() { return ctx.metrics; }

    @Override
    public void close() { ctx.close(); }

    @Override
    public String toString() { return "LocalObjectSource[" + location.root() + "]"; }
}
