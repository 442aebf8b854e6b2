package dev.stoker.image.torch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.Vectors;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The torch resize kernels against fixtures of the numpy reference (ref_qwenvl_video.py {@code resize_u8_torch},
 * {@code resize_tv1_u8}, {@code resize_f32_torch} at cpu default/avx2/avx512), written by
 * tools/torch-resize-fixtures/make_fixtures.py; the reference equals torch 2.13.0+cpu / torchvision 0.28.0 (see that
 * tool's README). Needs nothing outside the module.
 */
@Timeout(60)
class TorchResizeTest {

    record Case(long seed, int pattern, int inWidth, int inHeight, int outWidth, int outHeight, String[] sha) {
        @Override public String toString() {
            return "seed " + seed + " pattern " + pattern + " " + inWidth + "x" + inHeight + " -> " + outWidth + "x" + outHeight;
        }
    }

    /** The LCG image of testdata/resize/make_resize_cases.py {@code synthetic_image} (HWC). */
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

    static List<Case> cases() throws IOException {
        var in = Objects.requireNonNull(TorchResizeTest.class.getResourceAsStream("torch_resize_cases.csv"), "torch_resize_cases.csv");
        List<Case> out = new ArrayList<>();
        try (var r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.isBlank() || line.startsWith("#")) continue;
                String[] f = line.split(",");
                out.add(new Case(Long.parseLong(f[0]), Integer.parseInt(f[1]), Integer.parseInt(f[2]), Integer.parseInt(f[3]),
                        Integer.parseInt(f[4]), Integer.parseInt(f[5]), Arrays.copyOfRange(f, 6, 13)));
            }
        }
        assertTrue(out.size() >= 40, "only " + out.size() + " cases");
        return out;
    }

    /** sha256 of float32 LE with −0.0 written as +0.0, as make_fixtures.py's {@code sha_f32}. */
    static String sha256Canonical(float[] values, int n) {
        float[] v = Arrays.copyOf(values, n);
        for (int i = 0; i < n; i++) if (v[i] == 0.0f) v[i] = 0.0f;
        return Vectors.sha256(v);
    }

    /** Both tap paths: the Vector API's (every run of the project's JVM flags) and the scalar one (a JVM without it). */
    @ParameterizedTest(name = "vector={0}")
    @ValueSource(booleans = {true, false})
    void uint8KernelEqualsReference(boolean vector) throws IOException {
        var resizer = new TorchBicubicU8Resizer(vector);
        for (Case c : cases()) {
            byte[] src = syntheticImage(c.seed, c.pattern, c.inWidth, c.inHeight);
            byte[] dst = new byte[c.outWidth * c.outHeight * 3];
            resizer.resize(src, c.inWidth, c.inHeight, dst, c.outWidth, c.outHeight);
            assertEquals(c.sha[0], Vectors.sha256(dst), () -> "resize_u8_torch (vector " + vector + ") differs: " + c);
        }
    }

    /** Sizes the fixtures do not hold (strip boundaries, 1-pixel sides, widths that are no whole vector): both paths agree. */
    @Test
    void vectorAndScalarPathsAgree() {
        var vector = new TorchBicubicU8Resizer(true);
        var scalar = new TorchBicubicU8Resizer(false);
        var rnd = new java.util.SplittableRandom(7);
        int s = TorchBicubicU8Resizer.STRIP_ROWS;
        int[] heights = {1, 2, s - 1, s, s + 1, 2 * s + 3, 200};
        for (int n = 0; n < 120; n++) {
            int iw = n < 20 ? 1 + n % 3 : 1 + rnd.nextInt(300);
            int ih = heights[n % heights.length];
            int ow = n % 5 == 0 ? iw : 1 + rnd.nextInt(300);
            int oh = n % 5 == 1 ? ih : 1 + rnd.nextInt(250);
            if (ow == 1 && oh != ih) ow = 2; // torch's own kernel fails at a 1-px output width with a height change (class doc)
            byte[] src = syntheticImage(n, n % 2, iw, ih);
            byte[] a = new byte[ow * oh * 3];
            byte[] b = new byte[ow * oh * 3];
            vector.resize(src, iw, ih, a, ow, oh);
            scalar.resize(src, iw, ih, b, ow, oh);
            assertArrayEquals(b, a, iw + "x" + ih + " -> " + ow + "x" + oh);
        }
    }

    @Test
    void floatKernelEqualsReferenceAtEveryCapability() throws IOException {
        CpuCapability[] caps = CpuCapability.values();
        int capabilityMatters = 0;
        for (int k = 0; k < caps.length; k++) {
            var resizer = new TorchBicubicF32Resizer(caps[k]);
            for (Case c : cases()) {
                byte[] src = syntheticImage(c.seed, c.pattern, c.inWidth, c.inHeight);
                int n = c.outWidth * c.outHeight * 3;
                byte[] dst = new byte[n];
                float[] f = new float[n];
                resizer.resize(src, c.inWidth, c.inHeight, dst, c.outWidth, c.outHeight);
                resizer.resizeToFloat(src, c.inWidth, c.inHeight, f, c.outWidth, c.outHeight);
                final int kk = k;
                assertEquals(c.sha[1 + k], Vectors.sha256(dst), () -> "resize_tv1_u8 cpu=" + caps[kk] + " differs: " + c);
                assertEquals(c.sha[4 + k], sha256Canonical(f, n), () -> "resize_f32_torch cpu=" + caps[kk] + " differs: " + c);
                if (k == 0 && !c.sha[1].equals(c.sha[2])) capabilityMatters++;
            }
        }
        assertTrue(capabilityMatters > 0, "no case tells the DEFAULT build from AVX2: the fixtures do not pin the FMA recipe");
    }

    @Test
    void kernelsDifferFromEachOther() throws IOException {
        int differ = 0;
        for (Case c : cases()) if (!c.sha[0].equals(c.sha[2])) differ++;
        assertTrue(differ > 10, "uint8 and float kernels agree on all but " + differ + " cases: the fixtures cannot tell them apart");
    }

    @Test
    void resizingToTheSameSizeCopies() {
        byte[] src = syntheticImage(5, 0, 13, 7);
        byte[] a = new byte[src.length];
        byte[] b = new byte[src.length];
        new TorchBicubicU8Resizer().resize(src, 13, 7, a, 13, 7);
        new TorchBicubicF32Resizer().resize(src, 13, 7, b, 13, 7);
        assertArrayEquals(src, a);
        assertArrayEquals(src, b);
    }

    /**
     * The scalar path: the Vector API's values are objects until C2 compiles the loop that makes them, so that path
     * allocates while it is interpreted, and when C2 compiles it is not this test's to wait for.
     */
    @Test
    void warmResizeAllocatesNothing() {
        var bean = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        var u8 = new TorchBicubicU8Resizer(false);
        var f32 = new TorchBicubicF32Resizer();
        byte[] src = syntheticImage(9, 1, 97, 61);
        byte[] dst = new byte[300 * 200 * 3];
        for (int i = 0; i < 3; i++) {
            u8.resize(src, 97, 61, dst, 56, 28);
            u8.resize(src, 97, 61, dst, 300, 200);
            f32.resize(src, 97, 61, dst, 56, 28);
            f32.resize(src, 97, 61, dst, 300, 200);
        }
        long tid = Thread.currentThread().threadId();
        long before = bean.getThreadAllocatedBytes(tid);
        for (int i = 0; i < 20; i++) {
            u8.resize(src, 97, 61, dst, 56, 28);
            u8.resize(src, 97, 61, dst, 300, 200);
            f32.resize(src, 97, 61, dst, 56, 28);
            f32.resize(src, 97, 61, dst, 300, 200);
        }
        long allocated = bean.getThreadAllocatedBytes(tid) - before;
        // 80 resizes; an intermediate or weight table per call would be tens of KB each
        assertTrue(allocated < 16 * 1024, "warm resizes allocated " + allocated + " bytes");
    }

    @Test
    void badArgumentsAreRefusedWithTheCause() {
        var u8 = new TorchBicubicU8Resizer();
        var f32 = new TorchBicubicF32Resizer(CpuCapability.DEFAULT);
        var e = assertThrows(IllegalArgumentException.class, () -> u8.resize(new byte[12], 2, 2, new byte[12], 0, 2));
        assertTrue(e.getMessage().contains("positive"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> u8.resize(new byte[11], 2, 2, new byte[12], 2, 2));
        assertTrue(e.getMessage().contains("source buffer"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> f32.resize(new byte[12], 2, 2, new byte[26], 3, 3));
        assertTrue(e.getMessage().contains("destination buffer"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> CpuCapability.parse("sse4"));
        assertTrue(e.getMessage().contains("sse4"), e.getMessage());
        assertEquals(CpuCapability.AVX512, CpuCapability.parse("AVX512"));
        assertEquals(CpuCapability.AVX2, new TorchBicubicF32Resizer().capability());
    }
}
