package dev.stoker.testkit;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.TimeUnit;

/**
 * Every thread of the pool {@link CompletableFuture}'s async methods use (the JVM's common pool) held by a task until
 * {@link #close()}: for tests that code under test does not hang its progress on that pool, which anything in a process
 * may fill (a caller's {@code supplyAsync} blocked on I/O; on two CPUs the pool has one thread).
 *
 * <p>Each task waits on a latch, for which the pool starts no compensating thread, so nothing else runs there meanwhile.
 */
public final class BusyCommonPool implements AutoCloseable {
    private final CountDownLatch release = new CountDownLatch(1);
    private final ForkJoinPool pool;

    /** Holds every thread of the pool; fails when they are not all held within 10 s. */
    public BusyCommonPool() throws InterruptedException {
        pool = (ForkJoinPool) new CompletableFuture<Void>().defaultExecutor();
        int threads = pool.getParallelism();
        var holding = new CountDownLatch(threads);
        for (int i = 0; i < threads; i++)
            pool.execute(() -> {
                holding.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
        if (!holding.await(10, TimeUnit.SECONDS)) {
            release.countDown();
            throw new IllegalStateException("not all " + threads + " threads of the common pool took a task within 10 s: " + pool);
        }
    }

    /** The pool held: {@link ForkJoinPool#commonPool()}. */
    public ForkJoinPool pool() { return pool; }

    /** Lets the tasks end. */
    @Override
    public void close() { release.countDown(); }
}
