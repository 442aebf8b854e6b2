package dev.stoker.core.batch;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * One named, typed, shaped array of a batch. {@code data} holds its little-endian C-order bytes:
 * a heap segment when built by the producer, a slice of the received or mapped batch when read.
 *
 * <p>{@code metadata}: a fact about the batch ({@code sample_index}, the compact format's {@code pixel_norm}
 * and {@code pixel_patch}) rather than a model input, or a model input left out of {@code forward} (the empty
 * {@code pixel_values} and {@code image_grid_thw} of a batch without images). It travels with the batch like any tensor (its
 * descriptor says so, {@link BatchLayout#FLAG_METADATA}), but clients keep it out of what they hand
 * to the model's {@code forward} ({@link BatchLayout.Batch#inputs()}).
 */
public record Tensor(String name, DType dtype, long[] shape, MemorySegment data, boolean metadata) {

    /** Element types, with the NumPy descriptor each one maps to. */
    public enum DType {
        FLOAT32(1, 4, "<f4"), INT64(2, 8, "<i8"), INT32(3, 4, "<i4"), UINT8(4, 1, "|u1");

        final int code;
        final int byteSize;
        final String numpy;

        DType(int code, int byteSize, String numpy) {
            this.code = code;
            this.byteSize = byteSize;
            this.numpy = numpy;
        }

        public int byteSize() { return byteSize; }

        public String numpy() { return numpy; }

        static DType ofCode(int code) {
            for (DType d : values()) if (d.code == code) return d;
            throw new IllegalArgumentException("unknown dtype code " + code);
        }
    }

    /** A model input. */
    public Tensor(String name, DType dtype, long[] shape, MemorySegment data) { this(name, dtype, shape, data, false); }

    public Tensor {
        if (name.isEmpty() || name.length() > BatchLayout.NAME_BYTES - 1) throw new IllegalArgumentException("bad tensor name '" + name + "'");
        if (shape.length > BatchLayout.MAX_DIMS) throw new IllegalArgumentException(name + ": more than " + BatchLayout.MAX_DIMS + " dimensions");
        shape = shape.clone();
        boolean empty = false;
        for (long d : shape) {
            if (d < 0) throw new IllegalArgumentException(name + ": negative dimension");
            empty |= d == 0;
        }
        long n = empty ? 0 : 1;
        // a shape whose byte count overflows would wrap around, to 0 bytes for (2^61, 8) of int64: refused
        for (long d : shape) {
            if (empty) break;
            if (n > Long.MAX_VALUE / dtype.byteSize / d)
                throw new IllegalArgumentException(name + ": shape " + Arrays.toString(shape) + " of " + dtype + " is over 2^63 bytes");
            n *= d;
        }
        if (n * dtype.byteSize != data.byteSize())
            throw new IllegalArgumentException(name + ": " + data.byteSize() + " bytes do not fit shape " + Arrays.toString(shape) + " of " + dtype);
    }

    public static Tensor of(String name, float[] values, long... shape) {
        return new Tensor(name, DType.FLOAT32, shape, MemorySegment.ofArray(values));
    }

    public static Tensor of(String name, long[] values, long... shape) {
        return new Tensor(name, DType.INT64, shape, MemorySegment.ofArray(values));
    }

    /** An int32 tensor (a packed batch's {@code cu_seqlens}, {@code max_seqlen}, {@code seg_ids}). */
    public static Tensor of(String name, int[] values, long... shape) {
        return new Tensor(name, DType.INT32, shape, MemorySegment.ofArray(values));
    }

    public static Tensor of(String name, byte[] values, long... shape) {
        return new Tensor(name, DType.UINT8, shape, MemorySegment.ofArray(values));
    }

    /** This tensor marked as the batch's metadata, not a model input. */
    public Tensor asMetadata() { return metadata ? this : new Tensor(name, dtype, shape, data, true); }

    public long elementCount() { return data.byteSize() / dtype.byteSize; }

    @Override public long[] shape() { return shape.clone(); }

    public float[] toFloats() {
        require(DType.FLOAT32);
        return data.toArray(BatchLayout.FLOAT_LE);
    }

    public long[] toLongs() {
        require(DType.INT64);
        return data.toArray(BatchLayout.LONG_LE);
    }

    public int[] toInts() {
        require(DType.INT32);
        return data.toArray(BatchLayout.INT_LE);
    }

    public byte[] toBytes() {
        require(DType.UINT8);
        return data.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
    }

    private void require(DType d) {
        if (dtype != d) throw new IllegalStateException(name + " is " + dtype + ", not " + d);
    }
}
