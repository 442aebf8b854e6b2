package dev.stoker.image.qwenvl;

import dev.stoker.core.VisionConfig;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * Turns a resized u8 RGB image into Qwen-VL {@code pixel_values} rows in one pass: rescale, normalize,
 * temporal duplication and patchify fused (spec §6, §7).
 *
 * <p>Values: {@code y = ((float)(v * (1.0/255.0)) - (float) mean[c]) / (float) std[c]}, float32 as numpy
 * computes it. Only 256 inputs exist per channel, so a 3×256 table built with exactly these operations
 * is bit-identical and replaces all arithmetic by a lookup. With {@link ImageBackend#TORCHVISION} the table is the
 * torchvision backend's fused one ({@link #fusedNormalizationTable(VisionConfig)}).
 *
 * <p>Layout (single image, t = 0), with {@code gw = width/p}, {@code m} the merge size:
 * <pre>
 *   row = ((bh*(gw/m) + bw)*m + mh)*m + mw        patch (ph, pw) = (bh*m + mh, bw*m + mw)
 *   col = ((c*tps + tt)*p + y)*p + x              [c0 p·p | c0 again | c1 | c1 | c2 | c2] for tps = 2
 *   value = norm[c][ph*p + y][pw*p + x]           identical for every tt
 * </pre>
 * Each row is built with the tt = 0 block of each channel filled from the table and the other temporal
 * blocks copied from it; rows go straight to a {@code float[]}, or through a one-row scratch and one bulk
 * copy into a {@link MemorySegment} (little-endian float32, any byte offset).
 *
 * <p>Threading: not thread-safe (one scratch row); use one instance per thread.
 */
public final class PatchWriter {
    /** Float32 as stored in pixel_values buffers shared with Python: little-endian, no alignment assumed. */
    public static final ValueLayout.OfFloat FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final int patchSize;
    private final int mergeSize;
    private final int temporalPatchSize;
    private final int rowLength;
    private final float[] table;
    private final float[] scratchRow;

    public PatchWriter(VisionConfig cfg) {
        this(cfg, ImageBackend.PIL);
    }

    /** A writer normalizing as {@code backend}'s image processor does ({@link #normalizationTable(VisionConfig, ImageBackend)}). */
    public PatchWriter(VisionConfig cfg, ImageBackend backend) {
        this.patchSize = cfg.patchSize();
        this.mergeSize = cfg.mergeSize();
        this.temporalPatchSize = cfg.temporalPatchSize();
        this.rowLength = cfg.rowLength();
        this.table = normalizationTable(cfg, backend);
        this.scratchRow = new float[rowLength];
    }

    /** The table of {@code backend}: {@link #normalizationTable(VisionConfig)} or {@link #fusedNormalizationTable(VisionConfig)}. */
    public static float[] normalizationTable(VisionConfig cfg, ImageBackend backend) {
        return backend == ImageBackend.TORCHVISION ? fusedNormalizationTable(cfg) : normalizationTable(cfg);
    }

    /**
     * The torchvision backend's table (transformers {@code TorchvisionBackend.rescale_and_normalize}, fused rescale
     * and normalize; correction 8 of vectors/qwen-vl-video/README.md, {@code normalize_fused} of
     * ref_qwenvl_video.py): {@code table[c*256 + v] = ((float) v − f32(f32(mean)·255)) / f32(f32(std)·255)}, all in
     * float32 ({@code 1/rescale_factor} is exactly 255.0).
     */
    public static float[] fusedNormalizationTable(VisionConfig cfg) {
        double[] mean = cfg.mean();
        double[] std = cfg.std();
        float[] t = new float[3 * 256];
        for (int c = 0; c < 3; c++) {
            float meanScaled = (float) mean[c] * 255.0f;
            float stdScaled = (float) std[c] * 255.0f;
            for (int v = 0; v < 256; v++) t[c * 256 + v] = ((float) v - meanScaled) / stdScaled;
        }
        return t;
    }

    /** The PIL backend's 3×256 table: {@code table[c*256 + v]} is the normalized value of channel {@code c} with u8 value {@code v}. */
    public static float[] normalizationTable(VisionConfig cfg) {
        double[] mean = cfg.mean();
        double[] std = cfg.std();
        float[] t = new float[3 * 256];
        for (int c = 0; c < 3; c++) {
            float meanF = (float) mean[c];
            float stdF = (float) std[c];
            for (int v = 0; v < 256; v++) {
                float r = (float) (v * (1.0 / 255.0));
                t[c * 256 + v] = (r - meanF) / stdF;
            }
        }
        return t;
    }

    public int rowLength() { return rowLength; }

    /** Number of pixel_values rows for a {@code width × height} image (both multiples of p·m). */
    public int rows(int width, int height) {
        checkGeometry(width, height);
        return (height / patchSize) * (width / patchSize);
    }

    /** Writes all rows of {@code rgb} (HWC, {@code width × height}) into {@code dst} from float index {@code offset}. */
    public void write(byte[] rgb, int width, int height, float[] dst, int offset) {
        int rows = rows(width, height);
        if (offset < 0 || (long) offset + (long) rows * rowLength > dst.length)
            throw new IndexOutOfBoundsException("pixel_values of " + rows + " rows do not fit at " + offset + " in " + dst.length);
        checkSource(rgb, width, height);
        int gw = width / patchSize;
        int groupsW = gw / mergeSize;
        int groupsH = (height / patchSize) / mergeSize;
        int row = 0;
        for (int bh = 0; bh < groupsH; bh++)
            for (int bw = 0; bw < groupsW; bw++)
                for (int mh = 0; mh < mergeSize; mh++)
                    for (int mw = 0; mw < mergeSize; mw++) {
                        fillRow(rgb, width, bh * mergeSize + mh, bw * mergeSize + mw, dst, offset + row * rowLength);
                        row++;
                    }
    }

    /** Writes all rows of {@code rgb} into {@code dst} as little-endian float32 starting at {@code offsetBytes}. */
    public void write(byte[] rgb, int width, int height, MemorySegment dst, long offsetBytes) {
        int rows = rows(width, height);
        long rowBytes = (long) rowLength * Float.BYTES;
        if (offsetBytes < 0 || offsetBytes + rows * rowBytes > dst.byteSize())
            throw new IndexOutOfBoundsException("pixel_values of " + rows + " rows do not fit at byte " + offsetBytes + " in " + dst.byteSize());
        checkSource(rgb, width, height);
        int gw = width / patchSize;
        int groupsW = gw / mergeSize;
        int groupsH = (height / patchSize) / mergeSize;
        long at = offsetBytes;
        for (int bh = 0; bh < groupsH; bh++)
            for (int bw = 0; bw < groupsW; bw++)
                for (int mh = 0; mh < mergeSize; mh++)
                    for (int mw = 0; mw < mergeSize; mw++) {
                        fillRow(rgb, width, bh * mergeSize + mh, bw * mergeSize + mw, scratchRow, 0);
                        MemorySegment.copy(scratchRow, 0, dst, FLOAT_LE, at, rowLength);
                        at += rowBytes;
                    }
    }

    /** Builds the row of patch (ph, pw) at {@code out[base .. base+rowLength)}. */
    private void fillRow(byte[] rgb, int width, int ph, int pw, float[] out, int base) {
        final int p = patchSize;
        final int planeLength = p * p;
        final int channelStride = temporalPatchSize * planeLength;
        final float[] t = table;
        final int c1 = base + channelStride;
        final int c2 = c1 + channelStride;
        int o = 0;
        for (int y = 0; y < p; y++) {
            int s = ((ph * p + y) * width + pw * p) * 3;
            for (int x = 0; x < p; x++) {
                out[base + o] = t[rgb[s] & 0xFF];
                out[c1 + o] = t[256 + (rgb[s + 1] & 0xFF)];
                out[c2 + o] = t[512 + (rgb[s + 2] & 0xFF)];
                s += 3;
                o++;
            }
        }
        for (int c = 0; c < 3; c++) {
            int first = base + c * channelStride;
            for (int tt = 1; tt < temporalPatchSize; tt++)
                System.arraycopy(out, first, out, first + tt * planeLength, planeLength);
        }
    }

    private void checkGeometry(int width, int height) {
        int factor = patchSize * mergeSize;
        if (width <= 0 || height <= 0 || width % factor != 0 || height % factor != 0)
            throw new IllegalArgumentException(width + "x" + height + " is not a positive multiple of factor " + factor);
    }

    private static void checkSource(byte[] rgb, int width, int height) {
        if (rgb.length < (long) width * height * 3)
            throw new IllegalArgumentException("image buffer of " + rgb.length + " bytes is too small for " + width + "x" + height);
    }
}
