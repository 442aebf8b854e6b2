package dev.stoker.pipeline.feed;

import dev.stoker.encode.batch.FeedBatch;
import java.util.ArrayDeque;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;

/**
 * One rank's ready batches, bounded in batches and in bytes; the point where back-pressure starts.
 *
 * <p>The producer (the rank's stream, through a mapAsync(1)) offers one batch at a time with
 * {@link #admit}: it is taken at once when a consumer is already waiting, or when it fits under
 * both limits, or when the buffer is empty (so a batch larger than the byte limit still flows,
 * alone); otherwise its future stays open and the stream stops pulling until {@link #take} makes
 * room. Consumers waiting in {@link #take} are served in order, at most {@code maxWaiters} of them.
 *
 * <p>Threading: all state under one lock; futures are completed after releasing it, on the thread
 * that made the transition (a stream thread or the consumer's).
 */
final class PrefetchBuffer<B extends FeedBatch> {
    private int maxBatches; // guarded by this: the autotuner moves it ({@link #maxBatches(int)})
    private final long maxBytes;
    private final int maxWaiters;
    private final ArrayDeque<B> ready = new ArrayDeque<>();
    private final ArrayDeque<CompletableFuture<B>> waiters = new ArrayDeque<>();
    private long readyBytes;
    private long peakBytes;
    private long producerWaits;
    private long consumerWaits;
    private B parked;
    private CompletableFuture<Void> parkedAdmit;
    private Throwable failure;

    PrefetchBuffer(int maxBatches, long maxBytes, int maxWaiters) {
        this.maxBatches = maxBatches;
        this.maxBytes = maxBytes;
        this.maxWaiters = maxWaiters;
    }

    /** Completes when {@code b} has been buffered or handed to a waiting consumer. */
    CompletableFuture<Void> admit(B b) {
        CompletableFuture<B> waiter;
        synchronized (this) {
            if (failure != null) {
                b.discard();
                return CompletableFuture.failedFuture(failure);
            }
            if (parked != null) throw new IllegalStateException("admit: a batch is already waiting for space");
            waiter = waiters.poll();
            if (waiter == null) {
                if (!fits(b)) {
                    producerWaits++;
                    parked = b;
                    parkedAdmit = new CompletableFuture<>();
                    return parkedAdmit;
                }
                add(b);
            }
        }
        if (waiter != null) waiter.complete(b);
        return CompletableFuture.completedFuture(null);
    }

    /** The next batch: at once when one is ready, else when the producer delivers one. */
    CompletableFuture<B> take() {
        B b;
        CompletableFuture<Void> admitted = null;
        synchronized (this) {
            b = ready.poll();
            if (b == null) {
                if (failure != null) return CompletableFuture.failedFuture(failure);
                if (waiters.size() >= maxWaiters)
                    return CompletableFuture.failedFuture(new IllegalStateException(
                            "more than " + maxWaiters + " next() calls outstanding on one rank"));
                consumerWaits++;
                var w = new CompletableFuture<B>();
                waiters.add(w);
                return w;
            }
            readyBytes -= b.sizeBytes();
            if (parked != null && fits(parked)) {
                add(parked);
                parked = null;
                admitted = parkedAdmit;
                parkedAdmit = null;
            }
        }
        if (admitted != null) admitted.complete(null);
        return CompletableFuture.completedFuture(b);
    }

    /** Fails waiting and later takes with {@code cause} (stream failure or close) and releases a parked producer. */
    void fail(Throwable cause) {
        CompletableFuture<Void> admitted;
        CompletableFuture<?>[] toFail;
        var dropped = new java.util.ArrayList<B>();
        synchronized (this) {
            if (failure != null) return;
            failure = cause;
            dropped.addAll(ready);
            if (parked != null) dropped.add(parked);
            ready.clear();
            readyBytes = 0;
            parked = null;
            admitted = parkedAdmit;
            parkedAdmit = null;
            toFail = waiters.toArray(CompletableFuture[]::new);
            waiters.clear();
        }
        for (B b : dropped) b.discard(); // shared memory of batches nobody will take goes back to the store
        if (admitted != null) admitted.completeExceptionally(cause);
        for (var w : toFail) w.completeExceptionally(cause);
    }

    void close() { fail(new CancellationException("feed closed")); }

    /**
     * Holds up to {@code n} batches from now on (the autotuner). Raised, a producer parked for room is let in at once when
     * its batch now fits; lowered, the batches already buffered stay and the producer waits until they are taken below it.
     */
    void maxBatches(int n) {
        if (n < 1) throw new IllegalArgumentException("prefetch batches must be positive, got " + n);
        CompletableFuture<Void> admitted = null;
        synchronized (this) {
            maxBatches = n;
            if (failure == null && parked != null && fits(parked)) {
                add(parked);
                parked = null;
                admitted = parkedAdmit;
                parkedAdmit = null;
            }
        }
        if (admitted != null) admitted.complete(null);
    }

    synchronized int maxBatches() { return maxBatches; }

    synchronized int batches() { return ready.size(); }

    synchronized long bytes() { return readyBytes; }

    synchronized long peakBytes() { return peakBytes; }

    synchronized long producerWaits() { return producerWaits; }

    synchronized long consumerWaits() { return consumerWaits; }

    /** Whether the next batch would have to wait for room: a producer is parked or the batch limit is reached. */
    synchronized boolean full() { return parked != null || ready.size() >= maxBatches; }

    /** Batches, bytes and full (1/0) read together, for the sampler. */
    synchronized long[] state() { return new long[] {ready.size(), readyBytes, parked != null || ready.size() >= maxBatches ? 1 : 0}; }

    private boolean fits(B b) {
        return ready.isEmpty() || (ready.size() < maxBatches && readyBytes + b.sizeBytes() <= maxBytes);
    }

    private void add(B b) {
        ready.add(b);
        readyBytes += b.sizeBytes();
        peakBytes = Math.max(peakBytes, readyBytes);
    }
}
