package dev.stoker.encode.validate;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * What {@link DatasetValidator} found in a source: how many records, errors and filtered samples (by cause, with a
 * few examples each), images, images per sample, and the token lengths of the samples a feed would keep.
 *
 * @param source          the source's short name
 * @param digest          the source's digest, hex
 * @param lengths         per record: its token length, or {@link LengthIndex#ERROR} / {@link LengthIndex#FILTERED}
 * @param imagePatches    per record: the patch counts (t·h·w) of the images the feed keeps of it; null or empty for a
 *                        record without images, an error or a filtered one
 * @param videoPatches    per record: the patch counts (t·h·w) of the videos the feed keeps of it, planned from their
 *                        frame index; null or empty for a record without videos, an error or a filtered one
 * @param videoGroups     per record: those videos' temporal groups t, as {@code videoPatches}
 * @param images          images named by the records that parsed
 * @param videos          videos named by the records that parsed
 * @param audios          audio clips named by the records that parsed (an audio family's job; 0 otherwise)
 * @param imagesPerSample records that parsed by image count: index k for k images, the last for that many or more
 * @param causes          every cause, most frequent first
 * @param scanNanos       the scan's time, from the first record's read to the last verdict (start-up excluded)
 * @param clipFrames      per record: an audio family's clips' frames as the job's {@code --audio-pad} makes them
 *                        ({@link dev.stoker.plan.pack.SampleShape#clipFrames}); null (the array or a record's) where none.
 *                        Not written into the length index
 */
public record ValidationReport(String source, String digest, int[] lengths, int[][] imagePatches, int[][] videoPatches,
                               int[][] videoGroups, long images, long videos, long audios, long[] imagesPerSample,
                               List<Cause> causes, long scanNanos, int[][] clipFrames) {
    /** A report without clips' frames. */
    public ValidationReport(String source, String digest, int[] lengths, int[][] imagePatches, int[][] videoPatches,
                            int[][] videoGroups, long images, long videos, long audios, long[] imagesPerSample,
                            List<Cause> causes, long scanNanos) {
        this(source, digest, lengths, imagePatches, videoPatches, videoGroups, images, videos, audios, imagesPerSample, causes, scanNanos, null);
    }

    /** This report with {@code frames} as its records' clips' frames. */
    ValidationReport withClipFrames(int[][] frames) {
        return new ValidationReport(source, digest, lengths, imagePatches, videoPatches, videoGroups, images, videos, audios, imagesPerSample,
                causes, scanNanos, frames);
    }

    /** Buckets of {@link #imagesPerSample}: 0..7 images, and 8 or more. */
    public static final int IMAGE_COUNT_BUCKETS = 9;
    /** Upper bounds (exclusive) of the token-length histogram's buckets; the last bucket is open. */
    static final int[] LENGTH_BOUNDS = {128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};

    private static final ObjectMapper JSON = new ObjectMapper();

    /** A class of skipped samples: the feed's kind, stage and reason. */
    public record CauseKey(SampleException.Kind kind, SampleException.Stage stage, String reason) {}

    /** One skipped sample: its record index, the id the feed names it by, and the feed's one-line message. */
    public record Example(int index, String sampleId, String message) {}

    /** A cause, how many samples it took, and the examples of the lowest record indices. */
    public record Cause(CauseKey key, long count, List<Example> examples) {
        public Cause {
            examples = List.copyOf(examples);
        }
    }

    /** One bucket of the token-length histogram: {@code [from, to)}, {@code to} = -1 for the open last one. */
    public record Bucket(int from, int to, long count) {}

    /** Counts a cause's samples and keeps the {@code keep} of lowest index (thread-safe). */
    static final class CauseCounter {
        private final CauseKey key;
        private final int keep;
        private final TreeMap<Integer, Example> examples = new TreeMap<>();
        private long count;

        CauseCounter(CauseKey key, int keep) {
            this.key = key;
            this.keep = keep;
        }

        synchronized void add(int index, String id, String message) {
            count++;
            if (keep == 0) return;
            if (examples.size() < keep) examples.put(index, new Example(index, id, message));
            else if (index < examples.lastKey()) {
                examples.pollLastEntry();
                examples.put(index, new Example(index, id, message));
            }
        }

        synchronized Cause cause() { return new Cause(key, count, new ArrayList<>(examples.values())); }
    }

    static ValidationReport of(String source, byte[] digest, int[] lengths, int[][] imagePatches, int[][] videoPatches,
                               int[][] videoGroups, long images, long videos, long audios, long[] imagesPerSample,
                               Collection<CauseCounter> counters, long scanNanos) {
        var causes = new ArrayList<Cause>();
        for (var c : counters) causes.add(c.cause());
        causes.sort(Comparator.comparingLong(Cause::count).reversed().thenComparing(c -> c.key().kind())
                .thenComparing(c -> c.key().stage()).thenComparing(c -> c.key().reason()));
        return new ValidationReport(source, HexFormat.of().formatHex(digest), lengths, imagePatches, videoPatches, videoGroups, images,
                videos, audios, imagesPerSample, causes, scanNanos);
    }

    /** Records read. */
    public int samples() { return lengths.length; }

    public long errors() { return count(SampleException.Kind.ERROR); }

    public long filtered() { return count(SampleException.Kind.FILTERED); }

    private long count(SampleException.Kind kind) {
        long n = 0;
        for (var c : causes) if (c.key().kind() == kind) n += c.count();
        return n;
    }

    /** The token lengths of the samples the feed keeps, ascending. */
    public int[] keptLengths() {
        return Arrays.stream(lengths).filter(n -> n > 0).sorted().toArray();
    }

    /** The {@code q}-quantile (nearest rank) of the kept samples' lengths; 0 when none is kept. */
    public int lengthQuantile(double q) {
        int[] kept = keptLengths();
        if (kept.length == 0) return 0;
        int rank = (int) Math.ceil(q * kept.length);
        return kept[Math.max(0, Math.min(kept.length - 1, rank - 1))];
    }

    /** The token-length histogram of the kept samples, over every bucket (empty ones too). */
    public List<Bucket> lengthHistogram() {
        long[] counts = new long[LENGTH_BOUNDS.length + 1];
        for (int n : lengths) {
            if (n <= 0) continue;
            int b = 0;
            while (b < LENGTH_BOUNDS.length && n >= LENGTH_BOUNDS[b]) b++;
            counts[b]++;
        }
        var out = new ArrayList<Bucket>();
        for (int b = 0; b <= LENGTH_BOUNDS.length; b++)
            out.add(new Bucket(b == 0 ? 1 : LENGTH_BOUNDS[b - 1], b < LENGTH_BOUNDS.length ? LENGTH_BOUNDS[b] : -1, counts[b]));
        return out;
    }

    public double samplesPerSecond() { return scanNanos <= 0 ? 0 : samples() * 1e9 / scanNanos; }

    /**
     * The summary line: {@code {"samples", "errors", "filtered", "images", "videos", "tokens": {"p50", "p99", "max"},
     * "samples_per_s"}}, {@code "audios"} after {@code "videos"} when the records named any, and {@code "length_index"}
     * when {@code lengthIndex} is given.
     */
    public String summaryJson(java.nio.file.Path lengthIndex) {
        var m = new LinkedHashMap<String, Object>();
        m.put("samples", samples());
        m.put("errors", errors());
        m.put("filtered", filtered());
        m.put("images", images);
        m.put("videos", videos);
        if (audios > 0) m.put("audios", audios);
        var tokens = new LinkedHashMap<String, Object>();
        tokens.put("p50", lengthQuantile(0.50));
        tokens.put("p99", lengthQuantile(0.99));
        tokens.put("max", lengthQuantile(1.0));
        m.put("tokens", tokens);
        m.put("samples_per_s", Math.round(samplesPerSecond() * 10) / 10.0);
        if (lengthIndex != null) m.put("length_index", lengthIndex.toString());
        try {
            return JSON.writeValueAsString(m);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The human-readable report: counts, causes with their examples, images per sample, the length histogram. */
    public void print(PrintWriter out) {
        long kept = samples() - errors() - filtered();
        out.printf(Locale.ROOT, "%s: %,d records, %,d kept, %,d errors, %,d filtered, %,d images%s%s (scan %.2f s, %,.0f samples/s)%n",
                source, samples(), kept, errors(), filtered(), images, videos > 0 ? String.format(Locale.ROOT, ", %,d videos", videos) : "",
                audios > 0 ? String.format(Locale.ROOT, ", %,d audio clips", audios) : "",
                scanNanos / 1e9, samplesPerSecond());
        if (!causes.isEmpty()) {
            out.println("skipped samples by cause:");
            for (var c : causes) {
                out.printf(Locale.ROOT, "  %,8d  %-8s %-9s %s%n", c.count(), c.key().kind().label(),
                        c.key().stage().name().toLowerCase(Locale.ROOT), c.key().reason());
                for (var e : c.examples()) out.printf(Locale.ROOT, "            e.g. record %d: %s: %s%n", e.index(), e.sampleId(), e.message());
            }
        }
        var perSample = new StringBuilder("images per sample:");
        for (int k = 0; k < imagesPerSample.length; k++)
            if (imagesPerSample[k] > 0)
                perSample.append(String.format(Locale.ROOT, "  %s: %,d", k == imagesPerSample.length - 1 ? k + "+" : String.valueOf(k), imagesPerSample[k]));
        out.println(perSample);
        out.printf(Locale.ROOT, "tokens per kept sample: p50 %d, p99 %d, max %d%n", lengthQuantile(0.5), lengthQuantile(0.99), lengthQuantile(1.0));
        var histogram = lengthHistogram();
        long most = histogram.stream().mapToLong(Bucket::count).max().orElse(0);
        for (var b : histogram) {
            if (b.count() == 0) continue;
            String range = b.to() < 0 ? String.format(Locale.ROOT, "%6d+", b.from()) : String.format(Locale.ROOT, "%6d–%-6d", b.from(), b.to() - 1);
            int bar = most == 0 ? 0 : (int) Math.max(1, Math.round(40.0 * b.count() / most));
            out.printf(Locale.ROOT, "  %-14s %,10d  %s%n", range, b.count(), "#".repeat(bar));
        }
        out.flush();
    }

    /** Causes as a map for JSON writers: {@code "kind stage reason" → count}. */
    public Map<String, Long> causeCounts() {
        var m = new LinkedHashMap<String, Long>();
        for (var c : causes) m.put(c.key().kind().label() + " " + c.key().stage().name().toLowerCase(Locale.ROOT) + " " + c.key().reason(), c.count());
        return m;
    }
}
