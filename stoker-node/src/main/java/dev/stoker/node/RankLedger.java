package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.pipeline.batch.BatchSchema;
import dev.stoker.pipeline.batch.StoredBatch;
import dev.stoker.pipeline.feed.Bottleneck;
import dev.stoker.pipeline.feed.BottleneckVerdict;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.pipeline.schedule.SampleSchedule;
import dev.stoker.store.Lease;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoredObject;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;

/**
 * The ledger of a local job: a running {@link Feeder} as the node's {@link BatchProvider}, the record of
 * what each rank was handed and confirmed. Heap batches (serial, concurrent, prefetch) go by value,
 * their tensors in {@link BatchSchema}'s order; ZERO_COPY batches by reference to their shared-memory
 * object, each hand-out holding its own lease until the trainer releases it.
 *
 * <p>Exactly once across reconnects: every batch handed out is <em>held</em> (a lease of the
 * service's own, or the heap tensors) until the trainer that got it asks for another one — the
 * protocol allows one request in flight, so that request proves the batch arrived. A trainer that
 * reconnects says where it is (the cursor from its saved state); held batches from that cursor on
 * are handed out again, in order, before anything new, and a batch that was still being produced
 * for the dead connection joins them when it completes. Nothing is lost or repeated for the rank.
 *
 * <p>Restart: a service started afresh (after SIGTERM, {@code kill -9}, a resize) whose first
 * trainer resumes from a saved cursor restarts its pipeline at that cursor, provided no trainer has
 * been welcomed yet. The cursor is global, so a state saved with R ranks resumes with R' ranks: the
 * epoch's order continues with nothing lost or repeated.
 *
 * <p>Threading: safe from the server's connection threads. Each rank's requests are chained, so
 * they complete in order even across connections; the bookkeeping is guarded by {@code lock}.
 */
public final class RankLedger implements BatchProvider, AutoCloseable {
    private final Function<ScheduleCursor, Feeder> reopen;
    private final ShmObjectStore store;
    private final long expectedBatchBytes;
    private final long steps;
    /** How long a trainer claiming a rank waits for the rank's old connection to be seen closing. */
    private static final long LIVE_GRACE_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(2);
    private final Object lock = new Object();
    private final RankSlot[] slots;
    private volatile Feeder feeder;
    private boolean welcomed;
    private long repositions;

    /** One hand-out's bytes, kept until the trainer proves it has them: heap tensors or a lease of our own. */
    private record Held(ScheduleCursor cursor, Prepared prepared, StoredObject object, long bytes, Lease hold) {
        Delivery handOut() {
            if (prepared != null) return prepared;
            var lease = object.lease();
            return new Stored(object.file(), object.offset(), bytes, object.segment().asSlice(0, bytes), lease::close);
        }

        void drop() {
            if (hold != null) hold.close();
        }
    }

    /** A batch being produced; a reconnect that resumes past it has it dropped when it arrives. */
    private static final class InFlight {
        final ScheduleCursor cursor;
        boolean dropOnArrival;

        InFlight(ScheduleCursor cursor) { this.cursor = cursor; }
    }

    private static final class RankSlot {
        ScheduleCursor next;                                 // cursor of the next batch the feeder yields for this rank
        long fromFeeder;                                     // batches taken from the feeder (for --steps)
        final ArrayDeque<Held> held = new ArrayDeque<>();    // handed out, not yet confirmed
        final ArrayDeque<Held> replay = new ArrayDeque<>();  // to hand out again before anything new
        final ArrayDeque<InFlight> inFlight = new ArrayDeque<>(); // taken from the feeder, not yet produced
        long connection = -1;                                // the connection now serving this rank
        long live = -1;                                      // that connection while it is open, else -1
        CompletableFuture<?> tail = CompletableFuture.completedFuture(null);
    }

