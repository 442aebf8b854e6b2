package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.Ticker;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.observe.Bottleneck;
import dev.stoker.observe.BottleneckVerdict;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import dev.stoker.store.Lease;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoredObject;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;

/**
 * The ledger of a job on a node, behind every delivery path (the trainer socket, Flight, a cluster
 * node's socket): a {@link BatchStream} (the local pipeline, or a cluster node's pulls) as the node's
 * {@link BatchProvider}, and the record of what each rank was handed and confirmed. Heap batches go
 * by value; shared-memory batches by reference to their object, each hand-out holding its own lease
 * until the trainer releases it.
 *
 * <p>Exactly once across reconnects: every batch handed out is <em>held</em> (a lease of the
 * service's own, or the heap tensors) until the trainer that got it asks for another one — the
 * protocol allows one request in flight, so that request proves the batch arrived. A trainer that
 * reconnects says where it is (the cursor from its saved state); held batches from that cursor on
 * are handed out again, in order, before anything new, and a batch that was still being produced
 * for the dead connection joins them when it completes. Nothing is lost or repeated for the rank.
 * A request without a connection (a Flight ticket without a session) is at most once, and only for
 * a rank no trainer holds, one at a time ({@link #next}).
 *
 * <p>Restart: a service started afresh (after SIGTERM, {@code kill -9}, a resize) whose first
 * trainer resumes from a saved cursor restarts its pipeline at that cursor, provided no trainer has
 * been welcomed yet. The cursor is global, so a state saved with R ranks resumes with R' ranks: the
 * epoch's order continues with nothing lost or repeated. A running service moves back to an older
 * cursor (trainers restarted from their last checkpoint after a crash, as an elastic restart does)
 * when no rank has a trainer connected: what the old timeline held is dropped, and every rank then
 * resumes from the same checkpoint.
 *
 * <p>Each rank walks the stream's {@link StepSchedule} (whichever kind it is) from where the stream starts: the walk says
 * which step, label and samples the rank's next batch is, and every batch the stream makes is checked against it
 * ({@link DeliveryAudit}) before anyone gets it.
 *
 * <p>Time: the grace a claim waits for an old connection to close is measured by a {@link Ticker} (the real clock unless
 * a test passes its own).
 *
 * <p>Threading: safe from the server's connection threads. Each rank's requests are chained, so
 * they complete in order even across connections; the bookkeeping is guarded by {@code lock}.
 */
public final class RankLedger implements BatchProvider, AutoCloseable {
    private final BatchStream stream;
    private final ShmObjectStore store;
    private final long expectedBatchBytes;
    private final long steps;
    /** How long a trainer claiming a rank waits for the rank's old connection to be seen closing. */
    static final long LIVE_GRACE_NANOS = TimeUnit.SECONDS.toNanos(2);
    /** How often a waiting claim looks at the ticker again when nothing wakes it. */
    static final long GRACE_POLL_MILLIS = 20;
    private final Ticker ticker;
    private final Object lock = new Object();
    private final RankSlot[] slots;
    private final long[] handed, confirmed, replayed; // per rank: batches taken from the stream, proven arrived, handed out again
    private final DeliveryAudit audit;
    private final CompletableFuture<RuntimeException> failure = new CompletableFuture<>();
    private volatile IllegalStateException violation;
    private boolean welcomed;
    private final TrainerTimings timings = new TrainerTimings();
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

        /** The batch's size as laid out, what its trainer receives. */
        long size() { return prepared != null ? BatchLayout.sizeOf(prepared.tensors()) : bytes; }

        BatchLayout.Meta meta() { return prepared != null ? prepared.meta() : BatchLayout.read(object.segment().asSlice(0, bytes)).meta(); }

