package dev.stoker.bench;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.qwenvl.BicubicResizer;
import dev.stoker.image.qwenvl.SmartResize;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.image.torch.TorchBicubicF32Resizer;
import dev.stoker.image.torch.TorchBicubicU8Resizer;
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
 * Single-thread time of one resize to the Qwen2.5-VL smart_resize target by each kernel: torchvision v2's uint8
 * kernel ({@link TorchBicubicU8Resizer}: HF video processors, the torchvision image backend), torchvision v1's float
 * kernel at AVX2 and DEFAULT ({@link TorchBicubicF32Resizer}: qwen-vl-utils' videos), with the Pillow-exact
 * {@link BicubicResizer} (the PIL image backend) as the baseline. Video frames are the 640x360 and 1920x1080
 * scenarios.
 *
 * <p>Run: {@code java -cp 'stoker-bench/target/stoker-bench.jar:stoker-bench/target/lib/*' org.openjdk.jmh.Main TorchResize}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class TorchResizeBenchmark {
    /** {@code <srcWidth>x<srcHeight>@<maxPixels>}. */
    @Param({"640x360@200704", "1920x1080@451584", "1920x1080@1003520"})
    public String scenario;

    @Param({"pillow", "torch-u8", "torch-f32-avx2", "torch-f32-default"})
    public String kernel;

    private final BicubicResizer pillow = new BicubicResizer();
    private final TorchBicubicU8Resizer u8 = new TorchBicubicU8Resizer();
    private TorchBicubicF32Resizer f32;
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
        f32 = new TorchBicubicF32Resizer(kernel.endsWith("default") ? CpuCapability.DEFAULT : CpuCapability.AVX2);
    }

    @Benchmark
    public byte[] resize() {
        switch (kernel) {
            case "pillow" -> pillow.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight);
            case "torch-u8" -> u8.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight);
            default -> f32.resize(src, srcWidth, srcHeight, dst, dstWidth, dstHeight);
        }
        return dst;
    }
}
