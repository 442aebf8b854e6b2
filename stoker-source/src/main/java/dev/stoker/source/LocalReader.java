package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.LinkOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.FutureTask;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Reads whole local files, and ranges of them, on a small pool of daemon threads (file reads block), inside the shared
 * in-flight bound; only regular files, each read within {@link SourceConfig#localReadTimeoutMillis()}.
 *
 * <p>Hostile files (audit #22): a manifest may name a FIFO, a device ({@code /dev/stdin}, {@code /dev/zero}), a
 * directory or a socket, directly or through a symlink. Before a file is opened its real path is found (symlinks
 * resolved, nothing opened) and its type read without following a link; anything but a regular file is refused as the
 * sample's error, naming the path and what it is. The real path is then opened with {@code O_NOFOLLOW}, so a link
 * swapped in after the check is not followed. What is left (the file replaced by a FIFO between the check and the
 * open, a read that blocks on a hung network file system) is bounded by the timeout: the sample fails with a clear
 * cause, its in-flight slot is freed and its thread interrupted, which ends a blocked read of a pipe or device. A thread
 * that does not return (a read the kernel will not interrupt, such as a hard NFS mount) is replaced by a new one, so the
 * pool keeps its width; at most {@code maxInFlight} such threads are added.
 *
 * <p>Threading: thread-safe; the pool has min(maxInFlight, max(2, cores)) threads, plus one per hung read, and its
 * queue never holds more than maxInFlight reads (the limiter admits no more).
 */
final class LocalReader implements AutoCloseable {
    /** Opens a checked regular file for reading; a seam only so that a test can make a read block in the kernel. */
    @FunctionalInterface
    interface Opener {
        FileChannel open(Path realFile) throws IOException;
    }

    /** Opens the file read-only, refusing a symlink in its last component ({@code O_NOFOLLOW}). */
    static final Opener NO_FOLLOW = f -> FileChannel.open(f, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);

    private final FetchContext ctx;
    private final ThreadPoolExecutor pool;
    private final int threads;
    private final Opener opener;
    /** Threads whose read timed out and has not returned yet. */
    private final AtomicInteger hung = new AtomicInteger();

    LocalReader(FetchContext ctx) { this(ctx, NO_FOLLOW); }

    LocalReader(FetchContext ctx, Opener opener) {
        this.ctx = ctx;
        this.opener = opener;
        this.threads = Math.min(ctx.config.maxInFlight(), Math.max(2, Runtime.getRuntime().availableProcessors()));
        var n = new AtomicInteger();
        this.pool = new ThreadPoolExecutor(threads, threads, 30, TimeUnit.SECONDS, new LinkedBlockingQueue<>(),
                r -> Thread.ofPlatform().daemon().name("stoker-local-read-" + n.incrementAndGet()).unstarted(r));
    }

    /** Reads {@code file}; when {@code realRoot} is given, a file whose real path leaves it is refused. */
    CompletableFuture<byte[]> read(String sampleId, Path file, Path realRoot, SampleException.Stage stage) {
        return ctx.submit(sampleId, stage, startNanos -> timed(sampleId, stage, file, null,
                () -> readFile(sampleId, file, realRoot, stage, startNanos)));
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
        return ctx.submit(sampleId, stage, startNanos -> timed(sampleId, stage, file, channels::remove, () -> {
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
        }));
    }

    private static final int QUEUED = 0, RUNNING = 1, HUNG = 2, DONE = 3;

    /** One blocking read (or open), run on the pool. */
    @FunctionalInterface
    private interface Body<T> {
        T run();
    }

    /**
     * Runs {@code body} on the pool and fails the result after the read timeout: the thread is then interrupted (which
     * closes its channel; {@code onTimeout} drops a cached one) and, while it does not return, replaced.
     */
    private <T> CompletableFuture<T> timed(String sampleId, SampleException.Stage stage, Path file,
                                           java.util.function.Consumer<Path> onTimeout, Body<T> body) {
        var result = new CompletableFuture<T>();
        var state = new AtomicInteger(QUEUED);
        var task = new FutureTask<Void>(() -> {
            if (!state.compareAndSet(QUEUED, RUNNING)) return null;
            try {
                T value = body.run();
                // an open that returns after its timeout: nobody will read or close what it opened
                if (!result.complete(value) && value instanceof AutoCloseable late) late.close();
            } catch (Throwable t) {
                result.completeExceptionally(t);
            } finally {
                if (state.getAndSet(DONE) == HUNG) resize(-1);
            }
            return null;
        });
        long timeout = ctx.config.localReadTimeoutMillis();
        try {
            pool.execute(task);
            var timer = ctx.timer.schedule(() -> {
                if (!result.completeExceptionally(new SampleException(sampleId, stage, "local read timed out after " + timeout
                        + " ms: " + file + " (a hung network file system or a device that never ends? --local-read-timeout-ms)")))
                    return;
                if (onTimeout != null) onTimeout.accept(file);
                boolean running = state.compareAndSet(RUNNING, HUNG);
                state.compareAndSet(QUEUED, DONE); // never started: it will not run
                task.cancel(true);
                if (running) resize(+1);
            }, timeout, TimeUnit.MILLISECONDS);
            result.whenComplete((b, e) -> timer.cancel(false));
        } catch (RejectedExecutionException e) {
            task.cancel(false);
            result.completeExceptionally(new SampleException(sampleId, stage, "source is closed", e));
        }
        return result;
    }

    /** What one refill of a {@link #stream} reads: large enough that the hand-off to the pool costs nothing next to it. */
    static final int STREAM_CHUNK = 256 * 1024;

    /**
     * {@code file} as a stream from its start: a manifest or a shard, read once to index it. As for {@link #read}, only a
     * regular file is opened (its real path checked, inside {@code realRoot} when given; then {@code O_NOFOLLOW}), and
     * the open and each refill of {@link #STREAM_CHUNK} bytes run on the pool, each within the read timeout (per refill,
     * not for the whole stream: a manifest may be many gigabytes). Past it the caller gets an IOException naming the file
     * and the timeout and the stuck thread is handled as a hung read's; a refused file is an IOException at once. Without
     * this a FIFO, a device or a file on a hung network file system named as a manifest or shard blocked the caller, and
     * with it the service's start, for good.
     *
     * @param label the manifest's or shard's name in errors
     */
    java.io.InputStream stream(String label, Path file, Path realRoot) throws IOException {
        var stage = SampleException.Stage.MANIFEST;
        FileChannel ch = await(timed(label, stage, file, null, () -> {
            try {
                return opener.open(checkedRealPath(label, file, realRoot, stage));
            } catch (NoSuchFileException e) {
                throw new SampleException(label, stage, "file not found: " + file, e);
            } catch (AccessDeniedException e) {
                throw new SampleException(label, stage, "permission denied: " + file, e);
            } catch (IOException e) {
                throw new SampleException(label, stage, "cannot open " + file + ": " + e, e);
            }
        }));
        return new TimedStream(label, file, ch);
    }

    /** Waits for a timed open or refill (it ends by the read timeout at the latest); its failure as an IOException. */
    private static <T> T await(CompletableFuture<T> f) throws IOException {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("interrupted while reading a local file");
        } catch (java.util.concurrent.ExecutionException e) {
            Throwable cause = FetchContext.unwrap(e);
            if (cause instanceof SampleException s) throw new IOException(s.getMessage(), s);
            if (cause instanceof RuntimeException r) throw r;
            if (cause instanceof Error err) throw err;
            throw new IOException(cause.getMessage(), cause);
        }
    }

    /**
     * A stream whose refills run on the pool within the read timeout. Once a refill fails (a timeout, a read error) the
     * stream stays failed: a thread that may still be reading owns the buffer.
     */
    private final class TimedStream extends java.io.InputStream {
        private final String label;
        private final Path file;
        private final FileChannel channel;
        private byte[] buf = new byte[STREAM_CHUNK];
        private int pos, end;
        private boolean eof;
        private IOException failed;

        TimedStream(String label, Path file, FileChannel channel) {
            this.label = label;
            this.file = file;
            this.channel = channel;
        }

        @Override
        public int read() throws IOException {
            if (pos == end && !fill()) return -1;
            return buf[pos++] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            java.util.Objects.checkFromIndexSize(off, len, b.length);
            if (len == 0) return 0;
            if (pos == end && !fill()) return -1;
            int n = Math.min(len, end - pos);
            System.arraycopy(buf, pos, b, off, n);
            pos += n;
            return n;
        }

        @Override
        public int available() { return end - pos; }

        /**
         * Skips by moving the channel's position, not by reading: indexing a tar shard skips its members' data (a
         * multi-GB video member included), so that only its headers are read. Never past the file's end.
         */
        @Override
        public long skip(long n) throws IOException {
            if (failed != null) throw new IOException(failed.getMessage(), failed);
            if (n <= 0) return 0;
            int buffered = end - pos;
            if (n <= buffered) {
                pos += (int) n;
                return n;
            }
            pos = end;
            if (eof) return buffered;
            long at = channel.position();
            long to = Math.min(channel.size(), at + (n - buffered));
            if (to > at) channel.position(to);
            return buffered + Math.max(0, to - at);
        }

        private boolean fill() throws IOException {
            if (failed != null) throw new IOException(failed.getMessage(), failed);
            if (eof) return false;
            byte[] into = buf;
            int n;
            try {
                n = await(timed(label, SampleException.Stage.MANIFEST, file, null, () -> {
                    try {
                        return channel.read(ByteBuffer.wrap(into));
                    } catch (IOException e) {
                        throw new SampleException(label, SampleException.Stage.MANIFEST, "cannot read " + file + ": " + e, e);
                    }
                }));
            } catch (IOException | RuntimeException e) {
                failed = e instanceof IOException io ? io : new IOException(e.getMessage(), e);
                buf = new byte[0]; // the stuck thread may still write into the old one
                pos = end = 0;
                throw failed;
            }
            if (n < 0) {
                eof = true;
                return false;
            }
            pos = 0;
            end = n;
            return n > 0 || fill();
        }

        @Override
        public void close() throws IOException { channel.close(); }
    }

    /**
     * Adds ({@code +1}) or removes ({@code -1}) a thread for a hung read, so that the pool keeps {@link #threads} threads
     * that are not hung; at most maxInFlight are added.
     */
    private synchronized void resize(int delta) {
        int h = delta > 0 ? hung.incrementAndGet() : hung.decrementAndGet();
        int size = threads + Math.min(Math.max(h, 0), ctx.config.maxInFlight());
        if (pool.isShutdown() || size == pool.getMaximumPoolSize()) return;
        if (size > pool.getMaximumPoolSize()) {
            pool.setMaximumPoolSize(size);
            pool.setCorePoolSize(size);
        } else {
            pool.setCorePoolSize(size);
            pool.setMaximumPoolSize(size);
        }
    }

    /** Threads of the pool now (those of hung reads included); for tests. */
    int poolSize() { return pool.getPoolSize(); }

    private final java.util.Map<Path, FileChannel> channels = new java.util.concurrent.ConcurrentHashMap<>();

    private FileChannel channel(Path file, Path realRoot, String sampleId, SampleException.Stage stage) throws IOException {
        FileChannel open = channels.get(file);
        if (open != null && open.isOpen()) return open;
        Path real = checkedRealPath(sampleId, file, realRoot, stage);
        try {
            return channels.compute(file, (f, cached) -> {
                if (cached != null && cached.isOpen()) return cached;
                try {
                    return opener.open(real);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
        } catch (java.io.UncheckedIOException e) {
            throw e.getCause();
        }
    }

    /**
     * The real path of {@code file}, refused (as {@code sampleId}'s error) when it leaves {@code realRoot} (if given) or is
     * not a regular file; nothing is opened, so a FIFO or a device is judged without blocking.
     */
    private static Path checkedRealPath(String sampleId, Path file, Path realRoot, SampleException.Stage stage) throws IOException {
        Path real;
        try {
            real = file.toRealPath();
        } catch (NoSuchFileException e) {
            // a link the kernel follows to something with no path (/dev/stdin → /proc/self/fd/0 → pipe:[…]), or nothing
            String kind;
            try {
                kind = kindOf(file, true);
            } catch (IOException gone) {
                throw e;
            }
            throw new SampleException(sampleId, stage, (kind == null ? "a file with no path" : kind) + ", not a regular file: " + file
                    + " (a link to something with no path); only regular files are read");
        }
        if (realRoot != null && !real.startsWith(realRoot))
            throw new SampleException(sampleId, stage, "path " + file + " leads out of the data set root " + realRoot + " through a symlink");
        String kind = notRegular(real);
        if (kind != null)
            throw new SampleException(sampleId, stage, kind + ", not a regular file: " + file
                    + (real.equals(file) ? "" : " (a link to " + real + ")") + "; only regular files are read");
        return real;
    }

    /** What {@code path} is when it is not a regular file (a link is not followed), else null. */
    static String notRegular(Path path) throws IOException { return kindOf(path, false); }

    /** What {@code path} is when it is not a regular file, else null; a link is followed only when {@code follow}. */
    private static String kindOf(Path path, boolean follow) throws IOException {
        LinkOption[] options = follow ? new LinkOption[0] : new LinkOption[] {LinkOption.NOFOLLOW_LINKS};
        int mode;
        try {
            mode = (Integer) Files.getAttribute(path, "unix:mode", options);
        } catch (UnsupportedOperationException | IllegalArgumentException e) {
            var a = Files.readAttributes(path, BasicFileAttributes.class, options);
            if (a.isRegularFile()) return null;
            return a.isDirectory() ? "a directory" : a.isSymbolicLink() ? "a symbolic link" : "a device, FIFO or socket";
        }
        return switch (mode & 0170000) {
            case 0100000 -> null;
            case 0010000 -> "a FIFO (named pipe)";
            case 0020000 -> "a character device";
            case 0040000 -> "a directory";
            case 0060000 -> "a block device";
            case 0140000 -> "a socket";
            case 0120000 -> "a symbolic link";
            default -> "a file of type 0" + Integer.toOctalString(mode & 0170000);
        };
    }

    private byte[] readFile(String sampleId, Path file, Path realRoot, SampleException.Stage stage, long startNanos) {
        try {
            Path real = checkedRealPath(sampleId, file, realRoot, stage);
            try (FileChannel ch = opener.open(real)) {
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
