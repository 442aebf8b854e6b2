package dev.stoker.source.mix;

import dev.stoker.source.SampleRecords;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Several sources fed as one, each with its weight (the schedule's {@code SourceMix}): their records numbered across
 * sources in the order given, each image fetched from the source of its record.
 *
 * <p>Threading: {@link #records()} once, before the feed starts; the rest from any thread.
 */
public final class MixedSource implements FeedSource {
    /** One source of the mix and its weight (records per pass: 1 is one pass per epoch of the mix). */
    public record Part(FeedSource source, double weight) {
        public Part {
            if (!(weight > 0) || Double.isInfinite(weight)) throw new IllegalArgumentException("weight must be positive, got " + weight);
        }
    }

    private final List<Part> parts;
    private volatile Records records;

    public MixedSource(List<Part> parts) {
        if (parts.isEmpty()) throw new IllegalArgumentException("no sources");
        this.parts = List.copyOf(parts);
    }

    public List<Part> parts() { return parts; }

    public double[] weights() {
        var w = new double[parts.size()];
        for (int i = 0; i < w.length; i++) w[i] = parts.get(i).weight();
        return w;
    }

    @Override
    public CompletableFuture<byte[]> fetchManifest() {
        return CompletableFuture.failedFuture(new UnsupportedOperationException("a mix of sources has no one manifest"));
    }

    @Override
    public synchronized SampleRecords records() throws IOException {
        if (records == null) {
            var list = new ArrayList<SampleRecords>(parts.size());
            for (var p : parts) {
                var r = p.source().records();
                if (r.size() == 0) throw new IOException("source " + p.source().manifestName() + " holds no samples");
                list.add(r);
            }
            records = new Records(list, weights());
        }
        return records;
    }

    @Override
    public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
        return parts.get(0).source().fetch(sampleId, reference);
    }

    @Override
    public CompletableFuture<byte[]> fetch(int record, String sampleId, String reference) {
        var r = records;
        int i = r == null ? 0 : r.sourceOf(record);
        return parts.get(i).source().fetch(sampleId, reference);
    }

    @Override
    public dev.stoker.core.io.SeekableByteSource openVideo(int record, String sampleId, String reference) throws java.io.IOException {
        var r = records;
        int i = r == null ? 0 : r.sourceOf(record);
        return parts.get(i).source().openVideo(record, sampleId, reference);
    }

    @Override
    public String manifestName() {
        var names = new ArrayList<String>(parts.size());
        for (var p : parts) names.add(p.source().manifestName());
        return String.join("+", names);
    }

    /** The sources' records numbered across them; its {@link #sizes} and {@link #weights} give the schedule its mix. */
    public static final class Records implements SampleRecords {
        private final List<SampleRecords> sources;
        private final double[] weights;
        private final int[] base;
        private final int size;

        Records(List<SampleRecords> sources, double[] weights) {
            this.sources = List.copyOf(sources);
            this.weights = weights.clone();
            this.base = new int[sources.size()];
            long n = 0;
            for (int i = 0; i < base.length; i++) {
                base[i] = (int) n;
                n += sources.get(i).size();
                if (n > Integer.MAX_VALUE) throw new IllegalArgumentException("the sources hold more than " + Integer.MAX_VALUE + " records together");
            }
            this.size = (int) n;
        }

        public List<SampleRecords> sources() { return sources; }

        /** Each source's records, in order: with {@link #weights()}, what the schedule's mix of sources is made of. */
        public int[] sizes() {
            var sizes = new int[sources.size()];
            for (int i = 0; i < sizes.length; i++) sizes[i] = sources.get(i).size();
            return sizes;
        }

        /** Each source's weight, in order. */
        public double[] weights() { return weights.clone(); }

        /** Whether any of the sources may hold a video. */
        @Override
        public boolean mayHoldVideo() {
            for (var s : sources) if (s.mayHoldVideo()) return true;
            return false;
        }

        int sourceOf(int record) {
            int lo = 0, hi = base.length - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >>> 1;
                if (base[mid] <= record) lo = mid;
                else hi = mid - 1;
            }
            return lo;
        }

        @Override
        public String name() {
            var names = new ArrayList<String>(sources.size());
            for (var s : sources) names.add(s.name());
            return String.join("+", names);
        }

        @Override
        public int size() { return size; }

        @Override
        public String id(int i) {
            int s = sourceOf(i);
            return sources.get(s).id(i - base[s]);
        }

        @Override
        public CompletableFuture<Record> record(int i) {
            int s = sourceOf(i);
            return sources.get(s).record(i - base[s]);
        }

        /** SHA-256 over each source's digest and weight, in order: another weight is another job. */
        @Override
        public byte[] digest() {
            try {
                var md = MessageDigest.getInstance("SHA-256");
                for (int i = 0; i < sources.size(); i++) {
                    md.update(sources.get(i).digest());
                    md.update(ByteBuffer.allocate(8).putDouble(weights[i]).array());
                }
                md.update(("sources=" + sources.size()).getBytes(StandardCharsets.UTF_8));
                return md.digest();
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
