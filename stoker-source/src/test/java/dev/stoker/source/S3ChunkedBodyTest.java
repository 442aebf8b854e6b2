package dev.stoker.source;

import static dev.stoker.source.TestData.failure;
import static dev.stoker.source.TestData.get;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import dev.stoker.core.SampleException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Audit #26 against a real HTTP server on loopback that answers GETs as S3 does, but with chunked bodies (no
 * Content-Length): an object over maxObjectBytes fails its sample as soon as the limit is passed, naming the object and
 * the limit, and the rest of its body is not read (the server sees the connection go); chunked objects under the limit
 * and objects with a Content-Length are read whole, before and after it.
 */
@Timeout(60)
class S3ChunkedBodyTest {
    static final int LIMIT = 64 << 10;
    static final long ENDLESS = 256L << 20;
    static HttpServer server;
    static final byte[] SMALL = bytes(40_000, 1);
    static final byte[] EXACT = bytes(LIMIT, 2);
    static final AtomicLong endlessWritten = new AtomicLong();
    static volatile IOException endlessStopped;

    static byte[] bytes(int n, long seed) {
        var b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    @BeforeAll
    static void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.setExecutor(Executors.newCachedThreadPool(r -> Thread.ofPlatform().daemon().unstarted(r)));
        server.createContext("/chunked/ds/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            exchange.getResponseHeaders().set("Content-Type", "application/octet-stream");
            try (OutputStream out = exchange.getResponseBody()) {
                switch (path) {
                    case "/chunked/ds/small.jpg" -> {
                        exchange.sendResponseHeaders(200, 0); // 0: chunked transfer encoding, no Content-Length
                        for (int at = 0; at < SMALL.length; at += 4096) out.write(SMALL, at, Math.min(4096, SMALL.length - at));
                    }
                    case "/chunked/ds/exact.jpg" -> {
                        exchange.sendResponseHeaders(200, 0);
                        for (int at = 0; at < EXACT.length; at += 4096) out.write(EXACT, at, 4096);
                    }
                    case "/chunked/ds/sized.jpg" -> {
                        exchange.sendResponseHeaders(200, SMALL.length);
                        out.write(SMALL);
                    }
                    case "/chunked/ds/endless.jpg" -> {
                        // a body that would go on for 256 MiB: the old reader buffered all of it
                        exchange.sendResponseHeaders(200, 0);
                        byte[] chunk = new byte[16 << 10];
                        try {
                            while (endlessWritten.get() < ENDLESS) {
                                out.write(chunk);
                                out.flush();
                                endlessWritten.addAndGet(chunk.length);
                            }
                        } catch (IOException e) {
                            endlessStopped = e;
                            throw e;
                        }
                    }
                    default -> exchange.sendResponseHeaders(404, -1);
                }
            }
        });
        server.start();
    }

    @AfterAll
    static void stop() { server.stop(0); }

    @Test
    void aChunkedBodyOverTheLimitFailsItsSampleAndIsNotReadOn() throws Exception {
        var config = SourceConfig.builder().endpointOverride(URI.create("http://127.0.0.1:" + server.getAddress().getPort()))
                .pathStyle(true).credentials("test-key", "test-secret").maxObjectBytes(LIMIT).maxRetries(0).build();
        try (var source = ObjectSources.open("s3://chunked/ds/train.jsonl", config)) {
            assertArrayEquals(SMALL, get(source.fetch("s1", "small.jpg")), "chunked, under the limit");
            assertArrayEquals(EXACT, get(source.fetch("s2", "exact.jpg")), "chunked, exactly the limit");
            var e = failure(source.fetch("s3", "endless.jpg"));
            assertEquals("s3", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertEquals("s3://chunked/ds/endless.jpg has more than " + LIMIT + " bytes, over maxObjectBytes " + LIMIT
                    + " (no Content-Length: the body was read up to the limit and dropped)", e.getMessage());
            assertEquals(0, source.metrics().retries(), "a body over the limit is not retried");
            // the server's writes stop: the connection was closed, not drained
            while (endlessStopped == null) Thread.sleep(20);
            assertTrue(endlessWritten.get() < ENDLESS, "stopped after " + endlessWritten.get() + " bytes");
            assertArrayEquals(SMALL, get(source.fetch("s4", "sized.jpg")), "with a Content-Length, after the refusal");
            assertArrayEquals(SMALL, get(source.fetch("s5", "small.jpg")), "chunked, after the refusal");
            assertEquals(3L * SMALL.length + EXACT.length, source.metrics().bytesFetched(), "bytes of the good objects only");
        }
    }

    @Test
    void theLimitHoldsForAnObjectWhoseContentLengthIsOver() {
        var config = SourceConfig.builder().endpointOverride(URI.create("http://127.0.0.1:" + server.getAddress().getPort()))
                .pathStyle(true).credentials("test-key", "test-secret").maxObjectBytes(SMALL.length - 1).maxRetries(0).build();
        try (var source = ObjectSources.open("s3://chunked/ds/train.jsonl", config)) {
            var sized = failure(source.fetch("s6", "sized.jpg"));
            assertEquals("s3://chunked/ds/sized.jpg has " + SMALL.length + " bytes, over maxObjectBytes " + (SMALL.length - 1), sized.getMessage());
            var chunked = failure(source.fetch("s7", "small.jpg"));
            assertTrue(chunked.getMessage().startsWith("s3://chunked/ds/small.jpg has more than " + (SMALL.length - 1) + " bytes"), chunked.getMessage());
        }
    }
}
