package dev.stoker.video.index;

import dev.stoker.core.io.AtomicFiles;
import dev.stoker.core.io.SeekableByteSource;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.concurrent.atomic.LongAdder;

/**
 * A folder of frame indexes, one file per video, so that a video is demuxed once (issue 29, build item 4: the index
 * "made by validate, stored beside the length index, or at first use"): an index costs a scan of every packet, which
 * reads the whole file (libavformat hands over each packet's payload), and a stored one costs a read of two 64 KiB
 * ranges and of the index file.
 *
 * <p>Which video a file is for: its key is the SHA-256 of the index format ({@code STKVIX01}), the FFmpeg libraries'
 * versions (another libavformat may index otherwise), the video's size in bytes, and its first and last
 * {@value #SAMPLE_BYTES} bytes; not its name, so the same bytes under two references or in two sources share one
 * file, and a file replaced under the same name by other bytes is indexed anew. (Two different videos of one size whose
 * first and last 64 KiB agree would share a key: a container's header and its tail — MP4's sample table, AVI's
 * {@code idx1}, Matroska's cues, or compressed frame data — make that as unlikely as a collision of its frames.)
 * A video of unknown size is indexed and not stored.
 *
 * <p>Files are {@code <dir>/<key, 32 hex digits>.vix} in {@link FrameIndex#toBytes}'s format, written atomically; one that
 * cannot be read back (cut short, corrupt, another format) is indexed anew and replaced; one that cannot be written
 * (a full or read-only disk) is counted ({@link #writeFailures}) and the index is used all the same.
 *
 * <p>Threading: thread-safe; two threads indexing the same video at once both index it and the last write wins (both
 * files are whole and equal).
 */
public final class FrameIndexStore {
    /** Bytes hashed at each end of a video for its key. */
    public static final int SAMPLE_BYTES = 64 << 10;
    /** The largest index file read: {@link FrameIndex#MAX_ENTRIES} entries of 25 bytes, and its header. */
    static final long MAX_FILE_BYTES = FrameIndex.MAX_ENTRIES * 25L + 8192;

    private final Path dir;
    private final String libraries;
    private final LongAdder hits = new LongAdder(), misses = new LongAdder(), writeFailures = new LongAdder();

    /**
     * @param dir       the folder (made at the first write)
     * @param libraries the FFmpeg libraries' versions the indexes are made with ({@code Ffmpeg.get().versions()})
     */
    public FrameIndexStore(Path dir, String libraries) {
        this.dir = java.util.Objects.requireNonNull(dir, "dir");
        this.libraries = java.util.Objects.requireNonNull(libraries, "libraries");
    }

    /** A store in {@code dir} for the FFmpeg libraries loaded in this process. */
    public static FrameIndexStore of(Path dir) { return new FrameIndexStore(dir, dev.stoker.video.ffmpeg.Ffmpeg.get().versions()); }

    public Path dir() { return dir; }

    /** Indexes found in the store. */
    public long hits() { return hits.sum(); }

    /** Indexes built (none stored for those bytes, or the stored one unreadable). */
    public long misses() { return misses.sum(); }

    /** Indexes built but not stored (the folder or file could not be written). */
    public long writeFailures() { return writeFailures.sum(); }

    /**
     * The frame index of {@code source}: the stored one when the store holds one for these bytes, else built by
     * {@code indexer} (a {@link dev.stoker.core.SampleException} naming the video when the video is broken; nothing is
     * stored then) and stored.
     *
     * @throws IOException when the video's bytes cannot be read
     */
    public FrameIndex index(SeekableByteSource source, FrameIndexer indexer) throws IOException {
        String key = key(source);
        if (key == null) {
            misses.increment();
            return indexer.index(source);
        }
        Path file = dir.resolve(key + ".vix");
        FrameIndex stored = read(file);
        if (stored != null) {
            hits.increment();
            return stored;
        }
        misses.increment();
        FrameIndex index = indexer.index(source);
        try {
            byte[] bytes = index.toBytes();
            AtomicFiles.write(file, tmp -> Files.write(tmp, bytes));
        } catch (IOException | RuntimeException e) {
            writeFailures.increment();
        }
        return index;
    }

    /** The stored index in {@code file}, or null when there is none or it cannot be read back. */
    private static FrameIndex read(Path file) {
        try {
            if (Files.size(file) > MAX_FILE_BYTES) return null;
            return FrameIndex.fromBytes(Files.readAllBytes(file));
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException | RuntimeException e) {
            return null; // cut short, corrupt or of another format: indexed anew and replaced
        }
    }

    /** The key of {@code source}'s bytes (32 hex digits), or null when its size is unknown. */
    public String key(SeekableByteSource source) throws IOException {
        long size = source.sizeBytes();
        if (size < 0) return null;
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        sha.update(("STKVIX01\n" + libraries + "\n" + size + "\n").getBytes(StandardCharsets.UTF_8));
        int head = (int) Math.min(SAMPLE_BYTES, size);
        sha.update(readFully(source, 0, head));
        long tailAt = Math.max(head, size - SAMPLE_BYTES); // the bytes after the head, at most the last 64 KiB
        sha.update(readFully(source, tailAt, (int) (size - tailAt)));
        return HexFormat.of().formatHex(sha.digest(), 0, 16);
    }

    private static byte[] readFully(SeekableByteSource source, long at, int length) throws IOException {
        byte[] out = new byte[length];
        var dst = MemorySegment.ofArray(out);
        int done = 0;
        while (done < length) {
            int n = source.read(at + done, dst.asSlice(done));
            if (n < 0) throw new IOException(source.name() + ": ended at byte " + (at + done) + " of the " + (at + length) + " its size promised");
            done += n;
        }
        return out;
    }
}
