package dev.stoker.cluster;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.node.BatchStream;
import dev.stoker.node.RankLedger;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.store.ShmObjectStore;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.AskPattern;

/**
 * The trainer-facing side of a cluster job on one node: the {@link BatchProvider} of the node's
 * trainer socket. Each job gets a {@link RankLedger} on this node (the same ledger as a local job:
 * held and replayed batches per connection, a rank refused to a second live connection, resume
 * from a trainer's saved state, the epoch accounting), fed by a {@link JobStream} of the batches
 * this node's ranks pull. For each batch it asks the coordinator where the rank's next batch is,
 * then takes it straight from its owner: a lease on the object when this node made it (zero copy),
 * else one Flight DoGet from the owner's endpoint into an object of this node's store, which the
 * trainer then maps. Bytes never pass through the coordinator. When the owner cannot be read (it
 * died after making the batch), the coordinator is asked to make the batch again.
 *
 * <p>Pull-ahead: each rank's next {@code pullAhead} batches ({@link #PULL_AHEAD_DEFAULT}) are pulled while its trainer computes,
 * one after the other (a rank asks the coordinator for a batch only once the one before it is in
 * this node's hands, which is what lets the coordinator release the owner's copy), so that a
 * remote batch's transfer overlaps the trainer's step instead of adding to its wait.
 *
 * <p>A job that ends on this node (stopped, its coordinator lost) fails its trainers' pending and
 * later requests with the reason; a trainer that says hello then is refused with it.
 *
 * <p>Stalls (audit #15): ten times a second a watchdog looks at every rank whose trainer waits for a batch; one
 * that has waited {@link #STALL_MILLIS_DEFAULT} (30 s) gets one warning naming what it waits on (the
 * coordinator's reference, its owner's Flight endpoint, space in this node's store), and the count goes
 * into the node's metrics. Slow batches are not stalls until then; the warning repeats for the next episode.
 *
 * <p>Threading: one request per rank at a time (the ledger chains them); pulls run on a pool of
 * their own, one Flight client per rank and owner.
 */
public final class ClusterRankFeed implements BatchProvider, AutoCloseable {
    private static final Duration ASK = Duration.ofHours(1); // a batch may take long to make; a lost job or node ends it sooner
    private static final Duration MOVE = Duration.ofSeconds(30);
    private static final int MAX_PULL_ATTEMPTS = 5;
    /** Batches of a rank pulled ahead of its trainer's request, by default. */
    public static final int PULL_AHEAD_DEFAULT = 2;
    /** How long a trainer waits for a batch before the watchdog warns. */
    public static final long STALL_MILLIS_DEFAULT = dev.stoker.observe.StallWatchdog.STALL_SECONDS_DEFAULT * 1000;
    private static final System.Logger LOG = System.getLogger(ClusterRankFeed.class.getName());
    /** How often the watchdog looks (a few ranks' clocks: nothing to measure). */
    private static final long WATCH_MILLIS = 100;
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
    private volatile boolean closed;
    private final java.util.Set<JobStream> streams = ConcurrentHashMap.newKeySet();
    private final java.util.concurrent.ScheduledExecutorService watchdog = Executors.newSingleThreadScheduledExecutor(r -> {
        var t = new Thread(r, "stoker-cluster-stall-watchdog");
        t.setDaemon(true);
        return t;
    });
    private volatile long stallMillis = STALL_MILLIS_DEFAULT;
    private volatile java.util.function.Consumer<String> stallSink = w -> LOG.log(System.Logger.Level.WARNING, w);
    private final java.util.concurrent.atomic.AtomicLong stalls = new java.util.concurrent.atomic.AtomicLong();

    private final FlightBatchClient.Options flightOptions;

