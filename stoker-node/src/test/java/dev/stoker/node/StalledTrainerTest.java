package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.QwenTokenizer;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A trainer that stops reading (issue 6, part 4): two ranks served zero-copy from a store with a
 * small budget; rank 0 takes one batch and then neither asks for more nor releases it, while rank 1
 * reads on. The store never exceeds its budget, rank 0's buffer never exceeds its prefetch limit,
 * and rank 1 gets every step it asks for.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class StalledTrainerTest {
    static final int RANKS = 2, BATCH = 2, PREFETCH = 2, STEPS = 24;
    static final long MAX_PIXELS = 50176;
    static final long STEP_MILLIS = 20;

    @TempDir Path tmp;

    /**
     * {@code n} samples with one 448×448 photo each: every batch is the same size, B images at the
     * pixel cap, so the budget can be counted in batches.
     */
    Path dataset(int n) throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < n; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"b.png\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i));
        return Files.writeString(ds.resolve("train.jsonl"), lines);
    }

    /** The store's segment for one batch: B images at the pixel cap, rounded up to whole MiB. */
    static long batchSegmentBytes(EncodeOptions options) {
        long pixels = BATCH * MAX_PIXELS * 3L * options.vision().temporalPatchSize() * Float.BYTES;
        return Math.ceilDiv(pixels + (1 << 16), 1L << 20) << 20;
    }

    /**
     * A budget that holds what both ranks' pipelines can hold at once (each rank: the batch its
     * trainer holds, its buffer, a parked batch, two batches being filled, one being allocated, plus
     * headroom): rank 1 reads every step at its own pace while rank 0 stalls.
     */
    @Test
    void aStalledRankDoesNotHoldUpTheOtherWhenTheBudgetCoversBothPipelines() throws Exception {
        stallRankZero(2 * (PREFETCH + 6));
    }

    /**
     * The same with a budget of a few batches, less than both pipelines together. Before the store
     * had shares, this starved rank 1: allocations were admitted first come, first served, so every
     * batch rank 1's trainer released went to the stalled rank 0's waiting allocation until rank 0
     * held the whole budget (measured: rank 1 got 6 batches, then none in 90 s). Now each rank's
     * pipeline allocates against its share ({@code ShmObjectStore.shareAmong(ranks)}): rank 0 pins at
     * most half the budget and rank 1 reads on.
     */
    @Test
    void aStalledRankDoesNotHoldUpTheOtherWithABudgetOfAFewBatches() throws Exception {
        stallRankZero(6);
    }

    /**
     * Rank 0 takes one batch and stops (holds it, sends nothing more); once the feed settles, rank 1
     * reads STEPS steps. Samples the store and rank 0's buffer every 5 ms throughout.
     */
    void stallRankZero(int budgetBatches) throws Exception {
        Path manifest = dataset(64);
        var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, MAX_PIXELS);
        long batchBytes = batchSegmentBytes(options);
        long budget = budgetBatches * batchBytes;
        Path shm = Files.createDirectories(tmp.resolve("shm"));
        var config = FeedConfig.of(FeedMode.ZERO_COPY, options, RANKS, BATCH).withCpuThreads(2).withFetchConcurrency(4)
                .withPrefetch(PREFETCH, 1L << 30).withWarmUp(0);
        var peakMapped = new AtomicLong();
        var peakInUse = new AtomicLong();
        var peakRank0Buffer = new AtomicLong();
        try (var tokenizer = QwenTokenizer.bundled();
             var store = ShmObjectStore.open(new StoreConfig(shm, budget, "stoker_test"))) {
            var feeder = Feeder.open(DatasetLocation.parse(manifest.toString()), SourceConfig.defaults(), config, tokenizer, store);
            try (var service = new RankLedger(feeder, null, batchBytes, 0);
                 var server = new FeedServer(tmp.resolve("feed.sock"), service, false)) {
                var sampling = new java.util.concurrent.atomic.AtomicBoolean(true);
                Thread sampler = Thread.ofPlatform().daemon().name("store-sampler").start(() -> {
                    while (sampling.get()) {
                        var m = store.metrics();
                        peakMapped.accumulateAndGet(m.mappedBytes(), Math::max);
                        peakInUse.accumulateAndGet(m.inUseBytes(), Math::max);
                        peakRank0Buffer.accumulateAndGet(feeder.metrics().ranks().getFirst().bufferedBatches(), Math::max);
                        try {
                            Thread.sleep(5);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                });
                try (var stalled = TrainerClient.connect(server.socketPath(), 0, RANKS, "test", TrainerClient.Options.SHARED_MEMORY)) {
                    var held = stalled.next(); // one batch, kept and never released; no further NEXT
                    assertNotNull(held);
                    assertTrue(held.byReference());
                    // rank 0's pipeline runs ahead into its buffer and stops there; then rank 1 starts reading
                    awaitQuiet(() -> store.metrics().allocations(), 1000);
                    long rank0Holds = store.metrics().inUseBytes();
                    var reader = CompletableFuture.supplyAsync(() -> readSteps(server.socketPath(), STEPS));
                    long t0 = System.nanoTime();
                    int received;
                    try {
                        received = reader.get(90, TimeUnit.SECONDS);
                    } catch (java.util.concurrent.TimeoutException e) {
                        throw new AssertionError("rank 1 starved behind the stalled rank 0: store " + store.metrics()
                                + ", rank 0 held " + rank0Holds + " bytes in use before rank 1 started (budget " + budget + ", one batch "
                                + batchBytes + "), feed " + feeder.metrics().ranks());
                    }
                    long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    assertEquals(STEPS, received);
                    assertTrue(held.batch().meta().batchSize() == BATCH, "the held batch stays readable");
                    held.close();
                    System.out.printf("rank 1: %d steps in %d ms while rank 0 stalled (rank 0 held %d of %d bytes)%n",
                            STEPS, millis, rank0Holds, budget);
                } finally {
                    sampling.set(false);
                    sampler.join();
                }
                assertTrue(peakMapped.get() <= budget, "mapped " + peakMapped + " > budget " + budget);
                assertTrue(peakInUse.get() <= budget, "in use " + peakInUse + " > budget " + budget);
                assertTrue(peakRank0Buffer.get() <= PREFETCH, "rank 0 buffered " + peakRank0Buffer + " > " + PREFETCH);
            }
        }
    }

    /** Rank 1's trainer: {@code steps} steps of NEXT, a short "GPU step", RELEASE; returns how many it got. */
    static int readSteps(Path socket, int steps) {
        try (var client = TrainerClient.connect(socket, 1, RANKS, "test", TrainerClient.Options.SHARED_MEMORY)) {
            int n = 0;
            for (int s = 0; s < steps; s++) {
                var r = client.next();
                if (r == null) break;
                Thread.sleep(STEP_MILLIS);
                r.close();
                n++;
            }
            return n;
        } catch (Exception e) {
            throw new java.util.concurrent.CompletionException(e);
        }
    }

    /** Waits until {@code value} has not changed for {@code quietMillis}; fails after 60 s. */
    static void awaitQuiet(java.util.function.LongSupplier value, long quietMillis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        long last = value.getAsLong(), since = System.nanoTime();
        while (System.nanoTime() - since < TimeUnit.MILLISECONDS.toNanos(quietMillis)) {
            if (System.nanoTime() > deadline) throw new AssertionError("still changing after 60 s");
            Thread.sleep(20);
            long now = value.getAsLong();
            if (now != last) {
                last = now;
                since = System.nanoTime();
            }
        }
    }
}
