package dev.stoker.pipeline.feed;

import dev.stoker.encode.SampleEncoder;
import dev.stoker.text.ChatSample;
import dev.stoker.text.SampleParser;
import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import javax.imageio.ImageIO;

/**
 * Runs the CPU stage on a made-up sample before the feed opens, so that the JIT compiles the
 * decode/resize/normalize/patchify path while nobody waits for it.
 *
 * <p>Why: on the 2-core test VM the first batch of a cold service took 1–2.5 s longer than the
 * steady rate predicts; a perf profile of those seconds showed the C1/C2 compiler threads taking
 * 20–40% of the machine and the pool threads running interpreted or C1 code. The time moves to
 * start-up (reported as such), where no trainer waits on it.
 *
 * <p>The sample is a generated JPEG (smooth gradients plus a hash pattern, so that the entropy
 * decoder sees realistic work) in a LLaVA record; each pool thread encodes it through the path its
 * mode uses — {@code prepare} + {@code writePixels} into a scratch segment (ZERO_COPY) or
 * {@code encode} to the heap — until {@code budgetMillis} have passed or {@code maxRounds} are done.
 *
 * <p>The scratch segment is of the kind the store's are ({@link #mappedScratch}: a file mapped in a shared arena), not
 * a malloc'd one: C2 compiles the pixel writer for the segment class and memory session it saw, and a first write into
 * a segment of another kind is an uncommon trap that throws the compiled code away mid-image. Measured before this,
 * with {@code -XX:+PrintCompilation}: the warm restart's first batches deoptimized {@code PatchWriter::write} (and its
 * OSR compiles) three times and ran the rest of those images interpreted.
 */
final class CpuWarmUp {
    static final int WIDTH = 1280;
    static final int HEIGHT = 960;
    static final long BUDGET_MILLIS_DEFAULT = 1500;
    static final int MAX_ROUNDS_DEFAULT = 12;
    /** Rounds through a scratch cache: the first fills it, the rest are hits, each far cheaper than a decode and resize. */
    static final int MAX_ROUNDS_CACHED = 48;
    /**
     * A video job's rounds of its pixel writer over a made-up clip ({@code SampleEncoder#warmUpVideoPixels}: 32 rows),
     * after the image rounds, and the most time they may take.
     */
    static final int VIDEO_ROUNDS = 800;
    static final long VIDEO_MILLIS = 1_000;
    private static final String IMAGE = "stoker-warm-up.jpg";

    private final ChatSample sample;
    private final Map<String, byte[]> images;

    private CpuWarmUp(ChatSample sample, byte[] jpeg) {
        this.sample = sample;
        this.images = Map.of(IMAGE, jpeg);
    }

    /** The made-up sample: one generated JPEG and a short exchange. */
    static CpuWarmUp create() {
        String line = "{\"id\": \"stoker-warm-up\", \"image\": \"" + IMAGE + "\", \"conversations\": ["
                + "{\"from\": \"human\", \"value\": \"<image>\\nWhat does this picture show?\"}, "
                + "{\"from\": \"gpt\", \"value\": \"A test pattern made by the data loader while it starts.\"}]}";
        var sample = new SampleParser().parseLine(line.getBytes(StandardCharsets.UTF_8), "stoker-warm-up");
        return new CpuWarmUp(sample, jpeg());
    }

    private static volatile byte[] made;

    /** The made-up JPEG ({@link #WIDTH} × {@link #HEIGHT}), generated once per process (ImageIO takes ~0.1–0.2 s for it). */
    static byte[] jpeg() {
        byte[] j = made;
        if (j == null) made = j = jpeg(WIDTH, HEIGHT);
        return j;
    }

