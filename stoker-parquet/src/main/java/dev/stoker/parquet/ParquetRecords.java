package dev.stoker.parquet;

import dev.stoker.core.SampleException;
import dev.stoker.source.ManifestStat;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.SampleRecords;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.parquet.ParquetReadOptions;
import org.apache.parquet.StokerReadOptions;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.convert.GroupRecordConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.io.ColumnIOFactory;

/**
 * The rows of one or more Parquet files in the Hugging Face datasets layout ({@link HfRows}), by index: the files
 * in their listed order, the rows of each in turn.
 *
 * <p>Index: the footers, read once at open (one or two ranged reads per file), give each file's row groups and
 * their row counts; record {@code i} is (file, row group, row). Nothing else of a file is read until a record
 * of it is asked for.
 *
 * <p>Row groups: Parquet's unit of reading is a row group's column chunks, so a record's row group is read and
 * decoded whole (only the columns the layout uses), and its rows are kept, converted, in a cache of decoded row
 * groups bounded by bytes (least recently used first out; groups being read do not count until they arrive).
 * Concurrent records of one row group share one read. In a shuffled order a row group is read again when one of
 * its rows comes after the group has left the cache, so the reads per record are about
 * {@code 1 - cache bytes / data set bytes} once the data set outgrows the cache: see docs/data-formats.md.
 *
 * <p>Threading: thread-safe. Row groups are read on {@code decoder}'s threads (their ranged reads block those
 * threads, never the caller's or the source's); {@link #record} never blocks.
 */
public final class ParquetRecords implements SampleRecords {
    /** One file: its name relative to the source's root, its footer, layout and where its row groups start. */
    private record File(String reference, ManifestStat stat, ObjectInputFile input, ParquetMetadata footer, HfRows layout,
                        long[] groupStarts, long firstRecord) {
        long rows() { return groupStarts[groupStarts.length - 1]; }
    }

    /** A decoded row group in the cache: its rows (HfRows.Row or SampleException each), their bytes once known. */
    private static final class Entry {
        final CompletableFuture<Object[]> rows = new CompletableFuture<>();
        long bytes = -1;
    }

    private final String name;
    private final ObjectSource source;
    private final List<File> files;
    private final long[] firstRecords;
    private final int size;
    private final long cacheBytes;
    private final Executor decoder;
    private final ParquetReadOptions options = StokerReadOptions.of(ParquetCodecs.INSTANCE);
    private final LinkedHashMap<Long, Entry> cache = new LinkedHashMap<>(16, 0.75f, true);
    private long cachedBytes;
    private final AtomicLong groupReads = new AtomicLong();
    private final AtomicLong rangeReads;
    private final byte[] digest;

    private ParquetRecords(String name, ObjectSource source, List<File> files, long cacheBytes, Executor decoder, AtomicLong rangeReads) {
        this.name = name;
        this.source = source;
        this.files = files;
        this.cacheBytes = cacheBytes;
        this.decoder = decoder;
        this.rangeReads = rangeReads;
        this.firstRecords = new long[files.size()];
        long total = 0;
        for (int f = 0; f < files.size(); f++) {
            firstRecords[f] = total;
            total += files.get(f).rows();
        }
        if (total > Integer.MAX_VALUE) throw new IllegalArgumentException(name + " has " + total + " rows, over " + Integer.MAX_VALUE);
        this.size = (int) total;
        this.digest = digest(files);
    }

