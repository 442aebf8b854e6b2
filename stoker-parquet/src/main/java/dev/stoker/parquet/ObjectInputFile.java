package dev.stoker.parquet;

import dev.stoker.core.SampleException;
import dev.stoker.source.ObjectSource;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.parquet.io.InputFile;
import org.apache.parquet.io.SeekableInputStream;

/**
 * A Parquet file read through an {@link ObjectSource}: every read is a ranged read of the object
 * ({@link ObjectSource#fetchRange}: a positioned read of a local file, a ranged GET on S3), so a file is never
 * downloaded whole. Small reads (page headers, the footer's length) go through a read-ahead buffer of
 * {@link #READ_AHEAD} bytes (near the end of the file: its last bytes, so that the footer takes one read);
 * large ones (a row group's column chunks, read by parquet-java in parts of up to
 * 8 MiB) are fetched as asked.
 *
 * <p>Threading: the file is shared; each stream belongs to one thread (parquet-java's reader is single-threaded).
 * A stream's reads block that thread (never an I/O thread of the source) until the range arrives.
 */
final class ObjectInputFile implements InputFile {
    /** Read-ahead of small reads; a page header is a few dozen bytes, the footer's tail 8. */
    static final int READ_AHEAD = 256 << 10;
    /** The most one ranged read asks for. */
    static final int MAX_RANGE = 16 << 20;
    /** How long one ranged read may take before the read fails (the source retries inside it). */
    static final long RANGE_TIMEOUT_SECONDS = 300;

    private final ObjectSource source;
    private final String reference;
    private final long length;
    private final AtomicLong ranges;

    /** @param ranges counts the ranged reads made (all streams of all files of one data set) */
    ObjectInputFile(ObjectSource source, String reference, long length, AtomicLong ranges) {
        this.source = source;
        this.reference = reference;
        this.length = length;
        this.ranges = ranges;
    }

    @Override
    public long getLength() { return length; }

    @Override
    public SeekableInputStream newStream() { return new Stream(); }

    @Override
    public String toString() { return reference; }

    private byte[] fetch(long offset, int n) throws IOException {
        ranges.incrementAndGet();
        try {
            return source.fetchRange(reference, offset, n).get(RANGE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("interrupted reading " + reference);
        } catch (ExecutionException | CompletionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            throw new IOException(cause instanceof SampleException se ? se.getMessage() : "cannot read " + reference + " at " + offset + ": " + cause, cause);
        } catch (TimeoutException e) {
            throw new IOException("reading " + n + " bytes of " + reference + " at " + offset + " took over " + RANGE_TIMEOUT_SECONDS + " s", e);
        }
    }

    private final class Stream extends SeekableInputStream {
        private long pos;
        private byte[] buf = new byte[0];
        private long bufStart;

        @Override
        public long getPos() { return pos; }

        @Override
        public void seek(long newPos) throws IOException {
            if (newPos < 0 || newPos > length) throw new EOFException("seek to " + newPos + " outside " + reference + " (" + length + " bytes)");
            pos = newPos;
        }

        @Override
        public int read() throws IOException {
            if (pos >= length) return -1;
            if (!buffered()) fill();
            return buf[(int) (pos++ - bufStart)] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (len == 0) return 0;
            if (pos >= length) return -1;
            int n = (int) Math.min(len, length - pos);
            readFully(b, off, n);
            return n;
        }

        @Override
        public void readFully(byte[] b) throws IOException { readFully(b, 0, b.length); }

        @Override
        public void readFully(byte[] b, int off, int len) throws IOException {
            readFully(ByteBuffer.wrap(b, off, len));
        }

        @Override
        public int read(ByteBuffer dst) throws IOException {
            if (!dst.hasRemaining()) return 0;
            if (pos >= length) return -1;
            int n = (int) Math.min(dst.remaining(), length - pos);
            readFully(dst.slice().limit(n));
            dst.position(dst.position() + n);
            return n;
        }

        @Override
        public void readFully(ByteBuffer dst) throws IOException {
            int want = dst.remaining();
            if (pos + want > length) throw new EOFException("read of " + want + " bytes at " + pos + " past the end of " + reference + " (" + length + " bytes)");
            while (dst.hasRemaining()) {
                if (buffered()) { // what the buffer holds first
                    int at = (int) (pos - bufStart);
                    int n = Math.min(dst.remaining(), buf.length - at);
                    dst.put(buf, at, n);
                    pos += n;
                } else if (dst.remaining() < READ_AHEAD) {
                    fill();
                } else { // large: straight from the object, in parts
                    int n = Math.min(dst.remaining(), MAX_RANGE);
                    byte[] part = fetch(pos, n);
                    if (part.length != n) throw new EOFException(reference + " gave " + part.length + " bytes at " + pos + ", not " + n);
                    dst.put(part);
                    pos += n;
                }
            }
        }

        private boolean buffered() { return pos >= bufStart && pos < bufStart + buf.length; }

        /** Reads ahead from pos; near the end, the file's last READ_AHEAD bytes (the footer and its length in one read). */
        private void fill() throws IOException {
            if (pos >= length) throw new EOFException("read past the end of " + reference);
            long start = length - pos < READ_AHEAD ? Math.max(0, length - READ_AHEAD) : pos;
            int n = (int) Math.min(READ_AHEAD, length - start);
            buf = fetch(start, n);
            bufStart = start;
            if (buf.length == 0) throw new EOFException(reference + " gave no bytes at " + pos);
        }

        @Override
        public void close() { buf = new byte[0]; }
    }
}
