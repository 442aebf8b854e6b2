package dev.stoker.pipeline.feed;

import dev.stoker.encode.SampleEncoder;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
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
    private final ObjectSource source;
    private final SampleEncoder.ImageSource images;
    private final ExecutorService io = Executors.newFixedThreadPool(4, r -> {
        var t = new Thread(r, "test-io");
        t.setDaemon(true);
        return t;
    });
    private final int jitterMillis;

    LocalFeedSource(Path manifest, int jitterMillis) {
        this.manifest = manifest;
        this.source = ObjectSources.open(manifest.toAbsolutePath().toString(), SourceConfig.defaults());
        this.images = SampleEncoder.ImageSource.blocking(source);
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
            return images.read(sampleId, reference);
        }, io);
    }

    @Override
    public String manifestName() { return manifest.getFileName().toString(); }

    @Override
    public dev.stoker.core.io.SeekableByteSource openVideo(int record, String sampleId, String reference) throws IOException {
        return dev.stoker.source.RangedObjectBytes.of(source, reference, VIDEO_READ_TIMEOUT_NANOS);
    }

    @Override
    public void close() {
        source.close();
        io.shutdownNow();
        try {
            io.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
