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
 * byte range in the shard), and its audio clips its audio members named so, in order, read whole with the record (each at
 * most {@value TarIndex#MAX_MEMBER_BYTES} bytes; issue 32). The json, image and audio members of one sample lie together in the shard (only headers and
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
        int videosFrom = first + 1; // members: the json, the images, the videos, then the audio clips
        while (videosFrom < end && !TarIndex.isVideoName(names.get(videosFrom - first)) && !TarIndex.isAudioName(names.get(videosFrom - first)))
            videosFrom++;
        int audiosFrom = videosFrom;
        while (audiosFrom < end && !TarIndex.isAudioName(names.get(audiosFrom - first))) audiosFrom++;
        var videos = new ArrayList<EmbeddedVideo>(audiosFrom - videosFrom);
        for (int m = videosFrom; m < audiosFrom; m++) {
            String member = names.get(m - first);
            long offset = index.offset(m), length = index.length(m);
            String label = labels[shard] + ":" + member;
            videos.add(new EmbeddedVideo(member, length,
                    () -> RangedObjectBytes.range(source, reference, offset, length, label, RangedObjectBytes.READ_TIMEOUT_NANOS)));
        }
        int[] read = new int[(videosFrom - first) + (end - audiosFrom)]; // read whole: the json, the images, the audio clips
        int n = 0;
        for (int m = first; m < videosFrom; m++) read[n++] = m;
        for (int m = audiosFrom; m < end; m++) read[n++] = m;
        int images = videosFrom - first - 1;
        return read(id, reference, first, read, names).thenApply(parts -> {
            return new Record(parts.getFirst().bytes(), parts.subList(1, 1 + images), videos, parts.subList(1 + images, parts.size()));
        });
    }

    /**
     * Reads members {@code members} (ascending) of a sample whose first member is {@code first} (its json, its images, its
     * audio clips) by one ranged read or one each: each member's bytes, named, in order.
     */
    private CompletableFuture<List<Embedded>> read(String id, String reference, int first, int[] members, List<String> names) {
        long lo = Long.MAX_VALUE, hi = 0, sum = 0;
        for (int m : members) {
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
                var out = new byte[members.length][];
                for (int k = 0; k < members.length; k++) {
                    int m = members[k];
                    int at = (int) (index.offset(m) - from);
                    out[k] = Arrays.copyOfRange(span, at, at + (int) index.length(m));
                }
                return out;
            });
        } else {
            var reads = new ArrayList<CompletableFuture<byte[]>>(members.length);
            for (int m : members) reads.add(source.fetchRange(reference, index.offset(m), (int) index.length(m)));
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
            var out = new ArrayList<Embedded>(bytes.length);
            for (int k = 0; k < bytes.length; k++) out.add(new Embedded(names.get(members[k] - first), bytes[k]));
            return out;
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
