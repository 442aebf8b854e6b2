package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Reads whole local files on a small pool of daemon threads (file reads block), inside the shared
 * in-flight bound.
 *
 * <p>Threading: thread-safe; the pool has min(maxInFlight, max(2, cores)) threads and its queue
 * never holds more than maxInFlight reads (the limiter admits no more).
 */
final class LocalReader implements AutoCloseable {
    private final FetchContext ctx;
    private final ExecutorService pool;

    LocalReader(FetchContext ctx) {
        this.ctx = ctx;
        int threads = Math.min(ctx.config.maxInFlight(), Math.max(2, Runtime.getRuntime().availableProcessors()));
        var n = new AtomicInteger();
        this.pool = Executors.newFixedThreadPool(threads,
                r -> Thread.ofPlatform().daemon().name("stoker-local-read-" + n.incrementAndGet()).unstarted(r));
    }

    /** Reads {@code file}; when {@code realRoot} is given, a file whose real path leaves it is refused. */
    CompletableFuture<byte[]> read(String sampleId, Path file, Path realRoot, SampleException.Stage stage) {
        return ctx.submit(sampleId, stage, startNanos -> CompletableFuture.supplyAsync(
                () -> readFile(sampleId, file, realRoot, stage, startNanos), pool));
    }

    /**
     * {@code length} bytes of {@code file} at {@code offset} (a manifest's record), by positioned reads on one channel
     * per file kept open until close (positioned reads of one channel may run on several threads at once).
     */
    CompletableFuture<byte[]> readRange(String sampleId, Path file, long offset, int length) {
        return readRange(sampleId, file, null, offset, length, SampleException.Stage.MANIFEST);
    }

    /**
     * As {@link #readRange(String, Path, long, int)} for any file (a shard's member), errors at {@code stage}; when
     * {@code realRoot} is given, a file whose real path leaves it is refused (checked when its channel is opened).
     */
    CompletableFuture<byte[]> readRange(String sampleId, Path file, Path realRoot, long offset, int length, SampleException.Stage stage) {
        if (offset < 0 || length < 0)
            return ctx.refused(new SampleException(sampleId, stage, "negative range " + offset + "+" + length + " of " + file));
        if (length > ctx.config.maxObjectBytes())
            return ctx.refused(new SampleException(sampleId, stage, "record of " + length + " bytes, over maxObjectBytes "
                    + ctx.config.maxObjectBytes()));
        return ctx.submit(sampleId, stage, startNanos -> CompletableFuture.supplyAsync(() -> {
            try {
                FileChannel ch = channel(file, realRoot, sampleId, stage);
                byte[] bytes = new byte[length];
                ByteBuffer buf = ByteBuffer.wrap(bytes);
                boolean first = true;
                while (buf.hasRemaining()) {
                    int n = ch.read(buf, offset + buf.position());
                    if (first) {
                        ctx.metrics.onFirstByte(System.nanoTime() - startNanos);
                        first = false;
                    }
                    if (n < 0) throw new SampleException(sampleId, stage, file + " ends at byte " + (offset + buf.position())
                            + ", before the record's " + length + " bytes at " + offset + " (the file changed since it was indexed?)");
                }
                return bytes;
            } catch (NoSuchFileException e) {
                throw new SampleException(sampleId, stage, "file not found: " + file, e);
            } catch (IOException e) {
                throw new SampleException(sampleId, stage, "cannot read " + file + " at " + offset + ": " + e, e);
            }
        }, pool));
    }

    private final java.util.Map<Path, FileChannel> channels = new java.util.concurrent.ConcurrentHashMap<>();

    private FileChannel channel(Path file, Path realRoot, String sampleId, SampleException.Stage stage) throws IOException {
        FileChannel open = channels.get(file);
        if (open != null) return open;
        if (realRoot != null && Files.exists(file) && !file.toRealPath().startsWith(realRoot))
            throw new SampleException(sampleId, stage, "path " + file + " leads out of the data set root " + realRoot + " through a symlink");
        try {
            return channels.computeIfAbsent(file, f -> {
                try {
                    return FileChannel.open(f, StandardOpenOption.READ);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
        } catch (java.io.UncheckedIOException e) {
            throw e.getCause();
        }
    }

    private byte[] readFile(String sampleId, Path file, Path realRoot, SampleException.Stage stage, long startNanos) {
        try {
            if (realRoot != null && Files.exists(file) && !file.toRealPath().startsWith(realRoot))
                throw new SampleException(sampleId, stage, "image path " + file + " leads out of the data set root " + realRoot + " through a symlink");
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                long size = ch.size();
                if (size > ctx.config.maxObjectBytes())
                    throw new SampleException(sampleId, stage, "file " + file + " has " + size + " bytes, over maxObjectBytes " + ctx.config.maxObjectBytes());
                byte[] bytes = new byte[(int) size];
                ByteBuffer buf = ByteBuffer.wrap(bytes);
                boolean first = true;
                while (buf.hasRemaining()) {
                    int n = ch.read(buf);
                    if (first) {
                        ctx.metrics.onFirstByte(System.nanoTime() - startNanos);
                        first = false;
                    }
                    if (n < 0) break;
                }
                if (first) ctx.metrics.onFirstByte(System.nanoTime() - startNanos);
                return buf.hasRemaining() ? Arrays.copyOf(bytes, buf.position()) : bytes;
            }
        } catch (NoSuchFileException e) {
            throw new SampleException(sampleId, stage, "file not found: " + file, e);
        } catch (AccessDeniedException e) {
            throw new SampleException(sampleId, stage, "permission denied: " + file, e);
        } catch (IOException e) {
            throw new SampleException(sampleId, stage, "cannot read " + file + ": " + e, e);
        }
    }

    @Override
    public void close() {
        pool.shutdownNow();
        for (var ch : channels.values()) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing
            }
        }
        channels.clear();
    }
}
