package dev.stoker.bench;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.qwenvl.VideoPatchWriter;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
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
 * Single-thread time to turn one cached clip's resized u8 frames into {@code pixel_values_videos}: the cache restart's
 * clips (docs/benchmarks.md: 640x360 at fps 2 for 10 s, 20 frames resized to 644x364, Qwen2.5-VL), 56.3 MB of float32 —
 * what a warm video sample costs beyond reading its entry. Into a heap {@code float[]}, into anonymous memory
 * ({@link Arena#allocate}) and into a mapped {@code /dev/shm} file (as the zero-copy store's segments are), each
 * prefaulted; {@code copy} is the bare memory floor: the same bytes copied from a prepared array.
 *
 * <p>Run: {@code ./stoker jmh VideoPatchify}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector"})
public class VideoPatchifyBenchmark {
    static final int FRAMES = 20, WIDTH = 644, HEIGHT = 364;

    @Param({"heap", "anon", "shm"})
    public String target;

    @Param({"writer", "copy"})
    public String impl;

    private VideoPatchWriter writer;
    private byte[] frames;
    private float[] heap;
    private byte[] prepared;
    private Arena arena;
    private MemorySegment segment;
    private Path file;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        VisionConfig cfg = ProcessorPreset.fromName("qwen2.5-vl").vision(ProcessorPreset.CONSTRUCTOR_MIN_PIXELS, ProcessorPreset.CONSTRUCTOR_MAX_PIXELS);
        writer = new VideoPatchWriter(cfg);
        frames = new byte[FRAMES * WIDTH * HEIGHT * 3];
        byte[] one = SyntheticImages.photoLike(WIDTH, HEIGHT, 7);
        for (int f = 0; f < FRAMES; f++) System.arraycopy(one, 0, frames, f * one.length, one.length);
        int floats = writer.rows(FRAMES, WIDTH, HEIGHT) * writer.rowLength();
        long bytes = floats * 4L;
        prepared = new byte[(int) bytes];
        arena = Arena.ofShared();
        switch (target) {
            case "heap" -> heap = new float[floats];
            case "anon" -> segment = arena.allocate(bytes, 64);
            case "shm" -> {
                file = Files.createTempFile(Path.of("/dev/shm"), "stoker-bench-", ".seg");
                try (var ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                    segment = ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
                }
            }
            default -> throw new IllegalArgumentException(target);
        }
        if (segment != null) for (long at = 0; at < bytes; at += 4096) segment.set(ValueLayout.JAVA_BYTE, at, (byte) 1); // prefault
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        arena.close();
        if (file != null) Files.deleteIfExists(file);
    }

    @Benchmark
    public Object patchify() {
        if (impl.equals("copy")) {
            if (heap != null) MemorySegment.copy(MemorySegment.ofArray(prepared), 0, MemorySegment.ofArray(heap), 0, prepared.length);
            else MemorySegment.copy(MemorySegment.ofArray(prepared), 0, segment, 0, prepared.length);
        } else if (heap != null) {
            writer.write(frames, FRAMES, WIDTH, HEIGHT, heap, 0);
        } else {
            writer.write(frames, FRAMES, WIDTH, HEIGHT, segment, 0);
        }
        return heap != null ? heap : segment;
    }
}
