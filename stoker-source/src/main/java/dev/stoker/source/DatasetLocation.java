package dev.stoker.source;

import java.nio.file.InvalidPathException;
import java.nio.file.Path;

/**
 * Where a data set's manifest lives, a local file or an S3 object; its folder, {@link #root()},
 * is what relative image references resolve against.
 */
public sealed interface DatasetLocation permits DatasetLocation.Local, DatasetLocation.S3 {

    /**
     * Parses {@code s3://bucket/key}, {@code file:///abs/path} or a plain (relative or absolute)
     * local path; IllegalArgumentException when malformed. Does no I/O.
     */
    static DatasetLocation parse(String uri) {
        if (uri == null || uri.isBlank()) throw new IllegalArgumentException("empty data set location");
        if (uri.startsWith("s3://")) {
            S3 s3 = References.parseS3(uri);
            if (s3.key().endsWith("/")) throw new IllegalArgumentException("s3 manifest URI names a folder, not an object: " + uri);
            return s3;
        }
        if (uri.startsWith("file:")) return new Local(References.fileUriToPath(uri));
        if (uri.matches("^[A-Za-z][A-Za-z0-9+.-]+://.*"))
            throw new IllegalArgumentException("unsupported scheme (use a local path, file:// or s3://): " + uri);
        try {
            return new Local(Path.of(uri));
        } catch (InvalidPathException e) {
            throw new IllegalArgumentException("invalid path '" + uri + "': " + e.getReason(), e);
        }
    }

    /** The manifest as a URI string ({@code file:///…} or {@code s3://…}). */
    String manifestUri();

    /** The manifest's folder: a local directory path, or {@code s3://bucket/prefix/}. */
    String root();

    /** A manifest on a local file system; the path is absolute and normalized. */
    record Local(Path manifest) implements DatasetLocation {
        public Local {
            manifest = manifest.toAbsolutePath().normalize();
            if (manifest.getParent() == null) throw new IllegalArgumentException("manifest path has no folder: " + manifest);
        }

        public Path rootDir() { return manifest.getParent(); }

        @Override
        public String manifestUri() { return manifest.toUri().toString(); }

        @Override
        public String root() { return rootDir().toString(); }
    }

    /** A manifest stored as {@code s3://bucket/key}. */
    record S3(String bucket, String key) implements DatasetLocation {
        public S3 {
            if (bucket == null || bucket.isEmpty() || bucket.contains("/")) throw new IllegalArgumentException("invalid bucket: " + bucket);
            if (key == null || key.isEmpty()) throw new IllegalArgumentException("empty key in s3://" + bucket + "/");
        }

        /** The key prefix of the manifest's folder: empty, or ending with '/'. */
        public String rootPrefix() { return key.substring(0, key.lastIndexOf('/') + 1); }

        @Override
        public String manifestUri() { return "s3://" + bucket + "/" + key; }

        @Override
        public String root() { return "s3://" + bucket + "/" + rootPrefix(); }
    }
}
