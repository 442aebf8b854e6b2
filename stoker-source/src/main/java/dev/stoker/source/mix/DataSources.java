package dev.stoker.source.mix;

import dev.stoker.source.DatasetLocation;
import dev.stoker.source.ManifestRecords;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.SourceMetrics;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The sources a job reads, opened: each one's records (a manifest, tar shards, Parquet) from its URI,
 * its images from its own folder or from its image root, several of them mixed by weight
 * ({@link MixedSource}). Owns the object sources it opened.
 *
 * <p>Threading: open and close from one thread; the feed source it gives is thread-safe.
 */
public final class DataSources implements AutoCloseable {
    /**
     * One source as configured.
     *
     * @param data       where its records are: a manifest, a tar shard pattern, a Parquet file (local or {@code s3://})
     * @param weight     passes over it per epoch of the mix (1: once; 0.5: half of it; 3: three times)
     * @param imageRoot  the folder its relative image paths resolve against, and which they must stay inside (a local
     *                   path or {@code s3://bucket/prefix/}); null: the folder of {@code data}
     */
    public record Spec(String data, double weight, String imageRoot) {
        public Spec {
            if (data == null || data.isBlank()) throw new IllegalArgumentException("a source needs its data (a path or s3:// URI)");
            if (!(weight > 0) || Double.isInfinite(weight)) throw new IllegalArgumentException(data + ": weight must be positive, got " + weight);
        }

        public Spec(String data) { this(data, 1, null); }
    }

    private final List<Spec> specs;
    private final List<ObjectSource> opened;
    private final FeedSource feedSource;
    private final ObjectSource primary;

    private DataSources(List<Spec> specs, List<ObjectSource> opened, FeedSource feedSource, ObjectSource primary) {
        this.specs = specs;
        this.opened = opened;
        this.feedSource = feedSource;
        this.primary = primary;
    }

    /** Opens {@code specs} with {@code config}, keeping large indexes in {@code cache} (null: none). */
    public static DataSources open(List<Spec> specs, SourceConfig config, ManifestRecords.IndexCache cache) {
        if (specs.isEmpty()) throw new IllegalArgumentException("no sources: give --data");
        var opened = new ArrayList<ObjectSource>();
        try {
            var parts = new ArrayList<MixedSource.Part>();
            ObjectSource primary = null;
            for (var spec : specs) {
                var records = ObjectSources.open(spec.data(), config);
                opened.add(records);
                if (primary == null) primary = records;
                ObjectSource images = records;
                if (spec.imageRoot() != null) {
                    images = ObjectSources.open(rootLocation(spec.imageRoot()), config);
                    opened.add(images);
                }
                parts.add(new MixedSource.Part(of(records, images, cache), spec.weight()));
            }
            FeedSource feed = parts.size() == 1 && specs.get(0).weight() == 1 ? parts.get(0).source() : new MixedSource(parts);
            return new DataSources(List.copyOf(specs), List.copyOf(opened), feed, primary);
        } catch (RuntimeException e) {
            for (var s : opened) s.close();
            throw e;
        }
    }

    /** Opens one source of weight 1 at {@code location}, its images beside it. */
    public static DataSources open(DatasetLocation location, SourceConfig config) {
        var source = ObjectSources.open(location, config);
        return new DataSources(List.of(new Spec(location.manifestUri())), List.of(source), FeedSource.of(source), source);
    }

    /** A location whose folder is {@code root}: image references of a source with an image root resolve there. */
    public static DatasetLocation rootLocation(String root) {
        String dir = root.endsWith("/") ? root : root + "/";
        return DatasetLocation.parse(dir + ".stoker-image-root");
    }

    /** The records of {@code records}' URI; images fetched from {@code images}' folder. */
    static FeedSource of(ObjectSource records, ObjectSource images, ManifestRecords.IndexCache cache) {
        if (records == images) return FeedSource.of(records, cache);
        String uri = records.location().manifestUri();
        String name = uri.substring(uri.lastIndexOf('/') + 1);
        return new FeedSource() {
            @Override
            public CompletableFuture<byte[]> fetchManifest() { return records.fetchManifest(); }

            @Override
            public SampleRecords records() throws IOException { return SampleFormat.records(records, name, cache); }

            @Override
            public CompletableFuture<byte[]> fetch(String sampleId, String reference) { return images.fetch(sampleId, reference); }

            @Override
            public String manifestName() { return name; }

            @Override
            public dev.stoker.core.io.SeekableByteSource openVideo(int record, String sampleId, String reference) throws IOException {
                return dev.stoker.source.RangedObjectBytes.of(images, reference, VIDEO_READ_TIMEOUT_NANOS); // from the media root
            }
        };
    }

    public List<Spec> specs() { return specs; }

    /** What the feed reads. */
    public FeedSource feedSource() { return feedSource; }

    /** The first source's object counters (a mix's other sources count apart). */
    public SourceMetrics metrics() { return primary.metrics(); }

    @Override
    public void close() {
        RuntimeException first = null;
        for (var s : opened) {
            try {
                s.close();
            } catch (RuntimeException e) {
                if (first == null) first = e;
            }
        }
        if (first != null) throw first;
    }
}
