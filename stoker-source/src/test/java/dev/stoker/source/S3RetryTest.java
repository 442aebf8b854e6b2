package dev.stoker.source;

import static dev.stoker.source.TestData.get;
import static dev.stoker.source.TestData.image;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.testkit.s3.FaultProxy;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.io.IOException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Retries against S3Mock behind a {@link FaultProxy} that injects throttling, errors, resets, stalls,
 * bodies that trickle and connections lost in the middle of a body.
 */
@ExtendWith(S3MockExtension.class)
@Timeout(120)
@Tag("slow")
class S3RetryTest {
    static final String BUCKET = "retry-test";
    static final String MANIFEST = "s3://" + BUCKET + "/ds/train.jsonl";
    static FaultProxy proxy;
    static byte[] expected;
    /** A photo of 61 kB: big enough to be cut or trickled. */
    static byte[] big;

    @BeforeAll
    static void setUp(S3MockServer s3) throws IOException {
        expected = image(TestData.imageNames().get(1));
        s3.createBucket(BUCKET);
        s3.putObject(BUCKET, "ds/train.jsonl", TestData.manifest());
        s3.putObject(BUCKET, "ds/a.png", expected);
        big = image(TestData.imageNames().getFirst());
        s3.putObject(BUCKET, "ds/big.jpg", big);
        proxy = FaultProxy.start(s3.endpoint());
    }

    @AfterAll
    static void tearDown() {
        if (proxy != null) proxy.close();
    }

    @BeforeEach
    void clearPlan() { proxy.clear(); }

    /**
     * A generous request timeout: the tests whose subject is not a timeout count requests and retries exactly, and a
     * loaded machine must not add a timed-out attempt to them (CI saw 2 requests for one 404 under load at 2 s). The
     * timeout tests set short ones and count what the proxy injected, not the attempts a slow machine may add.
     */
    static SourceConfig.Builder config() {
        return SourceConfig.builder().endpointOverride(proxy.endpoint()).pathStyle(true).credentials("test-key", "test-secret")
                .maxRetries(3).baseBackoffMillis(5).maxBackoffMillis(40).requestTimeoutMillis(30_000);
    }

    /**
     * After a fetch that passed once {@code stalls} injected stalls timed out: each stall cost a retry, and every
     * attempt past the first was a retry. A loaded machine may time out the good attempt too (its short timeout covers
     * it as well), which adds a retry the proxy did not cause: so at least {@code stalls}, not exactly.
     */
    static void assertStallsRetried(ObjectSource source, int stalls) {
        assertEquals(stalls, proxy.injected(), "each stall was met");
        assertTrue(source.metrics().retries() >= stalls, "retries " + source.metrics().retries());
        assertEquals(proxy.requests() - 1, source.metrics().retries(), "every attempt after the first is a retry");
        assertEquals(0, source.metrics().failures());
    }