        /** The batch's metadata {@code sample_index}: the samples the ledger checks against the schedule. */
        long[] sampleIndices() {
            if (prepared == null) return BatchLayout.read(object.segment().asSlice(0, bytes)).sampleIndex();
            return new BatchLayout.Batch(prepared.meta(), prepared.tensors(), 0).sampleIndex();
        }
    }

    /** A batch being produced for the rank's share {@code step}; a reconnect that resumes past it has it dropped when it arrives. */
    private static final class InFlight {
        final ScheduledBatch step;
        boolean dropOnArrival;

        InFlight(ScheduledBatch step) { this.step = step; }

        ScheduleCursor cursor() { return step.cursor(); }
    }

    /** A rank's walk over the schedule: the share of the step the stream yields next for it, taken one at a time. */
    private static final class Walk {
        private final Iterator<ScheduledBatch> steps;
        private ScheduledBatch next;

        Walk(Iterator<ScheduledBatch> steps) { this.steps = steps; }

        ScheduledBatch peek() {
            if (next == null) next = steps.next();
            return next;
        }

        ScheduledBatch take() {
            var b = peek();
            next = null;
            return b;
        }
    }

    private static final class RankSlot {
        Walk walk;                                           // from the next batch the stream yields for this rank
        long fromFeeder;                                     // batches taken from the stream (for --steps)
        final ArrayDeque<Held> held = new ArrayDeque<>();    // handed out, not yet confirmed
        final ArrayDeque<Held> replay = new ArrayDeque<>();  // to hand out again before anything new
        final ArrayDeque<InFlight> inFlight = new ArrayDeque<>(); // taken from the stream, not yet made
        long connection = -1;                                // the connection now serving this rank
        long live = -1;                                      // that connection while it is open, else -1
        int plain;                                           // requests without a connection not yet answered (0 or 1)
        CompletableFuture<?> tail = CompletableFuture.completedFuture(null);

        /** The cursor of the next batch the stream yields for this rank. */
        ScheduleCursor next() { return walk.peek().cursor(); }
    }

    /**
     * Serves {@code stream}; closes it, and {@code store} (may be null) after it, on {@link #close()}.
     * Each rank's feed ends after {@code steps} steps (0: at the stream's end).
     */
    public RankLedger(BatchStream stream, ShmObjectStore store, long expectedBatchBytes, long steps) {
        this(stream, store, expectedBatchBytes, steps, Ticker.system());
    }

    /** {@link #RankLedger(BatchStream, ShmObjectStore, long, long)} with a claim's grace measured by {@code ticker}. */
    public RankLedger(BatchStream stream, ShmObjectStore store, long expectedBatchBytes, long steps, Ticker ticker) {
        this.stream = stream;
        this.store = store;
        this.expectedBatchBytes = expectedBatchBytes;
        this.steps = steps;
        this.ticker = ticker;
        int ranks = stream.ranks();
        this.slots = new RankSlot[ranks];
        this.handed = new long[ranks];
        this.confirmed = new long[ranks];
        this.replayed = new long[ranks];
        var schedule = stream.schedule();
        this.audit = new DeliveryAudit(ranks, schedule);
        for (int r = 0; r < ranks; r++) slots[r] = new RankSlot();
        walkFrom(schedule, stream.start());
    }

    /** Every rank walks {@code schedule} from {@code at} (aligned), labelled as the schedule labels the step there. */
    private void walkFrom(StepSchedule schedule, ScheduleCursor at) {
        var c = schedule.aligned(at);
        for (int r = 0; r < slots.length; r++) slots[r].walk = new Walk(schedule.iterator(c, r));
    }

    /**
     * Serves a local pipeline, {@code feeder}. {@code reopen} (may be null: no restart at a trainer's
     * cursor) starts an equivalent feeder at a given cursor, its step labelled as given (−1: from the origin).
     */
    public RankLedger(Feeder feeder, ShmObjectStore store, long expectedBatchBytes, long steps,
                      BiFunction<ScheduleCursor, Long, Feeder> reopen) {
        this(new FeederStream(feeder, reopen), store, expectedBatchBytes, steps);
    }

    /** A ledger over {@code feeder} that cannot move its pipeline (no restart at a trainer's cursor). */
    public RankLedger(Feeder feeder, ShmObjectStore store, long expectedBatchBytes, long steps) {
        this(feeder, store, expectedBatchBytes, steps, null);
    }

    /** The local pipeline now (a restart at a trainer's cursor replaces it); null when the stream is not a local pipeline. */
    public Feeder feeder() { return stream instanceof FeederStream f ? f.feeder() : null; }

    /** Completes when the ledger finds its accounting broken (the trainers get the error too). */
    public CompletableFuture<RuntimeException> failure() { return failure; }

    /** The shared-memory store of a ZERO_COPY job, else null. */
    public ShmObjectStore store() { return store; }

    /** The job's world size. */
    public int ranks() { return slots.length; }

    /** The ranks this node serves (a node of a multi-node job: its own; else every rank). */
    public RankRange localRanks() { return stream.localRanks(); }

    /** Steps each rank is fed before its END (0: no end). */
    public long steps() { return steps; }

    /** What the trainers measured and reported, per rank (docs/protocol.md, NEXT). */
    public TrainerTimings timings() { return timings; }

    /** Records the trainer's timing of the batch its rank was handed last (the request it comes with has not taken the next yet). */
    @Override
    public void report(int rank, long connection, long waitNanos, long stepNanos) {
        timings.report(rank, waitNanos, stepNanos);
    }

    /** Records the trainer's measured compute floor (headspace analysis). */
    @Override
    public void reportHeadspace(int rank, long connection, long floorNanos, long replayedSteps) {
        timings.headspace(rank, floorNanos, replayedSteps);
    }

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
        var local = localRanks();
        if (!local.contains(rank))
            throw new IllegalArgumentException("rank " + rank + " is not served by this node: it serves ranks " + local + " of " + world
                    + " (--local-ranks); connect rank " + rank + " to the service of the node that serves it");
    }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
        return join(rank, connection, resume, -1, fingerprint);
    }

    @Override
    public Joined join(int rank, long connection, ScheduleCursor resume, long resumeStep, long fingerprint) {
        synchronized (lock) {
            if (violation != null) throw new IllegalArgumentException(violation.getMessage());
            if (fingerprint != 0 && fingerprint != stream.fingerprint())
                throw new IllegalArgumentException("the saved state is from another data set or configuration (fingerprint "
                        + Long.toHexString(fingerprint) + ", this job's is " + Long.toHexString(stream.fingerprint())
                        + "): the manifest, seed, batch size and encoding must be the same to resume");
            if (resume != null && fingerprint == 0 && !resume.equals(ScheduleCursor.START))
                throw new IllegalArgumentException("the saved state has no fingerprint, so it cannot be checked against this job: "
                        + "resume from a state the client saved (state_dict / state()) after it was connected");
            var slot = slots[rank];
            awaitNotClaimed(rank, slot, connection);
            if (resume == null) { // a fresh trainer takes what comes next; what an earlier connection got counts as taken
                slot.connection = connection;
                setLive(slot, connection);
                dropHeld(slot);
                welcomed = true;
                return joined(slot, firstToHandOut(slot));
            }
            var schedule = stream.schedule();
            if (resume.position() >= schedule.datasetSize())
                throw new IllegalArgumentException("cannot resume at " + resume + ": the data set has " + schedule.datasetSize() + " samples");
            var want = schedule.aligned(new ScheduleCursor(resume.epoch(), resume.position()));
            boolean fresh = !welcomed && noneHandedOut();
            // a fresh service moves to the first state it is given; a running one moves back (a trainer restarted from its last
            // checkpoint, as an elastic restart does with every rank) only while no rank has a trainer connected
            // a fresh one also takes the trainer's step labels, which a change of rank count would not repeat (audit #32);
            // the label at want is known where the rank is about to take it (elsewhere the move relabels anyway)
            var upcoming = slot.walk.peek();
            boolean relabel = fresh && resumeStep >= 0 && want.equals(upcoming.cursor()) && upcoming.globalStep() != resumeStep;
            if ((!want.equals(upcoming.cursor()) || relabel) && (fresh || (!servable(slot, want) && awaitNoTrainer())))
                reposition(want, resumeStep);
            if (!reconcile(slot, want)) {
                var at = new ArrayList<String>();
                slot.held.forEach(h -> at.add(label(h.cursor())));
                slot.replay.forEach(h -> at.add(label(h.cursor())));
                at.add(label(slot.next()));
                throw new IllegalArgumentException("rank " + rank + " asks to resume at " + label(want) + " but this service can serve it from "
                        + String.join(" or ", at) + (welcomed ? " (a trainer of another rank is connected, so the pipeline cannot move;"
                        + " stop every rank and resume each from the same saved state)" : ""));
            }
            slot.connection = connection; // only now: a refused hello must not take the rank from a live connection
            setLive(slot, connection);
            welcomed = true;
            return joined(slot, want);
        }
    }

    /**
     * Waits a moment for the rank's open connection, if another one, to close (a trainer restarted
     * at once after a crash: its old connection's end is seen within a poll), and for a request
     * without a connection to be answered (the batch it takes is not the newcomer's); refuses the
     * newcomer if either stays, so that one rank never feeds two trainers and a trainer is never
     * welcomed at a batch that goes elsewhere.
     */
    private void awaitNotClaimed(int rank, RankSlot slot, long connection) {
        if (connection == NO_CONNECTION) return;
        long deadline = ticker.read() + LIVE_GRACE_NANOS;
        while ((slot.live >= 0 && slot.live != connection) || slot.plain > 0) {
            long left = deadline - ticker.read();
            if (left <= 0 && slot.live >= 0 && slot.live != connection)
                throw new IllegalArgumentException("rank " + rank + " is already being fed to a trainer on another, open connection; "
                        + "two trainers on one rank would each get part of its batches. Check the launcher's RANK/LOCAL_RANK, or stop "
                        + "the old trainer first");
            if (left <= 0)
                throw new IllegalArgumentException("rank " + rank + "'s next batch is being taken by a request without a session "
                        + "(a Flight ticket without one); stop that client, or try again once its batch has gone");
            try {
                lock.wait(pollMillis(left));
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
                setLive(slot, -1);
                lock.notifyAll();
            }
        }
    }

    /** The cursor of the first batch a fresh trainer will get: one to hand out again, then one still being made, then the next. */
    private static ScheduleCursor firstToHandOut(RankSlot slot) {
        if (!slot.replay.isEmpty()) return slot.replay.peekFirst().cursor();
        for (var f : slot.inFlight) if (!f.dropOnArrival) return f.cursor();
        return slot.next();
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
        for (int i = 0; i < flights.size(); i++) if (flights.get(i).cursor().equals(want)) flight = i;
        if (at < 0 && flight < 0 && !want.equals(slot.next())) return false;
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

    /**
     * Restarts the stream at {@code at}, labelled {@code step} (−1: from the origin): nothing handed out
     * yet, or no trainer connected. Every rank then walks the moved stream's schedule from there.
     */
    private void reposition(ScheduleCursor at, long step) {
        var before = stream.schedule();
        stream.moveTo(at, step);
        for (var s : slots) {
            // moved back: --steps counts the steps again
            if (s.fromFeeder > 0) s.fromFeeder -= before.stepsBetween(at, s.next(), s.fromFeeder);
            s.tail = CompletableFuture.completedFuture(null);
            dropHeld(s); // batches of the old timeline: nobody gets them now
            s.replay.forEach(Held::drop);
            s.replay.clear();
            s.inFlight.forEach(f -> f.dropOnArrival = true);
        }
        var schedule = stream.schedule();
        walkFrom(schedule, at);
        audit.moved(schedule);
        repositions++;
    }

    /** Whether {@code want} is among the rank's held, replayable, in-flight or next batches. */
    private static boolean servable(RankSlot slot, ScheduleCursor want) {
        if (want.equals(slot.next())) return true;
        for (var h : slot.held) if (h.cursor().equals(want)) return true;
        for (var h : slot.replay) if (h.cursor().equals(want)) return true;
        for (var f : slot.inFlight) if (f.cursor().equals(want)) return true;
        return false;
    }

    /**
     * Whether no rank has a trainer connected, waiting a moment for those still connected to close:
     * an elastic restart stops every rank and starts them again, and the service may see a new
     * trainer's hello before an old one's end. Called with the lock held; the wait releases it.
     */
    private boolean awaitNoTrainer() {
        long deadline = ticker.read() + LIVE_GRACE_NANOS;
        while (!noTrainerConnected()) {
            long left = deadline - ticker.read();
            if (left <= 0) return false;
            try {
                lock.wait(pollMillis(left));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return true;
    }

    /**
     * How long a grace's wait sleeps before it looks at the ticker again: what is {@code left} of the grace, at most
     * {@link #GRACE_POLL_MILLIS}, so that a ticker a test moves by hand is seen within moments. A connection's close wakes
     * the wait at once.
     */
    private static long pollMillis(long leftNanos) { return Math.max(1, Math.min(leftNanos / 1_000_000, GRACE_POLL_MILLIS)); }

    private boolean noTrainerConnected() {
        for (var s : slots) if (s.live >= 0) return false;
        return true;
    }

    /**
     * Ranks with a trainer connected now. Read without the ledger's lock: a join that moves the
     * stream holds the lock while the stream asks (a cluster's coordinator asks every node this).
     */
    public int trainersConnected() { return connectedCount; }

    private volatile int connectedCount; // ranks whose live >= 0; written under the lock

    private void setLive(RankSlot slot, long connection) {
        if ((slot.live >= 0) != (connection >= 0)) connectedCount += connection >= 0 ? 1 : -1;
        slot.live = connection;
    }

    /**
     * What a trainer of {@code slot}'s rank whose next batch is at {@code c} is told: the label the ledger walked to there
     * (a batch to hand out again, one being made, or the next), and the schedule's steps per epoch and positions per step
     * (0 where a step's positions vary: a client then follows each batch's resume state, not arithmetic).
     */
    private Joined joined(RankSlot slot, ScheduleCursor c) {
        var schedule = stream.schedule();
        long label = slot.walk.peek().globalStep();
        for (var f : slot.inFlight) if (f.cursor().equals(c) && !f.dropOnArrival) label = f.step.globalStep();
        for (var h : slot.replay) if (h.cursor().equals(c)) label = h.meta().globalStep();
        return new Joined(label, stream.fingerprint(), schedule.stepsPerEpoch(), c, schedule.datasetSize(), schedule.positionsPerStep());
    }

    private String label(ScheduleCursor c) { return "epoch " + c.epoch() + " position " + c.position(); }

    private static void dropHeld(RankSlot slot) {
        slot.held.forEach(Held::drop);
        slot.held.clear();
    }

    @Override
    public long expectedBatchBytes() { return expectedBatchBytes; }

    @Override
    public boolean sharedMemory() { return stream.sharedMemory(); }

    /**
     * {@inheritDoc}
     *
     * <p>A request without a connection ({@link #NO_CONNECTION}: a Flight ticket without a session)
     * takes the rank's next batch, at most once (nothing proves it arrived, no reconnect asks for it again).
     * It is refused while a trainer holds the rank on an open connection or session, whose batches
     * are its alone, and while the rank's previous such request is unanswered: one at a time per
     * rank, so that such requests cannot drain a rank ahead of its trainers.
     */
    @Override
    public CompletableFuture<? extends Delivery> next(int rank, long connection) {
        synchronized (lock) {
            var slot = slots[rank];
            if (connection == NO_CONNECTION) admitWithoutConnection(rank, slot);
            else timings.requested(rank);
            var out = slot.tail.handle((x, e) -> null).thenCompose(ignored -> produce(rank, connection));
            slot.tail = out;
            if (connection == NO_CONNECTION)
                out.whenComplete((d, e) -> {
                    synchronized (lock) {
                        slot.plain--;
                        lock.notifyAll(); // a trainer's join may wait for it
                    }
                });
            return out;
        }
    }

    /** Counts a request without a connection in, or refuses it (see {@link #next}). Called with the lock held. */
    private static void admitWithoutConnection(int rank, RankSlot slot) {
        if (slot.live >= 0)
            throw new IllegalArgumentException("rank " + rank + " is being fed to a trainer on an open connection or session; a request "
                    + "without a session cannot take its batches (each would be missing from that trainer's). Open a session to resume "
                    + "the rank, or stop its trainer first");
        if (slot.plain > 0)
            throw new IllegalArgumentException("rank " + rank + " has a request without a session unanswered already: one at a time "
                    + "per rank");
        slot.plain++;
    }

    /** The rank's next hand-out, once the request before it has completed. */
    private CompletableFuture<Delivery> produce(int rank, long connection) {
        InFlight flight;
        synchronized (lock) {
            if (violation != null) return CompletableFuture.failedFuture(violation);
            var slot = slots[rank];
            if (connection == slot.connection) confirm(rank, slot); // this request proves the previous hand-outs arrived
            if (!slot.replay.isEmpty()) {
                var h = slot.replay.pollFirst();
                slot.held.addLast(h);
                replayed[rank]++;
                timings.handedOut(rank, h.size(), h.meta().batchSize());
                return CompletableFuture.completedFuture(h.handOut());
            }
            if (steps > 0 && slot.fromFeeder >= steps) return CompletableFuture.completedFuture(null);
            slot.fromFeeder++;
            flight = new InFlight(slot.walk.take());
            slot.inFlight.addLast(flight);
        }
        return stream.next(rank).handle((made, err) -> {
            synchronized (lock) {
                var slot = slots[rank];
                slot.inFlight.remove(flight);
                if (err != null) throw err instanceof CompletionException ce ? ce : new CompletionException(err);
                if (made == null) return null; // the stream ended
                var h = held(flight.cursor(), made);
                try {
                    audit.check(flight.step, h.meta(), h.sampleIndices());
                } catch (IllegalStateException broken) {
                    violated(broken);
                    h.drop();
                    throw new CompletionException(broken);
                }
                handed[rank]++;
                if (!flight.dropOnArrival) timings.handedOut(rank, h.size(), h.meta().batchSize());
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

    private static Held held(ScheduleCursor cursor, BatchStream.Made made) {
        return switch (made) {
            case BatchStream.Heap heap -> new Held(cursor, heap.prepared(), null, 0, null);
            case BatchStream.InStore in -> new Held(cursor, null, in.object(), in.bytes(), in.hold());
        };
    }

    /** The rank's hand-outs so far are proven to have arrived. */
    private void confirm(int rank, RankSlot slot) {
        confirmed[rank] += slot.held.size();
        dropHeld(slot);
    }

    /** The audit found the accounting broken: the job fails with it (the trainers get the error, the node exits with it). */
    private void violated(IllegalStateException e) {
        if (violation == null) {
            violation = e;
            failure.complete(e);
        }
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

    /** The bottleneck verdict with the trainers' figures: their (steady) wait ratio and the transfer's share of it. */
    public BottleneckVerdict verdict(double trainerWaitRatio, OptionalDouble transferShare) {
        // with the trainers' measured compute floor, when one reported it: how much per step the data side can still win
        return Bottleneck.classify(feeder().bottleneckInputs().withTrainer(trainerWaitRatio, transferShare)).withHeadspace(timings.headspace());
    }

    /**
     * The verdict now: with the wait ratio the trainers reported (steady state: after each rank's
     * first {@link #STEADY_SKIP_STEPS} steps; the transfer's share of it is not reported, so unknown)
     * once they have reported a step, else the pipeline's alone.
     */
    public BottleneckVerdict verdict() {
        if (!timings.any()) return feeder().verdict();
        return verdict(timings.steadyWaitRatio(STEADY_SKIP_STEPS).orElse(0), OptionalDouble.empty());
    }

    /** Steps of each rank left out of the steady wait ratio: the cold start (the report's rule, {@code RunData.STEADY_SKIP_STEPS}). */
    static final int STEADY_SKIP_STEPS = 3;

    /** The pipeline's (a local one's), the store's and the ledger's counters, for the run's JSON. */
    public Map<String, Object> metrics() {
        var m = new LinkedHashMap<String, Object>();
        var feeder = feeder();
        var snapshot = feeder == null ? null : feeder.metrics();
        if (snapshot != null) m.put("pipeline", snapshot);
        if (store != null) m.put("store", store.metrics());
        var cache = feeder == null ? null : feeder.config().cache();
        if (cache != null) m.put("cache", cacheJson(cache.store().stats(), cache.store().compressed())); // docs/run-data.md
        m.put("kept_for_reconnect", kept());
        m.put("ledger", ledgerMetrics());
        m.put("trainers", timings.toJson());
        if (snapshot != null) {
            var stages = new LinkedHashMap<String, Object>(); // docs/run-data.md
            snapshot.stages().forEach((name, stage) -> stages.put(name, stage.toJson()));
            m.put("stages", stages);
            m.put("timeline", feeder.timeline().toJson());
            var local = localRanks(); // the timeline's per-rank columns are these ranks', in order
            if (!local.isAll(ranks())) m.put("local_ranks", Map.of("first", local.first(), "last", local.last(), "world", ranks()));
            m.put("verdict", verdict().toJson());
            feeder.autotune().ifPresent(t -> m.put("autotune", t.toJson())); // docs/run-data.md: knobs and every decision
        }
        return m;
    }

    /** The cache of preprocessed samples' counters as the run's JSON holds them. */
    static Map<String, Object> cacheJson(dev.stoker.cache.CacheStats s, boolean compressed) {
        var m = new LinkedHashMap<String, Object>();
        m.put("hits", s.hits());
        m.put("misses", s.misses());
        m.put("hit_rate", Math.round(s.hitRate() * 10_000) / 10_000.0);
        m.put("corrupt", s.corrupt());
        m.put("written", s.written());
        m.put("write_failures", s.writeFailures());
        m.put("raw_bytes_read", s.rawBytesRead());
        m.put("stored_bytes_read", s.storedBytesRead());
        m.put("raw_bytes_written", s.rawBytesWritten());
        m.put("stored_bytes_written", s.storedBytesWritten());
        m.put("evicted", s.evicted());
        m.put("rejected", s.rejected());
        m.put("entries", s.entries());
        m.put("stored_bytes", s.storedBytes());
        m.put("budget_bytes", s.budgetBytes());
        m.put("compressed", compressed);
        return m;
    }

    /** What each rank was handed, confirmed and handed again, the epochs checked, and the first violation (or null). */
    public Map<String, Object> ledgerMetrics() {
        synchronized (lock) {
            var m = new LinkedHashMap<String, Object>();
            var ranks = new ArrayList<Map<String, Object>>();
            var local = localRanks();
            for (int r = local.first(); r <= local.last(); r++) { // this node's ranks only; each entry names its global rank
                var x = new LinkedHashMap<String, Object>();
                x.put("rank", r);
                x.put("handed", handed[r]);
                x.put("confirmed", confirmed[r]);
                x.put("replayed", replayed[r]);
                var a = audit.tally(r);
                x.put("epoch", a == null ? null : a.epoch());
                x.put("epoch_delivered", a == null ? 0 : a.delivered());
                x.put("epoch_skipped", a == null ? 0 : a.skipped());
                ranks.add(x);
            }
            m.put("ranks", ranks);
            m.put("epochs_checked", audit.epochsChecked());
            m.put("repositions", repositions);
            m.put("violation", violation == null ? null : violation.getMessage());
            return m;
        }
    }

    /** Epoch ends checked (per rank), and whether a check failed. */
    public long epochsChecked() {
        synchronized (lock) {
            return audit.epochsChecked();
        }
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
        stream.close();
        if (store != null) store.close();
    }
}
