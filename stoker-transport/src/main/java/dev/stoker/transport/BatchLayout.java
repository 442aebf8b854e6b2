package dev.stoker.transport;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The binary layout of one batch: a fixed header, a table of tensor descriptors, then each
 * tensor's bytes at a 64-byte aligned offset. The same bytes travel over a socket, sit in a
 * shared-memory segment, or are read by NumPy ({@code numpy.frombuffer(buf, dtype, count, offset)}).
 * All integers little-endian.
 *
 * <pre>
 *  0               4               8               12              16
 *  +---------------+---------------+---------------+---------------+
 *  | magic "STKB"  | version (=1)  | tensor count  | header bytes  |   header bytes = data start
 *  +---------------+---------------+---------------+---------------+
 *  | total bytes (u64)             | epoch (u64)                   |   16..31
 *  +-------------------------------+-------------------------------+
 *  | step (u64)                    | rank (u32)    | world (u32)   |   32..47
 *  +-------------------------------+---------------+---------------+
 *  | batch size (u32) | reserved (u32) | reserved (u64)            |   48..63
 *  +---------------------------------------------------------------+
 *  | descriptor 0 (128 bytes)                                      |   64..191
 *  |   name     32 bytes ASCII, NUL padded                         |
 *  |   dtype    u32  (1 f32, 2 i64, 3 i32, 4 u8)                   |
 *  |   ndim     u32                                                |
 *  |   shape    6 × u64 (unused dims 0)                            |
 *  |   offset   u64  from the batch start, multiple of 64          |
 *  |   length   u64  bytes                                         |
 *  |   reserved 24 bytes                                           |
 *  +---------------------------------------------------------------+
 *  | descriptor 1 … n−1                                            |
 *  +---------------------------------------------------------------+
 *  | padding to 64 | tensor 0 bytes | padding | tensor 1 bytes …   |
 *  +---------------------------------------------------------------+
 * </pre>
 */
public final class BatchLayout {
    public static final int MAGIC = 0x424B5453; // "STKB" read as a little-endian int
    public static final int VERSION = 1;
    public static final int HEADER_BYTES = 64;
    public static final int DESCRIPTOR_BYTES = 128;
    public static final int NAME_BYTES = 32;
    public static final int MAX_DIMS = 6;
    public static final int ALIGNMENT = 64;

    static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfLong LONG_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfFloat FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private static final long OFF_MAGIC = 0, OFF_VERSION = 4, OFF_COUNT = 8, OFF_HEADER = 12, OFF_TOTAL = 16,
            OFF_EPOCH = 24, OFF_STEP = 32, OFF_RANK = 40, OFF_WORLD = 44, OFF_BATCH = 48;
    private static final long D_NAME = 0, D_DTYPE = 32, D_NDIM = 36, D_SHAPE = 40, D_OFFSET = 88, D_LENGTH = 96;

    /** Which batch this is: schedule position and how many samples it holds. */
    public record Meta(long epoch, long step, int rank, int world, int batchSize) {}

    /** A parsed batch: its metadata and its tensors as slices of the underlying segment (no copy). */
    public record Batch(Meta meta, List<Tensor> tensors, long totalBytes) {
        public Tensor tensor(String name) {
            for (Tensor t : tensors) if (t.name().equals(name)) return t;
            throw new IllegalArgumentException("no tensor '" + name + "' in batch");
        }
    }

    private BatchLayout() {}

    static long align(long v) { return (v + ALIGNMENT - 1) & -ALIGNMENT; }

    /** Bytes a batch of these tensors occupies. */
    public static long sizeOf(List<Tensor> tensors) {
        long offset = align(HEADER_BYTES + (long) DESCRIPTOR_BYTES * tensors.size());
        for (Tensor t : tensors) offset = align(offset + t.data().byteSize());
        return offset;
    }

