package dev.stoker.pipeline.feed;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;

/**
 * What Pekko hands out as a {@link CompletionStage} (a stream's materialized completion: {@code Sink.ignore},
 * {@code Sink.foreach}; an ask's answer) as a plain JDK future whose dependent actions run on the thread that completes
 * it: the stream's own as it ends, the answering actor's.
 *
 * <p>Why: that stage is Scala's converter ({@code scala.concurrent.impl.FutureConvertersImpl.CF}, scala-library 2.13.18
 * under Pekko 1.7.0), which runs every executor-less dependent ({@code whenComplete}, {@code thenApply},
 * {@code handle}, …) as its {@code *Async} twin on {@link java.util.concurrent.ForkJoinPool#commonPool()}, so that
 * callers' code never runs on Pekko's threads. Code that hangs its own progress on it depends on a pool anything in the
 * process may fill: on a machine of two CPUs the common pool has one thread (JDK 25), and where a caller's task holds it
 * (ResumeTest's resuming trainer, started with {@code CompletableFuture.supplyAsync}, waits in its HELLO until the node
 * has closed the old feed), a closing feed waited its whole {@link Feeder#CLOSE_TIMEOUT_SECONDS} for streams that had
 * ended at once, and a rank whose stream failed left its trainer waiting until that pool was free.
 *
 * <p>Threading: what is chained on the returned future runs on the Pekko thread that completes the stage (or on the
 * caller's, when it is already complete); it must not block.
 */
public final class PekkoFutures {
    private PekkoFutures() {}

    /** {@code stage}'s outcome, as it is (a failure unwrapped), in a future completed on the thread that completes {@code stage}. */
    public static <T> CompletableFuture<T> direct(CompletionStage<T> stage) {
        var out = new CompletableFuture<T>();
        // an executor given runs the action where the stage completes: Scala's CF redirects only the executor-less forms
        stage.whenCompleteAsync((value, error) -> {
            if (error != null) out.completeExceptionally(error);
            else out.complete(value);
        }, Runnable::run);
        return out;
    }
}
