package dev.stoker.node;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.pipeline.observe.Bottleneck;
import dev.stoker.pipeline.observe.BottleneckVerdict;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.pipeline.feed.PackedFeed;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.schedule.SampleSchedule;
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
 * <p>Threading: safe from the server's connection threads. Each rank's requests are chained, so
 * they complete in order even across connections; the bookkeeping is guarded by {@code lock}.
 */
public final class RankLedger implements BatchProvider, AutoCloseable {
    private final BatchStream stream;
    private final ShmObjectStore store;
    private final long expectedBatchBytes;
    private final long steps;
    /** How long a trainer claiming a rank waits for the rank's old connection to be seen closing. */
    private static final long LIVE_GRACE_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(2);
    private final Object lock = new Object();
    private final RankSlot[] slots;
    private final long[] handed, confirmed, replayed; // per rank: batches taken from the stream, proven arrived, handed out again
    private final EpochAccount[] accounts;
    private final CompletableFuture<RuntimeException> failure = new CompletableFuture<>();
    private volatile IllegalStateException violation;
    private boolean welcomed;
    private final TrainerTimings timings = new TrainerTimings();
    private long repositions, epochsChecked;

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

    /**
     * A batch being produced; a reconnect that resumes past it has it dropped when it arrives. A packed job's carries its
     * step's label and its step within the epoch (the ledger walks the packed steps: no arithmetic gives them); −1 unpacked.
     */
    private static final class InFlight {
        final ScheduleCursor cursor;
        final long label, inEpoch;
        boolean dropOnArrival;

        InFlight(ScheduleCursor cursor, long label, long inEpoch) {
            this.cursor = cursor;
            this.label = label;
            this.inEpoch = inEpoch;
        }
    }

    private static final class RankSlot {
        ScheduleCursor next;                                 // cursor of the next batch the stream yields for this rank
        long nextLabel, nextInEpoch;                         // a packed job's: that step's label and step within its epoch
        long fromFeeder;                                     // batches taken from the stream (for --steps)
        final ArrayDeque<Held> held = new ArrayDeque<>();    // handed out, not yet confirmed
        final ArrayDeque<Held> replay = new ArrayDeque<>();  // to hand out again before anything new
        final ArrayDeque<InFlight> inFlight = new ArrayDeque<>(); // taken from the stream, not yet made
        long connection = -1;                                // the connection now serving this rank
        long live = -1;                                      // that connection while it is open, else -1
        int plain;                                           // requests without a connection not yet answered (0 or 1)
        CompletableFuture<?> tail = CompletableFuture.completedFuture(null);
    }

    /**
     * Serves {@code stream}; closes it, and {@code store} (may be null) after it, on {@link #close()}.
     * Each rank's feed ends after {@code steps} steps (0: at the stream's end).
     */
    public RankLedger(BatchStream stream, ShmObjectStore store, long expectedBatchBytes, long steps) {
        this.stream = stream;
        this.store = store;
        this.expectedBatchBytes = expectedBatchBytes;
        this.steps = steps;
        int ranks = stream.ranks();
        this.slots = new RankSlot[ranks];
        this.handed = new long[ranks];
        this.confirmed = new long[ranks];
        this.replayed = new long[ranks];
        this.accounts = new EpochAccount[ranks];
        for (int r = 0; r < ranks; r++) {
            slots[r] = new RankSlot();
            slots[r].next = stream.start();
        }
        var packed = stream.packed();
        if (packed != null) startPacked(packed, stream.start(), -1);
    }

