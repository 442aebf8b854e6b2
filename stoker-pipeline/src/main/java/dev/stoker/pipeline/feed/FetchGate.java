package dev.stoker.pipeline.feed;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.concurrent.CompletableFuture;

/**
 * How many of one rank stream's samples may be in fetch at once when the autotuner moves that number while the stream
 * runs: the stream's fetch stage is a mapAsync of the tuner's ceiling ({@link FeedConfig#fetchConcurrencyMax()}), and each
 * of its samples first takes a permit here, so that at most {@link #limit()} are fetching. Order is kept by the mapAsync;
 * the gate only delays starts. A feed with autotune off has no gate: its mapAsync is the concurrency given.
 *
 * <p>Threading: thread-safe; a waiting start is completed outside the lock, on the thread that released a permit or
 * raised the limit, and must only kick off asynchronous work (a fetch does).
 */
final class FetchGate {
    private final ArrayDeque<CompletableFuture<Void>> waiting = new ArrayDeque<>();
    private int limit; // guarded by this
    private int inFlight; // guarded by this

    FetchGate(int limit) {
        if (limit < 1) throw new IllegalArgumentException("fetch limit must be positive, got " + limit);
        this.limit = limit;
    }

    /** Completes when a permit is this caller's; at once when one is free. */
    CompletableFuture<Void> acquire() {
        synchronized (this) {
            if (inFlight < limit) {
                inFlight++;
                return CompletableFuture.completedFuture(null);
            }
            var w = new CompletableFuture<Void>();
            waiting.add(w);
            return w;
        }
    }

    /** Gives a permit back: to the first waiting start when the limit allows it. */
    void release() {
        CompletableFuture<Void> next = null;
        synchronized (this) {
            if (inFlight > limit || waiting.isEmpty()) inFlight--;
            else next = waiting.poll(); // the permit passes on: inFlight unchanged
        }
        if (next != null) next.complete(null);
    }

    /** Lets {@code n} fetch at once from now on; raised, waiting starts go at once; lowered, in-flight fetches finish. */
    void limit(int n) {
        if (n < 1) throw new IllegalArgumentException("fetch limit must be positive, got " + n);
        var go = new ArrayList<CompletableFuture<Void>>();
        synchronized (this) {
            limit = n;
            while (inFlight < limit && !waiting.isEmpty()) {
                inFlight++;
                go.add(waiting.poll());
            }
        }
        for (var w : go) w.complete(null);
    }

    synchronized int limit() { return limit; }

    synchronized int inFlight() { return inFlight; }
}
