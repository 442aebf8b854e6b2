package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.image.RgbImage;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

@Timeout(60)
class BicubicResizerTest {

    /** The LCG image of testdata/resize/make_resize_cases.py ({@code synthetic_image}). */
    static byte[] syntheticImage(long seed, int pattern, int w, int h) {
        long state = seed;
        byte[] out = new byte[w * h * 3];
        int i = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    state = state * 6364136223846793005L + 1442695040888963407L;
                    int r = (int) (state >>> 56);
                    out[i++] = (byte) (pattern == 0 ? r : (x * 7 + y * 3 + c * 50 + (r >> 5)) & 0xFF);
                }
        return out;
    }

    /**
     * The project's JVM flags (the tests', the launcher's) add the Vector API, so the tests below cover both tap
     * paths: with {@code vector = true} the one every run takes, with {@code false} the one a JVM without it takes.
     */
    @Test
    void theProjectsJvmHasTheVectorPath() {
        assertTrue(dev.stoker.image.resample.VectorSupport.available(), "the tests' JVM lacks --add-modules=jdk.incubator.vector (stoker.jvm.flags)");
    }

    @ParameterizedTest(name = "vector={0}")
    @ValueSource(booleans = {true, false})
    void equalsPillowOnRandomSizes(boolean vector) throws IOException {
        var file = Vectors.projectDir().resolve("testdata/resize/resize_cases.csv");
        var resizer = new BicubicResizer(vector);
        int cases = 0;
        for (String line : Files.readAllLines(file)) {
            if (line.isBlank() || line.startsWith("#")) continue;
            String[] f = line.split(",");
            long seed = Long.parseLong(f[0]);
            int pattern = Integer.parseInt(f[1]);
            int iw = Integer.parseInt(f[2]), ih = Integer.parseInt(f[3]), ow = Integer.parseInt(f[4]), oh = Integer.parseInt(f[5]);
            var src = new RgbImage(iw, ih, syntheticImage(seed, pattern, iw, ih));
            var out = resizer.resize(src, ow, oh);
            assertEquals(f[6], Vectors.sha256(out.data()),
                    () -> "Pillow mismatch for seed " + seed + " pattern " + pattern + ": " + iw + "x" + ih + " -> " + ow + "x" + oh);
            cases++;
        }
        assertTrue(cases >= 150, "only " + cases + " cases in " + file);
    }

    @ParameterizedTest(name = "vector={0}")
    @ValueSource(booleans = {true, false})
    void equalsPlainPortOfResampleC(boolean vector) {
        var rnd = new SplittableRandom(42);
        var resizer = new BicubicResizer(vector);
        for (int n = 0; n < 400; n++) {
            int iw = 1 + rnd.nextInt(n < 300 ? 120 : 700);
            int ih = 1 + rnd.nextInt(n < 300 ? 120 : 500);
            int ow = 1 + rnd.nextInt(n < 300 ? 200 : 600);
            int oh = 1 + rnd.nextInt(n < 300 ? 200 : 600);
            if (n % 10 == 0) ow = iw;
            if (n % 10 == 1) oh = ih;
            byte[] src = syntheticImage(n, n % 2, iw, ih);
            byte[] expected = PlainResample.resize(src, iw, ih, ow, oh);
            byte[] actual = resizer.resize(new RgbImage(iw, ih, src), ow, oh).data();
            int first = Arrays.mismatch(expected, actual);
            int fiw = iw, fih = ih, fow = ow, foh = oh;
            assertEquals(-1, first, () -> fiw + "x" + fih + " -> " + fow + "x" + foh + ": first difference at byte " + first
                    + " (pixel " + first / 3 % fow + "," + first / 3 / fow + " channel " + first % 3 + ")");
        }
    }

    /** Heights on and around strip boundaries, widths down to one pixel, each axis alone and both, one reused instance. */
    @ParameterizedTest(name = "vector={0}")
    @ValueSource(booleans = {true, false})
    void equalsPlainPortAcrossStripBoundaries(boolean vector) {
        var resizer = new BicubicResizer(vector);
        int s = BicubicResizer.STRIP_ROWS;
        int seed = 0;
        for (int ih : new int[] {1, s - 1, s, s + 1, 2 * s + 3})
            for (int iw : new int[] {1, 2, 37})
                for (int[] out : new int[][] {{iw, ih / 2 + 1}, {iw * 3 + 1, ih}, {iw + 5, ih * 2 + 1}, {(iw + 1) / 2, ih + 7}}) {
                    if (out[0] == iw && out[1] == ih) continue;
                    byte[] src = syntheticImage(seed, seed % 2, iw, ih);
                    seed++;
                    byte[] expected = PlainResample.resize(src, iw, ih, out[0], out[1]);
                    byte[] actual = resizer.resize(new RgbImage(iw, ih, src), out[0], out[1]).data();
                    assertArrayEquals(expected, actual, iw + "x" + ih + " -> " + out[0] + "x" + out[1]);
                }
    }

    @Test
    void sameSizeIsAnExactCopy() {
        byte[] src = syntheticImage(7, 0, 448, 448);
        var out = new BicubicResizer().resize(new RgbImage(448, 448, src), 448, 448);
        assertNotSame(src, out.data());
        assertArrayEquals(src, out.data());
    }

    @ParameterizedTest(name = "vector={0}")
    @ValueSource(booleans = {true, false})
    void writesIntoALargerDestinationWithoutTouchingTheTail(boolean vector) {
        byte[] src = syntheticImage(9, 1, 90, 70);
        byte[] dst = new byte[40 * 30 * 3 + 5];
        Arrays.fill(dst, (byte) 0x5A);
        new BicubicResizer(vector).resize(src, 90, 70, dst, 40, 30);
        assertArrayEquals(PlainResample.resize(src, 90, 70, 40, 30), Arrays.copyOf(dst, 40 * 30 * 3));
        for (int i = 40 * 30 * 3; i < dst.length; i++) assertEquals((byte) 0x5A, dst[i]);
    }

    /**
     * A literal port of Pillow's Resample.c (spec §5): per-pixel loops, coefficients recomputed per call,
     * the vertical pass walking columns tap by tap as Pillow does.
     */
    static final class PlainResample {
        static byte[] resize(byte[] src, int iw, int ih, int ow, int oh) {
            byte[] cur = src;
            int w = iw;
            if (ow != iw) {
                cur = pass(cur, w, ih, ow, true);
                w = ow;
            }
            if (oh != ih) cur = pass(cur, w, ih, oh, false);
            return cur == src ? src.clone() : cur;
        }

        private static byte[] pass(byte[] src, int w, int h, int outSize, boolean horizontal) {
            int inSize = horizontal ? w : h;
            double scale = (double) inSize / outSize;
            double filterscale = scale < 1.0 ? 1.0 : scale;
            double support = 2.0 * filterscale;
            double ss = 1.0 / filterscale;
            int ow = horizontal ? outSize : w;
            int oh = horizontal ? h : outSize;
            byte[] out = new byte[ow * oh * 3];
            for (int o = 0; o < outSize; o++) {
                double center = (o + 0.5) * scale;
                int xmin = (int) (center - support + 0.5);
                if (xmin < 0) xmin = 0;
                int xmax = (int) (center + support + 0.5);
                if (xmax > inSize) xmax = inSize;
                xmax -= xmin;
                double[] ws = new double[xmax];
                double ww = 0;
                for (int x = 0; x < xmax; x++) {
                    ws[x] = cubic((x + xmin - center + 0.5) * ss);
                    ww += ws[x];
                }
                int[] k = new int[xmax];
                for (int x = 0; x < xmax; x++) {
                    double v = ww != 0.0 ? ws[x] / ww : ws[x];
                    k[x] = v < 0 ? (int) (-0.5 + v * (1 << 22)) : (int) (0.5 + v * (1 << 22));
                }
                int other = horizontal ? h : w;
                for (int j = 0; j < other; j++)
                    for (int c = 0; c < 3; c++) {
                        int acc = 1 << 21;
                        for (int x = 0; x < xmax; x++) {
                            int sx = horizontal ? xmin + x : j;
                            int sy = horizontal ? j : xmin + x;
                            acc += (src[(sy * w + sx) * 3 + c] & 0xFF) * k[x];
                        }
                        int v = acc >> 22;
                        v = v < 0 ? 0 : v > 255 ? 255 : v;
                        int dx = horizontal ? o : j;
                        int dy = horizontal ? j : o;
                        out[(dy * ow + dx) * 3 + c] = (byte) v;
                    }
            }
            return out;
        }

        private static double cubic(double x) {
            double a = -0.5;
            if (x < 0.0) x = -x;
            if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
            if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
            return 0.0;
        }
    }
}
