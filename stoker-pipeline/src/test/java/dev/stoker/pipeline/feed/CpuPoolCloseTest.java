package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.text.QwenTokenizer;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Closing the CPU pool waits for a thread that is still encoding, however long it takes (audit
 * #29): before, it gave up after 10 s, and the store then recycled the segment the thread was
 * still writing pixels into.
 */
@Timeout(60)
@org.junit.jupiter.api.Tag("slow")
class CpuPoolCloseTest {
    @Test
    void closeReturnsOnlyOnceEveryThreadHasFinishedItsSample() throws Exception {
        var finished = new AtomicBoolean();
        var started = new java.util.concurrent.CountDownLatch(1);
        try {
            var pool = new CpuPool(1, 4, EncodeOptions.defaults(ProcessorPreset.QWEN2_VL), QwenTokenizer.bundled());
            pool.supply(() -> {
                started.countDown();
                long end = System.nanoTime() + 10_500_000_000L; // longer than the 10 s the pool used to give up after
                while (System.nanoTime() < end) Thread.onSpinWait(); // a native decode: interrupts do not stop it
                finished.set(true);
                return null;
            });
            started.await();
            pool.close();
            assertTrue(finished.get(), "close returned while a thread was still encoding");
        } finally {
            started.countDown();
        }
    }
}
