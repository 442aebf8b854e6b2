package dev.stoker.image.qwenvl;

import dev.stoker.core.VisionConfig;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Turns the resized u8 RGB frames of one video into Qwen-VL {@code pixel_values_videos} rows in one pass: the fused
 * normalize of the Hugging Face video processors and patchify, bit-identical to {@code normalize_fused} +
 * {@code patchify_video} of {@code shared/reference/ref_qwenvl_video.py} (transformers 5.18.0 / 4.57.6
 * {@code Qwen2VLVideoProcessor}, {@code Qwen3VLVideoProcessor}; corrections 8 of vectors/qwen-vl-video/README.md).
 *
 * <p>Values: {@code (float(v) − f32(f32(mean)·255)) / f32(f32(std)·255)}, looked up in the 3×256 table of
 * {@link PatchWriter#fusedNormalizationTable(VisionConfig)}. A frame count that is not a multiple of the temporal
 * patch size {@code tps} is padded by repeating the last frame (HF pads after normalizing, which gives the same
 * values since normalizing is per pixel).
 *
 * <p>Layout, with {@code T' = ceil(T/tps)·tps} frames, {@code gh = H/p}, {@code gw = W/p}, {@code m} the merge size —
 * HF's view {@code (gt, tps, C, gh/m, m, p, gw/m, m, p).permute(0,3,6,4,7,2,1,5,8)}:
 * <pre>
 *   row = (((t·(gh/m) + bh)·(gw/m) + bw)·m + mh)·m + mw     patch (ph, pw) = (bh·m + mh, bw·m + mw)
 *   col = ((c·tps + tt)·p + y)·p + x
 *   value = norm[c][frame min(t·tps + tt, T−1)][ph·p + y][pw·p + x]
 * </pre>
 * A single frame gives the rows of a still image under the torchvision image backend (the image repeated over the
 * temporal patch), so {@link PatchWriter} with {@link ImageBackend#TORCHVISION} and this writer agree on T = 1.
 *
 * <p>How: a band of rows at a time — one row of merge blocks across the frame, consecutive in the layout — each of its
 * frame lines normalized once into three channel lines by table lookups in one long loop, and cut into the rows in
 * runs of p floats; into native memory through a heap band (one bulk copy per band). On the 2-core VM (JMH,
 * {@code VideoPatchifyBenchmark}) this took the cache restart's clip (20 frames of 644x364) from 32.6–33.8 ms to 16.4–20.1
 * into native memory (docs/benchmarks.md). Frames in native memory (a cache entry mapped in place) are read a line at a
 * time, copied into an array first, so that the compiled loop is the same whatever the kind of segment.
 *
 * <p>Threading: not thread-safe (scratch lines and band); use one instance per thread.
 */
public final class VideoPatchWriter {
    private final int patchSize;
    private final int mergeSize;
    private final int temporalPatchSize;
    private final int rowLength;
    private final float[] table;
    /** One band's rows ({@link #fillBand}) before they are copied into native memory; grown on demand. */
    private float[] band = new float[0];
    /** One frame line's values, channel by channel ({@link #fillBand}); grown on demand. */
    private float[] lineR = new float[0], lineG = new float[0], lineB = new float[0];
    /** One frame line's bytes copied from native memory ({@link #fillBand}); grown on demand. */
    private byte[] lineBytes = new byte[0];

    public VideoPatchWriter(VisionConfig cfg) {
        this.patchSize = cfg.patchSize();
        this.mergeSize = cfg.mergeSize();
        this.temporalPatchSize = cfg.temporalPatchSize();
        this.rowLength = cfg.rowLength();
        this.table = PatchWriter.fusedNormalizationTable(cfg);
    }

    /** Width and height of a frame must be multiples of this: p·m. */
    public int factor() { return patchSize * mergeSize; }

    /** Floats per row: 3·tps·p·p. */
    public int rowLength() { return rowLength; }

    /** Temporal patches of {@code frameCount} frames: ceil(T / tps). */
    public int gridT(int frameCount) {
        if (frameCount <= 0) throw new IllegalArgumentException("a video needs at least one frame, got " + frameCount);
        return (frameCount + temporalPatchSize - 1) / temporalPatchSize;
    }

    /** Rows of {@code frameCount} frames of {@code width × height} (multiples of p·m): gt·gh·gw. */
    public int rows(int frameCount, int width, int height) {
        checkGeometry(width, height);
        return Math.multiplyExact(gridT(frameCount), (height / patchSize) * (width / patchSize));
    }

    /**
     * Writes all rows of {@code frameCount} frames stored back to back in {@code frames} (T×H×W×3, HWC each) into
     * {@code dst} from float index {@code offset}.
     */
    public void write(byte[] frames, int frameCount, int width, int height, float[] dst, int offset) {
        int rows = rows(frameCount, width, height);
        if (offset < 0 || (long) offset + (long) rows * rowLength > dst.length)
            throw new IndexOutOfBoundsException("pixel_values_videos of " + rows + " rows do not fit at " + offset + " in " + dst.length);
        checkSource(frames, frameCount, width, height);
        lines(width);
        int bandFloats = bandRows(width) * rowLength;
        for (int t = 0, gt = gridT(frameCount), at = offset; t < gt; t++)
            for (int bh = 0; bh < height / patchSize / mergeSize; bh++, at += bandFloats)
                fillBand(frames, null, frameCount, width, height, t, bh, dst, at);
    }

    /** As {@link #write(byte[], int, int, int, float[], int)}, as little-endian float32 into {@code dst} from {@code offsetBytes}. */
    public void write(byte[] frames, int frameCount, int width, int height, MemorySegment dst, long offsetBytes) {
        checkSource(frames, frameCount, width, height);
        write(frames, null, frameCount, width, height, dst, offsetBytes);
    }

    /**
     * As {@link #write(byte[], int, int, int, MemorySegment, long)}, the frames read from {@code frames} (T×H×W×3 bytes,
     * HWC each, from its start; e.g. a cache entry mapped in place).
     */
    public void write(MemorySegment frames, int frameCount, int width, int height, MemorySegment dst, long offsetBytes) {
        if (frames.byteSize() < (long) frameCount * width * height * 3)
            throw new IllegalArgumentException("frames of " + frames.byteSize() + " bytes are too few for " + frameCount + " frames of " + width + "x" + height);
        write(null, frames, frameCount, width, height, dst, offsetBytes);
    }

    /** The frames from {@code heap}, or when it is null from {@code nativeFrames}, into native memory. */
    private void write(byte[] heap, MemorySegment nativeFrames, int frameCount, int width, int height, MemorySegment dst, long offsetBytes) {
        int rows = rows(frameCount, width, height);
        long rowBytes = (long) rowLength * Float.BYTES;
        if (offsetBytes < 0 || offsetBytes + rows * rowBytes > dst.byteSize())
            throw new IndexOutOfBoundsException("pixel_values_videos of " + rows + " rows do not fit at byte " + offsetBytes + " in " + dst.byteSize());
        lines(width);
        int bandFloats = bandRows(width) * rowLength;
        if (band.length < bandFloats) band = new float[bandFloats];
        long at = offsetBytes;
        for (int t = 0, gt = gridT(frameCount); t < gt; t++)
            for (int bh = 0; bh < height / patchSize / mergeSize; bh++, at += (long) bandFloats * Float.BYTES) {
                fillBand(heap, nativeFrames, frameCount, width, height, t, bh, band, 0);
                MemorySegment.copy(band, 0, dst, PatchWriter.FLOAT_LE, at, bandFloats);
            }
    }

    /**
     * Grows the channel lines to {@code width}: here, once per clip, not in {@link #fillBand} (C2 compiles that for the
     * branches it saw taken; a wider clip than the warm-up's would make its code trap).
     */
    private void lines(int width) {
        if (lineR.length < width) {
            lineR = new float[width];
            lineG = new float[width];
            lineB = new float[width];
            lineBytes = new byte[width * 3];
        }
    }

    /** One frame line of {@code width} pixels from byte {@code s} of {@code frames}, channel by channel, through the table. */
    private void normalizeLine(byte[] frames, int s, int width, float[] r, float[] g, float[] b) {
        final float[] tab = table;
        for (int x = 0; x < width; x++, s += 3) {
            r[x] = tab[frames[s] & 0xFF];
            g[x] = tab[256 + (frames[s + 1] & 0xFF)];
            b[x] = tab[512 + (frames[s + 2] & 0xFF)];
        }
    }

    /** Rows of one band: a row of merge blocks across a frame, (W/p)·m patches. */
    private int bandRows(int width) { return width / patchSize * mergeSize; }

    /**
     * The rows of temporal patch {@code t}, merge-block row {@code bh} — consecutive in the layout: block after block
     * across the frame, each block's m×m patches — into {@code out} from {@code base}. Each of the band's frame lines
     * (tps frames × m·p lines) is normalized once, channel by channel into {@link #lineR}/{@link #lineG}/{@link #lineB}
     * (one long loop per line, table lookups), and its p-float runs are then copied to their patches' rows: the same
     * values as writing each row from its own patches' bytes, with far fewer short loops.
     */
    private void fillBand(byte[] heap, MemorySegment nativeFrames, int frameCount, int width, int height, int t, int bh, float[] out, int base) {
        final int p = patchSize, m = mergeSize, tps = temporalPatchSize;
        final int plane = p * p, channelStride = tps * plane, gw = width / p;
        final long frameBytes = (long) width * height * 3;
        final float[] r = lineR, g = lineG, b = lineB;
        for (int tt = 0; tt < tps; tt++) {
            long frame = Math.min(t * tps + tt, frameCount - 1);
            for (int mh = 0; mh < m; mh++)
                for (int y = 0; y < p; y++) {
                    long s = frame * frameBytes + (long) ((bh * m + mh) * p + y) * width * 3;
                    if (heap != null) {
                        normalizeLine(heap, (int) s, width, r, g, b);
                    } else { // a bulk copy of the line first: the loop then reads an array whatever the segment's kind
                        MemorySegment.copy(nativeFrames, ValueLayout.JAVA_BYTE, s, lineBytes, 0, width * 3);
                        normalizeLine(lineBytes, 0, width, r, g, b);
                    }
                    int col = (tt * p + y) * p;
                    for (int pw = 0; pw < gw; pw++) {
                        int at = base + ((pw / m * m + mh) * m + pw % m) * rowLength + col;
                        System.arraycopy(r, pw * p, out, at, p);
                        System.arraycopy(g, pw * p, out, at + channelStride, p);
                        System.arraycopy(b, pw * p, out, at + 2 * channelStride, p);
                    }
                }
        }
    }

    private void checkGeometry(int width, int height) {
        int factor = patchSize * mergeSize;
        if (width <= 0 || height <= 0 || width % factor != 0 || height % factor != 0)
            throw new IllegalArgumentException(width + "x" + height + " is not a positive multiple of factor " + factor);
    }

    private static void checkSource(byte[] frames, int frameCount, int width, int height) {
        if (frames.length < (long) frameCount * width * height * 3)
            throw new IllegalArgumentException("frame buffer of " + frames.length + " bytes is too small for " + frameCount + " frames of " + width + "x" + height);
    }
}