    /**
     * Serves {@code feeder}; closes it, and {@code store} (may be null) after it, on {@link #close()}.
     * Each rank's feed ends after {@code steps} steps (0: never). {@code reopen} (may be null: no
     * restart at a trainer's cursor) starts an equivalent feeder at a given cursor.
     */
    public RankLedger(Feeder feeder, ShmObjectStore store, long expectedBatchBytes, long steps, Function<ScheduleCursor, Feeder> reopen) {
        this.feeder = feeder;
        this.store = store;
        this.expectedBatchBytes = expectedBatchBytes;
        this.steps = steps;
        this.reopen = reopen;
        this.slots = new RankSlot[feeder.config().ranks()];
        for (int r = 0; r < slots.length; r++) {
            slots[r] = new RankSlot();
            slots[r].next = feeder.config().start();
        }
    }

    /** A ledger over {@code feeder} that cannot move its pipeline (no restart at a trainer's cursor). */
    public RankLedger(Feeder feeder, ShmObjectStore store, long expectedBatchBytes, long steps) {
        this(feeder, store, expectedBatchBytes, steps, null);
    }

    /** The pipeline now (a restart at a trainer's cursor replaces it). */
    public Feeder feeder() { return feeder; }

    /** The shared-memory store of a ZERO_COPY job, else null. */
    public ShmObjectStore store() { return store; }

    public int ranks() { return slots.length; }

    /** Steps each rank is fed before its END (0: no end). */
    public long steps() { return steps; }

    /** Times the pipeline was restarted at a trainer's cursor. */
    public long repositions() {
        synchronized (lock) {
            return repositions;
        }
    }

