package dev.stoker.store;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.channels.FileChannel.MapMode;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/** Helpers shared by the store tests. */
final class StoreTesting {
    static final long MIB = 1L << 20;

    private StoreTesting() {}

    static StoreConfig config(Path dir, long budgetBytes) {
        return new StoreConfig(dir, budgetBytes, "stoker");
    }

    static <T> T await(CompletableFuture<T> f) throws Exception {
        try {
            return f.get(10, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception cause) throw cause;
            throw e;
        }
    }

    /** The failure of {@code f}, which must fail within the timeout. */
    static Throwable failure(CompletableFuture<?> f) throws InterruptedException, TimeoutException {
        try {
            f.get(10, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            return e.getCause();
        }
        throw new AssertionError("expected the future to fail, it completed with " + f.join());
    }

    /** A deterministic pattern, distinct per {@code seed}. */
    static void fill(MemorySegment s, int seed) {
        for (long i = 0; i + 8 <= s.byteSize(); i += 8) s.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 31 + seed);
        for (long i = s.byteSize() & ~7L; i < s.byteSize(); i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (i + seed));
    }

    /** Maps the object's bytes from its file as another process would, and copies them out. */
    static byte[] readAsAnotherProcess(Path file, long offset, long bytes) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ); Arena arena = Arena.ofConfined()) {
            return ch.map(MapMode.READ_ONLY, offset, bytes, arena).toArray(ValueLayout.JAVA_BYTE);
        }
    }

    /** Sum of the sizes of the segment files in {@code dir}, tolerating files deleted meanwhile. */
    static long segmentFileBytes(Path dir) {
        try (Stream<Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().startsWith(ShmObjectStore.SEGMENT_PREFIX)).mapToLong(p -> {
                try {
                    return Files.size(p);
                } catch (NoSuchFileException e) {
                    return 0;
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }).sum();
        } catch (NoSuchFileException e) {
            return 0;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static long segmentFileCount(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().startsWith(ShmObjectStore.SEGMENT_PREFIX)).count();
        }
    }
}