    /**
     * The rows of {@code references} (file names relative to {@code source}'s root), their footers read on
     * {@code decoder}; {@code cacheBytes} bounds the decoded row groups kept.
     */
    static ParquetRecords open(ObjectSource source, String name, List<String> references, long cacheBytes, Executor decoder) throws IOException {
        var ranges = new AtomicLong();
        var options = StokerReadOptions.of(ParquetCodecs.INSTANCE);
        var pending = new ArrayList<CompletableFuture<File>>();
        for (String ref : references) {
            pending.add(CompletableFuture.supplyAsync(() -> {
                try {
                    return readFooter(source, ref, options, ranges);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }, decoder));
        }
        var files = new ArrayList<File>();
        long first = 0;
        for (var p : pending) {
            File f;
            try {
                f = p.join();
            } catch (CompletionException e) {
                Throwable c = e.getCause();
                if (c instanceof UncheckedIOException u) throw u.getCause();
                throw new IOException(c == null ? e.toString() : c.getMessage(), c);
            }
            files.add(new File(f.reference, f.stat, f.input, f.footer, f.layout, f.groupStarts, first));
            first += f.rows();
        }
        return new ParquetRecords(name, source, files, cacheBytes, decoder, ranges);
    }

    private static File readFooter(ObjectSource source, String ref, ParquetReadOptions options, AtomicLong ranges) throws IOException {
        var stat = source.stat(ref);
        var input = new ObjectInputFile(source, ref, stat.size(), ranges);
        ParquetMetadata footer;
        try (var reader = new ParquetFileReader(input, options)) {
            footer = reader.getFooter();
        } catch (RuntimeException e) { // parquet-java reports a file that is not Parquet so
            throw new IOException("cannot read the footer of " + ref + ": " + e.getMessage(), e);
        } catch (IOException e) {
            throw new IOException("cannot read the footer of " + ref + ": " + e.getMessage(), e);
        }
        var layout = HfRows.of(footer.getFileMetaData().getSchema(), ref);
        var blocks = footer.getBlocks();
        long[] starts = new long[blocks.size() + 1];
        for (int g = 0; g < blocks.size(); g++) starts[g + 1] = starts[g] + blocks.get(g).getRowCount();
        return new File(ref, stat, input, footer, layout, starts, 0);
    }

    @Override
    public String name() { return name; }

    /** Whether a file has a video column ({@code videos} or {@code video}). */
    @Override
    public boolean mayHoldVideo() {
        for (var f : files) if (f.layout.hasVideoColumn()) return true;
        return false;
    }

    @Override
    public int size() { return size; }

    /** {@code file.parquet:row}, the row counted from 0 in its file. */
    @Override
    public String id(int i) {
        int f = fileOf(i);
        return files.get(f).reference + ":" + (i - firstRecords[f]);
    }

    @Override
    public CompletableFuture<Record> record(int i) {
        if (i < 0 || i >= size) return CompletableFuture.failedFuture(new IndexOutOfBoundsException("record " + i + " of " + size));
        int f = fileOf(i);
        File file = files.get(f);
        long row = i - firstRecords[f];
        int g = Arrays.binarySearch(file.groupStarts, row);
        if (g < 0) g = -g - 2;
        while (g + 1 < file.groupStarts.length - 1 && file.groupStarts[g + 1] == row) g++; // skip empty groups
        int k = (int) (row - file.groupStarts[g]);
        String id = file.reference + ":" + row;
        int group = g;
        return group(f, g).handle((rows, err) -> {
            if (err != null) {
                Throwable c = err instanceof CompletionException && err.getCause() != null ? err.getCause() : err;
                return CompletableFuture.<Record>failedFuture(new SampleException(id, SampleException.Stage.MANIFEST,
                        "cannot read row group " + group + " of " + file.reference + ": " + (c.getMessage() == null ? c.toString() : c.getMessage()), c));
            }
            Object r = rows[k];
            if (r instanceof SampleException e) return CompletableFuture.<Record>failedFuture(e);
            return toRecord(id, (HfRows.Row) r);
        }).thenCompose(x -> x);
    }

    /**
     * The record of a converted row; images it names by a path only (next to carried ones) are fetched here. Its carried
     * videos are in memory already (a Parquet cell is read with its row group) and are handed on as they are; a video
     * named by a path next to carried ones is opened by reference, in ranges, where it is demuxed.
     */
    private CompletableFuture<Record> toRecord(String id, HfRows.Row row) {
        var videos = new ArrayList<SampleRecords.EmbeddedVideo>(row.videos().size());
        for (var v : row.videos()) {
            if (v.bytes() != null) videos.add(SampleRecords.EmbeddedVideo.inMemory(v.name(), v.bytes()));
            else videos.add(new SampleRecords.EmbeddedVideo(v.name(), -1,
                    () -> dev.stoker.source.RangedObjectBytes.of(source, v.path(), dev.stoker.source.RangedObjectBytes.READ_TIMEOUT_NANOS)));
        }
        if (row.images().isEmpty() && row.audios().isEmpty()) return CompletableFuture.completedFuture(new Record(row.json(), List.of(), videos));
        var parts = new ArrayList<CompletableFuture<Embedded>>(row.images().size() + row.audios().size());
        for (var list : List.of(row.images(), row.audios()))
            for (var im : list) {
                if (im.bytes() != null) parts.add(CompletableFuture.completedFuture(new Embedded(im.name(), im.bytes())));
                else parts.add(source.fetch(id, im.path()).thenApply(b -> new Embedded(im.name(), b)));
            }
        int images = row.images().size();
        return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new)).thenApply(ignored -> {
            var all = parts.stream().map(CompletableFuture::join).toList();
            return new Record(row.json(), all.subList(0, images), videos, all.subList(images, all.size()));
        });
    }

    private int fileOf(int i) {
        int f = Arrays.binarySearch(firstRecords, i);
        if (f < 0) return -f - 2;
        while (f + 1 < firstRecords.length && firstRecords[f + 1] == i) f++; // files without rows
        return f;
    }

    /** Row group {@code g} of file {@code f}, decoded: from the cache, or read now (once, however many ask). */
    private CompletableFuture<Object[]> group(int f, int g) {
        long key = ((long) f << 32) | g;
        Entry entry;
        synchronized (cache) {
            entry = cache.get(key);
            if (entry != null) return entry.rows;
            entry = new Entry();
            cache.put(key, entry);
        }
        Entry e = entry;
        groupReads.incrementAndGet();
        try {
            decoder.execute(() -> {
                try {
                    Object[] rows = decode(files.get(f), g);
                    long bytes = 0;
                    for (Object r : rows) bytes += r instanceof HfRows.Row row ? row.bytes() : 256;
                    synchronized (cache) {
                        if (cache.get(key) == e) {
                            e.bytes = bytes;
                            cachedBytes += bytes;
                            evict();
                        }
                    }
                    e.rows.complete(rows);
                } catch (Throwable t) { // not kept: a later record reads it again
                    synchronized (cache) {
                        if (cache.get(key) == e) cache.remove(key);
                    }
                    e.rows.completeExceptionally(t);
                }
            });
        } catch (RuntimeException rejected) {
            synchronized (cache) {
                cache.remove(key);
            }
            e.rows.completeExceptionally(rejected);
        }
        return e.rows;
    }

    /** Drops the least recently used decoded groups while over the budget (always keeping the newest). Holds the cache's lock. */
    private void evict() {
        var it = cache.entrySet().iterator();
        int left = cache.size();
        while (cachedBytes > cacheBytes && it.hasNext() && left > 1) {
            var e = it.next().getValue();
            left--;
            if (e.bytes < 0) continue; // being read
            it.remove();
            cachedBytes -= e.bytes;
        }
    }

    /** Reads and converts row group {@code g} of {@code file}: each row an HfRows.Row, or the SampleException that converting it gave. */
    private Object[] decode(File file, int g) throws IOException {
        var layout = file.layout;
        var projection = layout.projection();
        try (var reader = new ParquetFileReader(file.input, file.footer, options, file.input.newStream())) {
            reader.setRequestedSchema(projection);
            var pages = reader.readRowGroup(g);
            if (pages == null) throw new IOException(file.reference + " has no row group " + g);
            int n = Math.toIntExact(pages.getRowCount());
            long expected = file.groupStarts[g + 1] - file.groupStarts[g];
            if (n != expected) throw new IOException("row group " + g + " of " + file.reference + " has " + n + " rows, its footer said " + expected);
            var io = new ColumnIOFactory().getColumnIO(projection, file.footer.getFileMetaData().getSchema());
            var recordReader = io.getRecordReader(pages, new GroupRecordConverter(projection));
            Object[] rows = new Object[n];
            for (int k = 0; k < n; k++) {
                long row = file.groupStarts[g] + k;
                String id = file.reference + ":" + row;
                Group group = recordReader.read();
                try {
                    rows[k] = layout.convert(group, id, "row" + row);
                } catch (SampleException e) {
                    rows[k] = e;
                } catch (RuntimeException e) {
                    rows[k] = new SampleException(id, SampleException.Stage.MANIFEST, "cannot convert the row: " + e, e);
                }
            }
            return rows;
        } catch (RuntimeException e) { // a corrupt page, an unsupported codec
            throw new IOException(e.getMessage() == null ? e.toString() : e.getMessage(), e);
        }
    }

    /** SHA-256 over the files' names, sizes and versions (modification time, ETag). */
    @Override
    public byte[] digest() { return digest.clone(); }

    private static byte[] digest(List<File> files) {
        try {
            var md = MessageDigest.getInstance("SHA-256");
            md.update("parquet\n".getBytes(StandardCharsets.UTF_8));
            for (var f : files)
                md.update((f.reference + "\n" + f.stat.size() + "\n" + f.stat.version() + "\n").getBytes(StandardCharsets.UTF_8));
            return md.digest();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The files read, in order (names relative to the source's root). */
    public List<String> files() { return files.stream().map(File::reference).toList(); }

    /** How many row groups the files have in all. */
    public int rowGroups() { return files.stream().mapToInt(f -> f.groupStarts.length - 1).sum(); }

    /** Row groups read and decoded so far (a group read again after leaving the cache counts again). */
    public long rowGroupReads() { return groupReads.get(); }

    /** Ranged reads of the files so far (footers included). */
    public long rangeReads() { return rangeReads.get(); }

    /** Bytes of decoded rows in the cache now. */
    public long cachedBytes() {
        synchronized (cache) {
            return cachedBytes;
        }
    }
}
