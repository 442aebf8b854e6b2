package dev.stoker.cluster;

import dev.stoker.flight.FlightBatchClient;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.ScheduleCursor;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.AskPattern;

/**
 * The trainer-facing side of a cluster job on one node: a {@link BatchProvider} for the node's
 * trainer socket. For each request it asks the coordinator where the rank's next batch is, then
 * takes it straight from its owner: a lease on the object when this node made it (zero copy), else
 * one Flight DoGet from the owner's endpoint into an object of this node's store, which the
 * trainer then maps. Bytes never pass through the coordinator. When the owner cannot be read (it
 * died after making the batch), the coordinator is asked to make the batch again.
 *
 * <p>Pull-ahead: each rank's next {@code pullAhead} batches ({@link #PULL_AHEAD_DEFAULT}) are pulled while its trainer computes,
 * one after the other (a rank asks the coordinator for a batch only once the one before it is in
 * this node's hands, which is what lets the coordinator release the owner's copy), so that a
 * remote batch's transfer overlaps the trainer's step instead of adding to its wait.
 *
 * <p>Threading: one request per rank at a time (the socket protocol's rule); pulls run on a pool
 * of their own, one Flight client per rank and owner.
 */
public final class ClusterRankFeed implements BatchProvider, AutoCloseable {
    private static final Duration ASK = Duration.ofHours(1); // a batch may take long to make; node deaths end it sooner
    private static final int MAX_PULL_ATTEMPTS = 5;
    /** Batches of a rank pulled ahead of its trainer's request, by default. */
    public static final int PULL_AHEAD_DEFAULT = 2;
    private final int pullAhead;

    private final ActorSystem<?> system;
    private final NodeRuntime runtime;
    private final Duration waitForJob;
    private final BufferAllocator allocator;
    private final ExecutorService pullers = Executors.newCachedThreadPool(r -> {
        var t = new Thread(r, "stoker-pull");
        t.setDaemon(true);
        return t;
    });
    private final Map<String, FlightBatchClient> clients = new HashMap<>(); // "rank@host:port"
    private final Map<Integer, Ahead> ahead = new java.util.concurrent.ConcurrentHashMap<>();

    /** A rank's pulls in order: those its trainer has not asked for yet, and the tail the next one starts after. */
    private static final class Ahead {
        final java.util.ArrayDeque<CompletableFuture<Delivery>> ready = new java.util.ArrayDeque<>();
        CompletableFuture<Delivery> tail = CompletableFuture.completedFuture(null);
        volatile boolean ended;
        volatile Throwable failed;
    }
    private volatile boolean closed;

    private final FlightBatchClient.Options flightOptions;

    ClusterRankFeed(ActorSystem<?> system, NodeRuntime runtime, Duration waitForJob, BufferAllocator allocator, String flightToken,
                    int pullAhead) {
        if (pullAhead < 0) throw new IllegalArgumentException("pull-ahead must be >= 0, got " + pullAhead);
        this.pullAhead = pullAhead;
        this.flightOptions = new FlightBatchClient.Options(flightToken, false, null);
        this.system = system;
        this.runtime = runtime;
        this.waitForJob = waitForJob;
        this.allocator = allocator;
    }

