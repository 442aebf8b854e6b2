package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * What the sources of one data set share: configuration, metrics, the in-flight limiter, the timer
 * for modelled latency and retry backoff, and the readers (local files, S3), created on first use.
 *
 * <p>Threading: thread-safe. The timer has one daemon thread and only starts asynchronous work.
 */
final class FetchContext implements AutoCloseable {
    /** One object read, started once an in-flight slot is held; {@code startNanos} is when it was. */
    @FunctionalInterface
    interface Read {
        CompletableFuture<byte[]> start(long startNanos);
    }

    final SourceConfig config;
    final SourceMetrics metrics = new SourceMetrics();
    final ScheduledThreadPoolExecutor timer;
    private final FetchLimiter limiter;
    private LocalReader local;
    private S3Reader s3;
    private boolean closed;

    FetchContext(SourceConfig config) {
        this.config = config;
        this.limiter = new FetchLimiter(config.maxInFlight(), metrics);
        this.timer = new ScheduledThreadPoolExecutor(1, r -> Thread.ofPlatform().daemon().name("stoker-source-timer").unstarted(r));
        this.timer.setRemoveOnCancelPolicy(true);
    }

    synchronized LocalReader local() {
        if (closed) throw new IllegalStateException("source is closed");
        if (local == null) local = new LocalReader(this);
        return local;
    }

    synchronized S3Reader s3() {
        if (closed) throw new IllegalStateException("source is closed");
        if (s3 == null) s3 = new S3Reader(this);
        return s3;
    }

    /**
     * Resolves a manifest's {@code reference} against {@code location}, confined unless {@link SourceConfig#refsOutsideRoot()},
     * and reads it; refusals fail the future.
     */
    CompletableFuture<byte[]> fetchReference(String sampleId, String reference, DatasetLocation location, Path realRoot) {
        References.Target target;
        try {
            target = References.resolve(sampleId, reference, location, config.refsOutsideRoot());
        } catch (SampleException e) {
            return refused(e);
        }
        return fetch(sampleId, target, realRoot, SampleException.Stage.FETCH);
    }

    /** Reads {@code target}; a file from a relative reference must stay under {@code realRoot}. */
    CompletableFuture<byte[]> fetch(String sampleId, References.Target target, Path realRoot, SampleException.Stage stage) {
        try {
            return switch (target) {
                case References.FileTarget f -> local().read(sampleId, f.path(), f.confined() ? realRoot : null, stage);
                case References.S3Target o -> s3().get(sampleId, o.bucket(), o.key(), stage);
            };
        } catch (IllegalStateException e) {
            return refused(new SampleException(sampleId, stage, e.getMessage(), e));
        }
    }

    /**
     * {@code length} bytes at {@code offset} of what {@code reference} names (a record's bytes); errors at stage MANIFEST,
     * labelled with the reference. The reference is a data file the command line named (a shard), so URIs are taken as given.
     */
    CompletableFuture<byte[]> fetchRange(String reference, DatasetLocation location, Path realRoot, long offset, int length) {
        var stage = SampleException.Stage.MANIFEST;
        References.Target target;
        try {
            target = References.resolve(reference, reference, location, true);
        } catch (SampleException e) {
            return refused(new SampleException(reference, stage, e.getMessage(), e));
        }
        try {
            return switch (target) {
                case References.FileTarget f -> local().readRange(reference, f.path(), f.confined() ? realRoot : null, offset, length, stage);
                case References.S3Target o -> length == 0 && offset >= 0 ? CompletableFuture.completedFuture(new byte[0])
                        : s3().getRange(reference, o.bucket(), o.key(), offset, length, stage);
            };
        } catch (IllegalStateException e) {
            return refused(new SampleException(reference, stage, e.getMessage(), e));
        }
    }

