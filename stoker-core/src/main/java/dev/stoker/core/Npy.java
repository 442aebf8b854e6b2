package dev.stoker.core;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.regex.Pattern;

/**
 * Reads and writes NumPy {@code .npy} files (format 1.0, little-endian, C order), the exchange
 * format of the CLI and the conformance vectors.
 */
public final class Npy {
    private static final byte[] MAGIC = {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y'};
    private static final Pattern DESCR = Pattern.compile("'descr'\\s*:\\s*'([^']+)'");
    private static final Pattern ORDER = Pattern.compile("'fortran_order'\\s*:\\s*(True|False)");
    private static final Pattern SHAPE = Pattern.compile("'shape'\\s*:\\s*\\(([^)]*)\\)");

    /** A loaded array: dtype descriptor (e.g. {@code <f4}), shape and raw little-endian bytes. */
    public record Array(String dtype, long[] shape, byte[] data) {
        public long elementCount() { return Arrays.stream(shape).reduce(1, (a, b) -> a * b); }

        public float[] asFloats() {
            require("<f4");
            var out = new float[data.length / 4];
            ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
            return out;
        }

        public long[] asLongs() {
            require("<i8");
            var out = new long[data.length / 8];
            ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
            return out;
        }

        private void require(String d) {
            if (!dtype.equals(d)) throw new IllegalStateException("dtype is " + dtype + ", not " + d);
        }
    }

    private Npy() {}

    /** Elements converted to bytes at a time: an array is written in chunks, never copied whole (a video's tensor is GBs). */
    private static final int CHUNK_ELEMENTS = 1 << 18;

    /** All of {@code values} as little-endian float32 under a header for {@code shape}. */
    public static void writeFloat32(Path file, float[] values, long... shape) throws IOException {
        int n = values.length;
        var buf = ByteBuffer.allocate(Math.min(n, CHUNK_ELEMENTS) * 4).order(ByteOrder.LITTLE_ENDIAN);
        try (OutputStream out = Files.newOutputStream(file)) {
            out.write(header("<f4", shape));
            for (int i = 0; i < n; i += CHUNK_ELEMENTS) {
                int len = Math.min(CHUNK_ELEMENTS, n - i);
                buf.clear();
                buf.asFloatBuffer().put(values, i, len);
                out.write(buf.array(), 0, len * 4);
            }
        }
    }

    public static void writeInt64(Path file, long[] values, long... shape) throws IOException {
        int n = values.length;
        var buf = ByteBuffer.allocate(Math.min(n, CHUNK_ELEMENTS) * 8).order(ByteOrder.LITTLE_ENDIAN);
        try (OutputStream out = Files.newOutputStream(file)) {
            out.write(header("<i8", shape));
            for (int i = 0; i < n; i += CHUNK_ELEMENTS) {
                int len = Math.min(CHUNK_ELEMENTS, n - i);
                buf.clear();
                buf.asLongBuffer().put(values, i, len);
                out.write(buf.array(), 0, len * 8);
            }
        }
    }

    public static void writeUint8(Path file, byte[] values, long... shape) throws IOException {
        write(file, "|u1", shape, values);
    }

    /** Writes raw little-endian element bytes under a header for {@code dtype} and {@code shape}. */
    public static void write(Path file, String dtype, long[] shape, byte[] data) throws IOException {
        try (OutputStream out = Files.newOutputStream(file)) {
            out.write(header(dtype, shape));
            out.write(data);
        }
    }

    /** The complete header (magic, version, length, padded dict) for an array. */
    public static byte[] header(String dtype, long[] shape) {
        var dims = new StringBuilder();
        for (int i = 0; i < shape.length; i++) {
            if (i > 0) dims.append(", ");
            dims.append(shape[i]);
        }
        if (shape.length == 1) dims.append(',');
        var dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (" + dims + "), }";
        int unpadded = MAGIC.length + 2 + 2 + dict.length() + 1;
        int padding = (64 - unpadded % 64) % 64;
        var text = dict + " ".repeat(padding) + "\n";
        var bytes = text.getBytes(StandardCharsets.US_ASCII);
        var buf = ByteBuffer.allocate(MAGIC.length + 4 + bytes.length).order(ByteOrder.LITTLE_ENDIAN);
        buf.put(MAGIC).put((byte) 1).put((byte) 0).putShort((short) bytes.length).put(bytes);
        return buf.array();
    }

    public static Array read(Path file) throws IOException {
        return read(Files.readAllBytes(file), file.toString());
    }

    public static Array read(byte[] all, String name) {
        for (int i = 0; i < MAGIC.length; i++)
            if (all.length < 10 || all[i] != MAGIC[i]) throw new IllegalArgumentException(name + ": not a .npy file");
        int major = all[6];
        var bb = ByteBuffer.wrap(all).order(ByteOrder.LITTLE_ENDIAN);
        int headerLen;
        int start;
        if (major == 1) { headerLen = Short.toUnsignedInt(bb.getShort(8)); start = 10; }
        else { headerLen = bb.getInt(8); start = 12; }
        var header = new String(all, start, headerLen, StandardCharsets.ISO_8859_1);
        var d = DESCR.matcher(header);
        var o = ORDER.matcher(header);
        var s = SHAPE.matcher(header);
        if (!d.find() || !o.find() || !s.find()) throw new IllegalArgumentException(name + ": bad .npy header " + header);
        if (o.group(1).equals("True")) throw new IllegalArgumentException(name + ": Fortran order is not supported");
        long[] shape = Arrays.stream(s.group(1).split(","))
                .map(String::trim).filter(x -> !x.isEmpty()).mapToLong(Long::parseLong).toArray();
        int dataStart = start + headerLen;
        return new Array(d.group(1), shape, Arrays.copyOfRange(all, dataStart, all.length));
    }
}
