package dev.stoker.source;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.TreeSet;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * WebDataset tar shards as a source: a URI (local path or {@code s3://}) whose last segment names {@code .tar}
 * files, one ({@code train.tar}), a brace pattern ({@code shard-{000..099}.tar}, {@code {a,b}.tar}) or a glob
 * ({@code shard-*.tar}, {@code shard-0?.tar}); see {@link ShardPattern}. A brace pattern names its shards, each of
 * which must exist; a glob names the matching objects of the folder's listing ({@link ObjectSource#list}), sorted by
 * name; either naming none is refused.
 *
 * <p>The shards are indexed by one pass each ({@link TarIndex}); the index is kept in the {@link ManifestRecords.IndexCache}
 * when the shards together have at least its minimum of bytes, keyed by the URI and each shard's name, size and
 * version (a local file's modification time, an S3 object's ETag): a shard that changes is indexed again. Records are
 * then read by range ({@link WebDatasetRecords}).
 *
 * <p>Compressed shards ({@code .tar.gz}, {@code .tgz}, {@code .tar.zst}, …) are claimed only to be refused with a
 * clear message: a member cannot be read by range inside a compressed stream.
 *
 * <p>Threading: stateless.
 */
public final class WebDatasetFormat implements SampleFormat {
    private static final Logger LOG = LoggerFactory.getLogger(WebDatasetFormat.class);
    private static final Pattern COMPRESSED = Pattern.compile(".*\\.(tar\\.(gz|bz2|xz|zst|lz4)|tgz)");

    @Override
    public String name() { return "webdataset"; }

    /** The URI's last segment ends with {@code .tar} (or a compressed tar's suffix, refused when opened). */
    @Override
    public boolean reads(String uri) {
        String segment = lastSegment(uri).toLowerCase(Locale.ROOT);
        return segment.endsWith(".tar") || COMPRESSED.matcher(segment).matches();
    }

    private static String lastSegment(String uri) { return uri.substring(uri.lastIndexOf('/') + 1); }

    @Override
    public SampleRecords open(ObjectSource source, String name, ManifestRecords.IndexCache cache) throws IOException {
        String pattern = switch (source.location()) {
            case DatasetLocation.Local l -> l.manifest().getFileName().toString();
            case DatasetLocation.S3 s -> s.key().substring(s.key().lastIndexOf('/') + 1);
        };
        if (COMPRESSED.matcher(pattern.toLowerCase(Locale.ROOT)).matches())
            throw new IOException("compressed tar shards are not read (" + pattern + "): a sample is read by byte range, which needs an "
                    + "uncompressed .tar (its images are compressed already); decompress the shards (gunzip, zstd -d) first");
        List<String> shards = shards(source, pattern);
        var stats = new ArrayList<ManifestStat>(shards.size());
        long bytes = 0;
        var key = new StringBuilder("webdataset\n").append(source.location().manifestUri()).append('\n');
        for (String shard : shards) {
            ManifestStat stat;
            try {
                stat = source.stat(shard);
            } catch (IOException e) {
                throw new IOException("shard " + shard + " of " + pattern + " in " + source.location().root() + " cannot be read: " + e.getMessage(), e);
            }
            stats.add(stat);
            bytes += stat.size();
            key.append(shard).append('\t').append(stat.size()).append('\t').append(stat.version()).append('\n');
        }
        byte[] digest = digest(shards, stats);
        Path file = cache == null || bytes < cache.minBytes() ? null : cache.fileFor(key.toString());
        if (file != null && Files.isRegularFile(file)) {
            try {
                var index = TarIndex.read(file, key.toString());
                if (index != null && index.shardCount() == shards.size()) return new WebDatasetRecords(name, source, index, digest, true);
            } catch (IOException e) {
                LOG.warn("index cache file {} is unreadable, indexing {} again: {}", file, name, e.getMessage());
            }
        }
        var builder = new TarIndex.Builder();
        for (int s = 0; s < shards.size(); s++) {
            String shard = shards.get(s);
            for (int attempt = 1; ; attempt++) {
                builder.mark();
                try (var in = source.open(shard)) {
                    builder.scan(shard, WebDatasetRecords.fileName(shard), in, stats.get(s).size());
                    break;
                } catch (RecordIndex.Malformed e) {
                    throw e;
                } catch (IOException e) { // the stream broke (a reset, a throttled GET): read the shard again, a few times
                    builder.rollback();
                    if (attempt >= ManifestRecords.SCAN_ATTEMPTS)
                        throw new IOException("cannot index shard " + shard + " after " + attempt + " attempts: " + e.getMessage(), e);
                    LOG.warn("indexing shard {} failed ({}), reading it again", shard, e.getMessage());
                    source.metrics().onRetry();
                }
            }
        }
        TarIndex index;
        try {
            index = builder.build();
        } catch (IllegalStateException e) {
            throw new IOException("cannot index " + pattern + ": " + e.getMessage(), e);
        }
        if (file != null) {
            try {
                Files.createDirectories(file.getParent());
                index.write(file, key.toString());
            } catch (IOException e) {
                LOG.warn("cannot save the index of {} in {}: {}", name, file.getParent(), e.getMessage());
            }
        }
        LOG.debug("indexed {}: {}", name, index);
        return new WebDatasetRecords(name, source, index, digest, false);
    }

    /** The shards {@code pattern} names, as references relative to the source's root. */
    static List<String> shards(ObjectSource source, String pattern) throws IOException {
        List<String> names;
        try {
            names = ShardPattern.expandBraces(pattern);
        } catch (IllegalArgumentException e) {
            throw new IOException("bad shard pattern " + pattern + ": " + e.getMessage(), e);
        }
        boolean glob = names.stream().anyMatch(ShardPattern::hasGlob);
        if (!glob) {
            for (String n : names) {
                if (!n.toLowerCase(Locale.ROOT).endsWith(".tar")) throw new IOException("shard pattern " + pattern + " names " + n + ", not a .tar");
            }
            return names;
        }
        var prefixes = names.stream().map(ShardPattern::literalPrefix).toList();
        var patterns = names.stream().map(ShardPattern::glob).toList();
        var found = new TreeSet<String>();
        for (String listed : source.list(ShardPattern.commonPrefix(prefixes))) {
            if (!listed.toLowerCase(Locale.ROOT).endsWith(".tar")) continue;
            for (var p : patterns)
                if (p.matcher(listed).matches()) {
                    found.add(listed);
                    break;
                }
        }
        if (found.isEmpty()) throw new IOException("no shard matches " + pattern + " in " + source.location().root());
        return List.copyOf(found);
    }

    /**
     * SHA-256 over {@code webdataset}, then each shard's reference, size and version, each followed by a newline: the
     * shards' identity, not their content (a copy of the same shards elsewhere, or touched, has another digest).
     */
    static byte[] digest(List<String> shards, List<ManifestStat> stats) {
        try {
            var sha = MessageDigest.getInstance("SHA-256");
            sha.update("webdataset\n".getBytes(StandardCharsets.UTF_8));
            for (int i = 0; i < shards.size(); i++)
                sha.update((shards.get(i) + "\n" + stats.get(i).size() + "\n" + stats.get(i).version() + "\n").getBytes(StandardCharsets.UTF_8));
            return sha.digest();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
