package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.BusyCommonPool;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pekko.Done;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.stream.KillSwitches;
import org.apache.pekko.stream.Materializer;
import org.apache.pekko.stream.javadsl.Keep;
import org.apache.pekko.stream.javadsl.Sink;
import org.apache.pekko.stream.javadsl.Source;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * A stream's end reaches the feed on the stream's own thread, whatever else holds the JVM's common pool
 * ({@link PekkoFutures}). Regression: on one actor system per process, a feed closed while the node moved the job
 * (ResumeTest's resume that waits for another rank's closing trainer) waited its whole
 * {@link Feeder#CLOSE_TIMEOUT_SECONDS} for its ranks' streams: they had ended at once, but the callback that said so was
 * queued on the common pool, whose one thread (two CPUs) held the resuming trainer, which waited for that close.
 *
 * <p>Each test holds every thread of that pool ({@link BusyCommonPool}) while the stream ends.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class PekkoFuturesTest {
    /** Well under {@link Feeder#CLOSE_TIMEOUT_SECONDS}, which a close waited out before. */
    static final long CLOSE_MILLIS_AT_MOST = TimeUnit.SECONDS.toMillis(Feeder.CLOSE_TIMEOUT_SECONDS) / 2;
    static ActorSystem system;
    @TempDir Path tmp;
    @TempDir Path shm;

    @BeforeAll
    static void startSystem() { system = FeedEngine.newSystem("stoker-test"); }

    @AfterAll
    static void stopSystem() {
        system.terminate();
        system.getWhenTerminated().toCompletableFuture().orTimeout(Feeder.CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS).join();
    }

    /**
     * The cause, on a bare stream: what Pekko's {@code Sink.ignore} materializes runs a {@code whenComplete} on the common
     * pool, so with that pool busy it has not run when the stream has long ended; through {@link PekkoFutures} it runs
     * as the stream ends.
     */
    @Test
    void aStreamsEndIsSeenOnItsOwnThreadWhileTheCommonPoolIsBusy() throws Exception {
        var materializer = Materializer.createMaterializer(system);
        try {
            var running = Source.<Integer>maybe().viaMat(KillSwitches.single(), Keep.right()).toMat(Sink.ignore(), Keep.both())
                    .run(materializer);
            var pekkoSaw = new CompletableFuture<Thread>();
            CompletableFuture<Done> ours;
            try (var busy = new BusyCommonPool()) {
                running.second().whenComplete((done, err) -> pekkoSaw.complete(Thread.currentThread()));
                ours = PekkoFutures.direct(running.second());
                running.first().shutdown();
                assertEquals(Done.done(), ours.get(CLOSE_MILLIS_AT_MOST, TimeUnit.MILLISECONDS), "the stream's end, through PekkoFutures");
                assertFalse(pekkoSaw.isDone(), "Pekko's own stage has not run its callback: it waits for the busy common pool");
            }
            var ran = pekkoSaw.get(10, TimeUnit.SECONDS);
            assertTrue(ran.getName().contains("ForkJoinPool.commonPool"), "once the pool is free, Pekko's stage ran the callback there: " + ran);
        } finally {
            materializer.shutdown();
        }
    }

    /** A PREFETCH feed on the process's system, closed while the common pool is busy: its ranks' streams have ended when close returns. */
    @Test
    void aFeedOnTheProcesssSystemClosesAtOnceWhileTheCommonPoolIsBusy() throws Exception {
        Path manifest = TestDatasets.write(tmp, 12, Set.of());
        var config = FeederTest.config(FeedMode.PREFETCH, 2, 2, 1);
        try (var source = new LocalFeedSource(manifest, 0)) {
            var feeder = Feeder.start(config, source, SharedTokenizer.get(), null, system);
            RankFeed<?>[] ranks = {feeder.rank(0), feeder.rank(1)};
            try {
                for (var r : ranks) r.next().get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                feeder.close();
                throw e;
            }
            long took;
            try (var busy = new BusyCommonPool()) {
                long t0 = System.nanoTime();
                feeder.close();
                took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                for (var r : ranks) assertTrue(r.terminated().isDone(), "rank " + r.rank() + "'s stream had ended when close returned");
            }
            assertTrue(took < CLOSE_MILLIS_AT_MOST, "close took " + took + " ms (it waits at most " + Feeder.CLOSE_TIMEOUT_SECONDS + " s)");
            assertFalse(system.whenTerminated().isCompleted(), "the process's system outlives the feed");
        }
    }

    /** A cluster node's task producer on the member's system, closed while the common pool is busy, returns at once too. */
    @Test
    void aTaskProducerOnTheProcesssSystemClosesAtOnceWhileTheCommonPoolIsBusy() throws Exception {
        Path manifest = TestDatasets.write(tmp, 12, Set.of());
        var config = FeederTest.config(FeedMode.ZERO_COPY, 2, 2, 1);
        try (var source = new LocalFeedSource(manifest, 0);
             var store = ShmObjectStore.open(new StoreConfig(shm, 64L << 20, "stoker_test"))) {
            var producer = TaskProducer.start(config, source, SharedTokenizer.get(), store, 1, system);
            try {
                producer.produce(0, new ScheduleCursor(0, 0), 0, 1).get(30, TimeUnit.SECONDS).release();
            } catch (Exception e) {
                producer.close();
                throw e;
            }
            long took;
            try (var busy = new BusyCommonPool()) {
                long t0 = System.nanoTime();
                producer.close();
                took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            }
            assertTrue(took < CLOSE_MILLIS_AT_MOST, "close took " + took + " ms (it waits at most " + Feeder.CLOSE_TIMEOUT_SECONDS + " s)");
        }
    }
}
