package dev.stoker.core.batch;

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
 * <p>A descriptor's flags say what a tensor is: a model input, or (bit 0, {@link #FLAG_METADATA}) a
 * tensor a trainer does not hand to {@code forward}: a fact about the batch ({@code sample_index}, the compact
 * format's {@code pixel_norm} and {@code pixel_patch}), or the empty vision inputs of a batch without any image
 * ({@code pixel_values} or {@code pixel_values_u8}, and {@code image_grid_thw}), which the vision tower fails on. Version 2 added the flags; version 1 carried
 * those tensors unmarked among the inputs. Readers know one version and refuse the other, naming both.
 *
 * <pre>
 *  0               4               8               12              16
 *  +---------------+---------------+---------------+---------------+
 *  | magic "STKB"  | version (=2)  | tensor count  | header bytes  |   header bytes = data start
 *  +---------------+---------------+---------------+---------------+
 *  | total bytes (u64)             | epoch (u64)                   |   16..31
 *  +-------------------------------+-------------------------------+
 *  | step (u64)                    | rank (u32)    | world (u32)   |   32..47  step within the epoch
 *  +-------------------------------+---------------+---------------+
 *  | samples (u32) | scheduled(u32)| global step (u64)             |   48..63  samples delivered / scheduled
 *  +---------------------------------------------------------------+
 *  | descriptor 0 (128 bytes)                                      |   64..191
 *  |   name     32 bytes ASCII, NUL padded                         |
 *  |   dtype    u32  (1 f32, 2 i64, 3 i32, 4 u8)                   |
 *  |   ndim     u32                                                |
 *  |   shape    6 × u64 (unused dims 0)                            |
 *  |   offset   u64  from the batch start, multiple of 64          |
 *  |   length   u64  bytes                                         |
 *  |   flags    u32  bit 0: metadata, not a model input; others 0  |
 *  |   reserved 20 bytes (0)                                       |
 *  +---------------------------------------------------------------+
 *  | descriptor 1 … n−1                                            |
 *  +---------------------------------------------------------------+
 *  | resume block ({@link #RESUME_BYTES} reserved): "STKR" u32,     |   where the job resumes after this batch
 *  |   sources u32, epoch u64, position u64, step u64, then per      |   (zeros: none); {@link Resume}
 *  |   source epoch u64, position u64                              |
 *  +---------------------------------------------------------------+
 *  | padding to 64 | tensor 0 bytes | padding | tensor 1 bytes …   |
 *  +---------------------------------------------------------------+
 * </pre>
 */
public final class BatchLayout {
    public static final int MAGIC = 0x424B5453; // "STKB" read as a little-endian int
    /** 2: descriptors carry flags ({@link #FLAG_METADATA}); 1 had none. */
    public static final int VERSION = 2;
    public static final int HEADER_BYTES = 64;
    public static final int DESCRIPTOR_BYTES = 128;
    public static final int NAME_BYTES = 32;
    public static final int MAX_DIMS = 6;
    public static final int ALIGNMENT = 64;
    /** Descriptor flag: the tensor is the batch's metadata, not a model input. */
    public static final int FLAG_METADATA = 1;
    /** The metadata tensors Stoker writes: each sample's data set index; the compact format's normalization and patch sizes. */
    public static final String SAMPLE_INDEX = "sample_index", PIXEL_NORM = "pixel_norm", PIXEL_PATCH = "pixel_patch";
    /** "STKR" little-endian: the resume block after the descriptor table. */
    public static final int RESUME_MAGIC = 0x524B5453;
    /** Sources whose cursors a batch carries; a job of more carries only the global cursor. */
    public static final int MAX_RESUME_SOURCES = 64;
    /** Bytes reserved for the resume block: magic, count, epoch, position, step, then 16 per source. */
    public static final int RESUME_BYTES = 32 + 16 * MAX_RESUME_SOURCES;

    public static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    public static final ValueLayout.OfLong LONG_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    public static final ValueLayout.OfFloat FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private static final long OFF_MAGIC = 0, OFF_VERSION = 4, OFF_COUNT = 8, OFF_HEADER = 12, OFF_TOTAL = 16,
            OFF_EPOCH = 24, OFF_STEP = 32, OFF_RANK = 40, OFF_WORLD = 44, OFF_BATCH = 48, OFF_SCHEDULED = 52, OFF_GLOBAL_STEP = 56;
    private static final long D_NAME = 0, D_DTYPE = 32, D_NDIM = 36, D_SHAPE = 40, D_OFFSET = 88, D_LENGTH = 96, D_FLAGS = 104;

    /**
     * Which batch this is: schedule position and how many samples it holds.
     *
     * @param batchSize   samples delivered (B)
     * @param scheduled   samples the schedule assigned (B + skipped)
     * @param globalStep  epoch·stepsPerEpoch + step
     */
    public record Meta(long epoch, long step, int rank, int world, int batchSize, int scheduled, long globalStep, Resume resume) {
        /** A batch with nothing skipped whose global step is its step. */
        public Meta(long epoch, long step, int rank, int world, int batchSize) {
            this(epoch, step, rank, world, batchSize, batchSize, step, null);
        }

        /** A batch that does not say where the job resumes after it. */
        public Meta(long epoch, long step, int rank, int world, int batchSize, int scheduled, long globalStep) {
            this(epoch, step, rank, world, batchSize, scheduled, globalStep, null);
        }
    }

    /**
     * The state that resumes the job right after a batch, as the service's schedule says (no client arithmetic):
     * the global cursor of the next step ({@code epoch}, {@code position}), its label ({@code step}), and each
     * source's own cursor there (its epoch and position in that epoch's order), in the order the sources were given.
     * Written after the descriptor table ({@link #RESUME_MAGIC} "STKR", source count, then the cursors); a batch
     * without one has zeros there.
     */
    public record Resume(long epoch, long position, long step, long[] sourceEpochs, long[] sourcePositions) {
        public Resume {
            if (sourceEpochs.length != sourcePositions.length) throw new IllegalArgumentException("one epoch and one position per source");
            if (sourceEpochs.length > MAX_RESUME_SOURCES)
                throw new IllegalArgumentException(sourceEpochs.length + " sources, at most " + MAX_RESUME_SOURCES + " are carried");
            sourceEpochs = sourceEpochs.clone();
            sourcePositions = sourcePositions.clone();
        }

        @Override public long[] sourceEpochs() { return sourceEpochs.clone(); }

        @Override public long[] sourcePositions() { return sourcePositions.clone(); }

        public int sources() { return sourceEpochs.length; }

        @Override
        public boolean equals(Object o) {
            return o instanceof Resume r && r.epoch == epoch && r.position == position && r.step == step
                    && java.util.Arrays.equals(r.sourceEpochs, sourceEpochs) && java.util.Arrays.equals(r.sourcePositions, sourcePositions);
        }

        @Override
        public int hashCode() { return java.util.Objects.hash(epoch, position, step, java.util.Arrays.hashCode(sourcePositions)); }

        @Override
        public String toString() {
            return "Resume[epoch " + epoch + " position " + position + " step " + step + ", sources "
                    + java.util.Arrays.toString(sourceEpochs) + "/" + java.util.Arrays.toString(sourcePositions) + "]";
        }
    }

    /** One tensor's name, type and shape, before its bytes exist; {@code metadata} as {@link Tensor#metadata()}. */
    public record Spec(String name, Tensor.DType dtype, long[] shape, boolean metadata) {
        /** A model input's. */
        public Spec(String name, Tensor.DType dtype, long[] shape) { this(name, dtype, shape, false); }

        public Spec {
            if (name.isEmpty() || name.length() > NAME_BYTES - 1) throw new IllegalArgumentException("bad tensor name '" + name + "'");
            if (shape.length > MAX_DIMS) throw new IllegalArgumentException(name + ": more than " + MAX_DIMS + " dimensions");
            shape = shape.clone();
        }

        public long bytes() {
            long n = dtype.byteSize();
            for (long d : shape) n *= d;
            return n;
        }

        @Override public long[] shape() { return shape.clone(); }
    }

    /** Where each tensor of a batch goes: offsets from the batch start, header size and total size. */
    public record Plan(List<Spec> specs, long[] offsets, long headerBytes, long totalBytes) {
        public long offset(String name) {
            for (int i = 0; i < specs.size(); i++) if (specs.get(i).name().equals(name)) return offsets[i];
            throw new IllegalArgumentException("no tensor '" + name + "' in plan");
        }

        /** The slice of {@code batch} (a segment laid out by this plan) holding tensor {@code name}. */
        public MemorySegment slice(MemorySegment batch, String name) {
            for (int i = 0; i < specs.size(); i++)
                if (specs.get(i).name().equals(name)) return batch.asSlice(offsets[i], specs.get(i).bytes());
            throw new IllegalArgumentException("no tensor '" + name + "' in plan");
        }
    }

    /**
     * A parsed batch: its header and its tensors as slices of the underlying segment (no copy). {@code tensors} is every
     * tensor as laid out, in descriptor order; a trainer hands {@link #inputs()} to the model and reads the batch's
     * facts from {@link #metadata()} ({@link #sampleIndex()}, and in the compact format {@link #pixelNorm()} and
     * {@link #pixelPatch()}).
     */
    public record Batch(Meta meta, List<Tensor> tensors, long totalBytes) {
        /** Any tensor of the batch, input or metadata, by name. */
        public Tensor tensor(String name) {
            for (Tensor t : tensors) if (t.name().equals(name)) return t;
            throw new IllegalArgumentException("no tensor '" + name + "' in batch");
        }

        /** The model inputs, in order: what {@code forward} takes. */
        public List<Tensor> inputs() { return tensors.stream().filter(t -> !t.metadata()).toList(); }

        /** The batch's metadata tensors, in order. */
        public List<Tensor> metadata() { return tensors.stream().filter(Tensor::metadata).toList(); }

        /** Each sample's data set index (0-based), in batch order: the metadata tensor {@value #SAMPLE_INDEX}. */
        public long[] sampleIndex() { return metadataTensor(SAMPLE_INDEX).toLongs(); }

        /** The compact format's mean and std per channel, (2, 3) as float32; null in the float32 format. */
        public float[] pixelNorm() { return has(PIXEL_NORM) ? metadataTensor(PIXEL_NORM).toFloats() : null; }

        /** The compact format's patch size, temporal patch size and merge size; null in the float32 format. */
        public long[] pixelPatch() { return has(PIXEL_PATCH) ? metadataTensor(PIXEL_PATCH).toLongs() : null; }

        private boolean has(String name) { return tensors.stream().anyMatch(t -> t.metadata() && t.name().equals(name)); }

        private Tensor metadataTensor(String name) {
            for (Tensor t : tensors) if (t.metadata() && t.name().equals(name)) return t;
            throw new IllegalArgumentException("no metadata '" + name + "' in batch");
        }
    }

    private BatchLayout() {}

    static long align(long v) { return (v + ALIGNMENT - 1) & -ALIGNMENT; }

    /** Places {@code specs} in order after the header, each at a 64-byte aligned offset. */
    public static Plan plan(List<Spec> specs) {
        long header = align(HEADER_BYTES + (long) DESCRIPTOR_BYTES * specs.size() + RESUME_BYTES);
        long[] offsets = new long[specs.size()];
        long offset = header;
        for (int i = 0; i < specs.size(); i++) {
            offsets[i] = offset;
            offset = align(offset + specs.get(i).bytes());
        }
        return new Plan(List.copyOf(specs), offsets, header, offset);
    }

    private static List<Spec> specsOf(List<Tensor> tensors) {
        var specs = new ArrayList<Spec>(tensors.size());
        for (Tensor t : tensors) specs.add(new Spec(t.name(), t.dtype(), t.shape(), t.metadata()));
        return specs;
    }

    /** Bytes a batch of these tensors occupies. */
    public static long sizeOf(List<Tensor> tensors) { return plan(specsOf(tensors)).totalBytes(); }

    /**
     * Writes the header and descriptor table of a batch laid out by {@code plan} into {@code dst},
     * and zeroes the alignment padding after each tensor; the tensors' bytes are the caller's to
     * write (in place, at {@link Plan#offsets()}), before or after.
     */
    public static void writeHeader(Meta meta, Plan plan, MemorySegment dst) {
        long total = plan.totalBytes();
        if (dst.byteSize() < total) throw new IllegalArgumentException("segment of " + dst.byteSize() + " bytes < batch of " + total);
        var specs = plan.specs();
        dst.asSlice(0, plan.headerBytes()).fill((byte) 0);
        dst.set(INT_LE, OFF_MAGIC, MAGIC);
        dst.set(INT_LE, OFF_VERSION, VERSION);
        dst.set(INT_LE, OFF_COUNT, specs.size());
        dst.set(INT_LE, OFF_HEADER, (int) plan.headerBytes());
        dst.set(LONG_LE, OFF_TOTAL, total);
        dst.set(LONG_LE, OFF_EPOCH, meta.epoch());
        dst.set(LONG_LE, OFF_STEP, meta.step());
        dst.set(INT_LE, OFF_RANK, meta.rank());
        dst.set(INT_LE, OFF_WORLD, meta.world());
        dst.set(INT_LE, OFF_BATCH, meta.batchSize());
        dst.set(INT_LE, OFF_SCHEDULED, meta.scheduled());
        dst.set(LONG_LE, OFF_GLOBAL_STEP, meta.globalStep());
        var resume = meta.resume();
        long at = HEADER_BYTES + (long) DESCRIPTOR_BYTES * specs.size();
        if (resume != null && at + 32 + 16L * resume.sources() <= plan.headerBytes()) {
            dst.set(INT_LE, at, RESUME_MAGIC);
            dst.set(INT_LE, at + 4, resume.sources());
            dst.set(LONG_LE, at + 8, resume.epoch());
            dst.set(LONG_LE, at + 16, resume.position());
            dst.set(LONG_LE, at + 24, resume.step());
            for (int i = 0; i < resume.sources(); i++) {
                dst.set(LONG_LE, at + 32 + 16L * i, resume.sourceEpochs[i]);
                dst.set(LONG_LE, at + 40 + 16L * i, resume.sourcePositions[i]);
            }
        }
        for (int i = 0; i < specs.size(); i++) {
            Spec t = specs.get(i);
            long d = HEADER_BYTES + (long) DESCRIPTOR_BYTES * i;
            byte[] name = t.name().getBytes(StandardCharsets.US_ASCII);
            MemorySegment.copy(MemorySegment.ofArray(name), 0, dst, d + D_NAME, name.length);
            dst.set(INT_LE, d + D_DTYPE, t.dtype().code);
            long[] shape = t.shape();
            dst.set(INT_LE, d + D_NDIM, shape.length);
            for (int k = 0; k < shape.length; k++) dst.set(LONG_LE, d + D_SHAPE + 8L * k, shape[k]);
            dst.set(LONG_LE, d + D_OFFSET, plan.offsets()[i]);
            dst.set(LONG_LE, d + D_LENGTH, t.bytes());
            dst.set(INT_LE, d + D_FLAGS, t.metadata() ? FLAG_METADATA : 0);
            long end = plan.offsets()[i] + t.bytes();
            long next = i + 1 < specs.size() ? plan.offsets()[i + 1] : total;
            if (next > end) dst.asSlice(end, next - end).fill((byte) 0);
        }
    }

    /** Writes header, descriptors and data into {@code dst} (at least {@link #sizeOf} bytes); returns the bytes used. */
    public static long write(Meta meta, List<Tensor> tensors, MemorySegment dst) {
        Plan plan = plan(specsOf(tensors));
        writeHeader(meta, plan, dst);
        for (int i = 0; i < tensors.size(); i++) {
            MemorySegment data = tensors.get(i).data();
            MemorySegment.copy(data, 0, dst, plan.offsets()[i], data.byteSize());
        }
        return plan.totalBytes();
    }

    /** The resume block after {@code count} descriptors, or null when the batch has none (or it does not fit its header). */
    static Resume readResume(MemorySegment src, int count) {
        long at = HEADER_BYTES + (long) DESCRIPTOR_BYTES * count;
        long header = Integer.toUnsignedLong(src.get(INT_LE, OFF_HEADER));
        if (at + 32 > header || header > src.byteSize() || src.get(INT_LE, at) != RESUME_MAGIC) return null;
        int n = src.get(INT_LE, at + 4);
        if (n < 0 || n > MAX_RESUME_SOURCES || at + 32 + 16L * n > header)
            throw new IllegalArgumentException("batch resume block names " + n + " sources, more than its header holds");
        var epochs = new long[n];
        var positions = new long[n];
        for (int i = 0; i < n; i++) {
            epochs[i] = src.get(LONG_LE, at + 32 + 16L * i);
            positions[i] = src.get(LONG_LE, at + 40 + 16L * i);
        }
        return new Resume(src.get(LONG_LE, at + 8), src.get(LONG_LE, at + 16), src.get(LONG_LE, at + 24), epochs, positions);
    }

    /**
     * Refuses a batch of another layout version, saying what differs: a client and a service of different releases.
     * Version 1 carried {@code sample_index} (and the compact format's {@code pixel_norm}, {@code pixel_patch}) among
     * the model inputs; reading it as version 2 would hand them to the model, so it is not read at all.
     */
    static void checkVersion(int version) {
        if (version == VERSION) return;
        throw new IllegalArgumentException("batch layout version " + version + " is not supported: this reader knows version " + VERSION
                + " (since version 2 a descriptor flags the batch's metadata — sample_index, pixel_norm, pixel_patch — apart from "
                + "the model inputs); use a client of the service's release");
    }

    /** The header bytes (header and descriptor table) of the batch at the start of {@code src}. */
    public static int headerBytes(MemorySegment src) {
        if (src.byteSize() < HEADER_BYTES || src.get(INT_LE, OFF_MAGIC) != MAGIC)
            throw new IllegalArgumentException("not a Stoker batch (bad magic)");
        return src.get(INT_LE, OFF_HEADER);
    }

    /** Reads a batch laid out by {@link #write}; tensors are views of {@code src}. */
    public static Batch read(MemorySegment src) {
        if (src.byteSize() < HEADER_BYTES) throw new IllegalArgumentException("batch of " + src.byteSize() + " bytes has no header");
        if (src.get(INT_LE, OFF_MAGIC) != MAGIC) throw new IllegalArgumentException("not a Stoker batch (bad magic)");
        checkVersion(src.get(INT_LE, OFF_VERSION));
        int count = src.get(INT_LE, OFF_COUNT);
        long total = src.get(LONG_LE, OFF_TOTAL);
        if (total > src.byteSize() || count < 0 || HEADER_BYTES + (long) DESCRIPTOR_BYTES * count > total)
            throw new IllegalArgumentException("truncated batch: header says " + total + " bytes, " + count + " tensors; have " + src.byteSize());
        var meta = new Meta(src.get(LONG_LE, OFF_EPOCH), src.get(LONG_LE, OFF_STEP), src.get(INT_LE, OFF_RANK),
                src.get(INT_LE, OFF_WORLD), src.get(INT_LE, OFF_BATCH), src.get(INT_LE, OFF_SCHEDULED), src.get(LONG_LE, OFF_GLOBAL_STEP),
                readResume(src, count));
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
            // offset + len can overflow to a negative sum: compare without adding (a fuzzer's finding)
            if (offset < 0 || len < 0 || offset > total || len > total - offset)
                throw new IllegalArgumentException(name + ": data outside the batch");
            int flags = src.get(INT_LE, d + D_FLAGS);
            if ((flags & ~FLAG_METADATA) != 0) throw new IllegalArgumentException(name + ": unknown descriptor flags 0x" + Integer.toHexString(flags));
            tensors.add(new Tensor(name, dtype, shape, src.asSlice(offset, len), (flags & FLAG_METADATA) != 0));
        }
        return new Batch(meta, List.copyOf(tensors), total);
    }
}