    /** The size and version of what {@code reference} names (local: size and modification time; S3: length and ETag). */
    ManifestStat stat(String reference, DatasetLocation location, Path realRoot) throws java.io.IOException {
        return switch (resolveForIo(reference, location, realRoot)) {
            case References.FileTarget f -> {
                java.nio.file.attribute.BasicFileAttributes a;
                try {
                    a = java.nio.file.Files.readAttributes(f.path(), java.nio.file.attribute.BasicFileAttributes.class);
                } catch (java.nio.file.NoSuchFileException e) {
                    throw new java.io.IOException("file not found: " + f.path(), e);
                }
                if (!a.isRegularFile()) throw new java.io.IOException(f.path() + " is not a regular file");
                yield new ManifestStat(a.size(), Long.toString(a.lastModifiedTime().to(TimeUnit.NANOSECONDS)));
            }
            case References.S3Target o -> s3().stat(o.toString(), o.bucket(), o.key());
        };
    }

    /**
     * What {@code reference} names, as a stream from its start; a local one only if it is a regular file, opened and read
     * within the local read timeout ({@link LocalReader#stream}).
     */
    java.io.InputStream open(String reference, DatasetLocation location, Path realRoot) throws java.io.IOException {
        return switch (resolveForIo(reference, location, realRoot)) {
            case References.FileTarget f -> local().stream(reference, f.path(), f.confined() ? realRoot : null);
            case References.S3Target o -> s3().stream(o.toString(), o.bucket(), o.key());
        };
    }

    private static References.Target resolveForIo(String reference, DatasetLocation location, Path realRoot) throws java.io.IOException {
        References.Target target;
        try {
            target = References.resolve(reference, reference, location, true);
        } catch (SampleException e) {
            throw new java.io.IOException(e.getMessage(), e);
        }
        if (target instanceof References.FileTarget f && f.confined() && realRoot != null && java.nio.file.Files.exists(f.path())
                && !f.path().toRealPath().startsWith(realRoot))
            throw new java.io.IOException("path " + f.path() + " leads out of the data set root " + realRoot + " through a symlink");
        return target;
    }

    /** A fetch refused before it started (bad reference): counted as a request and a failure. */
    CompletableFuture<byte[]> refused(SampleException e) {
        metrics.onRequest();
        metrics.onRefused();
        return CompletableFuture.failedFuture(e);
    }

    /** Runs {@code read} inside an in-flight slot, after the modelled latency, and records its metrics. */
    CompletableFuture<byte[]> submit(String sampleId, SampleException.Stage stage, Read read) {
        metrics.onRequest();
        var result = new CompletableFuture<byte[]>();
        limiter.submit(() -> {
            long startNanos = System.nanoTime();
            metrics.onStart();
            long latencyMillis = config.fetchLatencyMillis();
            if (latencyMillis == 0) {
                begin(read, startNanos, result);
                return;
            }
            try {
                timer.schedule(() -> begin(read, startNanos, result), latencyMillis, TimeUnit.MILLISECONDS);
            } catch (RejectedExecutionException e) {
                finish(startNanos, result, null, new SampleException(sampleId, stage, "source is closed", e));
            }
        });
        return result;
    }

    private void begin(Read read, long startNanos, CompletableFuture<byte[]> result) {
        CompletableFuture<byte[]> f;
        try {
            f = read.start(startNanos);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((bytes, error) -> finish(startNanos, result, bytes, error));
    }

    private void finish(long startNanos, CompletableFuture<byte[]> result, byte[] bytes, Throwable error) {
        metrics.onEnd(error == null ? bytes : null, System.nanoTime() - startNanos);
        limiter.release();
        if (error == null) result.complete(bytes);
        else result.completeExceptionally(unwrap(error));
    }

    static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) t = t.getCause();
        return t;
    }

    @Override
    public void close() {
        LocalReader l;
        S3Reader s;
        synchronized (this) {
            if (closed) return;
            closed = true;
            l = local;
            s = s3;
        }
        timer.shutdownNow();
        if (l != null) l.close();
        if (s != null) s.close();
    }
}
