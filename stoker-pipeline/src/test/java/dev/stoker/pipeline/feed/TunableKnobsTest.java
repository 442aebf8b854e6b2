package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.batch.FeedBatch;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.core.ProcessorPreset;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** The three knobs the autotuner moves, each moved under load: the fetch gate, a prefetch buffer's depth, the CPU pool's size. */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class TunableKnobsTest {
    @Test
    void theFetchGateLetsInAsManyAsItsLimitWhereverItMoves() {
        var gate = new FetchGate(2);
        var permits = new ArrayList<CompletableFuture<Void>>();
        for (int i = 0; i < 5; i++) permits.add(gate.acquire());
        assertEquals(2, permits.stream().filter(CompletableFuture::isDone).count());
        gate.limit(4); // raised: two waiting starts go at once
        assertEquals(4, permits.stream().filter(CompletableFuture::isDone).count());
        assertEquals(4, gate.inFlight());
        gate.limit(1); // lowered: nothing is taken back, releases only shrink it until it is under the limit
        gate.release();
        gate.release();
        gate.release();
        assertEquals(1, gate.inFlight());
        assertFalse(permits.get(4).isDone());
        gate.release(); // 0 in flight < 1: the waiting start goes
        assertTrue(permits.get(4).isDone());
        assertEquals(1, gate.inFlight());
        assertThrows(IllegalArgumentException.class, () -> gate.limit(0));
    }

    record FakeBatch(int index, long sizeBytes) implements FeedBatch {
        @Override public long epoch() { return 0; }
        @Override public long step() { return index; }
        @Override public long globalStep() { return index; }
        @Override public int rank() { return 0; }
        @Override public int scheduled() { return 1; }
        @Override public List<String> sampleIds() { return List.of("s" + index); }
        @Override public int[] datasetIndices() { return new int[] {index}; }
        @Override public List<SkippedSample> skippedSamples() { return List.of(); }
        @Override public int samples() { return 1; }
    }

    @Test
    void aPrefetchBufferRaisedLetsItsParkedProducerInAndLoweredHoldsItBack() throws Exception {
        var buffer = new PrefetchBuffer<FakeBatch>(1, 1 << 20, 4);
        assertTrue(buffer.admit(new FakeBatch(0, 10)).isDone());
        var parked = buffer.admit(new FakeBatch(1, 10));
        assertFalse(parked.isDone(), "full at one batch");
        buffer.maxBatches(2);
        assertTrue(parked.isDone(), "raised: the parked batch is let in");
        assertEquals(2, buffer.batches());
        buffer.maxBatches(1);
        var next = buffer.admit(new FakeBatch(2, 10));
        assertFalse(next.isDone(), "lowered: the producer waits");
        assertEquals(0, buffer.take().get(1, TimeUnit.SECONDS).index());
        assertFalse(next.isDone(), "one batch still buffered, the limit is one");
        assertEquals(1, buffer.take().get(1, TimeUnit.SECONDS).index());
        assertTrue(next.isDone());
        assertEquals(2, buffer.take().get(1, TimeUnit.SECONDS).index());
    }

    @Test
    void theCpuPoolGrowsAndShrinksWithinItsCeilingWithoutCuttingATaskShort() throws Exception {
        try (var pool = new CpuPool(1, 3, 16, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), SharedTokenizer.get())) {
            var release = new CountDownLatch(1);
            var running = new CountDownLatch(3);
            var tasks = new ArrayList<CompletableFuture<String>>();
            for (int i = 0; i < 3; i++)
                tasks.add(pool.supply(() -> {
                    running.countDown();
                    try {
                        release.await(30, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    return Thread.currentThread().getName();
                }));
            assertEquals(2, pool.queued(), "one thread: two tasks wait");
            pool.resize(3);
            assertTrue(running.await(30, TimeUnit.SECONDS), "grown: the queued tasks start on the new threads");
            assertEquals(3, pool.threads());
            pool.resize(1);
            release.countDown();
            assertEquals(3, tasks.stream().map(CompletableFuture::join).distinct().count(), "shrunk: all three finished their tasks");
            assertEquals("ok", pool.supply(() -> "ok").get(30, TimeUnit.SECONDS));
            assertThrows(IllegalArgumentException.class, () -> pool.resize(4));
            assertThrows(IllegalArgumentException.class, () -> pool.resize(0));
        }
    }
}
