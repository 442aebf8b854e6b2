package dev.stoker.source;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import dev.stoker.core.io.AtomicFiles;
import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.DigestInputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * Where each record of a manifest lies: its byte offset and length, and for JSON Lines its line
 * number (for ids and messages), in three flat arrays (16 bytes per record with line numbers, 12
 * without), with the SHA-256 of the manifest's bytes. Built by one pass over the bytes ({@link #scan}),
 * never holding them; saved and loaded as one binary file ({@link #write}, {@link #read}).
 *
 * <p>Formats, told apart by the first byte that is not white space (after a UTF-8 byte order mark):
 * <ul>
 *   <li>{@code [}: a JSON array; each element is a record (an object, or whatever it is: the parser
 *       names it). Found by Jackson's streaming parser, which skips each element's content; a syntax
 *       error anywhere fails the whole index, naming the byte.</li>
 *   <li>anything else: JSON Lines; each line with other than spaces, tabs and a final {@code \r} is a
 *       record. Not parsed here: a broken line is one bad record, reported when it is read.</li>
 * </ul>
 *
 * <p>Threading: immutable once built; safe to share.
 */
public final class RecordIndex {
    /** How the manifest holds its records. */
    public enum Format { JSONL, JSON_ARRAY }

    private static final int MAGIC = 0x494B5453; // "STKI"
    /** 2: the header's kind also says whether the manifest spells "video" ({@link #mentionsVideo()}); a version 1 file is rebuilt. */
    private static final int FILE_VERSION = 2;
    /** The kind's bit for {@link #mentionsVideo()}. */
    private static final int MENTIONS_VIDEO = 0x200;
    private static final int HEADER_BYTES = 4 + 4 + 4 + 4 + 8 + 32;

    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final Format format;
    private final int size;
    // a scan's arrays, or slices of a cached index file mapped read-only (its values checked as they are read)
    private final MemorySegment offsets;
    private final MemorySegment lengths;
    private final MemorySegment lines; // JSONL only
    private final boolean mapped;
    private final long bytes;
    private final byte[] digest;
    private final boolean mentionsVideo;

    private RecordIndex(Format format, long[] offsets, int[] lengths, int[] lines, long bytes, byte[] digest, boolean mentionsVideo) {
        this(format, offsets.length, MemorySegment.ofArray(offsets), MemorySegment.ofArray(lengths),
                lines == null ? null : MemorySegment.ofArray(lines), false, bytes, digest, mentionsVideo);
    }

    private RecordIndex(Format format, int size, MemorySegment offsets, MemorySegment lengths, MemorySegment lines, boolean mapped,
                        long bytes, byte[] digest, boolean mentionsVideo) {
        this.mentionsVideo = mentionsVideo;
        this.format = format;
        this.size = size;
        this.offsets = offsets;
        this.lengths = lengths;
        this.lines = lines;
        this.mapped = mapped;
        this.bytes = bytes;
        this.digest = digest;
    }

    public Format format() { return format; }

    /** Records indexed. */
    public int size() { return size; }

    /** Where the record starts in the manifest; IllegalStateException when a cached index file says it lies outside. */
    public long offset(int record) {
        long o = offsets.getAtIndex(LONG, Objects.checkIndex(record, size));
        if (o < 0 || o > bytes) throw new IllegalStateException("the index puts record " + record + " at byte " + o
                + ", outside the manifest's " + bytes + " bytes");
        return o;
    }

    /** The record's bytes, {@link Integer#MAX_VALUE} when it is longer (no reader takes that much). */
    public int length(int record) {
        int n = lengths.getAtIndex(INT, Objects.checkIndex(record, size));
        if (n < 0) throw new IllegalStateException("the index gives record " + record + " a negative length " + n);
        return n;
    }

    /** The record's 1-based line (JSON Lines), or its 0-based position in the array. */
    public int label(int record) { return lines != null ? lines.getAtIndex(INT, Objects.checkIndex(record, size)) : record; }

    /** Whether the index is a cached file mapped into memory (its values then live in the page cache, not the heap). */
    public boolean mapped() { return mapped; }

    /** {@code name:line} (JSON Lines) or {@code name[i]} (JSON array): a record's id until its own {@code "id"} is read. */
    public String id(String name, int record) {
        return lines != null ? name + ":" + label(record) : name + "[" + record + "]";
    }

    /** The manifest's size in bytes. */
    public long bytes() { return bytes; }

    /** SHA-256 of the manifest's bytes. */
    public byte[] digest() { return digest.clone(); }

    /**
     * Whether the manifest's bytes spell {@code video} anywhere (a {@code "video"}/{@code "videos"} key, a
     * {@code <video>} placeholder, a {@code "type": "video"} item; or just the word in a text): what {@code --video auto}
     * reads to turn video on for a job. A manifest without the word has no video record but one spelled with JSON
     * escapes, which a job without video then refuses, named, as media it does not serve.
     */
    public boolean mentionsVideo() { return mentionsVideo; }

    /** Heap the index holds per record, for benchmarks. */
    public int bytesPerRecord() { return mapped ? 0 : 8 + 4 + (lines != null ? 4 : 0); }

    // ------------------------------------------------------------------ scanning

    /**
     * Indexes the manifest read from {@code in} (to its end; the caller closes it). {@code name} goes into messages.
     * Throws IOException for a JSON array that is not well-formed, or more than {@link Integer#MAX_VALUE} − 8 records.
     */
    public static RecordIndex scan(String name, InputStream in) throws IOException {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        var word = new WordWatch(new DigestInputStream(in, sha), "video".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        var peek = new java.io.PushbackInputStream(word, 64 * 1024);
        byte[] head = new byte[64 * 1024];
        int n = peek.readNBytes(head, 0, head.length);
        int first = 0;
        if (n >= 3 && (head[0] & 0xff) == 0xEF && (head[1] & 0xff) == 0xBB && (head[2] & 0xff) == 0xBF) first = 3;
        while (first < n && isSpace(head[first])) first++;
        boolean array = first < n && head[first] == '[';
        peek.unread(head, 0, n);
        var index = array ? scanArray(name, peek, sha) : scanLines(peek, sha);
        return index.withMentionsVideo(word.seen());
    }

    private RecordIndex withMentionsVideo(boolean v) {
        return new RecordIndex(format, size, offsets, lengths, lines, mapped, bytes, digest, v);
    }

    /** A stream that watches the bytes read through it for one word (across reads). */
    private static final class WordWatch extends java.io.FilterInputStream {
        private final byte[] word;
        private int matched;
        private boolean seen;

        WordWatch(InputStream in, byte[] word) {
            super(in);
            this.word = word;
        }

        boolean seen() { return seen; }

        private void watch(byte b) {
            if (seen) return;
            if (b == word[matched]) {
                if (++matched == word.length) seen = true;
            } else {
                matched = b == word[0] ? 1 : 0; // the word has no repeated prefix: a mismatch restarts at this byte
            }
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b >= 0) watch((byte) b);
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            for (int i = 0; i < n; i++) watch(b[off + i]);
            return n;
        }
    }

    private static boolean isSpace(byte b) { return b == ' ' || b == '\t' || b == '\r' || b == '\n'; }

    private static RecordIndex scanLines(InputStream in, MessageDigest sha) throws IOException {
        var offsets = new LongList();
        var lengths = new IntList();
        var lines = new IntList();
        byte[] buf = new byte[1 << 20];
        long pos = 0, lineStart = 0;
        int line = 1;
        boolean blank = true;
        byte previous = 0; // the byte before the current one, across reads (a CRLF split between two)
        int r;
        while ((r = in.read(buf)) > 0) {
            for (int i = 0; i < r; i++) {
                byte b = buf[i];
                if (b == '\n') {
                    if (!blank) add(offsets, lengths, lines, lineStart, pos + i - (previous == '\r' ? 1 : 0), line);
                    if (line == Integer.MAX_VALUE) throw new IOException("more than " + Integer.MAX_VALUE + " lines");
                    line++;
                    lineStart = pos + i + 1;
                    blank = true;
                } else if (blank && b != ' ' && b != '\t' && b != '\r') {
                    blank = false;
                }
                previous = b;
            }
            pos += r;
        }
        if (!blank) add(offsets, lengths, lines, lineStart, pos - (previous == '\r' ? 1 : 0), line);
        return new RecordIndex(Format.JSONL, offsets.toArray(), lengths.toArray(), lines.toArray(), pos, sha.digest(), false);
    }

    private static void add(LongList offsets, IntList lengths, IntList lines, long start, long end, int line) {
        offsets.add(start);
        lengths.add((int) Math.min(end - start, Integer.MAX_VALUE));
        lines.add(line);
    }

    private static final JsonFactory JSON = JsonFactory.builder()
            .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).maxNestingDepth(1000).build())
            .disable(com.fasterxml.jackson.core.StreamReadFeature.AUTO_CLOSE_SOURCE) // the caller's stream, read to its end below
            .build();

    private static RecordIndex scanArray(String name, InputStream in, MessageDigest sha) throws IOException {
        var offsets = new LongList();
        var lengths = new IntList();
        try (var p = JSON.createParser(in)) {
            if (p.nextToken() != JsonToken.START_ARRAY) throw new Malformed(name + ": expected a JSON array");
            JsonToken t;
            while ((t = p.nextToken()) != JsonToken.END_ARRAY) {
                if (t == null) throw new Malformed(name + ": the JSON array ends without ']' at byte " + p.currentLocation().getByteOffset());
                long start = p.currentTokenLocation().getByteOffset();
                if (t.isStructStart()) p.skipChildren();
                else p.finishToken(); // a string is read lazily: to its closing quote, so that the location is after it
                long end = p.currentLocation().getByteOffset();
                offsets.add(start);
                lengths.add((int) Math.min(end - start, Integer.MAX_VALUE));
            }
            if (p.nextToken() != null)
                throw new Malformed(name + ": more after the JSON array's ']' at byte " + p.currentTokenLocation().getByteOffset());
            long total = p.currentLocation().getByteOffset();
            in.transferTo(java.io.OutputStream.nullOutputStream()); // the digest covers every byte (trailing white space too)
            return new RecordIndex(Format.JSON_ARRAY, offsets.toArray(), lengths.toArray(), null, Math.max(total, 0), sha.digest(), false);
        } catch (JsonParseException e) {
            throw new Malformed(name + ": not a well-formed JSON array at byte " + e.getLocation().getByteOffset() + ": " + e.getOriginalMessage(), e);
        }
    }

    // ------------------------------------------------------------------ the file

    /** Saves the index to {@code file} (written beside it, then moved over it). */
    public void write(Path file, String key) throws IOException {
        byte[] keyBytes = key.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        AtomicFiles.write(file, tmp -> {
            try (var ch = FileChannel.open(tmp, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE)) {
                var head = ByteBuffer.allocate(HEADER_BYTES + 4 + keyBytes.length).order(ByteOrder.LITTLE_ENDIAN);
                head.putInt(MAGIC).putInt(FILE_VERSION).putInt(format.ordinal() | (lines != null ? 0x100 : 0) | (mentionsVideo ? MENTIONS_VIDEO : 0)).putInt(size())
                        .putLong(bytes).put(digest).putInt(keyBytes.length).put(keyBytes).flip();
                writeAll(ch, head);
                var block = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < size; i++) { if (block.remaining() < 8) flush(ch, block); block.putLong(offsets.getAtIndex(LONG, i)); }
                for (int i = 0; i < size; i++) { if (block.remaining() < 4) flush(ch, block); block.putInt(lengths.getAtIndex(INT, i)); }
                if (lines != null)
                    for (int i = 0; i < size; i++) { if (block.remaining() < 4) flush(ch, block); block.putInt(lines.getAtIndex(INT, i)); }
                flush(ch, block);
            }
        });
    }

    private static void flush(FileChannel ch, ByteBuffer b) throws IOException {
        b.flip();
        writeAll(ch, b);
        b.clear();
    }

    private static void writeAll(FileChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) ch.write(b);
    }

    /**
     * Loads an index saved for {@code key} (the manifest's URI, size and version); null when the file is of another
     * key or version. A file that is cut short, or whose counts do not fit its size, is refused (IOException).
     */
    public static RecordIndex read(Path file, String key) throws IOException {
        try (var ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < HEADER_BYTES + 4) throw new IOException("index " + file + " is cut short (" + size + " bytes)");
            var head = readAt(ch, 0, HEADER_BYTES + 4).order(ByteOrder.LITTLE_ENDIAN);
            if (head.getInt() != MAGIC || head.getInt() != FILE_VERSION) return null;
            int kind = head.getInt();
            int count = head.getInt();
            long bytes = head.getLong();
            byte[] digest = new byte[32];
            head.get(digest);
            int keyLength = head.getInt();
            int formatOrdinal = kind & 0xff;
            boolean withLines = (kind & 0x100) != 0, video = (kind & MENTIONS_VIDEO) != 0;
            if (formatOrdinal >= Format.values().length || count < 0 || keyLength < 0 || keyLength > 64 * 1024)
                throw new IOException("index " + file + " has a malformed header");
            long expect = HEADER_BYTES + 4L + keyLength + count * (12L + (withLines ? 4 : 0));
            if (expect != size) throw new IOException("index " + file + " has " + size + " bytes, its header says " + expect);
            String saved = new String(readAt(ch, HEADER_BYTES + 4, keyLength).array(), java.nio.charset.StandardCharsets.UTF_8);
            if (!saved.equals(key)) return null;
            // mapped, not copied: a 10 M-record index loads in milliseconds, and its pages are the page cache's (shared,
            // dropped under pressure). The values are checked as each is read, so a file damaged later fails that record only.
            var map = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, Arena.ofAuto());
            long at = HEADER_BYTES + 4L + keyLength;
            var offsets = map.asSlice(at, 8L * count);
            var lengths = map.asSlice(at + 8L * count, 4L * count);
            var lines = withLines ? map.asSlice(at + 12L * count, 4L * count) : null;
            return new RecordIndex(Format.values()[formatOrdinal], count, offsets, lengths, lines, true, bytes, digest, video);
        }
    }

    /** {@code n} bytes at {@code position} of {@code ch} (the file's size was checked to hold them). */
    private static ByteBuffer readAt(FileChannel ch, long position, int n) throws IOException {
        var b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            int got = ch.read(b, position + b.position());
            if (got < 0) throw new IOException("index is cut short");
        }
        return b.flip();
    }

    @Override
    public String toString() {
        return "RecordIndex[" + format + ", " + size() + " records, " + bytes + " bytes, sha256 " + HexFormat.of().formatHex(digest, 0, 8) + "…]";
    }

    /** The manifest's bytes were read, and they are not a manifest (reading them again would not help). */
    public static final class Malformed extends IOException {
        Malformed(String message) { super(message); }

        Malformed(String message, Throwable cause) { super(message, cause); }
    }

    /** A growable long[]. */
    private static final class LongList {
        long[] a = new long[1024];
        int n;

        void add(long v) {
            if (n == a.length) a = Arrays.copyOf(a, grow(n));
            a[n++] = v;
        }

        long[] toArray() { return Arrays.copyOf(a, n); }
    }

    /** A growable int[]. */
    private static final class IntList {
        int[] a = new int[1024];
        int n;

        void add(int v) {
            if (n == a.length) a = Arrays.copyOf(a, grow(n));
            a[n++] = v;
        }

        int[] toArray() { return Arrays.copyOf(a, n); }
    }

    private static int grow(int n) {
        if (n >= Integer.MAX_VALUE - 8) throw new IllegalStateException("more than " + (Integer.MAX_VALUE - 8) + " records");
        return (int) Math.min(Integer.MAX_VALUE - 8, n + (n >> 1) + 16);
    }
}
