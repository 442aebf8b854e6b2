package dev.stoker.source;

/**
 * A manifest's size in bytes and its version: the modification time of a local file (in
 * nanoseconds since the epoch, as text), the ETag of an S3 object. A cached index is valid for the
 * same (URI, size, version).
 */
public record ManifestStat(long size, String version) {
    public ManifestStat {
        if (size < 0) throw new IllegalArgumentException("size must be >= 0, got " + size);
        if (version == null || version.isEmpty()) throw new IllegalArgumentException("a version is needed");
    }
}
