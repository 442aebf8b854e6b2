package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.cache.SampleCache;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.cache.PreprocessedCache;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pekko.actor.ActorSystem;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The warm-up's rehearsal of the stream: made-up samples go through the job's own stream (the store's objects, or heap
 * batches) and the job is left as it was — no object in use, no entry or count in its cache, no folder left, the same
 * batches after it as without it.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class FeedRehearsalTest {
    @TempDir Path tmp;
    @TempDir Path shm;
    private ActorSystem system;

    @BeforeEach
    void start() { system = FeedEngine.newSystem("rehearsal-test"); }

    @AfterEach
    void stop() throws Exception {
        system.terminate();
        system.getWhenTerminated().toCompletableFuture().get(30, TimeUnit.SECONDS);
    }

    private static long in(long seconds) { return System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds); }

    @Test
    void zeroCopyGoesThroughTheStoreAndLeavesTheJobsCacheAndStoreAsTheyWere() throws Exception {
        var config = FeederTest.config(FeedMode.ZERO_COPY, 1, 4, 2);
        Path parent = Files.createDirectory(tmp.resolve("parent"));
        try (var cacheStore = SampleCache.open(tmp.resolve("cache"), 256L << 20);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            try (var pool = new CpuPool(2, 2, 64, FeederTest.OPTIONS, SharedTokenizer.get(), new PreprocessedCache(cacheStore))) {
                var r = FeedRehearsal.run(config, pool, store, CompletableFuture.completedFuture(system), in(60), 24, parent);
                assertNull(r.failure(), "it ran: " + r);
                assertEquals(24, r.samples(), "every made-up sample went through: " + r);
                assertTrue(store.metrics().segmentsCreated() >= 1, "its batches were written into the store's segments");
                assertEquals(0, store.metrics().inUseBytes(), "and released");
                assertTrue(pool.cacheOrNull() != null);
            }
            var mine = cacheStore.stats();
            assertEquals(0, mine.hits() + mine.misses() + mine.written(), "the job's cache is not used: " + mine);
            try (var left = Files.walk(tmp.resolve("cache"))) {
                assertEquals(0, left.filter(Files::isRegularFile).count(), "no entry in the job's cache");
            }
            try (var left = Files.list(parent)) {
                assertEquals(0, left.count(), "its made-up data set is deleted");
            }
        }
    }

    @Test
    void withoutAStoreItAssemblesHeapBatches() throws Exception {
        var config = FeederTest.config(FeedMode.PREFETCH, 1, 3, 1);
        try (var pool = new CpuPool(1, 1, 64, FeederTest.OPTIONS, SharedTokenizer.get(), null)) {
            var r = FeedRehearsal.run(config, pool, null, CompletableFuture.completedFuture(system), in(60), 9, tmp);
            assertNull(r.failure(), "it ran: " + r);
            assertEquals(9, r.samples());
        }
    }

    @Test
    void itStopsAtItsDeadlineAndRunsForNoPackedJob() throws Exception {
        try (var pool = new CpuPool(1, 1, 64, FeederTest.OPTIONS, SharedTokenizer.get(), null)) {
            var past = FeedRehearsal.run(FeederTest.config(FeedMode.PREFETCH, 1, 2, 1), pool, null,
                    CompletableFuture.completedFuture(system), System.nanoTime() - 1, 64, tmp);
            assertEquals(0, past.samples());
            assertNotNull(past.failure(), "no time left: " + past);
            var packed = FeederTest.config(FeedMode.PREFETCH, 1, 2, 1).withPacking(dev.stoker.plan.pack.Packing.of(512, dev.stoker.plan.pack.PackCost.QWEN2_5_VL_3B));
            var none = FeedRehearsal.run(packed, pool, null, CompletableFuture.completedFuture(system), in(60), 64, tmp);
            assertEquals(0, none.samples());
            assertNotNull(none.failure(), "not for a packed job: " + none);
        }
    }

    /** A feed whose warm-up rehearses its stream yields the batches it yields without one, and delivers its own samples only. */
    @Test
    void aRehearsedFeedYieldsTheSameBatchesAndDeliversOnlyItsOwnSamples() throws Exception {
        Path manifest = TestDatasets.write(tmp, 16, Set.of());
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 256L << 20, "stoker_test"))) {
            var cfg = FeederTest.config(FeedMode.ZERO_COPY, 2, 2, 2);
            var plain = ZeroCopyFeederTest.runZeroCopy(cfg, source, store, 3);
            try (var feeder = Feeder.start(cfg.withWarmUp(20_000), source, SharedTokenizer.get(), store)) {
                var summary = feeder.rehearsalSummary();
                assertNotNull(summary);
                assertTrue(summary.startsWith("warm-up: rehearsed the stream on ") && !summary.contains(" on 0 "), summary);
                var rehearsed = new java.util.ArrayList<dev.stoker.encode.batch.Batch>();
                for (int s = 0; s < 3; s++)
                    for (int r = 0; r < 2; r++) {
                        StoredBatch b = feeder.storedRank(r).next().get(60, TimeUnit.SECONDS);
                        rehearsed.add(ZeroCopyFeederTest.toHeap(b));
                        b.release();
                    }
                FeederTest.assertSameBatches(plain, rehearsed, "zero-copy after a rehearsal vs without one");
                var m = feeder.metrics();
                assertEquals(12, m.deliveredSamples());
                for (var b : rehearsed)
                    for (var id : b.sampleIds()) assertTrue(!id.startsWith("stoker-rehearsal-"), "a made-up sample delivered: " + id);
            }
        }
    }
}
