package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * The samples of WebDataset tar shards, by index ({@link WebDatasetFormat} opens them): the shards in their order,
 * the samples of each in member order. Sample {@code i}'s id is {@code shard-003.tar:key} (the shard's file name and
 * the sample's key); its record is its json member's bytes, its images its image members' bytes named by their
 * member names, in order, and its videos its video members named so, in order ({@link SampleRecords.EmbeddedVideo}s,
 * not read with the record: each is opened where it is demuxed and read in {@link RangedObjectBytes} blocks of its
 * byte range in the shard). The json and image members of one sample lie together in the shard (only headers and
 * ignored members between them), so they are read by one ranged read over them all, or, when something large lies
 * between them (more than {@value #MAX_GAP} bytes: a video member, say), one read each.
 *
 * <p>A sample the index found broken (no json member, …) fails when read, with a {@link SampleException} at stage
 * MANIFEST naming it and the rule it broke, as does one whose bytes cannot be read.
 *
 * <p>Threading: thread-safe; reads complete on the source's I/O threads.
 */
public final class WebDatasetRecords implements SampleRecords {
    /** The most bytes of other members and headers between a sample's members that one read takes along. */
    static final int MAX_GAP = 1 << 20;
    /** The most bytes one read of a sample covers; a larger sample is read member by member. */
    static final long MAX_SPAN = 64L << 20;

    private final String name;
    private final ObjectSource source;
    private final TarIndex index;
    private final String[] labels; // each shard's file name
    private final byte[] digest;
    private final boolean cached;

    WebDatasetRecords(String name, ObjectSource source, TarIndex index, byte[] digest, boolean cached) {
        this.name = name;
        this.source = source;
        this.index = index;
        this.digest = digest;
        this.cached = cached;
        this.labels = new String[index.shardCount()];
        for (int s = 0; s < labels.length; s++) labels[s] = fileName(index.shard(s));
    }

    static String fileName(String reference) { return reference.substring(reference.lastIndexOf('/') + 1); }

    @Override
    public String name() { return name; }

    @Override
    public int size() { return index.size(); }

    /** {@code shard-003.tar:key}. */
    @Override
    public String id(int i) { return labels[index.shardOf(i)] + ":" + index.key(i); }

    @Override
    public CompletableFuture<Record> record(int i) {
        String id;
        try {
            id = id(i);
        } catch (IndexOutOfBoundsException e) {
            return CompletableFuture.failedFuture(e);
        }
        String problem = index.problem(i);
        if (problem != null) return CompletableFuture.failedFuture(new SampleException(id, SampleException.Stage.MANIFEST, id + " " + problem));
        int shard = index.shardOf(i);
        String reference = index.shard(shard);
        int first = index.firstMember(i), end = index.firstMember(i + 1);
        List<String> names = index.memberNames(i);
        int videosFrom = first + 1; // members: the json, the images, then the videos
        while (videosFrom < end && !TarIndex.isVideoName(names.get(videosFrom - first))) videosFrom++;
        var videos = new ArrayList<EmbeddedVideo>(end - videosFrom);
        for (int m = videosFrom; m < end; m++) {
            String member = names.get(m - first);
            long offset = index.offset(m), length = index.length(m);
            String label = labels[shard] + ":" + member;
            videos.add(new EmbeddedVideo(member, length,
                    () -> RangedObjectBytes.range(source, reference, offset, length, label, RangedObjectBytes.READ_TIMEOUT_NANOS)));
        }
        return read(id, reference, first, videosFrom, names).thenApply(r -> new Record(r.json(), r.images(), videos));
    }

    /** Reads members {@code [first, end)} of a sample (its json, then its images) by one ranged read or one each. */
    private CompletableFuture<Record> read(String id, String reference, int first, int end, List<String> names) {
        long lo = Long.MAX_VALUE, hi = 0, sum = 0;
        for (int m = first; m < end; m++) {
            lo = Math.min(lo, index.offset(m));
            hi = Math.max(hi, index.offset(m) + index.length(m));
            sum += index.length(m);
        }
        CompletableFuture<byte[][]> parts;
        if (hi - lo <= MAX_SPAN && hi - lo - sum <= MAX_GAP) {
            long from = lo;
            int spanLength = (int) (hi - lo);
            parts = source.fetchRange(reference, from, spanLength).thenApply(span -> {
                if (span.length != spanLength) throw new IllegalStateException(span.length + " bytes for a range of " + spanLength);
                var out = new byte[end - first][];
                for (int m = first; m < end; m++) {
                    int at = (int) (index.offset(m) - from);
                    out[m - first] = Arrays.copyOfRange(span, at, at + (int) index.length(m));
                }
                return out;
            });
        } else {
            var reads = new ArrayList<CompletableFuture<byte[]>>(end - first);
            for (int m = first; m < end; m++) reads.add(source.fetchRange(reference, index.offset(m), (int) index.length(m)));
            parts = CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).thenApply(ignored -> {
                var out = new byte[reads.size()][];
                for (int k = 0; k < out.length; k++) out[k] = reads.get(k).join();
                return out;
            });
        }
        String sampleId = id;
        return parts.handle((bytes, error) -> {
            if (error != null) {
                Throwable cause = unwrap(error);
                throw new SampleException(sampleId, SampleException.Stage.MANIFEST, "cannot read " + sampleId + " from shard " + reference
                        + " in " + source.location().root() + ": " + cause.getMessage(), cause);
            }
            var images = new ArrayList<Embedded>(bytes.length - 1);
            for (int k = 1; k < bytes.length; k++) images.add(new Embedded(names.get(k), bytes[k]));
            return new Record(bytes[0], images);
        });
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) t = t.getCause();
        return t;
    }

    /** SHA-256 over the shards' references, sizes and versions ({@link WebDatasetFormat#digest}). */
    @Override
    public byte[] digest() { return digest.clone(); }

    /** Whether the index came from the cache. */
    public boolean fromCache() { return cached; }

    /** Samples the index found broken (each fails when read). */
    public int brokenSamples() { return index.problemCount(); }

    /** Heap the index holds per sample, for tests and benchmarks. */
    public double indexBytesPerSample() { return index.bytesPerSample(); }

    TarIndex index() { return index; }

    /** Whether a sample has a video member ({@code --video auto}). */
    @Override
    public boolean mayHoldVideo() { return index.hasVideoMembers(); }

    @Override
    public String toString() { return "WebDatasetRecords[" + name + ", " + index + "]"; }
}