    ClusterRankFeed(ActorSystem<?> system, NodeRuntime runtime, Duration waitForJob, BufferAllocator allocator,
                    FlightBatchClient.Options flightOptions, int pullAhead) {
        if (pullAhead < 0) throw new IllegalArgumentException("pull-ahead must be >= 0, got " + pullAhead);
        this.pullAhead = pullAhead;
        this.flightOptions = flightOptions;
        this.system = system;
        this.runtime = runtime;
        this.waitForJob = waitForJob;
        this.allocator = allocator;
        watchdog.scheduleWithFixedDelay(this::watch, WATCH_MILLIS, WATCH_MILLIS, TimeUnit.MILLISECONDS);
    }

    /** Sets the stall threshold and where warnings go (tests; the defaults are 30 s and the log). */
    void stallWarnings(long millis, java.util.function.Consumer<String> sink) {
        this.stallMillis = millis;
        this.stallSink = sink;
    }

    /** Stall warnings given so far (the node's metrics). */
    public long stalls() { return stalls.get(); }

    private void watch() {
        long now = System.nanoTime();
        for (var s : streams)
            s.ahead.forEach((rank, a) -> {
                long since = a.askedAt;
                if (since == 0 || a.warned || now - since < TimeUnit.MILLISECONDS.toNanos(stallMillis)) return;
                a.warned = true;
                stalls.incrementAndGet();
                try {
                    stallSink.accept("stall: rank " + rank + " of cluster job " + s.job.id + " has waited " + (now - since) / 1_000_000_000L
                            + " s for its batch, waiting on " + a.stage);
                } catch (RuntimeException e) {
                    // a broken log handler must not stop the watchdog
                }
            });
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

    /** The ledger of the job running now (made for it on first use). */
    private RankLedger ledger() {
        var job = job();
        return job.ledger(() -> {
            try {
                var config = dev.stoker.node.NodeConfig.fromJson(job.config);
                NodeShares.checkPulled(config, job.shm != null ? job.shm : config.shm(), runtime.store().budgetBytes());
            } catch (dev.stoker.node.ConfigException e) {
                throw new IllegalArgumentException("this node cannot serve trainers of cluster job " + job.id + ": " + e.getMessage());
            }
            return new RankLedger(new JobStream(job), null, 0, 0);
        });
    }

    /** The ledger each connection said hello to: its later requests stay with that job, even once another has started. */
    private final Map<Long, RankLedger> joinedLedger = new ConcurrentHashMap<>();

    @Override
    public void validate(int rank, int world) { ledger().validate(rank, world); }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        return join(rank, connection, resume, -1, fingerprint);
    }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long resumeStep, long fingerprint) {
        var l = ledger();
        var joined = l.join(rank, connection, resume, resumeStep, fingerprint);
        joinedLedger.put(connection, l);
        return joined;
    }

    @Override
    public void leave(int rank, long connection) {
        var l = joinedLedger.remove(connection);
        if (l != null) l.leave(rank, connection);
    }

    @Override
    public boolean sharedMemory() { return true; }

    /** A trainer's timing goes to the ledger of the job its connection joined, as its requests do. */
    @Override
    public void report(int rank, long connection, long waitNanos, long stepNanos) {
        var l = joinedLedger.get(connection);
        if (l != null) l.report(rank, connection, waitNanos, stepNanos);
    }

    /** A trainer's compute floor goes to the ledger of the job its connection joined, as its timings do. */
    @Override
    public void reportHeadspace(int rank, long connection, long floorNanos, long replayedSteps) {
        var l = joinedLedger.get(connection);
        if (l != null) l.reportHeadspace(rank, connection, floorNanos, replayedSteps);
    }

    @Override
    public CompletableFuture<? extends Delivery> next(int rank, long connection) {
        var l = joinedLedger.get(connection);
        if (l == null) return CompletableFuture.failedFuture(new IllegalStateException("rank " + rank + " has not said hello"));
        return l.next(rank, connection);
    }

    /** The ledger of the job now running on this node, or null (for its figures). */
    RankLedger currentLedger() {
        var j = runtime.currentJob();
        return j == null ? null : j.ledgerIfAny();
    }

    /** One job's batches for this node's ranks, pulled in each rank's order. */
    private final class JobStream implements BatchStream {
        private final NodeRuntime.NodeJob job;
        private volatile StepSchedule schedule;
        private final Map<Integer, Ahead> ahead = new ConcurrentHashMap<>();
        /** The job's moves this node has been told of: a rank's pulls carry the count of when they began. */
        private long moves;

        JobStream(NodeRuntime.NodeJob job) {
            this.job = job;
            // the job's steps as this node's producer planned them (batches, or packs): the same as the coordinator's
            this.schedule = job.opened.join().producer().schedule();
            streams.add(this);
        }

        @Override public int ranks() { return job.started.ranks(); }

        @Override public StepSchedule schedule() { return schedule; }

        @Override public long fingerprint() { return job.started.fingerprint(); }

        @Override public ScheduleCursor start() { return ScheduleCursor.START; }

        @Override public boolean sharedMemory() { return true; }

        @Override
        public CompletableFuture<Made> next(int rank) {
            Ahead a;
            synchronized (this) {
                a = ahead.computeIfAbsent(rank, r -> new Ahead(moves));
            }
            synchronized (a) {
                if (a.ready.isEmpty()) enqueue(job, rank, a);
                var head = a.ready.pollFirst();
                while (a.ready.size() < pullAhead && !a.ended && !closed) enqueue(job, rank, a);
                if (!head.isDone()) { // the trainer waits: the watchdog's clock runs until the batch is here
                    a.askedAt = Math.max(1, System.nanoTime());
                    a.warned = false;
                    head.whenComplete((d, e) -> a.askedAt = 0);
                }
                return head;
            }
        }

        @Override
        public void moveTo(ScheduleCursor at, long step) {
            CoordinatorProtocol.Moved moved;
            try {
                moved = AskPattern.<CoordinatorProtocol.Command, CoordinatorProtocol.Moved>ask(job.coordinator,
                                r -> new CoordinatorProtocol.MoveTo(job.id, at.epoch(), at.position(), step, r), MOVE, system.scheduler())
                        .toCompletableFuture().get(MOVE.toSeconds() + 1, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalArgumentException("interrupted while moving cluster job " + job.id);
            } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
                throw new IllegalArgumentException("the coordinator of cluster job " + job.id + " did not answer the resume: " + e);
            }
            if (moved.error() != null) throw new IllegalArgumentException(moved.error());
            synchronized (this) {
                // the job's labels
                schedule = schedule.labelled(new ScheduleCursor(moved.labelEpoch(), moved.labelPosition()), moved.labelStep());
                moves = moved.moves(); // the pulls begun before it are refused by the coordinator, and their rank's go on afresh
                for (var a : ahead.values()) discard(a); // pulled from the old timeline
                ahead.clear();
            }
        }

        /** Ends a rank's pulls: what was pulled ahead and never asked for goes back to the store. */
        private static void discard(Ahead a) {
            synchronized (a) {
                a.ended = true;
                for (var f : a.ready) f.thenAccept(d -> {
                    if (d instanceof InStore s) s.hold().close();
                });
                a.ready.clear();
            }
        }

        /** Chains the rank's next pull after its last one (whatever became of it). */
        private void enqueue(NodeRuntime.NodeJob job, int rank, Ahead a) {
            var f = a.tail.handle((d, e) -> null).thenComposeAsync(x -> {
                if (a.failed != null) return CompletableFuture.<Made>failedFuture(a.failed); // nothing after a lost batch
                if (a.ended || closed) return CompletableFuture.<Made>completedFuture(null);
                a.stage = "the coordinator's reference to it (its batch is not made yet: a slow or stuck node, or a full store there)";
                var ask = AskPattern.<CoordinatorProtocol.Command, CoordinatorProtocol.BatchRef>ask(job.coordinator,
                        r -> new CoordinatorProtocol.NextBatch(job.id, rank, a.moves, r), ASK, system.scheduler()).toCompletableFuture();
                job.gone.whenComplete((v, e) -> ask.completeExceptionally(e)); // a lost coordinator ends the wait now
                return ask.thenComposeAsync(ref -> pull(job, ref, 1, a), pullers)
                        .whenComplete((d, e) -> {
                            if (e != null) a.failed = unwrap(e);
                            else if (d == null) a.ended = true;
                        });
            }, pullers);
            a.tail = f;
            a.ready.addLast(f);
        }

        @Override
        public void close() {
            streams.remove(this);
            for (var a : ahead.values()) discard(a); // pulled ahead, never asked for: give their space back
        }
    }

    /** A rank's pulls in order: those its trainer has not asked for yet, and the tail the next one starts after. */
    private static final class Ahead {
        /** The job's moves when these pulls began: the coordinator answers them only while the job has not moved since. */
        final long moves;
        final ArrayDeque<CompletableFuture<BatchStream.Made>> ready = new ArrayDeque<>();
        CompletableFuture<BatchStream.Made> tail = CompletableFuture.completedFuture(null);
        volatile boolean ended;
        volatile Throwable failed;
        /** When the trainer began to wait for the head (0: it does not wait), whether that wait was warned about, and on what. */
        volatile long askedAt;
        volatile boolean warned;
        volatile String stage = "nothing yet";

        Ahead(long moves) { this.moves = moves; }
    }

    /** Takes the referenced batch from its owner; asks for it again when the owner cannot be read. */
    private CompletableFuture<BatchStream.Made> pull(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref, int attempt, Ahead a) {
        if (ref.end()) return CompletableFuture.completedFuture(null);
        a.stage = "its owner " + ref.address() + " (object " + ref.key() + ", attempt " + attempt + ")";
        if (ref.error() != null) return CompletableFuture.failedFuture(new IllegalStateException(ref.error()));
        String failure;
        try {
            if (job.gone.isDone()) return CompletableFuture.failedFuture(new IllegalStateException(job.why()));
            var local = local(job, ref);
            if (local != null) return CompletableFuture.completedFuture(local);
            return CompletableFuture.completedFuture(remote(job, ref, a));
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
                .thenComposeAsync(again -> pull(job, again, attempt + 1, a), pullers);
    }

    /** A lease on the object when this node made it; null when another node did. */
    private BatchStream.Made local(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref) {
        var lent = runtime.lend(job.id, BatchRelay.ownKey(ref.key())); // made here: a relayed one too
        if (lent == null) return null;
        runtime.localHandOuts.incrementAndGet();
        return new BatchStream.InStore(lent.object(), lent.bytes(), lent.lease());
    }

    /** One DoGet from the owner into an object of this node's store; the trainer maps that object. */
    private BatchStream.Made remote(NodeRuntime.NodeJob job, CoordinatorProtocol.BatchRef ref, Ahead ahead) throws InterruptedException {
        if (ref.flightPort() <= 0) throw new IllegalStateException("owner " + ref.address() + " has no Flight endpoint");
        FlightBatchClient client = client(ref);
        BatchLayout.Batch batch;
        synchronized (client) {
            batch = client.next(ref.rank(), job.started.ranks(), job.id + "/" + ref.key());
            if (batch == null) throw new IllegalStateException("owner " + ref.address() + " sent no batch for " + ref.key());
            ShmObjectStore store = runtime.store();
            ahead.stage = "space in this node's store for " + batch.totalBytes() + " bytes (" + store.metrics().inUseBytes() + " of "
                    + store.budgetBytes() + " in use)";
            dev.stoker.store.Allocation a;
            try {
                a = store.allocate(batch.totalBytes(), NodeShares.pulledOwner(ref.rank(), job.started.ranks())).get();
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
            object.release(); // the ledger's hold is the only one: its release frees the space
            runtime.pulledBatches.incrementAndGet();
            runtime.pulledBytes.addAndGet(batch.totalBytes());
            return new BatchStream.InStore(object, batch.totalBytes(), lease);
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
        watchdog.shutdownNow();
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
