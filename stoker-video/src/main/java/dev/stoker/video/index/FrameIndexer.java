package dev.stoker.video.index;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.AvField;
import dev.stoker.video.ffmpeg.Demuxer;
import dev.stoker.video.ffmpeg.PacketView;
import dev.stoker.video.ffmpeg.StreamInfo;
import java.util.Arrays;
import java.util.List;

/**
 * Builds a {@link FrameIndex} by demuxing every packet of a video's best video stream, without decoding
 * (torchcodec's exact scan): bounded by a packet count and a deadline, so that a file whose packets never end
 * fails that video only.
 *
 * <p>Threading: stateless; each call owns its demuxer.
 */
public final class FrameIndexer {
    /** Defaults: a 10-hour 240 fps video has 8.64M packets; 30 s covers a 2-hour 1080p file's scan (~1 s) with room. */
    public static final int MAX_PACKETS_DEFAULT = 10_000_000;
    public static final long DEADLINE_NANOS_DEFAULT = 30_000_000_000L;

    private final int maxPackets;
    private final long timeoutNanos;

    public FrameIndexer() { this(MAX_PACKETS_DEFAULT, DEADLINE_NANOS_DEFAULT); }

    public FrameIndexer(int maxPackets, long timeoutNanos) {
        if (maxPackets < 1 || maxPackets > FrameIndex.MAX_ENTRIES) {
            throw new IllegalArgumentException("maxPackets must be in 1.." + FrameIndex.MAX_ENTRIES + ": " + maxPackets);
        }
        if (timeoutNanos <= 0) throw new IllegalArgumentException("timeoutNanos must be positive: " + timeoutNanos);
        this.maxPackets = maxPackets;
        this.timeoutNanos = timeoutNanos;
    }

    /** Indexes {@code source} (the caller closes it); a {@link SampleException} names the video and the cause. */
    public FrameIndex index(SeekableByteSource source) {
        long deadline = System.nanoTime() + timeoutNanos;
        try (Demuxer d = Demuxer.open(source, deadline)) {
            StreamInfo info = StreamInfo.of(d);
            PacketView p = new PacketView(d);
            int n = 0;
            long[] pts = new long[64], dts = new long[64], dur = new long[64];
            byte[] flags = new byte[64];
            while (d.nextPacket()) {
                if (n == maxPackets) {
                    throw new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name()
                            + ": more than " + maxPackets + " packets in its video stream");
                }
                if ((n & 1023) == 0) d.checkDeadline();
                if (n == pts.length) {
                    int cap = (int) Math.min((long) n * 2, maxPackets);
                    pts = Arrays.copyOf(pts, cap);
                    dts = Arrays.copyOf(dts, cap);
                    dur = Arrays.copyOf(dur, cap);
                    flags = Arrays.copyOf(flags, cap);
                }
                pts[n] = p.pts();
                dts[n] = p.dts();
                dur[n] = p.duration();
                int f = p.flags();
                if ((f & AvField.Constant.AV_PKT_FLAG_CORRUPT.value) != 0) {
                    // libavformat's mark for a packet it could read only in part: a truncated or damaged file
                    throw new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name()
                            + ": packet " + n + " (dts " + dts[n] + ") is incomplete or corrupt: the file is "
                            + "truncated or damaged");
                }
                flags[n] = (byte) (((f & AvField.Constant.AV_PKT_FLAG_KEY.value) != 0 ? FrameIndex.KEY : 0)
                        | ((f & AvField.Constant.AV_PKT_FLAG_DISCARD.value) != 0 ? FrameIndex.DISCARD : 0));
                if (pts[n] == AvField.AV_NOPTS_VALUE) {
                    if (dts[n] == AvField.AV_NOPTS_VALUE) {
                        throw new SampleException(source.name(), SampleException.Stage.DECODE, "video "
                                + source.name() + ": packet " + n + " has neither pts nor dts");
                    }
                    pts[n] = dts[n];
                    flags[n] |= FrameIndex.PTS_FROM_DTS;
                }
                n++;
            }
            List<String> reported = d.ffmpegErrors();
            if (!reported.isEmpty()) {
                // e.g. "File ended prematurely" (a cut WebM/MKV) or "partial file" (MP4): the packets read are not
                // all the video has
                throw new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name()
                        + ": damaged or truncated, FFmpeg reported: " + String.join("; ", reported));
            }
            if (n == 0) {
                throw new SampleException(source.name(), SampleException.Stage.DECODE,
                        "video " + source.name() + ": its video stream has no packets");
            }
            int discarded = 0;
            for (int i = 0; i < n; i++) if ((flags[i] & FrameIndex.DISCARD) != 0) discarded++;
            if (discarded == n) {
                // an edit list that shows none of the stream (fuzzing's first finding): no frame to sample
                throw new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name()
                        + ": no frames: its edit list discards all " + n + " packets");
            }
            if (info.container().startsWith("mov,") && info.headerFrameCount() > n) {
                // MP4/MOV: nb_frames is the sample table's own count, not an estimate; fewer packets means the
                // media data ends early (a cut exactly between two packets leaves no partial packet to flag)
                throw new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name()
                        + ": truncated: its sample table lists " + info.headerFrameCount() + " frames, only " + n
                        + " could be read");
            }
            return sortedByPts(info, pts, dts, dur, flags, n);
        }
    }

    private static FrameIndex sortedByPts(StreamInfo info, long[] pts, long[] dts, long[] dur, byte[] flags, int n) {
        int[] order = new int[n];
        for (int i = 0; i < n; i++) order[i] = i;
        sortStable(order, pts);
        long[] p = new long[n], d = new long[n], u = new long[n];
        byte[] f = new byte[n];
        for (int i = 0; i < n; i++) {
            int j = order[i];
            p[i] = pts[j];
            d[i] = dts[j];
            u[i] = dur[j];
            f[i] = flags[j];
        }
        return new FrameIndex(info, p, d, u, f);
    }

    /**
     * Sorts packet numbers by their pts, stably (equal pts keep demux order), without boxing: a 10-hour video has
     * millions of packets. Bottom-up merge sort; runs already in order (no B-frames) cost one pass.
     */
    static void sortStable(int[] order, long[] key) {
        int n = order.length;
        int[] a = order, b = new int[n];
        for (int width = 1; width < n; width *= 2) {
            for (int lo = 0; lo < n; lo += 2 * width) {
                int mid = Math.min(lo + width, n), hi = Math.min(lo + 2 * width, n);
                int i = lo, j = mid, k = lo;
                if (mid < hi && key[a[mid - 1]] <= key[a[mid]]) {
                    System.arraycopy(a, lo, b, lo, hi - lo);
                    continue;
                }
                while (i < mid && j < hi) b[k++] = key[a[j]] < key[a[i]] ? a[j++] : a[i++];
                while (i < mid) b[k++] = a[i++];
                while (j < hi) b[k++] = a[j++];
            }
            int[] t = a;
            a = b;
            b = t;
        }
        if (a != order) System.arraycopy(a, 0, order, 0, n);
    }
}
