package dev.stoker.parquet;

import io.airlift.compress.Compressor;
import io.airlift.compress.Decompressor;
import io.airlift.compress.lz4.Lz4Compressor;
import io.airlift.compress.lz4.Lz4Decompressor;
import io.airlift.compress.snappy.SnappyCompressor;
import io.airlift.compress.snappy.SnappyDecompressor;
import io.airlift.compress.zstd.ZstdCompressor;
import io.airlift.compress.zstd.ZstdDecompressor;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.function.Supplier;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import org.apache.parquet.bytes.BytesInput;
import org.apache.parquet.compression.CompressionCodecFactory;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;

/**
 * Parquet's page codecs without Hadoop: SNAPPY, ZSTD and LZ4_RAW in pure Java (aircompressor, which parquet-java
 * already depends on), GZIP with {@code java.util.zip}, UNCOMPRESSED. Others (LZO, BROTLI, the Hadoop-framed LZ4)
 * are refused with their name. Compressors are here for the tests, which write files with the same library.
 *
 * <p>Threading: stateless; every call makes its own (de)compressor.
 */
public final class ParquetCodecs implements CompressionCodecFactory {
    public static final ParquetCodecs INSTANCE = new ParquetCodecs();

    private ParquetCodecs() { }

    @Override
    public BytesInputDecompressor getDecompressor(CompressionCodecName codec) {
        return switch (codec) {
            case UNCOMPRESSED -> new Blocks(codec, null);
            case SNAPPY -> new Blocks(codec, SnappyDecompressor::new);
            case ZSTD -> new Blocks(codec, ZstdDecompressor::new);
            case LZ4_RAW -> new Blocks(codec, Lz4Decompressor::new);
            case GZIP -> new Gzip();
            default -> throw new UnsupportedOperationException("Parquet codec " + codec + " is not supported (use SNAPPY, ZSTD, GZIP, LZ4_RAW or none)");
        };
    }

    @Override
    public BytesInputCompressor getCompressor(CompressionCodecName codec) {
        return switch (codec) {
            case UNCOMPRESSED -> compressor(codec, b -> b);
            case SNAPPY -> compressor(codec, b -> block(new SnappyCompressor(), b));
            case ZSTD -> compressor(codec, b -> block(new ZstdCompressor(), b));
            case LZ4_RAW -> compressor(codec, b -> block(new Lz4Compressor(), b));
            case GZIP -> compressor(codec, b -> {
                var out = new ByteArrayOutputStream(b.length / 2 + 64);
                try (var gz = new GZIPOutputStream(out)) {
                    gz.write(b);
                }
                return out.toByteArray();
            });
            default -> throw new UnsupportedOperationException("Parquet codec " + codec + " is not supported");
        };
    }

    @Override
    public void release() { }

    private interface ByteFunction {
        byte[] apply(byte[] in) throws IOException;
    }

    private static BytesInputCompressor compressor(CompressionCodecName codec, ByteFunction f) {
        return new BytesInputCompressor() {
            @Override
            public BytesInput compress(BytesInput bytes) throws IOException { return BytesInput.from(f.apply(bytes.toByteArray())); }

            @Override
            public CompressionCodecName getCodecName() { return codec; }

            @Override
            public void release() { }
        };
    }

    private static byte[] block(Compressor c, byte[] in) {
        byte[] out = new byte[c.maxCompressedLength(in.length)];
        int n = c.compress(in, 0, in.length, out, 0, out.length);
        return Arrays.copyOf(out, n);
    }

    /** A block codec: the page is one compressed block (or frame) of a known uncompressed size. */
    private record Blocks(CompressionCodecName codec, Supplier<Decompressor> make) implements BytesInputDecompressor {
        @Override
        public BytesInput decompress(BytesInput bytes, int uncompressedSize) throws IOException {
            if (make == null) return bytes;
            byte[] in = bytes.toByteArray();
            return BytesInput.from(run(in, 0, in.length, uncompressedSize));
        }

        @Override
        public void decompress(ByteBuffer input, int compressedSize, ByteBuffer output, int uncompressedSize) throws IOException {
            byte[] in = new byte[compressedSize];
            input.duplicate().get(in);
            output.put(make == null ? in : run(in, 0, in.length, uncompressedSize));
        }

        private byte[] run(byte[] in, int off, int len, int uncompressedSize) throws IOException {
            byte[] out = new byte[uncompressedSize];
            int n;
            try {
                n = make.get().decompress(in, off, len, out, 0, out.length);
            } catch (RuntimeException e) {
                throw new IOException("corrupt " + codec + " page: " + e.getMessage(), e);
            }
            if (n != uncompressedSize) throw new IOException(codec + " page gave " + n + " bytes, its header says " + uncompressedSize);
            return out;
        }

        @Override
        public void release() { }
    }

    private static final class Gzip implements BytesInputDecompressor {
        @Override
        public BytesInput decompress(BytesInput bytes, int uncompressedSize) throws IOException {
            return BytesInput.from(run(bytes.toByteArray(), uncompressedSize));
        }

        @Override
        public void decompress(ByteBuffer input, int compressedSize, ByteBuffer output, int uncompressedSize) throws IOException {
            byte[] in = new byte[compressedSize];
            input.duplicate().get(in);
            output.put(run(in, uncompressedSize));
        }

        private static byte[] run(byte[] in, int uncompressedSize) throws IOException {
            try (var gz = new GZIPInputStream(new java.io.ByteArrayInputStream(in))) {
                byte[] out = gz.readNBytes(uncompressedSize);
                if (out.length != uncompressedSize)
                    throw new IOException("GZIP page gave " + out.length + " bytes, its header says " + uncompressedSize);
                return out;
            }
        }

        @Override
        public void release() { }
    }
}
