package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/** The images of testdata/qwen-vl/images and a JSONL manifest that references them as {@code images/<name>}. */
final class TestData {
    static final Path IMAGES = Vectors.projectDir().resolve("testdata/qwen-vl/images");
    private static final Pattern IMAGE_FIELD = Pattern.compile("\"image\"\\s*:\\s*\"([^\"]+)\"");

    private TestData() { }

    static List<String> imageNames() {
        try (Stream<Path> s = Files.list(IMAGES)) {
            List<String> names = s.filter(Files::isRegularFile).map(p -> p.getFileName().toString()).sorted().toList();
            if (names.size() < 3) throw new IllegalStateException("expected the Qwen-VL test images in " + IMAGES);
            return names;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static byte[] manifest() {
        var sb = new StringBuilder();
        int i = 0;
        for (String name : imageNames())
            sb.append("{\"id\": \"s").append(i++).append("\", \"image\": \"images/").append(name).append("\", \"text\": \"describe\"}\n");
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** The image references of a manifest, in order. */
    static List<String> references(byte[] manifest) {
        List<String> refs = new ArrayList<>();
        for (String line : new String(manifest, StandardCharsets.UTF_8).split("\n")) {
            var m = IMAGE_FIELD.matcher(line);
            if (m.find()) refs.add(m.group(1));
        }
        return refs;
    }

    static byte[] image(String name) {
        try {
            return Files.readAllBytes(IMAGES.resolve(name));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static <T> T get(CompletableFuture<T> f) {
        try {
            return f.get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError("fetch failed", e);
        }
    }

    /** The SampleException that {@code f} fails with. */
    static SampleException failure(CompletableFuture<?> f) {
        var e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
        return assertInstanceOf(SampleException.class, e.getCause());
    }

    static void assertFetchRefused(ObjectSource source, String reference, String messagePart) {
        var e = failure(source.fetch("sample-9", reference));
        assertEquals("sample-9", e.sampleId());
        assertEquals(SampleException.Stage.FETCH, e.stage());
        if (!e.getMessage().contains(messagePart))
            throw new AssertionError("message of '" + reference + "' lacks '" + messagePart + "': " + e.getMessage());
    }

    /** 200 fetches at once with maxInFlight 4: every one completes with the right bytes and at most 4 are ever in flight. */
    static void assertBoundedInFlight(ObjectSource source, List<String> names) {
        List<CompletableFuture<byte[]>> futures = new ArrayList<>();
        for (int i = 0; i < 200; i++) futures.add(source.fetch("s" + i, "images/" + names.get(i % names.size())));
        for (int i = 0; i < 200; i++)
            org.junit.jupiter.api.Assertions.assertArrayEquals(image(names.get(i % names.size())), get(futures.get(i)), "fetch " + i);
        var m = source.metrics();
        assertEquals(4, m.inFlightPeak(), m.toString());
        assertEquals(0, m.inFlight());
        assertEquals(200, m.completed());
        org.junit.jupiter.api.Assertions.assertTrue(m.permitWaits() > 0, m.toString());
    }

    /**
     * 64 concurrent fetches with a 200 ms modelled latency: each takes >= 200 ms, all together well
     * under 64 x 200 ms, with few threads. A first round warms up connections and the server.
     */
    static void assertLatencyWithoutThreads(ObjectSource source, String reference, byte[] expected) {
        latencyRound(source, reference, expected);
        var threads = ManagementFactory.getThreadMXBean();
        threads.resetPeakThreadCount();
        int baseline = threads.getThreadCount();
        long t0 = System.nanoTime();
        List<Long> elapsed = latencyRound(source, reference, expected);
        long totalMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        for (long e : elapsed) org.junit.jupiter.api.Assertions.assertTrue(e >= 200_000_000L, "a fetch took under 200 ms: " + e + " ns");
        org.junit.jupiter.api.Assertions.assertTrue(totalMillis < 2000, "64 fetches with 200 ms latency took " + totalMillis + " ms");
        org.junit.jupiter.api.Assertions.assertTrue(source.metrics().firstByteLatency().minNanos() >= 200_000_000L, source.metrics().toString());
        int grown = threads.getPeakThreadCount() - baseline;
        org.junit.jupiter.api.Assertions.assertTrue(grown < 16, "thread count grew by " + grown + " during 64 delayed fetches");
    }

    private static List<Long> latencyRound(ObjectSource source, String reference, byte[] expected) {
        List<CompletableFuture<Long>> futures = new ArrayList<>();
        for (int i = 0; i < 64; i++) {
            long start = System.nanoTime();
            futures.add(source.fetch("s" + i, reference).thenApply(bytes -> {
                if (!java.util.Arrays.equals(bytes, expected)) throw new AssertionError("wrong bytes");
                return System.nanoTime() - start;
            }));
        }
        return futures.stream().map(TestData::get).toList();
    }
}
