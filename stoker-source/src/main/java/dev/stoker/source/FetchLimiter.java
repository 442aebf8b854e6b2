package dev.stoker.source;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;

/**
 * An asynchronous semaphore: a start that finds every permit taken is parked in FIFO order and run
 * by whichever thread releases the next permit, so no thread ever blocks waiting for a slot.
 *
 * <p>The parked queue holds at most as many starts as callers have outstanding fetches; the
 * pipeline bounds those (its fetch stage's parallelism), this class bounds what is on the wire.
 *
 * <p>Threading: thread-safe. Starts run on the submitting or the releasing thread and must only
 * kick off asynchronous work. A release made while this thread is already draining only returns
 * the permit (the outer loop picks up the next start), so completions that happen inline cannot
 * recurse without bound.
 */
final class FetchLimiter {
    private static final ThreadLocal<Boolean> DRAINING = ThreadLocal.withInitial(() -> Boolean.FALSE);

    private final Semaphore permits;
    private final ConcurrentLinkedQueue<Runnable> parked = new ConcurrentLinkedQueue<>();
    private final SourceMetrics metrics;

    FetchLimiter(int maxInFlight, SourceMetrics metrics) {
        this.permits = new Semaphore(maxInFlight);
        this.metrics = metrics;
    }

    /** Runs {@code start} now if a permit is free, else once one is; {@code start} must lead to exactly one {@link #release()}. */
    void submit(Runnable start) {
        if (parked.isEmpty() && permits.tryAcquire()) {
            start.run();
            return;
        }
        metrics.onPermitWait();
        parked.add(start);
        drain();
    }

    void release() {
        permits.release();
        if (!DRAINING.get()) drain();
    }

    private void drain() {
        DRAINING.set(Boolean.TRUE);
        try {
            while (!parked.isEmpty() && permits.tryAcquire()) {
                Runnable next = parked.poll();
                if (next == null) {
                    permits.release();
                    continue;
                }
                next.run();
            }
        } finally {
            DRAINING.set(Boolean.FALSE);
        }
    }
}
