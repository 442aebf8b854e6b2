package dev.stoker.transport;

import dev.stoker.core.batch.BatchLayout;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntFunction;

/**
 * A shared-memory provider for client tests: writes each batch of {@link FeedServerTest.Synthetic}
 * (one rank) into a file of {@link #FILE_BYTES} at offset 128 with plain writes (the service side of
 * this JVM maps nothing, so the test process's mappings are the client's alone), at the path
 * {@link #where} names for each step; {@link #onRelease} runs when the trainer releases a step (a
 * store deletes free segments: the test may too).
 */
final class FileSegments implements FeedServerTest.Simple {
    static final long FILE_BYTES = 1 << 20;
    static final long OFFSET = 128;
    final FeedServerTest.Synthetic values;
    final Path dir;
    volatile IntFunction<Path> where;
    volatile IntFunction<Path> named; // the path the REF names (default: where)
    volatile java.util.function.IntConsumer onRelease = step -> {};
    final AtomicInteger released = new AtomicInteger();

    FileSegments(Path dir, int steps) {
        this.dir = dir;
        this.values = new FeedServerTest.Synthetic(1, steps);
        this.where = step -> dir.resolve("seg-" + step);
        this.named = step -> where.apply(step);
    }

    @Override public void validate(int rank, int world) { values.validate(rank, world); }

    @Override public boolean sharedMemory() { return true; }

    @Override
    public CompletableFuture<Delivery> next(int rank) {
        var p = values.next(rank).join();
        if (p == null) return CompletableFuture.completedFuture(null);
        int step = (int) p.meta().step();
        try {
            long size = BatchLayout.sizeOf(p.tensors());
            var batch = Arena.ofAuto().allocate(size, 64);
            BatchLayout.write(p.meta(), p.tensors(), batch);
            Path file = where.apply(step);
            Files.deleteIfExists(file); // a file made afresh: a new inode, as a store's new segment
            try (var fc = FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                fc.write(ByteBuffer.allocate(1), FILE_BYTES - 1);
                fc.write(batch.asByteBuffer(), OFFSET);
            }
            Files.setPosixFilePermissions(file, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));
            return CompletableFuture.completedFuture(new Stored(named.apply(step), OFFSET, size, batch, () -> {
                released.incrementAndGet();
                onRelease.accept(step);
            }));
        } catch (IOException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /** Bytes of mappings of this process whose file under {@code dir} was deleted ({@code /proc/self/maps}). */
    static long deletedMappedBytes(Path dir) throws IOException {
        long n = 0;
        String prefix = dir.toRealPath().toString() + "/";
        for (String line : Files.readAllLines(Path.of("/proc/self/maps"))) {
            if (!line.endsWith(" (deleted)") || !line.contains(prefix)) continue;
            String[] range = line.substring(0, line.indexOf(' ')).split("-");
            n += Long.parseUnsignedLong(range[1], 16) - Long.parseUnsignedLong(range[0], 16);
        }
        return n;
    }
}
