package dev.stoker.parquet;

import dev.stoker.source.ManifestRecords;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SampleRecords;
import java.io.IOException;
import java.util.Locale;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Parquet files in the Hugging Face datasets layout: a source whose URI ends in {@code .parquet}, one file or a
 * pattern of them ({@code train-*.parquet}, {@code train-{00000..00003}.parquet}; see {@link FilePattern}).
 * Rows become records as {@link HfRows} says; {@link ParquetRecords} reads them.
 *
 * <p>Row groups are read on a shared pool of {@link #DECODE_THREADS} daemon threads. The decoded row groups kept
 * per source are bounded by {@code $STOKER_PARQUET_CACHE_MB} (default {@value #CACHE_MB_DEFAULT} MiB).
 */
public final class ParquetFormat implements SampleFormat {
    static final int DECODE_THREADS = 4;
    static final long CACHE_MB_DEFAULT = 256;
    private static final ThreadPoolExecutor DECODER;

    static {
        var n = new AtomicInteger();
        DECODER = new ThreadPoolExecutor(DECODE_THREADS, DECODE_THREADS, 30, TimeUnit.SECONDS, new LinkedBlockingQueue<>(),
                r -> Thread.ofPlatform().daemon().name("stoker-parquet-" + n.incrementAndGet()).unstarted(r));
        DECODER.allowCoreThreadTimeOut(true);
    }

    @Override
    public String name() { return "parquet"; }

    @Override
    public boolean reads(String uri) { return uri.toLowerCase(Locale.ROOT).endsWith(".parquet"); }

    @Override
    public SampleRecords open(ObjectSource source, String name, ManifestRecords.IndexCache cache) throws IOException {
        return open(source, name, cacheBytes(System.getenv("STOKER_PARQUET_CACHE_MB")));
    }

    /** The records of {@code source}'s Parquet files, at most {@code cacheBytes} of decoded row groups kept. */
    public static ParquetRecords open(ObjectSource source, String name, long cacheBytes) throws IOException {
        var files = FilePattern.files(source.location(), source);
        return ParquetRecords.open(source, FilePattern.name(source.location()).equals(name) ? name : FilePattern.name(source.location()),
                files, cacheBytes, DECODER);
    }

    /** {@code STOKER_PARQUET_CACHE_MB} in bytes; unset: the default; not a number >= 0: refused. */
    static long cacheBytes(String mb) throws IOException {
        if (mb == null || mb.isBlank()) return CACHE_MB_DEFAULT << 20;
        try {
            long v = Long.parseLong(mb.strip());
            if (v < 0 || v > (Long.MAX_VALUE >> 20)) throw new NumberFormatException();
            return v << 20;
        } catch (NumberFormatException e) {
            throw new IOException("STOKER_PARQUET_CACHE_MB must be a number of MiB >= 0, got '" + mb + "'");
        }
    }
}
