package dev.stoker.video.isolate;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;

/**
 * The messages between a node and its decode worker processes ({@link IsolatedDecoder}, {@link DecodeWorker}), over
 * the worker's stdin and stdout (big-endian, {@link DataOutputStream}). One request at a time per worker.
 * <pre>
 * node → worker   'D' decode: int id, UTF name, long size, bool hasPath, [UTF path], int n, int[n] frames,
 *                            long budgetMillis, int m, m bytes (the video's FrameIndex, stored format)
 *                 'B' bytes (answer to 'r'): int n (-1: end of source, -2: read failed + UTF cause), n bytes
 * worker → node   'r' read: long position, int length (≤ {@link #MAX_READ_BYTES})
 *                 'f' frame: int frame, int width, int height, width·height·3 bytes (rgb24)
 *                 'd' done: long framesDecoded, int kept, int seeks, long nanos
 *                 'e' error: UTF message (the video's error, already naming it)
 * </pre>
 * Every length is bounded by the reader before use: a worker is our own code, but a dying one may write anything.
 */
final class WireFormat {
    static final byte DECODE = 'D';
    static final byte BYTES = 'B';
    static final byte READ = 'r';
    static final byte FRAME = 'f';
    static final byte DONE = 'd';
    static final byte ERROR = 'e';
    /** The most bytes one read asks for (FFmpeg asks for its 64 KiB AVIO buffer, or a packet bigger than it). */
    static final int MAX_READ_BYTES = 64 << 20;
    /** The most bytes of a stored frame index ({@code FrameIndex.MAX_ENTRIES} entries of 25 bytes and a header). */
    static final int MAX_INDEX_BYTES = 1 << 29;
    /** The most frames one request may name. */
    static final int MAX_FRAMES = 1 << 20;

    private WireFormat() {}

    static DataInputStream in(InputStream in) { return new DataInputStream(new java.io.BufferedInputStream(in, 1 << 16)); }

    static DataOutputStream out(OutputStream out) { return new DataOutputStream(new java.io.BufferedOutputStream(out, 1 << 16)); }

    static int boundedInt(int value, int min, int max, String what) throws IOException {
        if (value < min || value > max) throw new IOException("decode worker protocol: " + what + " " + value
                + " outside " + min + ".." + max);
        return value;
    }
}
