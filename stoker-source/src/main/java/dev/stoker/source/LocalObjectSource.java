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
        // only a regular file, opened and read within the local read timeout (a FIFO named as the manifest hung the start)
        return ctx.local().stream(location.manifestUri(), location.manifest(), null);
    }

    @Override
    public CompletableFuture<byte[]> fetchManifestRange(String sampleId, long offset, int length) {
        return ctx.local().readRange(sampleId, location.manifest(), offset, length);
    }

    @Override
    public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
        return ctx.fetchReference(sampleId, reference, location, realRoot);
    }

    @Override
    public CompletableFuture<byte[]> fetchRange(String reference, long offset, int length) {
        return ctx.fetchRange(reference, location, realRoot, offset, length);
    }

    @Override
    public ManifestStat stat(String reference) throws IOException { return ctx.stat(reference, location, realRoot); }

    @Override
    public java.io.InputStream open(String reference) throws IOException { return ctx.open(reference, location, realRoot); }

    /** The regular files of the folder, by name; symlinks count when they lead to a regular file inside the root. */
    @Override
    public java.util.List<String> list(String prefix) throws IOException {
        int slash = prefix.lastIndexOf('/');
        String folder = slash < 0 ? "" : prefix.substring(0, slash + 1);
        String start = prefix.substring(slash + 1);
        Path dir;
        try {
            dir = (folder.isEmpty() ? location.rootDir() : location.rootDir().resolve(folder)).normalize();
        } catch (java.nio.file.InvalidPathException e) {
            throw new IOException("invalid folder '" + folder + "': " + e.getReason(), e);
        }
        if (!dir.startsWith(location.rootDir())) throw new IOException("folder '" + folder + "' escapes the data set root " + location.rootDir());
        var names = new java.util.ArrayList<String>();
        try (var s = java.nio.file.Files.newDirectoryStream(dir)) {
            for (Path p : s) {
                String n = p.getFileName().toString();
                if (!n.startsWith(start) || !java.nio.file.Files.isRegularFile(p)) continue;
                if (java.nio.file.Files.isSymbolicLink(p) && !p.toRealPath().startsWith(realRoot)) continue;
                names.add(folder + n);
                if (names.size() > MAX_LISTED)
                    throw new IOException("more than " + MAX_LISTED + " files in " + dir + "; name fewer with a narrower pattern");
            }
        } catch (java.nio.file.NoSuchFileException | java.nio.file.NotDirectoryException e) {
            throw new IOException("no folder " + dir, e);
        }
        names.sort(null);
        return names;
    }

    @Override
    public SourceMetrics metrics() { return ctx.metrics; }

    @Override
    public void close() { ctx.close(); }

    @Override
    public String toString() { return "LocalObjectSource[" + location.root() + "]"; }
}