    @Override
    public void validate(int rank, int world) {
        if (world != ranks()) throw new IllegalArgumentException("world size " + world + " differs from the job's " + ranks());
        if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
    }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        synchronized (lock) {
            var f = feeder;
            if (fingerprint != 0 && fingerprint != f.fingerprint())
                throw new IllegalArgumentException("the saved state is from another data set or configuration (fingerprint "
                        + Long.toHexString(fingerprint) + ", this job's is " + Long.toHexString(f.fingerprint())
                        + "): the manifest, seed, batch size and encoding must be the same to resume");
            var slot = slots[rank];
            awaitNotLive(rank, slot, connection);
            if (resume == null) { // a fresh trainer takes what comes next; what an earlier connection got counts as taken
                slot.connection = connection;
                slot.live = connection;
                dropHeld(slot);
                welcomed = true;
                return joined(firstToHandOut(slot));
            }
            var schedule = f.schedule();
            if (resume.position() >= schedule.datasetSize())
                throw new IllegalArgumentException("cannot resume at " + resume + ": the data set has " + schedule.datasetSize() + " samples");
            var want = schedule.aligned(new ScheduleCursor(resume.epoch(), resume.position()));
            if (!welcomed && noneHandedOut() && !want.equals(slot.next)) reposition(want);
            if (!reconcile(slot, want)) {
                var at = new ArrayList<String>();
                slot.held.forEach(h -> at.add(label(h.cursor())));
                slot.replay.forEach(h -> at.add(label(h.cursor())));
                at.add(label(slot.next));
                throw new IllegalArgumentException("rank " + rank + " asks to resume at " + label(want) + " but this service can serve it from "
                        + String.join(" or ", at) + (welcomed ? " (other trainers already started, so the pipeline cannot move;"
                        + " restart the service and resume every rank from the same saved state)" : ""));
            }
            slot.connection = connection; // only now: a refused hello must not take the rank from a live connection
            slot.live = connection;
            welcomed = true;
            return joined(want);
        }
    }

    /**
     * Waits a moment for the rank's open connection, if another one, to close (a trainer restarted
     * at once after a crash: its old connection's end is seen within a poll); refuses the newcomer
     * if it stays open, so that one rank never feeds two trainers.
     */
    private void awaitNotLive(int rank, RankSlot slot, long connection) {
        if (connection == NO_CONNECTION) return;
        long deadline = System.nanoTime() + LIVE_GRACE_NANOS;
        while (slot.live >= 0 && slot.live != connection) {
            long left = deadline - System.nanoTime();
            if (left <= 0)
                throw new IllegalArgumentException("rank " + rank + " is already being fed to a trainer on another, open connection; "
                        + "two trainers on one rank would each get part of its batches. Check the launcher's RANK/LOCAL_RANK, or stop "
                        + "the old trainer first");
            try {
                lock.wait(Math.max(1, left / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalArgumentException("interrupted while rank " + rank + "'s open connection was closing");
            }
        }
    }

    @Override
    public void leave(int rank, long connection) {
        synchronized (lock) {
            var slot = slots[rank];
            if (slot.live == connection) {
                slot.live = -1;
                lock.notifyAll();
            }
        }
    }

    /** The cursor of the first batch a fresh trainer will get: one to hand out again, then one still being made, then the next. */
    private static ScheduleCursor firstToHandOut(RankSlot slot) {
        if (!slot.replay.isEmpty()) return slot.replay.peekFirst().cursor();
        for (var f : slot.inFlight) if (!f.dropOnArrival) return f.cursor;
        return slot.next;
    }

    /**
     * The resume cursor {@code want} among the rank's held, replayable, in-flight and next batches:
     * drops those before it, replays those from it (an in-flight one joins the replay when it
     * arrives, since its connection is gone).
     */
    private boolean reconcile(RankSlot slot, ScheduleCursor want) {
        var line = new ArrayList<Held>(slot.held);
        line.addAll(slot.replay);
        int at = -1, flight = -1;
        for (int i = 0; i < line.size(); i++) if (line.get(i).cursor().equals(want)) at = i;
        var flights = new ArrayList<>(slot.inFlight);
        for (int i = 0; i < flights.size(); i++) if (flights.get(i).cursor.equals(want)) flight = i;
        if (at < 0 && flight < 0 && !want.equals(slot.next)) return false;
        int keepFrom = at >= 0 ? at : line.size();
        slot.held.clear();
        slot.replay.clear();
        for (int i = 0; i < line.size(); i++) {
            if (i < keepFrom) line.get(i).drop();
            else slot.replay.addLast(line.get(i));
        }
        if (at < 0) { // want is in flight or next: the in-flight ones before it are not wanted
            int dropBelow = flight >= 0 ? flight : flights.size();
            for (int i = 0; i < dropBelow; i++) flights.get(i).dropOnArrival = true;
        }
        return true;
    }

    private boolean noneHandedOut() {
        for (var s : slots) if (s.fromFeeder > 0 || !s.held.isEmpty() || !s.replay.isEmpty() || !s.inFlight.isEmpty()) return false;
        return true;
    }

    /** Restarts the pipeline at {@code at} (nothing handed out yet, no trainer welcomed). */
    private void reposition(ScheduleCursor at) {
        if (reopen == null)
            throw new IllegalArgumentException("this service cannot move its pipeline to " + label(at) + "; start it there");
        var old = feeder;
        old.close();
        feeder = reopen.apply(at);
        for (var s : slots) {
            s.next = at;
            s.tail = CompletableFuture.completedFuture(null);
        }
        repositions++;
    }

    private Joined joined(ScheduleCursor c) {
        var schedule = feeder.schedule();
        return new Joined(stepOf(schedule, c), feeder.fingerprint(), schedule.stepsPerEpoch(), c, schedule.datasetSize(),
                schedule.positionsPerStep());
    }

    private static long stepOf(SampleSchedule schedule, ScheduleCursor c) {
        return c.epoch() * schedule.stepsPerEpoch() + c.position() / schedule.positionsPerStep();
    }

    private String label(ScheduleCursor c) { return "epoch " + c.epoch() + " position " + c.position(); }

    private static void dropHeld(RankSlot slot) {
        slot.held.forEach(Held::drop);
        slot.held.clear();
    }

    @Override
    public long expectedBatchBytes() { return expectedBatchBytes; }

    @Override
    public boolean sharedMemory() { return feeder.config().mode() == FeedMode.ZERO_COPY; }

    @Override
    public CompletableFuture<? extends Delivery> next(int rank, long connection) {
        synchronized (lock) {
            var slot = slots[rank];
            var out = slot.tail.handle((x, e) -> null).thenCompose(ignored -> produce(rank, connection));
            slot.tail = out;
            return out;
        }
    }

    /** The rank's next hand-out, once the request before it has completed. */
    private CompletableFuture<Delivery> produce(int rank, long connection) {
        Feeder f;
        ScheduleCursor cursor;
        InFlight flight;
        synchronized (lock) {
            var slot = slots[rank];
            if (connection == slot.connection) dropHeld(slot); // this request proves the previous hand-outs arrived
            if (!slot.replay.isEmpty()) {
                var h = slot.replay.pollFirst();
                slot.held.addLast(h);
                return CompletableFuture.completedFuture(h.handOut());
            }
            if (steps > 0 && slot.fromFeeder >= steps) return CompletableFuture.completedFuture(null);
            slot.fromFeeder++;
            f = feeder;
            cursor = slot.next;
            slot.next = f.schedule().next(cursor);
            flight = new InFlight(cursor);
            slot.inFlight.addLast(flight);
        }
        var batch = sharedMemory() ? f.nextStored(rank).thenApply(b -> hold(cursor, b)) : f.next(rank)
                .thenApply(b -> new Held(cursor, BatchSchema.tensors(b, ranks(), f.config().encode().vision()), null, 0, null));
        return batch.handle((h, err) -> {
            synchronized (lock) {
                var slot = slots[rank];
                slot.inFlight.remove(flight);
                if (err != null) throw err instanceof CompletionException ce ? ce : new CompletionException(err);
                var out = h.handOut(); // (its own lease first: dropping the hold may free the object)
                if (flight.dropOnArrival) {
                    h.drop(); // a reconnect resumed past it; the dead connection it was for gets it, nobody else
                } else if (connection >= 0 && connection != slot.live) {
                    slot.replay.addLast(h); // produced for a connection that is gone: the trainer's next connection gets it
                } else {
                    slot.held.addLast(h);
                }
                return out;
            }
        });
    }

    /**
     * Hand-outs kept for a reconnect (held or waiting to be replayed), over all ranks. In zero-copy
     * each is one lease of the service's own in the store; they go when the trainer's next request
     * confirms them, or with the service.
     */
    public long kept() {
        synchronized (lock) {
            long n = 0;
            for (var s : slots) n += s.held.size() + s.replay.size();
            return n;
        }
    }

    /** A stored batch held by a lease of the service's own; the pipeline's reference is dropped. */
    private static Held hold(ScheduleCursor cursor, StoredBatch b) {
        var lease = b.object().lease();
        b.release();
        return new Held(cursor, null, b.object(), b.sizeBytes(), lease);
    }

    /** The bottleneck verdict with the trainers' figures: their (steady) wait ratio and the transfer's share of it. */
    public BottleneckVerdict verdict(double trainerWaitRatio, OptionalDouble transferShare) {
        return Bottleneck.classify(feeder.bottleneckInputs().withTrainer(trainerWaitRatio, transferShare));
    }

    /** The pipeline's and the store's counters, for the run's JSON. */
    public Map<String, Object> metrics() {
        var m = new LinkedHashMap<String, Object>();
        var snapshot = feeder.metrics();
        m.put("pipeline", snapshot);
        if (store != null) m.put("store", store.metrics());
        m.put("kept_for_reconnect", kept());
        var stages = new LinkedHashMap<String, Object>(); // docs/run-data.md
        snapshot.stages().forEach((name, stage) -> stages.put(name, stage.toJson()));
        m.put("stages", stages);
        m.put("timeline", feeder.timeline().toJson());
        m.put("verdict", feeder.verdict().toJson());
        return m;
    }

    @Override
    public void close() {
        synchronized (lock) {
            for (var s : slots) {
                dropHeld(s);
                s.replay.forEach(Held::drop);
                s.replay.clear();
            }
        }
        feeder.close();
        if (store != null) store.close();
    }
}
