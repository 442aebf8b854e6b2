package dev.stoker.video.decode;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.Demuxer;
import dev.stoker.video.ffmpeg.FrameReader;
import dev.stoker.video.index.FrameIndex;
import java.util.Arrays;

/**
 * Decodes only the frames a sampler chose, as RGB24, each handed over as it arrives (the caller resizes it at once,
 * so memory holds one full-size frame, never the video).
 *
 * <p><b>Frame numbers</b> are those the references use: the {@code k}-th frame the decoder gives in presentation
 * order when decoding from the start (what PyAV's {@code container.decode(video=0)} enumerates), which is the
 * {@code k}-th frame of the {@link FrameIndex} (its kept entries in pts order).
 *
 * <p><b>Seeking</b> (torchcodec's rule): for the next wanted frame {@code t}, take the last keyframe {@code k} at or
 * before it in presentation order; when {@code k} is beyond the next frame the decoder would give anyway, seek there
 * (the packets in between need not be decoded); otherwise decode forward. After a seek frames are numbered by their
 * pts in the index. Seeking is used only where the index makes that exact: every entry has its own container pts
 * (no {@link FrameIndex#PTS_FROM_DTS}), none is discarded by an edit list, and the pts strictly increase; other
 * videos are decoded forward from the start, numbered by counting.
 *
 * <p><b>Skipping</b>: where frames are numbered by pts, a packet whose frame is not wanted is decoded with
 * libavcodec's {@code skip_frame = AVDISCARD_NONREF}: a frame no other frame refers to (most B-frames) is then not
 * decoded at all, and the frames that are decoded come out the same.
 *
 * <p>Damage is an error, never a silent frame: a frame libavcodec marks corrupt, an error FFmpeg logs while decoding,
 * a wanted frame the stream does not give.
 */
public final class VideoDecoder {
    private VideoDecoder() {}

    /** Receives each wanted frame once, in ascending frame order; {@code rgb} (HWC, width·height·3) is valid only during the call. */
    @FunctionalInterface
    public interface FrameSink {
        void accept(int frame, int width, int height, byte[] rgb);
    }

    /**
     * What one decode cost.
     *
     * @param framesDecoded frames libavcodec produced (kept or not)
     * @param framesKept    distinct frames handed to the sink
     * @param seeks         seeks made
     * @param nanos         wall time of the whole decode, open and index checks included
     */
    public record Result(long framesDecoded, int framesKept, int seeks, long nanos) {
        /** Frames decoded per frame kept (1.0 is the least possible). */
        public double decodedPerKept() { return framesKept == 0 ? 0 : (double) framesDecoded / framesKept; }
    }

    /**
     * Decodes the frames {@code frames} (ascending, repeats allowed and delivered once, each in
     * {@code [0, index.frameCount())}) of {@code source}, whose index is {@code index}, before
     * {@code deadlineNanos} ({@link System#nanoTime()} clock).
     */
    public static Result decode(SeekableByteSource source, FrameIndex index, int[] frames, long deadlineNanos,
                                FrameSink sink) {
        return decode(source, index, frames, deadlineNanos, sink, true);
    }