    @Test
    void slowDownIsRetriedUntilItPasses() {
        proxy.enqueue(FaultProxy.slowDown(), 2);
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertArrayEquals(expected, get(source.fetch("s1", "a.png")));
            assertEquals(2, source.metrics().retries());
            assertEquals(3, proxy.requests());
            assertEquals(2, proxy.injected());
            assertEquals(0, source.metrics().failures());
        }
    }

    @Test
    void serverErrorsAndResetsAreRetried() {
        proxy.enqueue(FaultProxy.internalError(), 1).enqueue(FaultProxy.reset(), 1).enqueue(FaultProxy.slowDown(), 1);
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertArrayEquals(expected, get(source.fetch("s1", "a.png")));
            assertEquals(3, source.metrics().retries());
            assertEquals(4, proxy.requests());
        }
    }

    @Test
    void persistentSlowDownFailsAfterMaxRetries() {
        proxy.setDefault(FaultProxy.slowDown());
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            var e = TestData.failure(source.fetch("s1", "a.png"));
            assertEquals("s1", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertTrue(e.getMessage().contains("s3://" + BUCKET + "/ds/a.png"), e.getMessage());
            assertTrue(e.getMessage().contains("after 3 retries"), e.getMessage());
            assertTrue(e.getMessage().contains("HTTP 503 SlowDown"), e.getMessage());
            assertEquals(3, source.metrics().retries());
            assertEquals(1, source.metrics().failures());
            assertEquals(4, proxy.requests());
        }
    }

    @Test
    void stalledResponsesTimeOutAndAreRetried() {
        proxy.enqueue(FaultProxy.delay(3000), 2);
        try (var source = ObjectSources.open(MANIFEST, config().requestTimeoutMillis(300).build())) {
            long t0 = System.nanoTime();
            assertArrayEquals(expected, get(source.fetch("s1", "a.png")));
            long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            // a stall waited out would have passed (3 s, then the body): both met and retried means both timed out
            assertStallsRetried(source, 2);
            assertTrue(millis >= 600, "two 300 ms timeouts then success took " + millis + " ms");
        }
    }

    @Test
    void persistentStallEndsInATimeoutError() {
        proxy.setDefault(FaultProxy.delay(3000));
        try (var source = ObjectSources.open(MANIFEST, config().requestTimeoutMillis(200).maxRetries(2).build())) {
            var e = TestData.failure(source.fetch("s1", "a.png"));
            assertTrue(e.getMessage().contains("after 2 retries") && e.getMessage().contains("Timeout"), e.getMessage());
            assertEquals(2, source.metrics().retries());
        }
    }

    @Test
    void clientErrorsAreNotRetried() {
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            var notFound = TestData.failure(source.fetch("s1", "missing.png"));
            assertTrue(notFound.getMessage().startsWith("object not found: s3://" + BUCKET + "/ds/missing.png"), notFound.getMessage());
            assertEquals(1, proxy.requests());
            proxy.enqueue(new FaultProxy.Status(403, "AccessDenied"), 1);
            var denied = TestData.failure(source.fetch("s2", "a.png"));
            assertTrue(denied.getMessage().startsWith("access denied: s3://" + BUCKET + "/ds/a.png"), denied.getMessage());
            assertEquals(2, proxy.requests());
            assertEquals(0, source.metrics().retries());
        }
    }

    @Test
    void aBodyThatTricklesTimesOutAndIsRetried() {
        // 1 kB every 100 ms: the 61 kB photo would take 6 s; each attempt has 400 ms from request to last byte
        proxy.enqueue(FaultProxy.slowBody(1024, 100), 2);
        try (var source = ObjectSources.open(MANIFEST, config().requestTimeoutMillis(400).build())) {
            long t0 = System.nanoTime();
            assertArrayEquals(big, get(source.fetch("s1", "big.jpg")));
            long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertStallsRetried(source, 2);
            assertTrue(millis >= 800, "two 400 ms timeouts then success took " + millis + " ms");
        }
    }

    @Test
    void aBodyThatAlwaysTricklesEndsInATimeoutErrorNamingTheObject() {
        proxy.setDefault(FaultProxy.slowBody(1024, 100));
        try (var source = ObjectSources.open(MANIFEST, config().requestTimeoutMillis(300).maxRetries(2).build())) {
            long t0 = System.nanoTime();
            var e = TestData.failure(source.fetch("s7", "big.jpg"));
            long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertEquals("s7", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertTrue(e.getMessage().startsWith("cannot fetch s3://" + BUCKET + "/ds/big.jpg after 2 retries: "), e.getMessage());
            assertTrue(e.getMessage().contains("Timeout"), e.getMessage());
            assertEquals(2, source.metrics().retries());
            assertEquals(3, proxy.requests());
            assertTrue(millis < 6000, "three 300 ms attempts took " + millis + " ms, not the 6 s one trickled body lasts");
        }
    }

    @Test
    void aConnectionLostInTheMiddleOfTheBodyIsRetried() {
        proxy.enqueue(FaultProxy.bodyReset(big.length / 2), 1).enqueue(FaultProxy.bodyReset(1), 1);
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            assertArrayEquals(big, get(source.fetch("s1", "big.jpg")));
            assertEquals(2, source.metrics().retries());
            assertEquals(3, proxy.requests());
            assertEquals(2, proxy.injected("/ds/big.jpg"));
        }
    }

    @Test
    void aConnectionAlwaysLostInTheMiddleOfTheBodyFailsNamingTheObject() {
        proxy.addRule(FaultProxy.always("/ds/big.jpg", FaultProxy.bodyReset(big.length / 2)));
        try (var source = ObjectSources.open(MANIFEST, config().build())) {
            var e = TestData.failure(source.fetch("s3", "big.jpg"));
            assertEquals("s3", e.sampleId());
            assertEquals(SampleException.Stage.FETCH, e.stage());
            assertTrue(e.getMessage().startsWith("cannot fetch s3://" + BUCKET + "/ds/big.jpg after 3 retries: "), e.getMessage());
            assertEquals(3, source.metrics().retries());
            assertEquals(1, source.metrics().failures());
            assertEquals(4, proxy.injected("/ds/big.jpg"));
            // the rule faults that object only
            assertArrayEquals(expected, get(source.fetch("s4", "a.png")));
            assertEquals(4, proxy.injected());
        }
    }
}
