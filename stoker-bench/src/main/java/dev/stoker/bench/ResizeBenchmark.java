package dev.stoker.bench;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.qwenvl.BicubicResizer;
import dev.stoker.image.qwenvl.SmartResize;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Single-thread time of one Pillow-exact bicubic resize ({@link BicubicResizer}) from a source size to its
 * Qwen2.5-VL smart_resize target under a max_pixels budget; the rival is Pillow itself
 * ({@code Image.resize(BICUBIC)}, timed by {@code bench/pillow_resize_timeit.py}).
 *
 * <p>Run: {@code java -cp 'stoker-bench/target/stoker-bench.jar:stoker-bench/target/lib/*' org.openjdk.jmh.Main Resize}.
 * Input megapixels per second = (srcW·srcH / 1e6) / (ms/op / 1e3).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class ResizeBenchmark {
    /** {@code <srcWidth>x<srcHeight>@<maxPixels>}. */
    @Param({"1920x1080@451584", "1920x1080@1003520", "640x480@1003520", "4000x3000@1003520"})
    public String scenario;

    private final BicubicResizer resizer = new BicubicResizer();
    private byte[] src;
    private byte[] dst;
    private int srcWidth;
    private int srcHeight;
    private int dstWidth;
    private int dstHeight;

    @Setup
    public void setUp() {
        String[] sizeAndMax = scenario.split("@");
        String[] wh = sizeAndMax[0].split("x");
        srcWidth = Integer.parseInt(wh[0]);
        srcHeight = Integer.parseInt(wh[1]);
        var cfg = ProcessorPreset.QWEN2_5_VL.vision(ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, Long.parseLong(sizeAndMax[1]));
        int[] hw = SmartResize.compute(srcHeight, srcWidth, cfg);
        dstHeight = hw[0];
        dstWidth = hw[1];
        src = SyntheticImages.photoLike(srcWidth, srcHeight, 1);
        dst = new byte[dstWidth * dstHeight * 3];
    }

    @Benchmark
    public byte[] resize() {
        resizer.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight);
        return dst;
    }
}
