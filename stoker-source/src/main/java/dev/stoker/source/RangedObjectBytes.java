package dev.stoker.source;

import dev.stoker.core.io.SeekableByteSource;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * An object of an {@link ObjectSource} (or a byte range of one: a WebDataset member inside its shard) read at any
 * position through ranged fetches of {@link #BLOCK_BYTES} blocks, the last {@link #CACHED_BLOCKS} kept: what a
 * video demuxer reads, so that a seek in a 2 GB file fetches the megabytes around it, never the file. Every block
 * is one {@link ObjectSource#fetchRange} (inside the source's in-flight bound, retried as fetches are).
 *
 * <p>Reads block the calling thread until the block arrives or {@code timeoutNanos} passes (the demuxer asks for
 * bytes synchronously); the error then names the object.
 *
 * <p>Threading: one reader at a time (a demuxer).
 */
public final class RangedObjectBytes implements SeekableByteSource {
    public static final int BLOCK_BYTES = 1 << 20;
    /** How long one block's fetch may take by default (a video's reads in a feed). */
    public static final long READ_TIMEOUT_NANOS = TimeUnit.SECONDS.toNanos(60);
    static final int CACHED_BLOCKS = 8;

    private final ObjectSource objects;
    private final String reference;
    private final String name;
    private final long base;
    private final long length;
    private final long timeoutNanos;
    private final Map<Long, byte[]> blocks = new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, byte[]> eldest) { return size() > CACHED_BLOCKS; }
    };
    private long bytesFetched;
    private int fetches;

    private RangedObjectBytes(ObjectSource objects, String reference, String name, long base, long length, long timeoutNanos) {
        if (base < 0 || length < 0) throw new IllegalArgumentException("range " + base + "+" + length);
        this.objects = objects;
        this.reference = reference;
        this.name = name;
        this.base = base;
        this.length = length;
        this.timeoutNanos = timeoutNanos;
    }

    /** The whole object {@code reference} names (its size from a stat). */
    public static RangedObjectBytes of(ObjectSource objects, String reference, long timeoutNanos) throws IOException {
        return new RangedObjectBytes(objects, reference, reference, 0, objects.stat(reference).size(), timeoutNanos);
    }

    /** {@code length} bytes at {@code offset} of the object {@code reference} (a tar member), named {@code name}. */
    public static RangedObjectBytes range(ObjectSource objects, String reference, long offset, long length, String name,
                                          long timeoutNanos) {
        return new RangedObjectBytes(objects, reference, name, offset, length, timeoutNanos);
    }

    @Override public String name() { return name; }

    @Override public long sizeBytes() { return length; }

    /** Bytes fetched so far (blocks, including re-fetches of evicted ones). */
    public long bytesFetched() { return bytesFetched; }

    /** Ranged fetches made so far. */
    public int fetches() { return fetches; }

    @Override
    public int read(long position, MemorySegment dst) throws IOException {
        if (position < 0) throw new IOException(name + ": read at " + position);
        if (position >= length) return -1;
        long blockIndex = position / BLOCK_BYTES;
        byte[] block = block(blockIndex);
        int within = (int) (position - blockIndex * BLOCK_BYTES);
        int n = (int) Math.min(dst.byteSize(), block.length - within);
        MemorySegment.copy(block, within, dst, ValueLayout.JAVA_BYTE, 0, n);
        return n;
    }

    private byte[] block(long index) throws IOException {
        byte[] block = blocks.get(index);
        if (block != null) return block;
        long start = index * BLOCK_BYTES;
        int size = (int) Math.min(BLOCK_BYTES, length - start);
        try {
            block = objects.fetchRange(reference, base + start, size).get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException(name + ": interrupted while fetching bytes " + start + "…", e);
        } catch (TimeoutException e) {
            throw new IOException(name + ": bytes " + start + "…" + (start + size) + " did not arrive within "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms", e);
        } catch (ExecutionException e) {
            throw new IOException(name + ": " + e.getCause().getMessage(), e.getCause());
        }
        if (block.length != size) {
            throw new IOException(name + ": asked for " + size + " bytes at " + start + ", got " + block.length);
        }
        fetches++;
        bytesFetched += size;
        blocks.put(index, block);
        return block;
    }
}
