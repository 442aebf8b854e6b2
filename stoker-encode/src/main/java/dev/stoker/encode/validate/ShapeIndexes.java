package dev.stoker.encode.validate;

import dev.stoker.encode.EncodeOptions;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.source.mix.MixedSource;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * Where the pack planner's {@link ShapeIndex} comes from, without decoding a pixel: the length index
 * {@code stoker validate} wrote ({@link #load}), or the same scan run in-process ({@link #measure}: every record parsed,
 * its images' headers read and its tokens counted on a thread pool, as validate does). Both give, per record, the
 * {@code input_ids} length the feed makes, each kept image's patch count {@code t·h·w} and each kept video's patch count
 * {@code t·h·w} and temporal groups {@code t} (planned from its frame index, never decoded); records the feed would
 * skip are {@link SampleShape.Kind#ERROR} or {@link SampleShape.Kind#FILTERED}.
 *
 * <p>Several sources mixed ({@link MixedSource.Records}, records numbered across the sources in the order given):
 * {@link #load} takes validate's index of the same mix (validate run with the same {@code --data} list and weights),
 * else each source's own index, concatenated; {@link #measure} scans the mix as one.
 *
 * <p>Threading: static and stateless; an index it returns is immutable and may be read from any thread.
 */
public final class ShapeIndexes {
    private ShapeIndexes() {}

    /** The shapes held by a length index, record {@code i} the index's record {@code i}. */
    public static ShapeIndex of(LengthIndex index) {
        var shapes = new Compact(index.lengths(), index.imageStart(), index.imagePatches(), index.videoStart(), index.videoPatches(),
                index.videoGroups());
        return withClips(shapes, List.of(index));
    }

    /**
     * {@code shapes} (the records of {@code parts} end to end) with their clips' frames where the indexes hold any (format 4,
     * an audio family's: {@link SampleShape#clipFrames}), else {@code shapes} itself.
     */
    private static ShapeIndex withClips(ShapeIndex shapes, List<LengthIndex> parts) {
        if (parts.stream().allMatch(p -> p.clipFrames().length == 0)) return shapes;
        int[][] frames = new int[shapes.size()][];
        int r = 0;
        for (var p : parts)
            for (int i = 0; i < p.lengths().length; i++, r++) frames[r] = p.clips(i) == 0 ? null : p.clipFrames(i);
        return new WithClips(shapes, frames);
    }

    /** The shapes a validation found (the same as the index it writes). */
    public static ShapeIndex of(ValidationReport report) {
        var shapes = of(LengthIndex.of(java.util.Map.of(), report));
        return report.clipFrames() == null ? shapes : new WithClips(shapes, report.clipFrames());
    }

    /** {@code shapes} with each record's clips' frames (an audio family's scan, {@link SampleShape#clipFrames}). */
    private record WithClips(ShapeIndex shapes, int[][] clipFrames) implements ShapeIndex {
        @Override
        public int size() { return shapes.size(); }

        @Override
        public SampleShape shape(int record) {
            var s = shapes.shape(record);
            int[] frames = clipFrames[record];
            return s.kind() != SampleShape.Kind.OK || frames == null ? s : s.withClips(frames);
        }
    }

    /**
     * The shapes of {@code records} under {@code options} and the tokenizer {@code tokenizerId}
     * ({@link LengthIndex#tokenizerId}) from the length index {@code stoker validate} wrote into {@code dir}; null when
     * there is none for these records and settings (then {@link #measure}). An index whose record count differs from
     * the source's is refused (the file and the source disagree: re-run validate).
     *
     * @throws IOException when an index is there but cannot be read (corrupt, or of format 1: re-run validate)
     */
    public static ShapeIndex load(Path dir, SampleRecords records, EncodeOptions options, String tokenizerId) throws IOException {
        var settings = LengthIndex.settings(options, tokenizerId);
        var whole = read(dir, records, settings);
        if (whole != null) return of(whole);
        if (!(records instanceof MixedSource.Records mix)) return null;
        var parts = new ArrayList<LengthIndex>();
        for (var source : mix.sources()) {
            var part = read(dir, source, settings);
            if (part == null) return null;
            parts.add(part);
        }
        return concat(parts);
    }

    /** The index of {@code records} in {@code dir}, checked against them; null when there is none. */
    private static LengthIndex read(Path dir, SampleRecords records, java.util.Map<String, Object> settings) throws IOException {
        Path file = LengthIndex.fileFor(dir, HexFormat.of().formatHex(records.digest()), settings);
        if (!Files.isRegularFile(file)) return null;
        var index = LengthIndex.read(file);
        if (index.lengths().length != records.size())
            throw new IOException(file + ": the length index holds " + index.lengths().length + " records but " + records.name() + " has "
                    + records.size() + ": re-run stoker validate");
        return index;
    }

    private static ShapeIndex concat(List<LengthIndex> parts) {
        long records = 0, images = 0, videos = 0;
        for (var p : parts) {
            records += p.lengths().length;
            images += p.imagePatches().length;
            videos += p.videoPatches().length;
        }
        if (records > Integer.MAX_VALUE - 8 || images > Integer.MAX_VALUE - 8 || videos > Integer.MAX_VALUE - 8)
            throw new IllegalArgumentException("the sources hold " + records + " records, " + images + " images and " + videos
                    + " videos together: too many to index");
        int[] lengths = new int[(int) records];
        int[] start = new int[(int) records + 1];
        int[] patches = new int[(int) images];
        int[] vStart = new int[(int) records + 1];
        int[] vPatches = new int[(int) videos];
        int[] vGroups = new int[(int) videos];
        int r = 0, k = 0, v = 0;
        for (var p : parts) {
            int n = p.lengths().length;
            System.arraycopy(p.lengths(), 0, lengths, r, n);
            for (int i = 0; i < n; i++) {
                start[r + i + 1] = k + p.imageStart()[i + 1];
                vStart[r + i + 1] = v + p.videoStart()[i + 1];
            }
            System.arraycopy(p.imagePatches(), 0, patches, k, p.imagePatches().length);
            System.arraycopy(p.videoPatches(), 0, vPatches, v, p.videoPatches().length);
            System.arraycopy(p.videoGroups(), 0, vGroups, v, p.videoGroups().length);
            r += n;
            k += p.imagePatches().length;
            v += p.videoPatches().length;
        }
        return withClips(new Compact(lengths, start, patches, vStart, vPatches, vGroups), parts);
    }

    /**
     * Measures the shapes of every record of {@code records} in-process, for data without a validate file: the scan of
     * {@code stoker validate} ({@link DatasetValidator}) on {@code threads} threads, images fetched through
     * {@code source} (the one {@code records} came from), only their headers read. Takes about as long as validate.
     */
    public static ShapeIndex measure(SampleRecords records, FeedSource source, QwenTokenizer tokenizer, EncodeOptions options, int threads)
            throws InterruptedException {
        var report = DatasetValidator.validate(records, source, tokenizer, new DatasetValidator.Settings(options, threads, 64 * threads, 0));
        return of(report);
    }

    /**
     * Shapes in flat arrays (as the length index holds them), each {@link SampleShape} made when asked for: a record
     * costs 16 bytes, 4 per image and 8 per video, not an object.
     */
    private record Compact(int[] lengths, int[] imageStart, int[] patches, int[] videoStart, int[] videoPatches, int[] videoGroups)
            implements ShapeIndex {
        private static final SampleShape ERROR = new SampleShape(SampleShape.Kind.ERROR, 0, null);
        private static final SampleShape FILTERED = new SampleShape(SampleShape.Kind.FILTERED, 0, null);

        @Override
        public int size() { return lengths.length; }

        @Override
        public SampleShape shape(int record) {
            if (record < 0 || record >= lengths.length)
                throw new IllegalArgumentException("record " + record + " outside the shape index [0, " + lengths.length + ")");
            int tokens = lengths[record];
            if (tokens == LengthIndex.ERROR) return ERROR;
            if (tokens == LengthIndex.FILTERED) return FILTERED;
            int v0 = videoStart[record], v1 = videoStart[record + 1];
            return new SampleShape(SampleShape.Kind.OK, tokens, java.util.Arrays.copyOfRange(patches, imageStart[record], imageStart[record + 1]),
                    v0 == v1 ? null : java.util.Arrays.copyOfRange(videoPatches, v0, v1), v0 == v1 ? null : java.util.Arrays.copyOfRange(videoGroups, v0, v1));
        }
    }
}
