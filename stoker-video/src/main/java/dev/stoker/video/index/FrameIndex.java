package dev.stoker.video.index;

import dev.stoker.video.ffmpeg.Rational;
import dev.stoker.video.ffmpeg.StreamInfo;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The exact frame index of one video: every packet of its video stream, demuxed without decoding, in presentation
 * (pts) order, with the stream's parameters. Frame counts and durations come from the packets, never from the
 * header (whose estimates are kept apart, as {@link StreamInfo#headerFrameCount()}).
 *
 * <p>Entry {@code i} is the i-th packet in pts order; packets FFmpeg flags {@code AV_PKT_FLAG_DISCARD} (edit lists)
 * stay in the arrays with {@link #DISCARD} set but are not frames: {@link #frameCount()} leaves them out, as
 * torchcodec's exact scan does.
 *
 * <p>Stored format ("STKVIX01", little-endian), to sit beside the length index:
 * <pre>
 *   0  magic "STKVIX01"                     8 bytes
 *   8  header length H (bytes after this)   int32
 *  12  header: the StreamInfo fields        H bytes (ints, longs, doubles; strings as int32 length + UTF-8)
 *      entry count N                        int32
 *      pts[N], dts[N], duration[N]          int64 each
 *      flags[N]                             uint8 each (KEY 1, DISCARD 2, PTS_FROM_DTS 8)
 * </pre>
 */
public record FrameIndex(StreamInfo stream, long[] pts, long[] dts, long[] durations, byte[] flags) {
    public static final byte KEY = 1;
    public static final byte DISCARD = 2;
    /**
     * The container gave no pts (AVI, raw streams): the dts stands in for it. Packets are then in decode order, so
     * a stream with B-frames presents its frames at timestamps offset by its reorder delay; the count and the rate
     * are exact, and a keyframe's position is its decode position (exact for IDR/closed GOPs).
     */
    public static final byte PTS_FROM_DTS = 8;
    static final byte[] MAGIC = "STKVIX01".getBytes(StandardCharsets.US_ASCII);
    /** The most entries a stored index may claim (a 10-hour 240 fps video is 8.6M). */
    public static final int MAX_ENTRIES = 1 << 24;
    private static final int MAX_STRING_BYTES = 256;

    public FrameIndex {
        int n = pts.length;
        if (dts.length != n || durations.length != n || flags.length != n) {
            throw new IllegalArgumentException("frame index arrays differ in length");
        }
    }

    /** Packets in the index, discarded ones included. */
    public int entryCount() { return pts.length; }

    /** Frames: packets not flagged discard. */
    public int frameCount() {
        int n = 0;
        for (byte f : flags) if ((f & DISCARD) == 0) n++;
        return n;
    }

    public boolean isKey(int i) { return (flags[i] & KEY) != 0; }

    public boolean isDiscarded(int i) { return (flags[i] & DISCARD) != 0; }

    /**
     * Indices (into the arrays) of the key packets, where decoding may start: discarded ones included, since the
     * first kept frames after an edit list's start are decoded from a discarded keyframe.
     */
    public int[] keyFrames() {
        return java.util.stream.IntStream.range(0, pts.length).filter(this::isKey).toArray();
    }

    /**
     * The real duration in time-base units: from the first frame's pts to the last frame's pts plus its duration
     * (0 for an empty index).
     */
    public long durationTicks() {
        long first = Long.MAX_VALUE, end = Long.MIN_VALUE;
        for (int i = 0; i < pts.length; i++) {
            if (isDiscarded(i)) continue;
            first = Math.min(first, pts[i]);
            end = Math.max(end, pts[i] + Math.max(0, durations[i]));
        }
        return first == Long.MAX_VALUE ? 0 : end - first;
    }

    public double durationSeconds() {
        Rational tb = stream.timeBase();
        return (double) durationTicks() * tb.num() / tb.den();
    }

    /**
     * Frames per second as the index measures them (frames over the real duration); the container's average rate,
     * which the Qwen samplers use, is {@link StreamInfo#avgFrameRate()}. NaN for a zero duration.
     */
    public double indexedFramesPerSecond() {
        double seconds = durationSeconds();
        return seconds > 0 ? frameCount() / seconds : Double.NaN;
    }

    /**
     * Whether the frame-to-frame pts steps differ by more than one tick (variable frame rate): sampling must then go
     * by timestamps. One tick is allowed for containers whose time base is coarser than the frame rate (WebM's
     * milliseconds at 24000/1001 fps step 41, 42, 42, 41, ...).
     */
    public boolean variableFrameRate() {
        long min = Long.MAX_VALUE, max = Long.MIN_VALUE;
        long prev = Long.MIN_VALUE;
        for (int i = 0; i < pts.length; i++) {
            if (isDiscarded(i)) continue;
            if (prev != Long.MIN_VALUE) {
                long d = pts[i] - prev;
                min = Math.min(min, d);
                max = Math.max(max, d);
            }
            prev = pts[i];
        }
        return min != Long.MAX_VALUE && max - min > 1;
    }

    public byte[] toBytes() {
        ByteBuffer head = ByteBuffer.allocate(4096).order(ByteOrder.LITTLE_ENDIAN);
        StreamInfo s = stream;
        head.putInt(s.streamIndex());
        putString(head, s.container());
        putString(head, s.codec());
        putRational(head, s.timeBase());
        putRational(head, s.avgFrameRate());
        putRational(head, s.realFrameRate());
        head.putInt(s.width()).putInt(s.height()).putInt(s.pixelFormat());
        putString(head, s.pixelFormatName());
        head.putInt(s.colorSpace()).putInt(s.colorRange()).putInt(s.colorPrimaries()).putInt(s.colorTransfer());
        head.putDouble(s.rotationDegrees()).putLong(s.startTime()).putLong(s.headerFrameCount())
                .putLong(s.headerDuration());
        head.flip();
        int n = pts.length;
        ByteBuffer out = ByteBuffer.allocate(MAGIC.length + 4 + head.remaining() + 4 + n * 25)
                .order(ByteOrder.LITTLE_ENDIAN);
        out.put(MAGIC).putInt(head.remaining()).put(head).putInt(n);
        for (long v : pts) out.putLong(v);
        for (long v : dts) out.putLong(v);
        for (long v : durations) out.putLong(v);
        out.put(flags);
        return out.array();
    }

    /** Reads what {@link #toBytes} wrote; every length is checked against what is left before use. */
    public static FrameIndex fromBytes(byte[] bytes) throws IOException {
        try {
            ByteBuffer in = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
            byte[] magic = new byte[MAGIC.length];
            if (bytes.length < MAGIC.length + 4) throw new IOException("frame index too short: " + bytes.length + " bytes");
            in.get(magic);
            if (!Arrays.equals(magic, MAGIC)) {
                throw new IOException("not a frame index of this version (magic "
                        + new String(magic, StandardCharsets.ISO_8859_1) + ", expected STKVIX01)");
            }
            int headBytes = in.getInt();
            if (headBytes < 0 || headBytes > in.remaining() - 4) throw new IOException("frame index header length " + headBytes + " exceeds the file");
            ByteBuffer head = in.slice(in.position(), headBytes).order(ByteOrder.LITTLE_ENDIAN);
            in.position(in.position() + headBytes);
            StreamInfo s = new StreamInfo(head.getInt(), getString(head), getString(head), getRational(head),
                    getRational(head), getRational(head), head.getInt(), head.getInt(), head.getInt(), getString(head),
                    head.getInt(), head.getInt(), head.getInt(), head.getInt(), head.getDouble(), head.getLong(),
                    head.getLong(), head.getLong());
            int n = in.getInt();
            if (n < 0 || n > MAX_ENTRIES || (long) n * 25 != in.remaining()) {
                throw new IOException("frame index claims " + n + " entries in " + in.remaining() + " bytes");
            }
            long[] pts = new long[n], dts = new long[n], dur = new long[n];
            byte[] flags = new byte[n];
            for (int i = 0; i < n; i++) pts[i] = in.getLong();
            for (int i = 0; i < n; i++) dts[i] = in.getLong();
            for (int i = 0; i < n; i++) dur[i] = in.getLong();
            in.get(flags);
            return new FrameIndex(s, pts, dts, dur, flags);
        } catch (java.nio.BufferUnderflowException | IndexOutOfBoundsException e) {
            throw new IOException("frame index truncated or malformed", e);
        }
    }

    private static void putString(ByteBuffer b, String s) {
        byte[] u = s.getBytes(StandardCharsets.UTF_8);
        if (u.length > MAX_STRING_BYTES) u = Arrays.copyOf(u, MAX_STRING_BYTES);
        b.putInt(u.length).put(u);
    }

    private static String getString(ByteBuffer b) throws IOException {
        int len = b.getInt();
        if (len < 0 || len > MAX_STRING_BYTES || len > b.remaining()) throw new IOException("frame index string length " + len);
        byte[] u = new byte[len];
        b.get(u);
        return new String(u, StandardCharsets.UTF_8);
    }

    private static void putRational(ByteBuffer b, Rational r) { b.putInt(r.num()).putInt(r.den()); }

    private static Rational getRational(ByteBuffer b) { return new Rational(b.getInt(), b.getInt()); }

    @Override
    public boolean equals(Object o) {
        return o instanceof FrameIndex f && stream.equals(f.stream) && Arrays.equals(pts, f.pts)
                && Arrays.equals(dts, f.dts) && Arrays.equals(durations, f.durations) && Arrays.equals(flags, f.flags);
    }

    @Override
    public int hashCode() { return stream.hashCode() * 31 + Arrays.hashCode(pts); }

    @Override
    public String toString() {
        return "FrameIndex[" + stream.codec() + " " + stream.width() + "x" + stream.height() + ", " + frameCount()
                + " frames, " + durationSeconds() + " s]";
    }
}