    /** Writes header, descriptors and data into {@code dst} (at least {@link #sizeOf} bytes); returns the bytes used. */
    public static long write(Meta meta, List<Tensor> tensors, MemorySegment dst) {
        long total = sizeOf(tensors);
        if (dst.byteSize() < total) throw new IllegalArgumentException("segment of " + dst.byteSize() + " bytes < batch of " + total);
        long header = align(HEADER_BYTES + (long) DESCRIPTOR_BYTES * tensors.size());
        dst.asSlice(0, header).fill((byte) 0);
        dst.set(INT_LE, OFF_MAGIC, MAGIC);
        dst.set(INT_LE, OFF_VERSION, VERSION);
        dst.set(INT_LE, OFF_COUNT, tensors.size());
        dst.set(INT_LE, OFF_HEADER, (int) header);
        dst.set(LONG_LE, OFF_TOTAL, total);
        dst.set(LONG_LE, OFF_EPOCH, meta.epoch());
        dst.set(LONG_LE, OFF_STEP, meta.step());
        dst.set(INT_LE, OFF_RANK, meta.rank());
        dst.set(INT_LE, OFF_WORLD, meta.world());
        dst.set(INT_LE, OFF_BATCH, meta.batchSize());
        long offset = header;
        for (int i = 0; i < tensors.size(); i++) {
            Tensor t = tensors.get(i);
            long d = HEADER_BYTES + (long) DESCRIPTOR_BYTES * i;
            byte[] name = t.name().getBytes(StandardCharsets.US_ASCII);
            MemorySegment.copy(MemorySegment.ofArray(name), 0, dst, d + D_NAME, name.length);
            dst.set(INT_LE, d + D_DTYPE, t.dtype().code);
            long[] shape = t.shape();
            dst.set(INT_LE, d + D_NDIM, shape.length);
            for (int k = 0; k < shape.length; k++) dst.set(LONG_LE, d + D_SHAPE + 8L * k, shape[k]);
            long len = t.data().byteSize();
            dst.set(LONG_LE, d + D_OFFSET, offset);
            dst.set(LONG_LE, d + D_LENGTH, len);
            MemorySegment.copy(t.data(), 0, dst, offset, len);
            long end = offset + len;
            long next = align(end);
            if (next > end) dst.asSlice(end, next - end).fill((byte) 0);
            offset = next;
        }
        return total;
    }

    /** Reads a batch laid out by {@link #write}; tensors are views of {@code src}. */
    public static Batch read(MemorySegment src) {
        if (src.byteSize() < HEADER_BYTES) throw new IllegalArgumentException("batch of " + src.byteSize() + " bytes has no header");
        if (src.get(INT_LE, OFF_MAGIC) != MAGIC) throw new IllegalArgumentException("not a Stoker batch (bad magic)");
        int version = src.get(INT_LE, OFF_VERSION);
        if (version != VERSION) throw new IllegalArgumentException("batch layout version " + version + ", this reader knows " + VERSION);
        int count = src.get(INT_LE, OFF_COUNT);
        long total = src.get(LONG_LE, OFF_TOTAL);
        if (total > src.byteSize() || count < 0 || HEADER_BYTES + (long) DESCRIPTOR_BYTES * count > total)
            throw new IllegalArgumentException("truncated batch: header says " + total + " bytes, " + count + " tensors; have " + src.byteSize());
        var meta = new Meta(src.get(LONG_LE, OFF_EPOCH), src.get(LONG_LE, OFF_STEP), src.get(INT_LE, OFF_RANK),
                src.get(INT_LE, OFF_WORLD), src.get(INT_LE, OFF_BATCH));
        var tensors = new ArrayList<Tensor>(count);
        for (int i = 0; i < count; i++) {
            long d = HEADER_BYTES + (long) DESCRIPTOR_BYTES * i;
            byte[] raw = src.asSlice(d + D_NAME, NAME_BYTES).toArray(ValueLayout.JAVA_BYTE);
            int n = 0;
            while (n < raw.length && raw[n] != 0) n++;
            String name = new String(raw, 0, n, StandardCharsets.US_ASCII);
            var dtype = Tensor.DType.ofCode(src.get(INT_LE, d + D_DTYPE));
            int ndim = src.get(INT_LE, d + D_NDIM);
            if (ndim < 0 || ndim > MAX_DIMS) throw new IllegalArgumentException(name + ": bad ndim " + ndim);
            long[] shape = new long[ndim];
            for (int k = 0; k < ndim; k++) shape[k] = src.get(LONG_LE, d + D_SHAPE + 8L * k);
            long offset = src.get(LONG_LE, d + D_OFFSET);
            long len = src.get(LONG_LE, d + D_LENGTH);
            if (offset < 0 || len < 0 || offset + len > total) throw new IllegalArgumentException(name + ": data outside the batch");
            tensors.add(new Tensor(name, dtype, shape, src.asSlice(offset, len)));
        }
        return new Batch(meta, List.copyOf(tensors), total);
    }
}
