package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.testkit.FakeTicker;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Closing the CPU pool waits for a thread that is still encoding, however long it takes (audit
 * #29): before, it gave up after 10 s, and the store then recycled the segment the thread was
 * still writing pixels into. The pool's clock is moved by hand: twenty seconds pass in no time.
 */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class CpuPoolCloseTest {
    @Test
    void closeReturnsOnlyOnceEveryThreadHasFinishedItsSample() throws Exception {
        var ticker = new FakeTicker();
        var finished = new AtomicBoolean();
        var started = new CountDownLatch(1);
        var release = new CountDownLatch(1);
        var pool = new CpuPool(1, 4, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), SharedTokenizer.get(), ticker);
        pool.supply(() -> {
            started.countDown();
            while (release.getCount() > 0) {
                try {
                    release.await();
                } catch (InterruptedException e) {
                    // a native decode: interrupts do not stop it
                }
            }
            finished.set(true);
            return null;
        });
        started.await();
        var closer = Thread.ofPlatform().start(pool::close);
        try {
            awaitWarnings(pool, ticker, 2); // past the 10 s the pool used to give up after, twice
            assertTrue(closer.isAlive(), "close returned while a thread was still encoding");
            assertFalse(finished.get());
        } finally {
            release.countDown();
        }
        closer.join(TimeUnit.SECONDS.toMillis(30));
        assertFalse(closer.isAlive(), "close did not return once the thread finished");
        assertTrue(finished.get());
    }

    /**
     * Moves the clock on by the warning interval until close has said {@code n} times that it is still waiting: the closer
     * thread may start its wait (and read the clock) after the first move.
     */
    private static void awaitWarnings(CpuPool pool, FakeTicker ticker, int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (pool.closeWarnings() < n) {
            assertTrue(System.nanoTime() < deadline, "close said " + pool.closeWarnings() + " times that it waits, not " + n);
            ticker.advance(Duration.ofNanos(CpuPool.CLOSE_WARN_NANOS));
            Thread.sleep(5);
        }
    }
}