    static byte[] jpeg(int width, int height) {
        var img = new BufferedImage(width, height, BufferedImage.TYPE_3BYTE_BGR);
        for (int y = 0; y < height; y++)
            for (int x = 0; x < width; x++) {
                int h = (x * 73856093) ^ (y * 19349663);
                int r = (x * 255 / width + (h & 15)) & 255, g = (y * 255 / height + ((h >> 4) & 15)) & 255, b = ((x + y) & 255);
                img.setRGB(x, y, (r << 16) | (g << 8) | b);
            }
        var out = new ByteArrayOutputStream(width * height / 4);
        try {
            if (!ImageIO.write(img, "jpg", out)) throw new IllegalStateException("no JPEG writer in this JVM");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }

    /**
     * Encodes the sample with {@code encoder} until the budget or the round limit is reached;
     * returns the rounds done. {@code inPlace}: the ZERO_COPY path (prepare, then pixels into native memory).
     */
    int run(SampleEncoder encoder, boolean inPlace, long budgetMillis, int maxRounds) {
        if (encoder.audio()) return 0; // an audio family's encoder (issue 32) takes no made-up image sample: no warm-up
        long deadline = System.nanoTime() + budgetMillis * 1_000_000L;
        int rounds = 0;
        try (var arena = Arena.ofShared()) {
            MemorySegment scratch = null;
            while (rounds < maxRounds && System.nanoTime() < deadline) {
                if (inPlace) {
                    var p = encoder.prepare(sample, images);
                    if (scratch == null || scratch.byteSize() < p.pixelBytes()) scratch = mappedScratch(arena, p.pixelBytes());
                    encoder.writePixels(p, scratch, 0);
                } else {
                    encoder.encode(sample, images);
                }
                rounds++;
            }
            if (inPlace) runVideo(encoder, arena, VIDEO_ROUNDS, VIDEO_MILLIS);
        }
        encoder.resetTimes();
        return rounds;
    }

    /**
     * A video job's pixel writer over a made-up clip, {@code maxRounds} times or for {@code millis} at most: the rows its
     * cached clips go through (nothing else runs per pixel on a hit), from a mapped file's frames as a hit's and from the
     * heap's as a miss's, into a mapped segment as the store's; small clips, many calls (C2 compiles a method after some
     * hundreds of calls, for the kinds of segment it saw). Returns the rounds done: 0 for an encoder without video.
     */
    static int runVideo(SampleEncoder encoder, Arena arena, int maxRounds, long millis) {
        long[] video = encoder.videoWarmUpBytes();
        if (video[1] <= 0) return 0;
        MemorySegment mapped = mappedScratch(arena, video[0]), heap = MemorySegment.ofArray(new byte[Math.toIntExact(video[0])]);
        for (long i = 0; i < video[0]; i++) mapped.set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, (byte) (i * 7 + i / 3));
        heap.copyFrom(mapped);
        MemorySegment out = mappedScratch(arena, video[1]);
        long deadline = System.nanoTime() + millis * 1_000_000L;
        int rounds = 0;
        for (; rounds < maxRounds && System.nanoTime() < deadline; rounds++)
            encoder.warmUpVideoPixels(rounds % 4 == 3 ? heap : mapped, out, 0);
        return rounds;
    }

    /**
     * {@code bytes} of a file mapped read-write in {@code arena}, as the store maps its segments: in {@code /dev/shm}
     * where there is one, else the temporary folder; the file is unlinked at once (the mapping keeps its pages until the
     * arena closes). A file that cannot be made there leaves a malloc'd segment (the warm-up still runs; its compiled
     * writer may then be recompiled once in the epoch).
     */
    static MemorySegment mappedScratch(Arena arena, long bytes) {
        Path shm = Path.of("/dev/shm");
        return mappedScratch(arena, bytes, Files.isDirectory(shm) && Files.isWritable(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir")));
    }

    /** {@link #mappedScratch(Arena, long)} with its file made in {@code dir}. */
    static MemorySegment mappedScratch(Arena arena, long bytes, Path dir) {
        Path file = null;
        try {
            file = Files.createTempFile(dir, "stoker-warm-up-", ".pixels");
            try (var channel = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                return channel.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
            }
        } catch (IOException | RuntimeException e) {
            return arena.allocate(bytes, 64);
        } finally {
            if (file != null) try {
                Files.deleteIfExists(file);
            } catch (IOException e) {
                // a temporary file name of ours; nothing else to do
            }
        }
    }
}
