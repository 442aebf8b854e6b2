package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class PatchWriterTest {

    /** Two passes as the HF code does it: normalize into CHW floats, then index-math patchify (spec §6, §7). */
    static float[] twoPass(byte[] rgb, int w, int h, VisionConfig cfg) {
        double[] mean = cfg.mean(), std = cfg.std();
        float[] chw = new float[3 * h * w];
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < h * w; i++) {
                float r = (float) ((rgb[i * 3 + c] & 0xFF) * (1.0 / 255.0));
                chw[c * h * w + i] = (r - (float) mean[c]) / (float) std[c];
            }
        int p = cfg.patchSize(), m = cfg.mergeSize(), tps = cfg.temporalPatchSize();
        int gh = h / p, gw = w / p, len = cfg.rowLength();
        float[] out = new float[gh * gw * len];
        for (int bh = 0; bh < gh / m; bh++)
            for (int bw = 0; bw < gw / m; bw++)
                for (int mh = 0; mh < m; mh++)
                    for (int mw = 0; mw < m; mw++) {
                        int row = ((bh * (gw / m) + bw) * m + mh) * m + mw;
                        int ph = bh * m + mh, pw = bw * m + mw;
                        for (int c = 0; c < 3; c++)
                            for (int tt = 0; tt < tps; tt++)
                                for (int y = 0; y < p; y++)
                                    for (int x = 0; x < p; x++)
                                        out[row * len + ((c * tps + tt) * p + y) * p + x] = chw[(c * h + ph * p + y) * w + pw * p + x];
                    }
        return out;
    }

    @Test
    void fusedEqualsTwoPassForEveryPreset() {
        for (var preset : ProcessorPreset.values()) {
            var cfg = preset.vision();
            int f = cfg.factor();
            int w = 5 * f, h = 3 * f;
            byte[] rgb = BicubicResizerTest.syntheticImage(11, 0, w, h);
            var writer = new PatchWriter(cfg);
            float[] dst = new float[writer.rows(w, h) * cfg.rowLength() + 3];
            writer.write(rgb, w, h, dst, 3);
            assertArrayEquals(twoPass(rgb, w, h, cfg), Arrays.copyOfRange(dst, 3, dst.length), preset.name());
        }
    }

    @Test
    void tableIsBitIdenticalToTheSlowPathValues() {
        // spec §15 manifest: p01 qwen2vl_p14 min/max = -1.7922625541687012 / 2.1458969116210938
        float[] t = PatchWriter.normalizationTable(ProcessorPreset.QWEN2_VL.vision());
        assertEquals(-1.7922625541687012, t[0], 0.0);
        assertEquals(2.1458969116210938, t[2 * 256 + 255], 0.0);
        float[] half = PatchWriter.normalizationTable(ProcessorPreset.QWEN3_VL.vision());
        assertEquals(-1.0f, half[0]);
        assertEquals(1.0f, half[255]);
    }

    @Test
    void segmentAtAnUnalignedOffsetEqualsTheArray() {
        var cfg = ProcessorPreset.QWEN2_VL.vision();
        int w = 4 * 28, h = 2 * 28;
        byte[] rgb = BicubicResizerTest.syntheticImage(5, 1, w, h);
        var writer = new PatchWriter(cfg);
        float[] expected = new float[writer.rows(w, h) * cfg.rowLength()];
        writer.write(rgb, w, h, expected, 0);
        try (var arena = Arena.ofConfined()) {
            long offset = 13;
            MemorySegment seg = arena.allocate(offset + expected.length * 4L + 7);
            seg.fill((byte) 0x7F);
            writer.write(rgb, w, h, seg, offset);
            float[] back = new float[expected.length];
            MemorySegment.copy(seg, PatchWriter.FLOAT_LE, offset, back, 0, back.length);
            assertArrayEquals(expected, back);
            for (long i = 0; i < offset; i++) assertEquals((byte) 0x7F, seg.get(ValueLayout.JAVA_BYTE, i));
            for (long i = offset + expected.length * 4L; i < seg.byteSize(); i++)
                assertEquals((byte) 0x7F, seg.get(ValueLayout.JAVA_BYTE, i));
            assertThrows(IndexOutOfBoundsException.class, () -> writer.write(rgb, w, h, seg, offset + 8));
        }
    }

    @Test
    void rejectsSizesThatAreNotFactorAligned() {
        var writer = new PatchWriter(ProcessorPreset.QWEN3_VL.vision());
        assertThrows(IllegalArgumentException.class, () -> writer.rows(48, 64));
    }
}
