package dev.stoker.pipeline.feed;

import dev.stoker.pipeline.ImagePathResolver;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * A test source over a local folder: reads on its own I/O threads, optionally after a random delay
 * of up to {@code jitterMillis}, so completion order differs from request order run to run.
 */
final class LocalFeedSource implements FeedSource, AutoCloseable {
    private final Path manifest;
    private final ImagePathResolver resolver;
    private final ExecutorService io = Executors.newFixedThreadPool(4, r -> {
        var t = new Thread(r, "test-io");
        t.setDaemon(true);
        return t;
    });
    private final int jitterMillis;

    LocalFeedSource(Path manifest, int jitterMillis) {
        this.manifest = manifest;
        this.resolver = new ImagePathResolver(manifest.toAbsolutePath().getParent());
        this.jitterMillis = jitterMillis;
    }

    @Override
    public CompletableFuture<byte[]> fetchManifest() {
        try {
            return CompletableFuture.completedFuture(Files.readAllBytes(manifest));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public CompletableFuture<byte[]> fetch(String sampleId, String reference) {
        return CompletableFuture.supplyAsync(() -> {
            if (jitterMillis > 0) {
                try {
                    Thread.sleep(ThreadLocalRandom.current().nextInt(jitterMillis + 1));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return resolver.read(sampleId, reference);
        }, io);
    }

    @Override
    public String manifestName() { return manifest.getFileName().toString(); }

    @Override
    public void close() {
        io.shutdownNow();
        try {
            io.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
