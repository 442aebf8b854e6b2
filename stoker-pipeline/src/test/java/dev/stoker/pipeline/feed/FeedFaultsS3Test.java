package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.Batch;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.SourceMetrics;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.Vectors;
import dev.stoker.testkit.s3.FaultProxy;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * A feed over S3 (S3Mock) behind a {@link FaultProxy}: with 500s, 503 SlowDown, answers delayed past
 * the timeout, resets, bodies that trickle and bodies cut off on a seeded half of the requests,
 * every sample still arrives and the batches equal, bit for bit, those of the same data set read
 * from local disk; with objects that always fail, exactly the samples that name them are skipped at
 * FETCH with a cause naming the object and its last error, and every rank still gets every step.
 *
 * <p>The faulty feeds run in ZERO_COPY (batches written into the shared-memory store), against a
 * PREFETCH reference from local disk. Fetching, retrying and skipping are the same code in every mode
 * (the fetch stage and the S3 reader); that the modes give equal batches is {@link ZeroCopyFeederTest}'s
 * and {@code TensorOrderTest}'s.
 */
@ExtendWith({S3MockExtension.class, SharedTokenizer.class})
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class FeedFaultsS3Test {
    static final String BUCKET = "feed-faults";
    static final String MANIFEST = "s3://" + BUCKET + "/ds/train.jsonl";
    /** One epoch exactly: 24 samples = 4 steps of 2 ranks × 3. */
    static final int SAMPLES = 24, RANKS = 2, BATCH = 3, STEPS = 4;
    /**
     * Longer than any answer S3Mock gives here (first bytes took up to 2 s on the loaded 2-core test
     * machine; a healthy object that times out is only retried, but three times in a row would fail
     * it), shorter than the delays and trickles injected.
     */
    static final long TIMEOUT_MILLIS = 2500;
    static final List<FaultProxy.Fault> ALL_KINDS = List.of(FaultProxy.internalError(), FaultProxy.slowDown(),
            FaultProxy.delay(2 * TIMEOUT_MILLIS), FaultProxy.reset(), FaultProxy.slowBody(64, 200), FaultProxy.bodyReset(100));

    @TempDir static Path tmp;
    @TempDir Path shm;
    static Path dataset;
    static FaultProxy proxy;
    static List<Batch> reference;

    @BeforeAll
    static void setUp(S3MockServer s3) throws Exception {
        dataset = Files.createDirectories(tmp.resolve("ds"));
        TestDatasets.write(dataset, SAMPLES, Set.of());
        s3.createBucket(BUCKET);
        s3.putDirectory(BUCKET, "ds", dataset);
        proxy = FaultProxy.start(s3.endpoint());
        reference = runLocal(dataset);
    }

    @AfterAll
    static void tearDown() {
        if (proxy != null) proxy.close();
    }

    @BeforeEach
    void clearPlan() { proxy.clear(); }

    /** One buffered batch per rank: fetches still overlap the steps taken, with little work beyond them. */
    static FeedConfig config(FeedMode mode) { return FeederTest.config(mode, RANKS, BATCH, 2).withPrefetch(1, 1L << 30); }

    static SourceConfig.Builder s3Config() {
        return SourceConfig.builder().endpointOverride(proxy.endpoint()).pathStyle(true).credentials("test-key", "test-secret")
                .baseBackoffMillis(5).maxBackoffMillis(50).requestTimeoutMillis(TIMEOUT_MILLIS);
    }

    /** The fault-free reference: the data set in {@code dir} read from local disk, PREFETCH. */
    static List<Batch> runLocal(Path dir) throws Exception {
        try (var feeder = Feeder.open(DatasetLocation.parse(dir.resolve("train.jsonl").toString()), SourceConfig.defaults(),
                config(FeedMode.PREFETCH), SharedTokenizer.get())) {
            return take(feeder, FeedMode.PREFETCH);
        }
    }

    /** STEPS steps of every rank, in turn; stored batches read back to the heap and released. */
    static List<Batch> take(Feeder feeder, FeedMode mode) throws Exception {
        var out = new ArrayList<Batch>();
        for (int s = 0; s < STEPS; s++)
            for (int r = 0; r < RANKS; r++) {
                if (mode == FeedMode.ZERO_COPY) {
                    StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                    out.add(ZeroCopyFeederTest.toHeap(b));
                    b.release();
                } else {
                    out.add(feeder.rank(r).next().get(60, TimeUnit.SECONDS));
                }
            }
        return out;
    }

    /** What one faulty run yields: its batches, its errors, the source's counters once it went quiet. */
    record Run(List<Batch> batches, FeedErrors errors, SourceMetrics source) {}

    /**
     * STEPS steps of {@code mode} over S3 through the proxy; when {@code settle}, then waits until the
     * streams, which run ahead until their buffers are full, have no fetch in flight (retrying or
     * backing off), so that the source's counters are final.
     */
    Run runS3(FeedMode mode, SourceConfig source, boolean settle) throws Exception {
        ShmObjectStore store = mode == FeedMode.ZERO_COPY ? ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test")) : null;
        try (var feeder = Feeder.open(DatasetLocation.parse(MANIFEST), source, config(mode), SharedTokenizer.get(), store)) {
            var batches = take(feeder, mode);
            var m = feeder.sourceMetrics().orElseThrow();
            if (settle) {
                awaitQuiet(() -> m.requests() * 1_000_000 + m.retries() * 1000 + m.inFlight(), 3 * TIMEOUT_MILLIS);
                assertEquals(0, m.inFlight(), m.toString());
            }
            return new Run(batches, feeder.errors(), m);
        } finally {
            if (store != null) {
                store.close();
            }
        }
    }

    @Test
    void faultsOnHalfTheRequestsAreRetriedAndTheBatchesEqualALocalRun() throws Exception {
        var mode = FeedMode.ZERO_COPY;
        // at most 3 faults in a row per object, 8 retries: every fetch gets through
        proxy.addRule(FaultProxy.sometimes(0.5, 42, 3, ALL_KINDS));
        var run = runS3(mode, s3Config().maxRetries(8).build(), true);
        // the errors first: when a sample went missing, its cause is what tells why
        assertEquals(0, run.errors().total(), run.errors().records() + " " + run.source());
        FeederTest.assertSameBatches(reference, run.batches(), mode + " over S3 with faults vs local disk");
        var m = run.source();
        assertEquals(0, m.failures(), m.toString());
        for (var kind : ALL_KINDS)
            assertTrue(proxy.injected(kind.getClass()) > 0, kind.getClass().getSimpleName() + " never injected");
        // every fault on an image cost one retry (a healthy answer that timed out on a loaded machine adds one more); on the
        // manifest some need none: a slow body is only slow for the HEAD and the index's stream, which have no attempt timeout
        int onImages = proxy.injected() - proxy.injected("train.jsonl");
        assertTrue(m.retries() >= onImages, "retries " + m.retries() + " < faults injected on images " + onImages + ": " + m);
    }

    @Test
    void objectsThatAlwaysFailSkipTheirSamples() throws Exception {
        var mode = FeedMode.ZERO_COPY;
        // object → its fault and the last error its skipped samples must name
        Map<String, FaultProxy.Fault> faults = Map.of(
                image(1), FaultProxy.slowDown(),
                image(2), FaultProxy.slowBody(64, 200),
                image(4), FaultProxy.bodyReset(100));
        // Its own fault, or a broken connection: a reset mid-body reaches the SDK as "Connection reset" or, depending on
        // when Netty notices, "connection was closed"; and the proxy closes a connection after a reset or a slow body, so the
        // last attempt of any object may land on a pooled connection the proxy has just closed.
        var broken = List.of("SdkClientException: Unable to execute HTTP request: Connection reset",
                "SdkClientException: Unable to execute HTTP request: The connection was closed during the request");
        Map<String, List<String>> lastErrors = Map.of(
                image(1), java.util.stream.Stream.concat(java.util.stream.Stream.of("HTTP 503 SlowDown"), broken.stream()).toList(),
                image(2), java.util.stream.Stream.concat(java.util.stream.Stream.of("ApiCallAttemptTimeoutException"), broken.stream()).toList(),
                image(4), broken);
        faults.forEach((name, fault) -> proxy.addRule(FaultProxy.always("/ds/images/" + name, fault)));
        int retries = 2;
        var run = runS3(mode, s3Config().maxRetries(retries).build(), false);

        // the same batches as a local run in which those objects are missing: the same samples skipped, at the same stage
        Path missing = copyWithout(faults.keySet());
        FeederTest.assertSameBatches(runLocal(missing), run.batches(), mode + " with failing objects vs local disk without them");

        long skipped = 0;
        for (int r = 0; r < RANKS; r++) {
            int rank = r;
            var mine = run.batches().stream().filter(b -> b.rank() == rank).toList();
            assertEquals(STEPS, mine.size());
            int delivered = mine.stream().mapToInt(Batch::samples).sum(), dropped = mine.stream().mapToInt(Batch::skipped).sum();
            assertEquals(STEPS * BATCH, delivered + dropped, "rank " + r + ": delivered + skipped = scheduled");
            skipped += dropped;
        }
        long expected = Files.readAllLines(dataset.resolve("train.jsonl")).stream()
                .filter(line -> faults.keySet().stream().anyMatch(line::contains)).count();
        assertEquals(expected, skipped, "exactly the samples that name a failing object are skipped");
        for (var b : run.batches())
            for (var s : b.skippedSamples()) {
                assertEquals(SampleException.Stage.FETCH, s.stage(), s.toString());
                String object = faults.keySet().stream().filter(s.cause()::contains).findFirst()
                        .orElseThrow(() -> new AssertionError("cause names no failing object: " + s.cause()));
                String prefix = "cannot fetch s3://" + BUCKET + "/ds/images/" + object + " after " + retries + " retries: ";
                assertTrue(s.cause().contains(prefix), s.cause());
                assertTrue(lastErrors.get(object).stream().anyMatch(e -> s.cause().contains(prefix + e)), "last error of " + object + ": " + s.cause());
            }
        // the feed's error records hold the same (the run ahead may have skipped more beyond the steps taken)
        assertTrue(run.errors().total() >= skipped, run.errors().records().toString());
        assertEquals(Map.of(SampleException.Stage.FETCH, run.errors().total()), run.errors().byStage());
        for (String object : faults.keySet())
            assertTrue(proxy.injected("/ds/images/" + object) >= retries + 1, object + ": every attempt failed");
    }

    /** Waits until {@code value} has not changed for {@code quietMillis}; fails after 120 s (the test machine may be loaded). */
    static void awaitQuiet(java.util.function.LongSupplier value, long quietMillis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        long last = value.getAsLong(), since = System.nanoTime();
        while (System.nanoTime() - since < TimeUnit.MILLISECONDS.toNanos(quietMillis)) {
            if (System.nanoTime() > deadline) throw new AssertionError("the feed's fetches did not settle within 120 s");
            Thread.sleep(50);
            long now = value.getAsLong();
            if (now != last) {
                last = now;
                since = System.nanoTime();
            }
        }
    }

    /** The file name of TestDatasets' image {@code i}. */
    static String image(int i) { return Vectors.get().inputImage(TestDatasets.IMAGES[i]).getFileName().toString(); }

    /** A copy of the data set without the images {@code names}. */
    static Path copyWithout(Set<String> names) throws Exception {
        Path copy = Files.createTempDirectory(tmp, "missing-");
        Files.createDirectories(copy.resolve("images"));
        Files.copy(dataset.resolve("train.jsonl"), copy.resolve("train.jsonl"));
        try (Stream<Path> images = Files.list(dataset.resolve("images"))) {
            for (Path p : images.toList())
                if (!names.contains(p.getFileName().toString())) Files.copy(p, copy.resolve("images").resolve(p.getFileName()));
        }
        return copy;
    }
}