    /**
     * A packed job's every rank takes next the step at {@code at} (as the planner aligns it), labelled {@code label} (−1: as
     * the stream labels its start, {@link BatchStream#startLabel()}, or else by the steps from the origin), numbered within
     * its epoch as the packed schedule numbers it. Walking from the origin plans every step before {@code at}: only at a
     * start or a move, and only when nobody gave a label.
     */
    private void startPacked(PackedSchedule packed, ScheduleCursor at, long label) {
        var c = packed.planner().aligned(at);
        long l = label >= 0 ? label : stream.startLabel() >= 0 ? stream.startLabel() : packed.labelAt(c, -1);
        long inEpoch = c.position() == 0 ? 0 : packed.stepInEpoch(c);
        for (var s : slots) {
            s.next = c;
            s.nextLabel = l;
            s.nextInEpoch = inEpoch;
        }
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
    public dev.stoker.pipeline.feed.RankRange localRanks() { return stream.localRanks(); }

    /** Steps each rank is fed before its END (0: no end). */
    public long steps() { return steps; }

    /** What the trainers measured and reported, per rank (docs/protocol.md, NEXT). */
    public TrainerTimings timings() { return timings; }

    /** Records the trainer's timing of the batch its rank was handed last (the request it comes with has not taken the next yet). */
    @Override
    public void report(int rank, long connection, long waitNanos, long stepNanos) {
        timings.report(rank, waitNanos, stepNanos);
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
            var packed = stream.packed();
            if (resume.position() >= schedule.datasetSize())
                throw new IllegalArgumentException("cannot resume at " + resume + ": the data set has " + schedule.datasetSize() + " samples");
            var saved = new ScheduleCursor(resume.epoch(), resume.position());
            var want = packed != null ? packed.planner().aligned(saved) : schedule.aligned(saved);
            boolean fresh = !welcomed && noneHandedOut();
            // a fresh service moves to the first state it is given; a running one moves back (a trainer restarted from its last
            // checkpoint, as an elastic restart does with every rank) only while no rank has a trainer connected
            // a fresh one also takes the trainer's step labels, which a change of rank count would not repeat (audit #32);
            // a packed job's label at want is known where the rank is about to take it (else the move relabels anyway)
            boolean relabel = fresh && resumeStep >= 0 && (packed != null ? want.equals(slot.next) && slot.nextLabel != resumeStep
                    : schedule.globalStep(want) != resumeStep);
            if ((!want.equals(slot.next) || relabel) && (fresh || (!servable(slot, want) && awaitNoTrainer())))
                reposition(want, resumeStep);
            if (!reconcile(slot, want)) {
                var at = new ArrayList<String>();
                slot.held.forEach(h -> at.add(label(h.cursor())));
                slot.replay.forEach(h -> at.add(label(h.cursor())));
                at.add(label(slot.next));
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
        long deadline = System.nanoTime() + LIVE_GRACE_NANOS;
        while ((slot.live >= 0 && slot.live != connection) || slot.plain > 0) {
            long left = deadline - System.nanoTime();
            if (left <= 0 && slot.live >= 0 && slot.live != connection)
                throw new IllegalArgumentException("rank " + rank + " is already being fed to a trainer on another, open connection; "
                        + "two trainers on one rank would each get part of its batches. Check the launcher's RANK/LOCAL_RANK, or stop "
                        + "the old trainer first");
            if (left <= 0)
                throw new IllegalArgumentException("rank " + rank + "'s next batch is being taken by a request without a session "
                        + "(a Flight ticket without one); stop that client, or try again once its batch has gone");
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
                setLive(slot, -1);
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

    /**
     * Restarts the stream at {@code at}, labelled {@code step} (−1: from the origin): nothing handed out
     * yet, or no trainer connected.
     */
    private void reposition(ScheduleCursor at, long step) {
        var before = stream.schedule();
        var packedBefore = stream.packed();
        stream.moveTo(at, step);
        for (var s : slots) {
            long back = packedBefore != null ? stepsBetween(packedBefore, at, s.next, s.fromFeeder)
                    : naturalStep(before, s.next) - naturalStep(before, at);
            if (back > 0) s.fromFeeder = Math.max(0, s.fromFeeder - back); // moved back: --steps counts the steps again
            s.next = at;
            s.tail = CompletableFuture.completedFuture(null);
            dropHeld(s); // batches of the old timeline: nobody gets them now
            s.replay.forEach(Held::drop);
            s.replay.clear();
            s.inFlight.forEach(f -> f.dropOnArrival = true);
        }
        var packed = stream.packed();
        if (packed != null) startPacked(packed, at, step);
        java.util.Arrays.fill(accounts, null);
        repositions++;
    }

    /** A packed job's steps from {@code from} up to {@code to}, walking its plans; at most {@code max} (0 when {@code to} is not after {@code from}). */
    private static long stepsBetween(PackedSchedule packed, ScheduleCursor from, ScheduleCursor to, long max) {
        var x = packed.planner().aligned(from);
        long n = 0;
        while (n < max && (x.epoch() < to.epoch() || (x.epoch() == to.epoch() && x.position() < to.position()))) {
            x = packed.planner().plan(x, n).next();
            n++;
        }
        return n;
    }

    /** Whether {@code want} is among the rank's held, replayable, in-flight or next batches. */
    private static boolean servable(RankSlot slot, ScheduleCursor want) {
        if (want.equals(slot.next)) return true;
        for (var h : slot.held) if (h.cursor().equals(want)) return true;
        for (var h : slot.replay) if (h.cursor().equals(want)) return true;
        for (var f : slot.inFlight) if (f.cursor.equals(want)) return true;
        return false;
    }

    /**
     * Whether no rank has a trainer connected, waiting a moment for those still connected to close:
     * an elastic restart stops every rank and starts them again, and the service may see a new
     * trainer's hello before an old one's end. Called with the lock held; the wait releases it.
     */
    private boolean awaitNoTrainer() {
        long deadline = System.nanoTime() + LIVE_GRACE_NANOS;
        while (!noTrainerConnected()) {
            long left = deadline - System.nanoTime();
            if (left <= 0) return false;
            try {
                lock.wait(Math.max(1, left / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return true;
    }

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
     * What a trainer of {@code slot}'s rank whose next batch is at {@code c} is told. A packed job's label of {@code c} is
     * the one the ledger walked to (a batch to hand out again, one being made, or the next), and its steps per epoch and
     * positions per step are 0: a step's positions vary, so a client follows each batch's resume state, not arithmetic.
     */
    private Joined joined(RankSlot slot, ScheduleCursor c) {
        var schedule = stream.schedule();
        if (stream.packed() == null)
            return new Joined(schedule.globalStep(c), stream.fingerprint(), schedule.stepsPerEpoch(), c, schedule.datasetSize(),
                    schedule.positionsPerStep());
        long label = slot.nextLabel;
        for (var f : slot.inFlight) if (f.cursor.equals(c) && !f.dropOnArrival) label = f.label;
        for (var h : slot.replay) if (h.cursor().equals(c)) label = h.meta().globalStep();
        return new Joined(label, stream.fingerprint(), 0, c, schedule.datasetSize(), 0);
    }

    /** Steps from the origin to {@code c}, whatever the labels: how far a move goes. */
    private static long naturalStep(SampleSchedule schedule, ScheduleCursor c) {
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
        ScheduleCursor cursor;
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
            cursor = slot.next;
            var packed = stream.packed();
            if (packed != null) { // the packed step at the cursor, planned once for all ranks (the feed's plan, from its cache)
                var step = packed.step(cursor, slot.nextLabel);
                flight = new InFlight(cursor, slot.nextLabel, slot.nextInEpoch);
                slot.next = step.next();
                slot.nextInEpoch = step.next().epoch() == cursor.epoch() ? slot.nextInEpoch + 1 : 0;
                slot.nextLabel++;
            } else {
                slot.next = stream.schedule().next(cursor);
                flight = new InFlight(cursor, -1, -1);
            }
            slot.inFlight.addLast(flight);
        }
        return stream.next(rank).handle((made, err) -> {
            synchronized (lock) {
                var slot = slots[rank];
                slot.inFlight.remove(flight);
                if (err != null) throw err instanceof CompletionException ce ? ce : new CompletionException(err);
                if (made == null) return null; // the stream ended
                var h = held(cursor, made);
                try {
                    account(rank, flight, h);
                } catch (IllegalStateException broken) {
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

    /**
     * Checks a batch the stream made against the schedule before anyone gets it: its rank and step
     * are the cursor's, its sample indices are among the cursor's, delivered + skipped = scheduled;
     * and when the rank enters a new epoch, that the epoch it leaves had every step from where this
     * ledger began it, each once. A violation fails the job: the trainers get the error, the node
     * exits with it. A packed job's batch is checked against its rank's pack of the step ({@link #accountPacked}).
     */
    private void account(int rank, InFlight flight, Held h) {
        var packed = stream.packed();
        if (packed != null) {
            accountPacked(rank, packed, flight, h);
            return;
        }
        var cursor = flight.cursor;
        var schedule = stream.schedule();
        var meta = h.meta();
        long step = cursor.position() / schedule.positionsPerStep();
        String where = "rank " + rank + " epoch " + cursor.epoch() + " step " + step;
        if (meta.rank() != rank || meta.epoch() != cursor.epoch() || meta.globalStep() != schedule.globalStep(cursor))
            fail(where + ": the batch made is rank " + meta.rank() + " epoch " + meta.epoch() + " global step " + meta.globalStep());
        if (meta.batchSize() > meta.scheduled() || meta.scheduled() != schedule.batchSize())
            fail(where + ": " + meta.batchSize() + " delivered of " + meta.scheduled() + " scheduled, the schedule has "
                    + schedule.batchSize() + " per batch");
        var expected = new java.util.HashMap<Long, Integer>(); // a multiset: a source of weight > 1 may repeat a record in a batch
        for (int i : schedule.batchAt(cursor, rank)) expected.merge((long) i, 1, Integer::sum);
        for (long i : h.sampleIndices())
            if (expected.merge(i, -1, Integer::sum) < 0) fail(where + ": sample " + i + " is not one of this batch's, or comes more often");
        tally(rank, cursor, step, meta, schedule.batchSize(), false, where);
    }

    /**
     * {@link #account} for a packed job: the batch is the rank's pack of the step at the cursor, so its scheduled count
     * is that pack's size ({@code records()[rank].length}, which varies by step and rank) and its samples are among the
     * pack's records; its label and step within the epoch are those the ledger walked to. At the epoch's end the rank's
     * delivered + skipped must be the samples of its packs of the steps from where the ledger began the epoch, and its
     * last step the epoch's last.
     */
    private void accountPacked(int rank, PackedSchedule packed, InFlight flight, Held h) {
        var cursor = flight.cursor;
        var meta = h.meta();
        PackedStep step = packed.step(cursor, flight.label);
        int[] pack = step.records()[rank];
        String where = "rank " + rank + " epoch " + cursor.epoch() + " step " + flight.inEpoch + " (packed, global step " + flight.label + ")";
        if (meta.rank() != rank || meta.epoch() != cursor.epoch() || meta.globalStep() != flight.label || meta.step() != flight.inEpoch)
            fail(where + ": the batch made is rank " + meta.rank() + " epoch " + meta.epoch() + " step " + meta.step() + " global step "
                    + meta.globalStep());
        if (meta.batchSize() > meta.scheduled() || meta.scheduled() != pack.length)
            fail(where + ": " + meta.batchSize() + " delivered of " + meta.scheduled() + " scheduled, the packed schedule gives this rank's pack "
                    + pack.length + " samples");
        var expected = new java.util.HashMap<Long, Integer>(); // a multiset: a source of weight > 1 may repeat a record in a step
        for (int i : pack) expected.merge((long) i, 1, Integer::sum);
        for (long i : h.sampleIndices())
            if (expected.merge(i, -1, Integer::sum) < 0) fail(where + ": sample " + i + " is not one of this pack's, or comes more often");
        tally(rank, cursor, flight.inEpoch, meta, pack.length, step.next().epoch() != cursor.epoch(), where);
    }

    /**
     * Adds a checked batch to its rank's tally of the epoch, closing the epoch before when the batch begins another:
     * {@code planned} is the samples the schedule gives the rank at this step, {@code lastOfEpoch} whether a packed
     * step is its epoch's last.
     */
    private void tally(int rank, ScheduleCursor cursor, long step, BatchLayout.Meta meta, int planned, boolean lastOfEpoch, String where) {
        var a = accounts[rank];
        if (a == null || a.epoch != cursor.epoch()) {
            if (a != null) closeEpoch(rank, a);
            a = accounts[rank] = new EpochAccount(cursor.epoch(), step, cursor.position(), stream.packed() != null);
        }
        if (step != a.firstStep + a.steps) fail(where + ": expected step " + (a.firstStep + a.steps) + " of the epoch");
        a.steps++;
        a.delivered += meta.batchSize();
        a.skipped += meta.scheduled() - meta.batchSize();
        a.planned += planned;
        a.reachedEnd = lastOfEpoch;
    }

    private void closeEpoch(int rank, EpochAccount a) {
        if (!a.packed) {
            closeEpoch(rank, a, stream.schedule());
            return;
        }
        // a packed job: the steps the ledger walked from where it began the epoch, each rank's pack of them
        if (!a.reachedEnd || a.delivered + a.skipped != a.planned)
            fail("rank " + rank + " epoch " + a.epoch + ": " + a.delivered + " delivered + " + a.skipped + " skipped in " + a.steps
                    + " packed steps from step " + a.firstStep + ", but the packed schedule has " + a.planned + " samples in this rank's packs"
                    + " of those steps" + (a.reachedEnd ? "" : ", and the epoch did not end with the last of them"));
        epochsChecked++;
    }

    private void closeEpoch(int rank, EpochAccount a, SampleSchedule schedule) {
        // the whole steps from where the ledger began the epoch: a job resized there began it at a position no multiple of its step
        long want = (schedule.datasetSize() - a.firstPosition) / schedule.positionsPerStep();
        if (a.steps != want || a.delivered + a.skipped != a.steps * schedule.batchSize())
            fail("rank " + rank + " epoch " + a.epoch + ": " + a.delivered + " delivered + " + a.skipped + " skipped in " + a.steps
                    + " steps, but the schedule has " + want * schedule.batchSize() + " samples in " + want + " steps from step " + a.firstStep);
        epochsChecked++;
    }

    private void fail(String why) {
        var e = new IllegalStateException("delivery accounting broken: " + why);
        if (violation == null) {
            violation = e;
            failure.complete(e);
        }
        throw e;
    }

    /** One rank's tally of the epoch it is in, from the step this ledger began it at. */
    private static final class EpochAccount {
        final long epoch, firstStep, firstPosition;
        final boolean packed;  // a packed job's: checked against its packs (planned) rather than steps × batch size
        long steps, delivered, skipped;
        long planned;          // samples the schedule gave the rank in those steps
        boolean reachedEnd;    // a packed job's: the last step tallied is its epoch's last

        EpochAccount(long epoch, long firstStep, long firstPosition, boolean packed) {
            this.epoch = epoch;
            this.firstStep = firstStep;
            this.firstPosition = firstPosition;
            this.packed = packed;
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
        return Bottleneck.classify(feeder().bottleneckInputs().withTrainer(trainerWaitRatio, transferShare));
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
        m.put("kept_for_reconnect", kept());
        m.put("ledger", ledgerMetrics());
        m.put("trainers", timings.toJson());
        if (snapshot != null) {
            var stages = new LinkedHashMap<String, Object>(); // docs/run-data.md
            snapshot.stages().forEach((name, stage) -> stages.put(name, stage.toJson()));
            m.put("stages", stages);
            m.put("timeline", feeder.timeline().toJson());
            var local = localRanks(); // the timeline's per-rank columns are these ranks', in order
            if (!local.isAll(ranks())) m.put("local_ranks", java.util.Map.of("first", local.first(), "last", local.last(), "world", ranks()));
            m.put("verdict", verdict().toJson());
        }
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
                var a = accounts[r];
                x.put("epoch", a == null ? null : a.epoch);
                x.put("epoch_delivered", a == null ? 0 : a.delivered);
                x.put("epoch_skipped", a == null ? 0 : a.skipped);
                ranks.add(x);
            }
            m.put("ranks", ranks);
            m.put("epochs_checked", epochsChecked);
            m.put("repositions", repositions);
            m.put("violation", violation == null ? null : violation.getMessage());
            return m;
        }
    }

    /** Epoch ends checked (per rank), and whether a check failed. */
    public long epochsChecked() {
        synchronized (lock) {
            return epochsChecked;
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
