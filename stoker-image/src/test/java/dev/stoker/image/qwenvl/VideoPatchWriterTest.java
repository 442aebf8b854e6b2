package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.testkit.Vectors;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link VideoPatchWriter} (fused normalize + patchify) against fixtures of ref_qwenvl_video.py
 * {@code patchify_video(normalize_fused(..))} written by tools/torch-resize-fixtures/make_fixtures.py.
 */
@Timeout(60)
class VideoPatchWriterTest {

    static VisionConfig family(String name) {
        return switch (name) {
            case "qwen2-vl" -> ProcessorPreset.QWEN2_VL.vision();
            case "qwen2.5-vl" -> ProcessorPreset.QWEN2_5_VL.vision();
            case "qwen3-vl" -> ProcessorPreset.QWEN3_VL.vision();
            default -> throw new IllegalArgumentException(name);
        };
    }

    @Test
    void equalsReferenceForOddAndEvenFrameCounts() throws IOException {
        var in = Objects.requireNonNull(getClass().getResourceAsStream("/dev/stoker/image/torch/video_patchify_cases.csv"));
        int cases = 0;
        try (var r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.isBlank() || line.startsWith("#")) continue;
                String[] f = line.split(",");
                long seed = Long.parseLong(f[0]);
                int pattern = Integer.parseInt(f[1]), t = Integer.parseInt(f[3]), h = Integer.parseInt(f[4]), w = Integer.parseInt(f[5]);
                int rows = Integer.parseInt(f[6]);
                byte[] frames = new byte[t * h * w * 3];
                for (int k = 0; k < t; k++) {
                    byte[] one = BicubicResizerTest.syntheticImage(seed + k, pattern, w, h);
                    System.arraycopy(one, 0, frames, k * one.length, one.length);
                }
                var writer = new VideoPatchWriter(family(f[2]));
                assertEquals(rows, writer.rows(t, w, h), line);
                float[] out = new float[rows * writer.rowLength()];
                writer.write(frames, t, w, h, out, 0);
                String where = line;
                assertEquals(f[7], Vectors.sha256(out), () -> "patchify_video differs: " + where);
                try (var arena = Arena.ofConfined()) {
                    var seg = arena.allocate(out.length * 4L + 3);
                    writer.write(frames, t, w, h, seg, 3);
                    float[] back = new float[out.length];
                    java.lang.foreign.MemorySegment.copy(seg, PatchWriter.FLOAT_LE, 3, back, 0, back.length);
                    assertArrayEquals(out, back, line);
                }
                cases++;
            }
        }
        assertTrue(cases >= 8, "only " + cases + " cases");
    }

    /**
     * The band writer gives the row-by-row form's values bit for bit: random bytes (every value of every channel), each
     * family's patch and merge size, odd and even frame counts, several band widths and heights, into an array at an
     * offset and a segment at an odd byte offset, nothing written outside the rows.
     */
    @Test
    void theBandsEqualTheRowByRowFormBitForBit() {
        var rnd = new java.util.Random(20261208);
        int compared = 0;
        for (String name : new String[] {"qwen2-vl", "qwen2.5-vl", "qwen3-vl"}) {
            VisionConfig cfg = family(name);
            var writer = new VideoPatchWriter(cfg);
            int f = cfg.patchSize() * cfg.mergeSize();
            for (int[] size : new int[][] {{f, f}, {2 * f, f}, {3 * f, 2 * f}, {5 * f, 3 * f}, {f, 4 * f}}) {
                for (int t = 1; t <= 3; t++) {
                    int w = size[0], h = size[1];
                    byte[] frames = new byte[t * w * h * 3];
                    rnd.nextBytes(frames);
                    int rows = writer.rows(t, w, h);
                    float[] expected = new float[rows * writer.rowLength()];
                    rowByRow(cfg, frames, t, w, h, expected);
                    float[] a = new float[expected.length + 7];
                    java.util.Arrays.fill(a, -1e9f);
                    writer.write(frames, t, w, h, a, 5);
                    for (int i = 0; i < expected.length; i++)
                        if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(a[5 + i]))
                            throw new AssertionError(name + " " + w + "x" + h + " t=" + t + ": value " + i + " is " + a[5 + i] + ", " + expected[i] + " expected");
                    for (int i : new int[] {0, 4, 5 + expected.length, a.length - 1}) assertEquals(-1e9f, a[i], "outside the rows: " + i);
                    try (var arena = Arena.ofConfined()) {
                        long bytes = expected.length * 4L;
                        var seg = arena.allocate(bytes + 3 + 16);
                        seg.fill((byte) 0x5A);
                        writer.write(frames, t, w, h, seg, 3);
                        float[] back = new float[expected.length];
                        java.lang.foreign.MemorySegment.copy(seg, PatchWriter.FLOAT_LE, 3, back, 0, back.length);
                        assertArrayEquals(expected, back, name + " " + w + "x" + h + " t=" + t + " into a segment");
                        // the frames read from native memory (a cache entry mapped in place)
                        var src = arena.allocate(frames.length + 5).asSlice(5);
                        src.copyFrom(java.lang.foreign.MemorySegment.ofArray(frames));
                        seg.fill((byte) 0x5A);
                        writer.write(src, t, w, h, seg, 3);
                        java.lang.foreign.MemorySegment.copy(seg, PatchWriter.FLOAT_LE, 3, back, 0, back.length);
                        assertArrayEquals(expected, back, name + " " + w + "x" + h + " t=" + t + " from native memory");
                        for (long b = 0; b < 3; b++) assertEquals((byte) 0x5A, seg.get(java.lang.foreign.ValueLayout.JAVA_BYTE, b), "before the rows");
                        for (long b = 3 + bytes; b < seg.byteSize(); b++)
                            assertEquals((byte) 0x5A, seg.get(java.lang.foreign.ValueLayout.JAVA_BYTE, b), "after the rows, byte " + b);
                    }
                    compared += expected.length;
                }
            }
        }
        assertTrue(compared > 1_000_000, compared + " values");
    }

    /**
     * The layout written the plain way, row after row, each from its own patches' bytes (VideoPatchWriter's form before
     * its bands): row = (((t·(gh/m) + bh)·(gw/m) + bw)·m + mh)·m + mw, col = ((c·tps + tt)·p + y)·p + x.
     */
    static void rowByRow(VisionConfig cfg, byte[] frames, int frameCount, int width, int height, float[] out) {
        int p = cfg.patchSize(), m = cfg.mergeSize(), tps = cfg.temporalPatchSize(), rowLength = cfg.rowLength();
        float[] tab = PatchWriter.fusedNormalizationTable(cfg);
        long frameBytes = (long) width * height * 3;
        int row = 0;
        for (int t = 0; t < (frameCount + tps - 1) / tps; t++)
            for (int bh = 0; bh < height / p / m; bh++)
                for (int bw = 0; bw < width / p / m; bw++)
                    for (int mh = 0; mh < m; mh++)
                        for (int mw = 0; mw < m; mw++, row++) {
                            int ph = bh * m + mh, pw = bw * m + mw;
                            for (int c = 0; c < 3; c++)
                                for (int tt = 0; tt < tps; tt++) {
                                    int frame = Math.min(t * tps + tt, frameCount - 1);
                                    for (int y = 0; y < p; y++)
                                        for (int x = 0; x < p; x++) {
                                            int s = (int) (frame * frameBytes + ((long) (ph * p + y) * width + pw * p + x) * 3) + c;
                                            out[row * rowLength + ((c * tps + tt) * p + y) * p + x] = tab[c * 256 + (frames[s] & 0xFF)];
                                        }
                                }
                        }
    }

    @Test
    void oneFrameEqualsTheTorchvisionImageRows() {
        VisionConfig cfg = ProcessorPreset.QWEN2_VL.vision();
        byte[] img = BicubicResizerTest.syntheticImage(77, 1, 56, 28);
        var video = new VideoPatchWriter(cfg);
        float[] a = new float[video.rows(1, 56, 28) * video.rowLength()];
        video.write(img, 1, 56, 28, a, 0);
        var image = new PatchWriter(cfg, ImageBackend.TORCHVISION);
        float[] b = new float[image.rows(56, 28) * image.rowLength()];
        image.write(img, 56, 28, b, 0);
        assertArrayEquals(a, b);
        float[] pil = new float[b.length];
        new PatchWriter(cfg).write(img, 56, 28, pil, 0);
        assertTrue(!java.util.Arrays.equals(pil, b), "the fused and the PIL normalize should differ in some last bits");
    }

    @Test
    void badGeometryIsRefused() {
        var writer = new VideoPatchWriter(ProcessorPreset.QWEN3_VL.vision());
        var e = assertThrows(IllegalArgumentException.class, () -> writer.rows(0, 32, 32));
        assertTrue(e.getMessage().contains("at least one frame"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> writer.rows(2, 30, 32));
        assertTrue(e.getMessage().contains("factor 32"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> writer.write(new byte[10], 2, 32, 32, new float[2 * 4 * 1536], 0));
        assertTrue(e.getMessage().contains("too small"), e.getMessage());
        assertThrows(IndexOutOfBoundsException.class, () -> writer.write(new byte[2 * 32 * 32 * 3], 2, 32, 32, new float[100], 0));
    }
}