    /**
     * As {@link #decode(SeekableByteSource, FrameIndex, int[], long, FrameSink)}; with {@code seek} false every frame up
     * to the last wanted one is decoded in order (the reference for the seeking path).
     */
    public static Result decode(SeekableByteSource source, FrameIndex index, int[] frames, long deadlineNanos,
                                FrameSink sink, boolean seek) {
        long start = System.nanoTime();
        int[] wanted = distinctAscending(source.name(), frames, index.frameCount());
        if (wanted.length == 0) return new Result(0, 0, 0, System.nanoTime() - start);
        long[] pts = seek ? seekablePts(index) : null;
        int[] keys = pts == null ? null : keyOrdinals(index);
        int seeks = 0;
        try (Demuxer demuxer = Demuxer.open(source, deadlineNanos); FrameReader reader = FrameReader.open(demuxer)) {
            byte[] rgb = new byte[0];
            int position = -1; // frame number of the frame last given; -1 before the first
            // with pts to number frames by, frames nothing refers to are skipped unless wanted
            boolean byPts = pts != null;
            if (byPts) {
                long[] wantedPts = new long[wanted.length];
                for (int i = 0; i < wanted.length; i++) wantedPts[i] = pts[wanted[i]];
                reader.skipNonReferenceUnless(p -> Arrays.binarySearch(wantedPts, p) >= 0);
            }
            for (int target : wanted) {
                if (keys != null) {
                    int key = keyAtOrBefore(keys, target);
                    if (key > position + 1) {
                        reader.seekBackward(pts[key]);
                        seeks++;
                        byPts = true;
                        position = key - 1;
                    }
                }
                while (true) {
                    if (!reader.next()) {
                        throw error(source, "frame " + target + " of " + index.frameCount() + " was not decoded: the "
                                + "stream ended after frame " + position);
                    }
                    int frame;
                    if (byPts) {
                        long p = reader.framePts();
                        frame = Arrays.binarySearch(pts, p);
                        if (frame < 0) throw error(source, "the decoder gave a frame at pts " + p + " that the index lacks");
                    } else {
                        frame = position + 1;
                    }
                    position = frame;
                    if (frame < target) continue;
                    if (frame > target) {
                        throw error(source, "frame " + target + " was not decoded: the decoder went from frame "
                                + (frame - 1) + " to " + frame);
                    }
                    if (reader.frameCorrupt()) throw error(source, "frame " + target + " is corrupt" + reported(demuxer));
                    int w = reader.frameWidth(), h = reader.frameHeight();
                    int size = Math.multiplyExact(Math.multiplyExact(w, h), 3);
                    if (rgb.length != size) rgb = new byte[size];
                    reader.toRgb24(rgb, 0);
                    sink.accept(target, w, h, rgb);
                    break;
                }
            }
            if (!demuxer.ffmpegErrors().isEmpty()) {
                throw error(source, "damaged: FFmpeg reported " + String.join("; ", demuxer.ffmpegErrors()));
            }
            return new Result(reader.framesDecoded(), wanted.length, seeks, System.nanoTime() - start);
        }
    }

    /**
     * Decodes every frame of {@code source} without converting any, and returns how many the decoder gave: the
     * decode cost alone (what {@code ffmpeg -f null} measures), for benchmarks and checks.
     */
    public static long decodeEvery(SeekableByteSource source, long deadlineNanos) {
        try (Demuxer demuxer = Demuxer.open(source, deadlineNanos); FrameReader reader = FrameReader.open(demuxer)) {
            while (reader.next()) {
                if (reader.frameCorrupt()) throw error(source, "frame " + (reader.framesDecoded() - 1) + " is corrupt");
            }
            if (!demuxer.ffmpegErrors().isEmpty()) {
                throw error(source, "damaged: FFmpeg reported " + String.join("; ", demuxer.ffmpegErrors()));
            }
            return reader.framesDecoded();
        }
    }

    private static String reported(Demuxer d) {
        return d.ffmpegErrors().isEmpty() ? "" : " (FFmpeg: " + String.join("; ", d.ffmpegErrors()) + ")";
    }

    private static SampleException error(SeekableByteSource source, String cause) {
        return new SampleException(source.name(), SampleException.Stage.DECODE, "video " + source.name() + ": " + cause);
    }

    static int[] distinctAscending(String name, int[] frames, int frameCount) {
        int[] out = new int[frames.length];
        int n = 0;
        for (int i = 0; i < frames.length; i++) {
            int f = frames[i];
            if (f < 0 || f >= frameCount) {
                throw new SampleException(name, SampleException.Stage.DECODE, "video " + name + ": frame " + f
                        + " asked for, it has " + frameCount);
            }
            if (i > 0 && f < frames[i - 1]) throw new IllegalArgumentException("frames not ascending: " + Arrays.toString(frames));
            if (n == 0 || out[n - 1] != f) out[n++] = f;
        }
        return Arrays.copyOf(out, n);
    }

    /** The index's pts by frame number when seeking is exact on it (class comment), else null. */
    static long[] seekablePts(FrameIndex index) {
        long[] pts = index.pts();
        for (int i = 0; i < pts.length; i++) {
            if (index.isDiscarded(i) || (index.flags()[i] & FrameIndex.PTS_FROM_DTS) != 0) return null;
            if (i > 0 && pts[i] <= pts[i - 1]) return null;
        }
        return pts.clone();
    }

    static int[] keyOrdinals(FrameIndex index) {
        int[] keys = index.keyFrames();
        return keys.length == 0 || keys[0] != 0 ? null : keys;
    }

    /** The last keyframe number at or before {@code frame} ({@code keys} ascending, starting at 0). */
    static int keyAtOrBefore(int[] keys, int frame) {
        int i = Arrays.binarySearch(keys, frame);
        return i >= 0 ? keys[i] : keys[-i - 2];
    }
}
