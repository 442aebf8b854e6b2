package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.concurrent.CompletableFuture;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The records of one manifest, by index: how many, each one's id, and each one's bytes on demand,
 * read from the manifest where the {@link RecordIndex} says it lies (local files: positioned reads;
 * S3: ranged GETs), so that a manifest of any size costs its index's 12–16 bytes per record of heap.
 *
 * <p>The index is built by one pass over the manifest ({@link RecordIndex#scan}) or, for a manifest
 * of at least {@link IndexCache#minBytes()} bytes, loaded from the index cache, keyed by the
 * manifest's URI, size and version (a local file's modification time, an S3 object's ETag): a manifest
 * that changes is indexed again.
 *
 * <p>Threading: thread-safe; reads complete on the source's I/O threads.
 */
public final class ManifestRecords implements SampleRecords {
    private static final Logger LOG = LoggerFactory.getLogger(ManifestRecords.class);
    /** Passes over a manifest whose stream breaks before an index is given up. */
    static final int SCAN_ATTEMPTS = 3;

    /** Reads {@code length} bytes at {@code offset} of the manifest. */
    @FunctionalInterface
    interface RangeReader {
        CompletableFuture<byte[]> read(String sampleId, long offset, int length);
    }

    private final String name;
    private final RecordIndex index;
    private final RangeReader reader;
    private final boolean cached;

    private ManifestRecords(String name, RecordIndex index, RangeReader reader, boolean cached) {
        this.name = name;
        this.index = index;
        this.reader = reader;
        this.cached = cached;
    }

    /**
     * The records of {@code source}'s manifest, named {@code name} in ids ({@code train.jsonl:17}); the index comes
     * from {@code cache} when it has one for this manifest, else from a pass over it (saved there when large enough).
     */
    public static ManifestRecords open(ObjectSource source, String name, IndexCache cache) throws IOException {
        var stat = source.statManifest();
        String key = source.location().manifestUri() + "\n" + stat.size() + "\n" + stat.version();
        Path file = cache == null || stat.size() < cache.minBytes() ? null : cache.fileFor(key);
        RangeReader reader = source::fetchManifestRange;
        if (file != null && Files.isRegularFile(file)) {
            try {
                var index = RecordIndex.read(file, key);
                if (index != null && index.bytes() == stat.size()) return new ManifestRecords(name, index, reader, true);
            } catch (IOException e) {
                LOG.warn("index cache file {} is unreadable, indexing {} again: {}", file, name, e.getMessage());
            }
        }
        RecordIndex index = null;
        for (int attempt = 1; index == null; attempt++) {
            try (var in = source.openManifest()) {
                index = RecordIndex.scan(name, in);
            } catch (RecordIndex.Malformed e) {
                throw e;
            } catch (IOException e) { // the stream broke (a reset, a throttled GET): read it again, a few times
                if (attempt >= SCAN_ATTEMPTS) throw new IOException("cannot index " + name + " after " + attempt + " attempts: " + e.getMessage(), e);
                LOG.warn("indexing {} failed ({}), reading it again", name, e.getMessage());
                source.metrics().onRetry();
            }
        }
        if (index.bytes() != stat.size())
            throw new IOException("manifest " + source.location().manifestUri() + " changed while it was indexed (" + stat.size()
                    + " bytes before, " + index.bytes() + " read)");
        if (file != null) {
            try {
                Files.createDirectories(file.getParent());
                index.write(file, key);
            } catch (IOException e) {
                LOG.warn("cannot save the index of {} in {}: {}", name, file.getParent(), e.getMessage());
            }
        }
        return new ManifestRecords(name, index, reader, false);
    }

    /** The records of a manifest held in memory (tests, small in-memory sources). */
    public static ManifestRecords inMemory(String name, byte[] manifest) {
        RecordIndex index;
        try {
            index = RecordIndex.scan(name, new ByteArrayInputStream(manifest));
        } catch (IOException e) {
            throw new IllegalArgumentException(e.getMessage(), e);
        }
        return new ManifestRecords(name, index, (id, offset, length) -> {
            if (offset < 0 || length < 0 || offset + length > manifest.length)
                return CompletableFuture.failedFuture(new IllegalArgumentException("range " + offset + "+" + length + " outside the manifest"));
            return CompletableFuture.completedFuture(java.util.Arrays.copyOfRange(manifest, (int) offset, (int) offset + length));
        }, false);
    }

    /** The manifest's name in ids and messages. */
    @Override
    public String name() { return name; }

    @Override
    public int size() { return index.size(); }

    /** Record {@code i}'s id until its own {@code "id"} field is read: {@code name:line}, or {@code name[i]} in a JSON array. */
    @Override
    public String id(int i) { return index.id(name, i); }

    /** Record {@code i}: its JSON; its images are named by reference. */
    @Override
    public CompletableFuture<Record> record(int i) { return read(i).thenApply(Record::of); }

    /** Record {@code i}'s bytes (a JSON value in UTF-8, unchecked). */
    public CompletableFuture<byte[]> read(int i) {
        long offset;
        int length;
        try {
            offset = index.offset(i);
            length = index.length(i);
        } catch (IllegalStateException e) { // a cached index file damaged after it was checked and mapped
            return CompletableFuture.failedFuture(new SampleException(id(i), SampleException.Stage.MANIFEST, id(i) + ": " + e.getMessage()));
        }
        return reader.read(id(i), offset, length);
    }

    public RecordIndex index() { return index; }

    /** Whether the manifest spells "video" anywhere ({@link RecordIndex#mentionsVideo()}). */
    @Override
    public boolean mayHoldVideo() { return index.mentionsVideo(); }

    /** SHA-256 of the manifest's bytes. */
    @Override
    public byte[] digest() { return index.digest(); }

    /** Whether the index came from the cache. */
    public boolean fromCache() { return cached; }

    /** Where indexes of large manifests are kept between runs, and from what size. */
    public record IndexCache(Path dir, long minBytes) {
        /** Manifests smaller than this are indexed afresh each time (a pass over them takes well under a second). */
        public static final long MIN_BYTES_DEFAULT = 64L << 20;

        public IndexCache {
            if (dir == null) throw new IllegalArgumentException("an index cache needs a folder");
            if (minBytes < 0) throw new IllegalArgumentException("min bytes must be >= 0, got " + minBytes);
        }

        /**
         * {@code $STOKER_INDEX_CACHE}, else {@code $XDG_CACHE_HOME/stoker/index}, else {@code ~/.cache/stoker/index};
         * null when {@code STOKER_INDEX_CACHE} is {@code off}.
         */
        public static IndexCache defaults(java.util.Map<String, String> env) {
            String set = env.get("STOKER_INDEX_CACHE");
            if ("off".equals(set)) return null;
            Path dir;
            if (set != null && !set.isBlank()) dir = Path.of(set);
            else if (env.get("XDG_CACHE_HOME") != null && !env.get("XDG_CACHE_HOME").isBlank()) dir = Path.of(env.get("XDG_CACHE_HOME"), "stoker", "index");
            else dir = Path.of(System.getProperty("user.home"), ".cache", "stoker", "index");
            return new IndexCache(dir, MIN_BYTES_DEFAULT);
        }

        /** The file an index for {@code key} is saved in: named by the key's SHA-256. */
        Path fileFor(String key) {
            try {
                var sha = MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8));
                return dir.resolve(HexFormat.of().formatHex(sha, 0, 16) + ".idx");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
