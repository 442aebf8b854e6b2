package dev.stoker.transport;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;

/**
 * The local trainer protocol: length-prefixed frames over a stream socket (a Unix domain socket by
 * default). A frame is {@code type:u32 | length:u64 | payload}, little-endian.
 *
 * <pre>
 *  trainer                                   service
 *    HELLO  (version:u32, rank:u32, world:u32, job:utf8) ──►
 *                                      ◄── WELCOME (version:u32, expected batch bytes:u64)  or ERROR (message:utf8)
 *    NEXT   ()                         ──►
 *                                      ◄── BATCH (BatchLayout bytes)  or END () or ERROR
 *    …
 *    BYE    ()                         ──►
 * </pre>
 * WELCOME may be held back until the service's pipeline is up, so that a trainer's first NEXT
 * measures a cold start.
 */
public final class FeedProtocol {
    public static final int VERSION = 1;

    public static final int HELLO = 1, NEXT = 2, BYE = 3;
    public static final int WELCOME = 11, BATCH = 12, END = 13, ERROR = 14;

    static final int FRAME_HEADER_BYTES = 12;

    /** A received frame header. */
    public record Frame(int type, long length) {}

    private FeedProtocol() {}

    public static void writeFrame(WritableByteChannel ch, int type, ByteBuffer payload) throws IOException {
        var header = ByteBuffer.allocate(FRAME_HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        header.putInt(type).putLong(payload == null ? 0 : payload.remaining()).flip();
        writeFully(ch, header);
        if (payload != null) writeFully(ch, payload);
    }

    public static void writeFully(WritableByteChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) ch.write(buf);
    }

    public static Frame readFrame(ReadableByteChannel ch) throws IOException {
        var header = ByteBuffer.allocate(FRAME_HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, header);
        header.flip();
        int type = header.getInt();
        long length = header.getLong();
        if (length < 0) throw new IOException("bad frame length " + length);
        return new Frame(type, length);
    }

    public static void readFully(ReadableByteChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) if (ch.read(buf) < 0) throw new EOFException("peer closed the connection");
    }

    /** Reads a small payload (≤ 1 MiB) fully. */
    public static ByteBuffer readSmall(ReadableByteChannel ch, Frame f) throws IOException {
        if (f.length() > (1 << 20)) throw new IOException("frame of " + f.length() + " bytes is too large for type " + f.type());
        var buf = ByteBuffer.allocate((int) f.length()).order(ByteOrder.LITTLE_ENDIAN);
        readFully(ch, buf);
        return buf.flip();
    }

    static ByteBuffer utf8(String s) {
        return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
    }

    static String utf8(ByteBuffer b) {
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