    private NodeRuntime.NodeJob job() {
        long deadline = System.nanoTime() + waitForJob.toNanos();
        while (true) {
            var j = runtime.currentJob();
            if (j != null) return j;
            if (System.nanoTime() > deadline || closed)
                throw new IllegalArgumentException("no cluster job is running on this node (waited " + waitForJob.toSeconds() + " s)");
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalArgumentException("interrupted while waiting for a cluster job");
            }
        }
    }

    @Override
    public void validate(int rank, int world) {
        var s = job().started;
        if (world != s.ranks()) throw new IllegalArgumentException("world size " + world + " differs from the cluster job's " + s.ranks());
        if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
    }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        var s = job().started;
        if (resume != null)
            throw new IllegalArgumentException("a cluster job does not resume trainers yet (asked for " + resume + "); start the job at that point");
        long perStep = (long) s.ranks() * s.batchSize();
        return new Joined(0, s.fingerprint(), s.datasetSize() / perStep, ScheduleCursor.START, s.datasetSize(), perStep);
    }

    @Override
    public boolean sharedMemory() { return true; }

    @Override
    public CompletableFuture<? extends Delivery> next(int rank, long connection) {
        var job = job();
        var a = ahead.computeIfAbsent(rank, r -> new Ahead());
        synchronized (a) {
            if (a.ready.isEmpty()) enqueue(job, rank, a);
            var head = a.ready.pollFirst();
            while (a.ready.size() < pullAhead && !a.ended && !closed) enqueue(job, rank, a);
            return head;
        }
    }

    /** Chains the rank's next pull after its last one (whatever became of it). */
    private void enqueue(NodeRuntime.NodeJob job, int rank, Ahead a) {
        var f = a.tail.handle((d, e) -> null).thenComposeAsync(x -> {
            if (a.failed != null) return CompletableFuture.<Delivery>failedFuture(a.failed); // nothing after a lost batch
            if (a.ended || closed) return CompletableFuture.<Delivery>completedFuture(null);
            return AskPattern.<CoordinatorProtocol.Command, CoordinatorProtocol.BatchRef>ask(job.coordinator,
                            r -> new CoordinatorProtocol.NextBatch(job.id, rank, r), ASK, system.scheduler())
                    .toCompletableFuture()
                    .thenComposeAsync(ref -> pull(job, ref, 1), pullers)
                    .whenComplete((d, e) -> {
                        if (e != null) a.failed = unwrap(e);
                        else if (d == null) a.ended = true;
                    });
        }, pullers);
        a.tail = f;
        a.ready.addLast(f);
    }

    /** Takes the referenced batch from its owner; asks for it again when the owner cannot be read. */
    private CompletableFuture<Delivery> pull(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref, int attempt) {
        if (ref.end()) return CompletableFuture.completedFuture(null);
        if (ref.error() != null) return CompletableFuture.failedFuture(new IllegalStateException(ref.error()));
        String failure;
        try {
            var local = local(job, ref);
            if (local != null) return CompletableFuture.completedFuture(local);
            return CompletableFuture.completedFuture(remote(job, ref));
        } catch (FlightRuntimeException | IllegalStateException e) {
            failure = e.getMessage();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return CompletableFuture.failedFuture(e);
        }
        if (attempt >= MAX_PULL_ATTEMPTS || closed)
            return CompletableFuture.failedFuture(new IllegalStateException("rank " + ref.rank() + ": could not pull step "
                    + ref.globalStep() + " after " + attempt + " attempts: " + failure));
        String why = failure;
        return AskPattern.<CoordinatorProtocol.Command, CoordinatorProtocol.BatchRef>ask(job.coordinator,
                        r -> new CoordinatorProtocol.Refetch(job.id, ref.rank(), ref.key(), why, r), ASK, system.scheduler())
                .toCompletableFuture()
                .thenComposeAsync(again -> pull(job, again, attempt + 1), pullers);
    }

    /** A lease on the object when this node made it; null when another node did. */
    private Delivery local(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref) {
        var lent = runtime.lend(job.id, ref.key());
        if (lent == null) return null;
        runtime.localHandOuts.incrementAndGet();
        return new Stored(lent.object().file(), lent.object().offset(), lent.bytes(), lent.view(), lent.lease()::close);
    }

    /** One DoGet from the owner into an object of this node's store; the trainer maps that object. */
    private Delivery remote(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref) throws InterruptedException {
        if (ref.flightPort() <= 0) throw new IllegalStateException("owner " + ref.address() + " has no Flight endpoint");
        FlightBatchClient client = client(ref);
        BatchLayout.Batch batch;
        synchronized (client) {
            batch = client.next(ref.rank(), job.started.ranks(), job.id + "/" + ref.key());
            if (batch == null) throw new IllegalStateException("owner " + ref.address() + " sent no batch for " + ref.key());
            ShmObjectStore store = runtime.store();
            dev.stoker.store.Allocation a;
            try {
                a = store.allocate(batch.totalBytes(), ref.rank()).get();
            } catch (java.util.concurrent.ExecutionException e) {
                throw new IllegalStateException("cannot allocate " + batch.totalBytes() + " bytes in this node's store: " + e.getCause());
            }
            try {
                BatchLayout.write(batch.meta(), batch.tensors(), a.segment());
            } catch (RuntimeException e) {
                a.abort();
                throw e;
            }
            var object = a.seal();
            var lease = object.lease();
            object.release(); // the trainer's lease is the only hold: its release frees the space
            runtime.pulledBatches.incrementAndGet();
            runtime.pulledBytes.addAndGet(batch.totalBytes());
            return new Stored(object.file(), object.offset(), batch.totalBytes(), object.segment().asSlice(0, batch.totalBytes()), lease::close);
        }
    }

    private FlightBatchClient client(CoordinatorProtocol.BatchRef ref) {
        String key = ref.rank() + "@" + ref.flightHost() + ":" + ref.flightPort();
        synchronized (clients) {
            return clients.computeIfAbsent(key, k -> FlightBatchClient.connect(ref.flightHost(), ref.flightPort(), flightOptions, allocator));
        }
    }

    @Override
    public void close() {
        closed = true;
        for (var a : ahead.values()) // pulled ahead, never asked for: give their space back
            synchronized (a) {
                for (var f : a.ready) f.thenAccept(d -> {
                    if (d instanceof Stored s) s.release().run();
                });
                a.ready.clear();
            }
        pullers.shutdownNow();
        try {
            pullers.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (clients) {
            for (var c : clients.values()) {
                try {
                    c.close();
                } catch (RuntimeException e) {
                    // closing anyway
                }
            }
            clients.clear();
        }
    }

    static Throwable unwrap(Throwable t) {
        return t instanceof CompletionException c && c.getCause() != null ? c.getCause() : t;
    }
}
