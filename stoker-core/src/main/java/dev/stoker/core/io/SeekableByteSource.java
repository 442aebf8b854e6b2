package dev.stoker.core.io;

import java.io.Closeable;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * The bytes of one container, read at any position: what FFmpeg's custom AVIOContext reads through, so that a
 * video is never opened by path alone (a file channel and a byte array now; S3 ranged reads and WebDataset members
 * later).
 *
 * <p>Threading: one demuxer reads a source from one thread at a time.
 */
public interface SeekableByteSource extends Closeable {
    /** What errors name: the file, URI or member. */
    String name();

    /** The size in bytes, or -1 when unknown. */
    long sizeBytes() throws IOException;

    /**
     * Reads up to {@code dst.byteSize()} bytes at {@code position} into {@code dst}; returns how many (at least 1),
     * or -1 at the end.
     */
    int read(long position, MemorySegment dst) throws IOException;

    @Override
    default void close() throws IOException {}

    /** The local file these bytes are, when they are one (another process may then open it itself), else null. */
    default Path localFile() { return null; }

    static SeekableByteSource of(Path file) throws IOException {
        return new FileSource(file);
    }

    static SeekableByteSource of(String name, byte[] bytes) {
        return new ByteArraySource(name, bytes);
    }

    /** A file read through a {@link FileChannel} at explicit positions. */
    final class FileSource implements SeekableByteSource {
        private final Path file;
        private final FileChannel channel;

        FileSource(Path file) throws IOException {
            // a FIFO or device would block the open or never end: only regular files are videos
            if (!java.nio.file.Files.isRegularFile(file)) throw new IOException(file + ": not a regular file");
            this.file = file;
            this.channel = FileChannel.open(file, StandardOpenOption.READ);
        }

        @Override public String name() { return file.toString(); }

        @Override public long sizeBytes() throws IOException { return channel.size(); }

        @Override public Path localFile() { return file; }

        @Override
        public int read(long position, MemorySegment dst) throws IOException {
            int n = channel.read(dst.asByteBuffer(), position);
            return n == 0 ? -1 : n;
        }

        @Override public void close() throws IOException { channel.close(); }
    }

    /** Bytes already in memory (a Parquet cell, a tar member read whole). */
    final class ByteArraySource implements SeekableByteSource {
        private final String name;
        private final byte[] bytes;

        ByteArraySource(String name, byte[] bytes) {
            this.name = name;
            this.bytes = bytes;
        }

        @Override public String name() { return name; }

        @Override public long sizeBytes() { return bytes.length; }

        @Override
        public int read(long position, MemorySegment dst) {
            if (position < 0 || position >= bytes.length) return -1;
            int n = (int) Math.min(dst.byteSize(), bytes.length - position);
            MemorySegment.copy(MemorySegment.ofArray(bytes), position, dst, 0, n);
            return n;
        }
    }
}
