package dev.stoker.bench;

import dev.stoker.cache.CacheKey;
import dev.stoker.cache.SampleCache;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.image.qwenvl.QwenVlImageTransform;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
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
 * Single-thread cost of the cache of preprocessed samples for one image (docs/cache.md): the bundled photos
 * ({@code assets/photos}, or {@code -Dstoker.photos=DIR}) decoded and resized to their Qwen2.5-VL targets at max_pixels
 * 451,584 (the resized u8 pixels an entry holds), each stored as an entry; then per operation, cycling over them:
 * {@code hit} reads an entry back (open, read, CRC-32C, decompress for zstd), {@code write} stores one (compress,
 * temporary file, rename), {@code key} is the SHA-256 of the source JPEG (what every lookup computes first), and
 * {@code mappedCopy} copies the same stored bytes out of one file mapped once — what an embedded store such as LMDB
 * would read at best, for the files-or-LMDB choice.
 *
 * <p>Run: {@code ./stoker jmh CacheRead}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class CacheReadBenchmark {
    @Param({"zstd", "none"})
    public String codec;

    private final List<byte[]> jpegs = new ArrayList<>(), pixels = new ArrayList<>();
    private final List<CacheKey> keys = new ArrayList<>();
    private Path dir;
    private SampleCache cache;
    private Arena arena;
    private MemorySegment mapped, dst;
    private long[] offsets, lengths;
    private int next;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        Path photos = Path.of(System.getProperty("stoker.photos", "assets/photos"));
        var transform = new QwenVlImageTransform(ProcessorPreset.QWEN2_5_VL.vision(3136, 451_584));
        try (var files = Files.list(photos)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".jpg")).sorted().toList()) {
                byte[] jpeg = Files.readAllBytes(f);
                var rgb = ImageDecoders.forCurrentThread().decode(jpeg, f.toString());
                jpegs.add(jpeg);
                pixels.add(transform.resized(rgb, transform.plan(rgb.height(), rgb.width())).data());
                keys.add(CacheKey.of("bench", codec, CacheKey.sha256(jpeg)));
            }
        }
        if (jpegs.isEmpty()) throw new IllegalStateException("no .jpg under " + photos.toAbsolutePath() + " (-Dstoker.photos=DIR)");
        dir = Files.createTempDirectory("stoker-cache-bench");
        cache = SampleCache.open(dir, 1L << 40, SampleCache.LEVEL_DEFAULT, codec.equals("zstd"), System::currentTimeMillis);
        for (int i = 0; i < keys.size(); i++) cache.write(keys.get(i), pixels.get(i), 0, pixels.get(i).length);
        // every entry's file back to back in one file, mapped once
        arena = Arena.ofShared();
        Path all = dir.resolve("all.bin");
        offsets = new long[keys.size()];
        lengths = new long[keys.size()];
        try (var out = java.nio.channels.FileChannel.open(all, java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.WRITE)) {
            long at = 0;
            for (int i = 0; i < keys.size(); i++) {
                String hex = keys.get(i).hex();
                byte[] b = Files.readAllBytes(cache.root().resolve(hex.substring(0, 2)).resolve(hex + ".stc"));
                offsets[i] = at;
                lengths[i] = b.length;
                out.write(java.nio.ByteBuffer.wrap(b));
                at += b.length;
            }
        }
        try (var ch = java.nio.channels.FileChannel.open(all)) {
            mapped = ch.map(java.nio.channels.FileChannel.MapMode.READ_ONLY, 0, ch.size(), arena);
        }
        long max = 0;
        for (byte[] p : pixels) max = Math.max(max, p.length);
        for (long l : lengths) max = Math.max(max, l);
        dst = arena.allocate(max);
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        arena.close();
        try (var walk = Files.walk(dir)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) Files.delete(p);
        }
    }

    private int next() {
        int i = next;
        next = (next + 1) % keys.size();
        return i;
    }

    @Benchmark
    public boolean hit() {
        int i = next();
        return cache.read(keys.get(i), dst.asSlice(0, pixels.get(i).length));
    }

    @Benchmark
    public boolean write() {
        int i = next();
        return cache.write(keys.get(i), pixels.get(i), 0, pixels.get(i).length);
    }

    @Benchmark
    public byte[] key() {
        return CacheKey.sha256(jpegs.get(next()));
    }

    @Benchmark
    public MemorySegment mappedCopy() {
        int i = next();
        MemorySegment.copy(mapped, offsets[i], dst, 0, lengths[i]);
        return dst;
    }
}
