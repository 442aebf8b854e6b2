package dev.stoker.bench;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.qwenvl.PatchWriter;
import dev.stoker.image.qwenvl.SmartResize;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Single-thread time to turn one resized u8 image (the smart_resize target of 1920×1080 under max_pixels
 * 1003520) into pixel_values: the fused table-driven {@link PatchWriter} into a {@code float[]} or into an
 * off-heap {@link MemorySegment} at an unaligned offset, against the naive two-pass rival (normalize
 * into a CHW float array with float arithmetic, then patchify by index math), all into preallocated buffers.
 *
 * <p>Run: {@code java -cp 'stoker-bench/target/stoker-bench.jar:stoker-bench/target/lib/*' org.openjdk.jmh.Main Patchify}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class PatchifyBenchmark {
    @Param({"qwen2.5-vl", "qwen3-vl"})
    public String preset;

    @Param({"fusedArray", "fusedSegment", "twoPass"})
    public String impl;

    private static final long SEGMENT_OFFSET_BYTES = 6;

    private VisionConfig cfg;
    private PatchWriter writer;
    private byte[] rgb;
    private int width;
    private int height;
    private float[] out;
    private float[] chw;
    private Arena arena;
    private MemorySegment segment;

    @Setup(Level.Trial)
    public void setUp() {
        // pinned to the bounds the recorded numbers were measured at (the constructor defaults), not the published ones
        cfg = ProcessorPreset.fromName(preset).vision(ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, ProcessorPreset.CONSTRUCTOR_MAX_PIXELS);
        int[] hw = SmartResize.compute(1080, 1920, cfg);
        height = hw[0];
        width = hw[1];
        rgb = SyntheticImages.photoLike(width, height, 2);
        writer = new PatchWriter(cfg);
        int floats = writer.rows(width, height) * cfg.rowLength();
        out = new float[floats];
        chw = new float[3 * width * height];
        arena = Arena.ofShared();
        segment = arena.allocate(SEGMENT_OFFSET_BYTES + floats * 4L, 64);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }

    @Benchmark
    public Object patchify() {
        switch (impl) {
            case "fusedArray" -> {
                writer.write(rgb, width, height, out, 0);
                return out;
            }
            case "fusedSegment" -> {
                writer.write(rgb, width, height, segment, SEGMENT_OFFSET_BYTES);
                return segment;
            }
            case "twoPass" -> {
                twoPass();
                return out;
            }
            default -> throw new IllegalArgumentException(impl);
        }
    }

    private void twoPass() {
        double[] mean = cfg.mean();
        double[] std = cfg.std();
        int plane = width * height;
        for (int c = 0; c < 3; c++) {
            float meanF = (float) mean[c];
            float stdF = (float) std[c];
            for (int i = 0; i < plane; i++) {
                float r = (float) ((rgb[i * 3 + c] & 0xFF) * (1.0 / 255.0));
                chw[c * plane + i] = (r - meanF) / stdF;
            }
        }
        int p = cfg.patchSize(), m = cfg.mergeSize(), tps = cfg.temporalPatchSize();
        int gh = height / p, gw = width / p, len = cfg.rowLength();
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
                                        out[row * len + ((c * tps + tt) * p + y) * p + x] = chw[(c * height + ph * p + y) * width + pw * p + x];
                    }
    }
}
