package dev.stoker.cluster;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.pipeline.feed.PekkoFutures;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.Props;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.receptionist.Receptionist;
import org.apache.pekko.cluster.ClusterEvent;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.cluster.typed.Subscribe;

/**
 * A job run over the cluster: the coordinator. It finds the nodes (the receptionist), places the
 * workers ({@link Placement}), opens the job on every node, and then, for each rank, keeps a window
 * of batches being made ahead of the trainer (rank r's step s on worker (r + s) mod W). A rank asks for its
 * next batch and gets a <em>reference</em> (node, Flight endpoint, object name): the bytes stay in
 * the owner's store until the rank pulls them, and never pass through the coordinator.
 *
 * <p>Exactly once: a batch is a pure function of (cursor, rank), so a dead node's work is simply
 * made again elsewhere. When a node becomes unreachable (the failure detector) or leaves (downed
 * by the split-brain resolver), its workers are placed on the live nodes and every batch it owed
 * and no rank has pulled yet is asked again of its new worker, in each rank's order; a rank whose
 * pull from the dead owner failed asks again ({@code Refetch}). The rank's sequence does not change:
 * nothing is lost or repeated, the trainer sees a pause. Late answers from a node given up on are
 * dropped (and their objects released).
 *
 * <p>Nodes that come back: a node given up on that is reachable again (a long pause rode out without being downed), or
 * a node that joins while the job runs (a new one, or one started again at a removed node's address: a new incarnation),
 * is admitted once it has opened the job with the same fingerprint ({@link #admit}): the workers are placed again over
 * the live nodes, so it makes its share of every batch issued from then on; batches already issued stay where they are.
 * While no live node takes workers, a batch to make waits for one to be admitted ({@link #NO_NODE_LIMIT} at most).
 *
 * <p>Holding: the owner keeps a batch until its rank asks for the next one (which proves the
 * trainer holds it), then the coordinator releases it.
 *
 * <p>Threading: the coordinator actor and the answers' threads call in; state is guarded by {@code this}.
 */
public final class ClusterJob implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(ClusterJob.class.getName());
    private static final Duration ASK = Duration.ofSeconds(15);
    private static final Duration PRODUCE_TIMEOUT = Duration.ofHours(1);
    /**
     * How long batches to make wait for a node to be admitted while no live node takes workers (the only worker node
     * unreachable or removed, its supervisor starting it again) before their ranks get the error.
     */
    static final Duration NO_NODE_LIMIT = Duration.ofMinutes(5);

    /**
     * What to run.
     *
     * @param job       the job's name (unique in the cluster)
     * @param config    the job's configuration ({@code NodeConfig} JSON: its data, processor and store settings), the same on every node
     * @param nodes     worker nodes (slots > 0) to wait for before starting
     * @param placement pack or spread
     * @param workers   workers to place (each one stream of fetch → decode → write)
     * @param steps     batches per rank (0: endless)
     * @param depth     batches made ahead per rank (0: the feed's prefetch depth)
     * @param relay     batches made on a node other than the coordinator's reach their ranks' nodes through the coordinator's
     *                  node ({@code --retrieval relay}) instead of straight from their owner
     */
    public record Spec(String job, String config, int nodes, Placement placement, int workers, long steps, int depth, boolean relay) {
        /** A job whose ranks' nodes pull straight from each batch's owner. */
        public Spec(String job, String config, int nodes, Placement placement, int workers, long steps, int depth) {
            this(job, config, nodes, placement, workers, steps, depth, false);
        }

        public Spec {
            java.util.Objects.requireNonNull(config, "config");
            if (nodes <= 0) throw new IllegalArgumentException("nodes must be positive, got " + nodes);
            if (workers <= 0 || workers > NodeRuntime.MAX_WORKERS)
                throw new IllegalArgumentException("workers must be in [1, " + NodeRuntime.MAX_WORKERS + "], got " + workers);
            if (steps < 0 || depth < 0) throw new IllegalArgumentException("steps and depth must be >= 0");
        }
    }

    /** A local message to the coordinator: the nodes the receptionist knows now. */
    private record Listing(Receptionist.Listing listing) implements CoordinatorProtocol.Command {}

    /** A local message: a member event (a node left or was removed). */
    private record MemberChange(ClusterEvent.MemberEvent event) implements CoordinatorProtocol.Command {}

    /** A local message: a node became unreachable. */
    private record Reachability(ClusterEvent.ReachabilityEvent event) implements CoordinatorProtocol.Command {}

    private record Stop() implements CoordinatorProtocol.Command {}

    /** A local message: node {@code address} ({@code ref}) answered the admission's Hello and StartJob (or failed to). */
    private record Admission(String address, ActorRef<NodeProtocol.Command> ref, NodeProtocol.NodeInfo info,
                             NodeProtocol.JobStarted started, Throwable error) implements CoordinatorProtocol.Command {}

    /** A local message, every {@link #ADMIT_TICK}: admit the listed nodes that are Up and reachable and not live in the job. */
    private record AdmitTick() implements CoordinatorProtocol.Command {}

    /** How often the coordinator looks for nodes to admit (besides each listing): events of membership and listing come in any order. */
    private static final Duration ADMIT_TICK = Duration.ofSeconds(1);

    /** A local message: check whether batches still wait for a node after {@link #NO_NODE_LIMIT}. */
    private record NoNodeCheck(long parkedSince) implements CoordinatorProtocol.Command {}

    /** One batch of one rank: made by a worker, possibly again after its node died. */
    private static final class Task {
        final long id;
        final int rank;
        final ScheduleCursor cursor;
        final long globalStep;
        /** The step's share of the rank as the plan cut it (a packed step's plan holds every rank's costs). */
        final ScheduledBatch planned;
        int worker;
        String node;
        int attempt;
        boolean handedOut;
        CompletableFuture<NodeProtocol.Produced> done = new CompletableFuture<>();

        Task(long id, int rank, ScheduledBatch planned) {
            this.id = id;
            this.rank = rank;
            this.planned = planned;
            this.cursor = planned.cursor();
            this.globalStep = planned.globalStep();
        }

        String key() { return "t" + id + "a" + attempt; }
    }

    private static final class RankState {
        Iterator<ScheduledBatch> steps; // the rank's steps from the job's start: the next one is issued next
        long issued;
        final ArrayDeque<Task> window = new ArrayDeque<>();
        Task out; // handed out, not yet confirmed by the rank's next request
        long batches, samples, skipped;
    }

    private final ActorSystem<?> system;
    private final Spec spec;
    private final Map<String, ActorRef<NodeProtocol.Command>> agents = new TreeMap<>(); // live nodes by address
    private final Map<String, NodeProtocol.NodeInfo> infos = new HashMap<>();
    private final Set<String> dead = new HashSet<>();
    /** Each node's agent as the receptionist last listed it (live or given up on): those not live are admitted when Up and reachable. */
    private final Map<String, ActorRef<NodeProtocol.Command>> listed = new HashMap<>();
    /** Each admitted node's incarnation (Pekko's unique address uid): a node started again at an address is another one. */
    private final Map<String, Long> uids = new HashMap<>();
    /** Agents being admitted (Hello and StartJob asked, no answer yet), and those refused (another data set): not asked again. */
    private final Set<ActorRef<NodeProtocol.Command>> admitting = new HashSet<>(), refused = new HashSet<>();
    /** Batches to make while no live node takes workers: submitted once a node is admitted. */
    private final List<Task> parked = new ArrayList<>();
    /** When batches began to wait for a node (System.nanoTime; 0: none waits). */
    private long parkedSince;
    private long admitted;
    /** {@link #NO_NODE_LIMIT}, shorter in a test ({@link #waitForNodesAtMost}). */
    private volatile Duration noNodeLimit = NO_NODE_LIMIT;
    /** Completes when every rank's window is issued: a rank that asks earlier (its node opened the job first) waits for it. */
    private final CompletableFuture<Void> opened = new CompletableFuture<>();
    private List<String> order = List.of(); // nodes in placement order
    private String[] workerNode;
    private volatile StepSchedule schedule;
    private ScheduleCursor start = ScheduleCursor.START; // where every rank's sequence begins
    private long fingerprint;
    private int depth;
    private RankState[] ranks;
    private long nextTaskId;
    private long redone, refetched, lateDropped;
    /**
     * Times the job moved back after handing out batches ({@link #moveBack}): an ask made before the last such move is
     * refused, not served from the new place. (A move before any hand-out has no asks answered before it to guard against.)
     */
    private long moves;
    private ActorRef<CoordinatorProtocol.Command> self;
    private volatile boolean closed;
    /**
     * A packed job's packing and balance, step by step as its steps are handed out: each step's predicted cost per rank, its
     * imbalance and padding ({@link dev.stoker.observe.PackStats}, what a local packed feed records), in {@link #summary}.
     */
    private final dev.stoker.observe.PackStats packStats = new dev.stoker.observe.PackStats();
    private dev.stoker.plan.pack.Packing packing = dev.stoker.plan.pack.Packing.OFF;
    /** The trainers' timings gathered from the nodes ({@link #refreshTimings}); null until the job's world is known. */
    private volatile ClusterTimings timings;

    /** The steps the coordinator's own node planned for a job (by its name), or null where it did not open it. */
    private final java.util.function.Function<String, StepSchedule> localPlan;

    private ClusterJob(ActorSystem<?> system, Spec spec, java.util.function.Function<String, StepSchedule> localPlan) {
        this.system = system;
        this.spec = spec;
        this.localPlan = localPlan;
    }

    /**
     * Starts {@code spec} from this member: {@code localPlan} gives the steps this member's own node planned for the job when
     * it opened it there (every node opens it, the coordinator's too), which the coordinator walks.
     */
    static ClusterJob start(ActorSystem<?> system, Spec spec, Duration timeout, java.util.function.Function<String, StepSchedule> localPlan)
            throws IOException, InterruptedException {
        var job = new ClusterJob(system, spec, localPlan);
        var ready = new CompletableFuture<ActorRef<CoordinatorProtocol.Command>>();
        system.systemActorOf(job.behavior(ready), "coordinator-" + spec.job().replaceAll("[^A-Za-z0-9_-]", "_"), Props.empty());
        try {
            job.self = ready.get(10, TimeUnit.SECONDS);
            job.open(timeout);
            return job;
        } catch (ExecutionException | TimeoutException | RuntimeException e) {
            job.close();
            throw new IOException("cannot start job " + spec.job() + ": " + (e instanceof ExecutionException ? e.getCause() : e), e);
        } catch (IOException | InterruptedException e) {
            job.close();
            throw e;
        }
    }

    private Behavior<CoordinatorProtocol.Command> behavior(CompletableFuture<ActorRef<CoordinatorProtocol.Command>> ready) {
        return Behaviors.setup(ctx -> {
            var listings = ctx.messageAdapter(Receptionist.Listing.class, Listing::new);
            ctx.getSystem().receptionist().tell(Receptionist.subscribe(NodeProtocol.KEY, listings));
            var cluster = Cluster.get(ctx.getSystem());
            cluster.subscriptions().tell(Subscribe.create(ctx.messageAdapter(ClusterEvent.MemberEvent.class, MemberChange::new),
                    ClusterEvent.MemberEvent.class));
            cluster.subscriptions().tell(Subscribe.create(ctx.messageAdapter(ClusterEvent.ReachabilityEvent.class, Reachability::new),
                    ClusterEvent.ReachabilityEvent.class));
            ready.complete(ctx.getSelf());
            return Behaviors.<CoordinatorProtocol.Command>withTimers(timers -> {
                timers.startTimerWithFixedDelay(new AdmitTick(), ADMIT_TICK);
                return Behaviors.receive(CoordinatorProtocol.Command.class)
                    .onMessage(Listing.class, m -> {
                        onListing(m.listing().getServiceInstances(NodeProtocol.KEY));
                        return Behaviors.same();
                    })
                    .onMessage(MemberChange.class, m -> {
                        if ((m.event() instanceof ClusterEvent.MemberRemoved || m.event() instanceof ClusterEvent.MemberDowned
                                || m.event() instanceof ClusterEvent.MemberExited) && current(m.event().member()))
                            nodeDown(m.event().member().address().toString(), m.event().getClass().getSimpleName());
                        return Behaviors.same();
                    })
                    .onMessage(Reachability.class, m -> {
                        if (m.event() instanceof ClusterEvent.UnreachableMember u && current(u.member()))
                            nodeDown(u.member().address().toString(), "unreachable");
                        else if (m.event() instanceof ClusterEvent.ReachableMember) admitListed();
                        return Behaviors.same();
                    })
                    .onMessage(Admission.class, m -> {
                        admitted(m);
                        return Behaviors.same();
                    })
                    .onMessage(AdmitTick.class, m -> {
                        admitListed();
                        return Behaviors.same();
                    })
                    .onMessage(NoNodeCheck.class, m -> {
                        noNodeCheck(m.parkedSince());
                        return Behaviors.same();
                    })
                    .onMessage(CoordinatorProtocol.NextBatch.class, m -> {
                        next(m.rank(), m.moves(), m.replyTo());
                        return Behaviors.same();
                    })
                    .onMessage(CoordinatorProtocol.MoveTo.class, m -> {
                        moveTo(new ScheduleCursor(m.epoch(), m.position()), m.step(), m.replyTo());
                        return Behaviors.same();
                    })
                    .onMessage(Restart.class, m -> {
                        moveBack(m);
                        return Behaviors.same();
                    })
                    .onMessage(CoordinatorProtocol.Refetch.class, m -> {
                        refetch(m.rank(), m.key(), m.reason(), m.replyTo());
                        return Behaviors.same();
                    })
                    .onMessage(Stop.class, m -> Behaviors.stopped())
                    .build();
            });
        });
    }

    private synchronized void onListing(Set<ActorRef<NodeProtocol.Command>> refs) {
        var seen = new HashSet<String>();
        for (var ref : refs) {
            String address = addressOf(ref);
            seen.add(address);
            if (schedule == null) agents.putIfAbsent(address, ref); // still opening: every node listed takes part
            var known = agents.get(address);
            if (schedule != null && known != null && !known.equals(ref)) nodeDown(address, "started again (a new incarnation)");
            listed.put(address, ref);
        }
        listed.keySet().retainAll(seen);
        for (var address : List.copyOf(agents.keySet())) if (!seen.contains(address) && schedule != null) nodeDown(address, "deregistered");
        admitListed();
        notifyAll(); // open() waits for the nodes to register
    }

    /**
     * Admits every listed node that is not live in the job (given up on, started again, or new) once its member is Up and
     * reachable: on each listing, each reachability change and every {@link #ADMIT_TICK}, since the receptionist may list
     * a node before or after the membership says so, and may still list one that is unreachable.
     */
    private synchronized void admitListed() {
        if (schedule == null || closed) return;
        for (var e : listed.entrySet())
            if (!agents.containsKey(e.getKey()) && !admitting.contains(e.getValue()) && !refused.contains(e.getValue())
                    && upAndReachable(e.getKey()))
                admit(e.getKey(), e.getValue());
    }

    /**
     * Whether {@code member} is the incarnation of its address the job has (or any, before it has one): an event about an
     * older one, removed after a newer one was admitted at its address, must not take the newer one down.
     */
    private synchronized boolean current(org.apache.pekko.cluster.Member member) {
        Long uid = uids.get(member.address().toString());
        return uid == null || uid == 0 || uid == member.uniqueAddress().longUid();
    }

    /** Whether the member at {@code address} is Up and reachable in this member's view now. */
    private boolean upAndReachable(String address) {
        var state = Cluster.get(system).state();
        for (var m : state.getMembers())
            if (m.address().toString().equals(address)) {
                if (m.status() != org.apache.pekko.cluster.MemberStatus.up()) return false;
                for (var u : state.getUnreachable()) if (u.address().equals(m.address())) return false;
                return true;
            }
        return false;
    }

    /**
     * Admits node {@code address} into the running job: asks its Hello and opens the job on it (StartJob, which a node that
     * still has the job open answers as before); {@link #admitted} takes it once its fingerprint is the job's.
     */
    private void admit(String address, ActorRef<NodeProtocol.Command> ref) {
        admitting.add(ref);
        LOG.log(System.Logger.Level.INFO, "job " + spec.job() + ": admitting node " + address);
        this.<NodeProtocol.NodeInfo>ask(ref, NodeProtocol.Hello::new).toCompletableFuture()
                .thenCompose(info -> AskPattern.<NodeProtocol.Command, NodeProtocol.JobStarted>ask(ref,
                                r -> new NodeProtocol.StartJob(spec.job(), spec.config(), self, r), ASK, system.scheduler())
                        .toCompletableFuture().thenApply(started -> new Admission(address, ref, info, started, null)))
                .whenComplete((a, err) -> self.tell(err != null ? new Admission(address, ref, null, null, err) : a));
    }

    /** The admission's answers: the node takes part from the next batch issued on, or is refused with the reason logged. */
    private synchronized void admitted(Admission m) {
        admitting.remove(m.ref());
        if (closed) return;
        String why = m.error() != null ? "it did not answer: " + m.error()
                : m.started().error() != null ? m.started().error()
                : m.started().fingerprint() != fingerprint || m.started().datasetSize() != schedule.datasetSize()
                        || m.started().ranks() != ranks.length
                        ? "it reads another data set or configuration (fingerprint " + Long.toHexString(m.started().fingerprint()) + " vs "
                        + Long.toHexString(fingerprint) + ", " + m.started().datasetSize() + " vs " + schedule.datasetSize() + " samples)"
                        : !m.ref().equals(listed.get(m.address())) || agents.containsKey(m.address()) ? "it was started again meanwhile" : null;
        if (why != null) {
            // one that did not answer is asked again while it is listed, Up and reachable (ADMIT_TICK); one that answered wrong is not
            if (m.error() == null) refused.add(m.ref());
            if (m.started() != null && m.started().error() == null && !agents.containsKey(m.address()))
                m.ref().tell(new NodeProtocol.StopJob(spec.job())); // it opened the job: not to serve it, it holds nothing of it
            LOG.log(System.Logger.Level.WARNING, "job " + spec.job() + ": node " + m.address() + " is not admitted: " + why);
            return;
        }
        String address = m.address();
        dead.remove(address);
        agents.put(address, m.ref());
        infos.put(address, m.info());
        uids.put(address, uidOf(address));
        if (!order.contains(address)) {
            var o = new ArrayList<>(order);
            o.add(address);
            order = List.copyOf(o);
        }
        admitted++;
        placeWorkers();
        var waiting = new ArrayList<>(parked);
        parked.clear();
        parkedSince = 0;
        announceHomes();
        for (var t : waiting) submit(t);
        LOG.log(System.Logger.Level.INFO, "job " + spec.job() + ": node " + address + " admitted; workers now on " + java.util.Arrays.toString(workerNode));
    }

    /** Places every worker again over the live nodes (by the job's rule): what is issued from now on goes there. */
    private void placeWorkers() {
        var live = new ArrayList<String>();
        for (String a : order) if (!dead.contains(a) && agents.containsKey(a)) live.add(a);
        int[] slots = live.stream().mapToInt(a -> infos.get(a).slots()).toArray();
        boolean anyTakes = false;
        for (int s : slots) anyTakes |= s > 0;
        if (!anyTakes) return;
        int[] assignment = spec.placement().assign(workerNode.length, slots);
        for (int w = 0; w < assignment.length; w++) workerNode[w] = live.get(assignment[w]);
    }

    /** Batches have waited {@link #NO_NODE_LIMIT} for a node since {@code since}: their ranks get the error. */
    private synchronized void noNodeCheck(long since) {
        if (parkedSince != since || parked.isEmpty()) return;
        var failing = new ArrayList<>(parked);
        parked.clear();
        parkedSince = 0;
        for (var t : failing)
            t.done.completeExceptionally(new IllegalStateException("no live node has made step " + t.globalStep + " of rank " + t.rank
                    + " in " + noNodeLimit.toSeconds() + " s: every node that takes workers is gone (" + dead + ")"));
    }

    /** Sets how long batches wait for a node while no live node takes workers (tests; {@link #NO_NODE_LIMIT} otherwise). */
    void waitForNodesAtMost(Duration limit) { noNodeLimit = limit;
    }

    /** The incarnation (unique address uid) of the member at {@code address} now; the last admitted one, else 0. */
    private long uidOf(String address) {
        for (var m : Cluster.get(system).state().getMembers())
            if (m.address().toString().equals(address)) return m.uniqueAddress().longUid();
        return uids.getOrDefault(address, 0L);
    }

    /** The key the trainers' timings of the node at {@code address} are kept under: its incarnation's. */
    private String incarnation(String address) { return ClusterTimings.incarnation(address, uidOf(address)); }

    private String addressOf(ActorRef<?> ref) {
        var a = ref.path().address();
        return a.hasGlobalScope() ? a.toString() : Cluster.get(system).selfMember().address().toString();
    }

    /** Finds the nodes, places the workers, opens the job everywhere; then fills every rank's window. */
    private void open(Duration timeout) throws IOException, InterruptedException, ExecutionException, TimeoutException {
        long deadline = System.nanoTime() + timeout.toNanos();
        // wait until enough nodes that take workers have registered
        while (true) {
            Map<String, ActorRef<NodeProtocol.Command>> snapshot;
            synchronized (this) {
                snapshot = new TreeMap<>(agents);
            }
            var infosNow = new HashMap<String, NodeProtocol.NodeInfo>();
            for (var e : snapshot.entrySet())
                infosNow.put(e.getKey(), ask(e.getValue(), NodeProtocol.Hello::new).toCompletableFuture().get(ASK.toSeconds(), TimeUnit.SECONDS));
            long workerNodes = infosNow.values().stream().filter(i -> i.slots() > 0).count();
            if (workerNodes >= spec.nodes()) {
                synchronized (this) {
                    infos.putAll(infosNow);
                }
                break;
            }
            if (System.nanoTime() > deadline)
                throw new IOException("waited " + timeout.toSeconds() + " s for " + spec.nodes() + " worker nodes; " + workerNodes
                        + " joined (" + infosNow.keySet() + ")");
            synchronized (this) {
                if (agents.keySet().equals(snapshot.keySet())) wait(200); // until the receptionist lists another node
            }
        }
        List<String> nodes;
        synchronized (this) {
            nodes = new ArrayList<>(infos.keySet());
            var age = ages();
            nodes.sort(java.util.Comparator.comparingInt((String a) -> age.getOrDefault(a, Integer.MAX_VALUE)).thenComparing(a -> a));
            order = List.copyOf(nodes);
            for (String a : order) uids.put(a, uidOf(a));
            int[] slots = order.stream().mapToInt(a -> infos.get(a).slots()).toArray();
            int[] assignment = spec.placement().assign(spec.workers(), slots);
            workerNode = new String[spec.workers()];
            for (int w = 0; w < assignment.length; w++) workerNode[w] = order.get(assignment[w]);
        }
        // open the job on every node (a node with no workers still serves its trainers)
        var starts = new ArrayList<CompletableFuture<NodeProtocol.JobStarted>>();
        for (String a : nodes) {
            ActorRef<NodeProtocol.Command> ref;
            synchronized (this) {
                ref = agents.get(a);
            }
            starts.add(AskPattern.<NodeProtocol.Command, NodeProtocol.JobStarted>ask(ref,
                    r -> new NodeProtocol.StartJob(spec.job(), spec.config(), self, r), Duration.ofNanos(Math.max(1, deadline - System.nanoTime())),
                    system.scheduler()).toCompletableFuture());
        }
        NodeProtocol.JobStarted first = null;
        for (var f : starts) {
            var s = f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (s.error() != null) throw new IOException(s.error());
            if (first == null) first = s;
            else if (s.fingerprint() != first.fingerprint() || s.datasetSize() != first.datasetSize())
                throw new IOException("node " + s.address() + " reads another data set or configuration than " + first.address()
                        + " (fingerprint " + Long.toHexString(s.fingerprint()) + " vs " + Long.toHexString(first.fingerprint())
                        + ", " + s.datasetSize() + " vs " + first.datasetSize() + " samples): every node must see the same manifest and options");
            else if (s.planDigest() != first.planDigest())
                throw new IOException("node " + s.address() + " planned the job's packs from other sample shapes than " + first.address()
                        + " (digest " + Long.toHexString(s.planDigest()) + " vs " + Long.toHexString(first.planDigest()) + "): a length "
                        + "index (stoker validate) on one node that is not the other's, or another tokenizer; every node must plan the "
                        + "same packs");
        }
        // the steps the workers cut, as this node's own producer planned them: a packed job's packs come from the planner
        // `stoker plan --pack-tokens` prints (StepSchedules.of), deterministic from the order's seed and cursor, so that the
        // coordinator's (cursor, rank) names the same pack on every node
        var planned = localPlan.apply(spec.job());
        if (planned == null && first.planDigest() != 0)
            throw new IOException("job " + spec.job() + " packs its steps, but the coordinator's own node did not open it: it cannot "
                    + "walk the packs the workers plan");
        if (planned != null && (planned.ranks() != first.ranks() || planned.datasetSize() != first.datasetSize()))
            throw new IOException("the coordinator's node planned " + planned.ranks() + " ranks over " + planned.datasetSize()
                    + " places, the nodes " + first.ranks() + " over " + first.datasetSize());
        synchronized (this) {
            schedule = planned != null ? planned : new SampleSchedule(first.seed(), first.datasetSize(), first.ranks(), first.batchSize());
            fingerprint = first.fingerprint();
            packing = dev.stoker.node.NodeConfig.fromJson(spec.config()).packing(); // read by every node alike (they opened it)
            depth = spec.depth() > 0 ? spec.depth() : Math.max(1, first.prefetchBatches());
            ranks = new RankState[first.ranks()];
            timings = new ClusterTimings(spec.job(), first.ranks());
            for (int r = 0; r < ranks.length; r++) {
                ranks[r] = new RankState();
                ranks[r].steps = schedule.iterator(ScheduleCursor.START, r);
            }
            announceHomes();
            for (int r = 0; r < ranks.length; r++) topUp(r);
        }
        opened.complete(null);
        LOG.log(System.Logger.Level.DEBUG, "job " + spec.job() + ": " + spec.workers() + " workers " + spec.placement() + " over " + order);
    }

    /**
     * Each member's place among the cluster's members, oldest first (the seed that started the cluster is 0): the order in
     * which pack fills nodes. A node not (or no longer) a member sorts last.
     */
    private Map<String, Integer> ages() {
        var members = new ArrayList<org.apache.pekko.cluster.Member>();
        Cluster.get(system).state().getMembers().forEach(members::add);
        members.sort((a, b) -> a.isOlderThan(b) ? -1 : b.isOlderThan(a) ? 1 : 0);
        var out = new HashMap<String, Integer>();
        for (int i = 0; i < members.size(); i++) out.put(members.get(i).address().toString(), i);
        return out;
    }

    private <T> CompletionStage<T> ask(ActorRef<NodeProtocol.Command> ref, java.util.function.Function<ActorRef<T>, NodeProtocol.Command> msg) {
        return AskPattern.ask(ref, msg::apply, ASK, system.scheduler());
    }

    /** Issues batches for rank {@code r} until its window is full (or its steps are all issued). */
    private void topUp(int r) {
        var st = ranks[r];
        while (st.window.size() < depth && (spec.steps() == 0 || st.issued < spec.steps())) {
            var step = st.steps.next();
            long globalStep = step.globalStep();
            var t = new Task(nextTaskId++, r, step);
            st.issued++;
            // rank r's step s goes to worker (r + s) mod W: at every step the ranks' batches come from different workers, so
            // under spread each node's card sends about one batch per step instead of several at once
            t.worker = (int) ((r + globalStep) % workerNode.length);
            st.window.addLast(t);
            submit(t);
        }
    }

    /** Asks the task's worker's node to make it (a new attempt; answers of older attempts are dropped). */
    private void submit(Task t) {
        t.node = workerNode[t.worker];
        t.attempt++;
        int attempt = t.attempt;
        var agent = t.node == null ? null : agents.get(t.node);
        if (agent == null) { // no live node takes workers: wait for one to be admitted, within NO_NODE_LIMIT
            if (!parked.contains(t)) parked.add(t);
            if (parkedSince == 0) {
                long since = parkedSince = System.nanoTime();
                LOG.log(System.Logger.Level.WARNING, "job " + spec.job() + ": no live node takes workers; batches wait for one to be "
                        + "admitted (" + noNodeLimit.toSeconds() + " s at most)");
                system.scheduler().scheduleOnce(noNodeLimit, () -> self.tell(new NoNodeCheck(since)), system.executionContext());
            }
            return;
        }
        String key = t.key();
        // heard on the thread that answers, not on the JVM's common pool, which anything may hold (PekkoFutures says why)
        PekkoFutures.direct(AskPattern.<NodeProtocol.Command, NodeProtocol.Produced>ask(agent,
                        reply -> new NodeProtocol.Produce(spec.job(), key, t.worker, t.cursor.epoch(), t.cursor.position(), t.globalStep, t.rank,
                                reply),
                        PRODUCE_TIMEOUT, system.scheduler()))
                .whenComplete((p, err) -> produced(t, attempt, p, err));
    }

    private synchronized void produced(Task t, int attempt, NodeProtocol.Produced p, Throwable err) {
        boolean ok = err == null && p.error() == null;
        if (t.attempt != attempt || closed) {
            if (ok) { // an answer from a node given up on (or after the end): its object is nobody's
                lateDropped++;
                var agent = agents.get(p.address());
                if (agent != null) agent.tell(new NodeProtocol.Release(spec.job(), p.key()));
            }
            return;
        }
        if (ok) {
            t.done.complete(p);
            return;
        }
        if (dead.contains(t.node)) return; // redone by nodeDown
        t.done.completeExceptionally(new IllegalStateException(err != null ? "node " + t.node + " did not answer: " + err : p.error()));
    }

    /**
     * Rank {@code rank}'s next batch reference; confirms (releases) the one before it. An ask made before the job's last
     * move ({@code asked} moves seen) is refused: a node's pulls ahead of a trainer that then restarted from an older
     * checkpoint, answered after the move, would take the moved rank's first batches, and its trainer would miss them.
     */
    private synchronized void next(int rank, long asked, ActorRef<CoordinatorProtocol.BatchRef> replyTo) {
        if (ranks == null && !closed) {
            opened.whenComplete((ok, err) -> {
                if (err == null) next(rank, asked, replyTo);
                else replyTo.tell(CoordinatorProtocol.BatchRef.failed(rank, err.getMessage()));
            });
            return;
        }
        if (ranks == null || rank < 0 || rank >= ranks.length) {
            replyTo.tell(CoordinatorProtocol.BatchRef.failed(rank, "rank " + rank + " is not in this job"));
            return;
        }
        if (asked != moves) {
            replyTo.tell(CoordinatorProtocol.BatchRef.failed(rank, "rank " + rank + " asked for its next batch of job " + spec.job()
                    + " before the job moved to epoch " + start.epoch() + " position " + start.position() + "; its node asks again "
                    + "once its trainer resumes there"));
            return;
        }
        timings.served(rank, incarnation(addressOf(replyTo))); // the node that asks for a rank's batches serves its trainer: it may report it
        var st = ranks[rank];
        confirm(st);
        topUp(rank);
        var t = st.window.pollFirst();
        if (t == null) {
            replyTo.tell(CoordinatorProtocol.BatchRef.ended(rank));
            return;
        }
        t.handedOut = true;
        st.out = t;
        packStats.record(t.planned, packing); // a packed step's balance, once per step (its first rank's hand-out); batches: none
        topUp(rank);
        answer(t, replyTo, true);
    }

    private void confirm(RankState st) {
        var t = st.out;
        if (t == null) return;
        st.out = null;
        var p = t.done.getNow(null);
        if (p != null) {
            var agent = agents.get(p.address());
            if (agent != null) agent.tell(new NodeProtocol.Release(spec.job(), p.key()));
        }
    }

    /** Replies with the task's reference once it is made; {@code count}: a hand-out (not a redo of one) for the per-rank figures. */
    private void answer(Task t, ActorRef<CoordinatorProtocol.BatchRef> replyTo, boolean count) {
        t.done.whenComplete((p, err) -> {
            if (err != null) {
                replyTo.tell(CoordinatorProtocol.BatchRef.failed(t.rank, "step " + t.globalStep + " of rank " + t.rank + ": "
                        + (err.getCause() != null ? err.getCause().getMessage() : err.getMessage())));
                return;
            }
            NodeProtocol.NodeInfo info;
            synchronized (this) {
                info = infos.get(p.address());
                if (count) {
                    var st = ranks[t.rank];
                    st.batches++;
                    st.samples += p.samples();
                    st.skipped += p.scheduled() - p.samples();
                }
            }
            String key = p.key();
            if (spec.relay() && info != null) { // through this (the coordinator's) node's Flight server, unless it made the batch
                String me = Cluster.get(system).selfMember().address().toString();
                NodeProtocol.NodeInfo mine;
                synchronized (this) {
                    mine = infos.get(me);
                }
                if (!p.address().equals(me) && mine != null && mine.flightPort() > 0) {
                    key = BatchRelay.key(info.flightHost(), info.flightPort(), p.key());
                    info = mine;
                }
            }
            replyTo.tell(new CoordinatorProtocol.BatchRef(key, p.address(), info == null ? "" : info.flightHost(),
                    info == null ? 0 : info.flightPort(), p.bytes(), t.cursor.epoch(), t.cursor.position(), t.globalStep, t.rank,
                    p.samples(), p.scheduled(), p.skipped(), false, null));
        });
    }

    /**
     * Starts every rank at {@code at} (a trainer resumes from its saved state): only while no batch
     * was handed out; the batches made ahead from the old start are dropped and their objects released.
     */
    private synchronized void moveTo(ScheduleCursor at, long step, ActorRef<CoordinatorProtocol.Moved> replyTo) {
        if (ranks == null && !closed) {
            opened.whenComplete((ok, err) -> {
                if (err == null) moveTo(at, step, replyTo);
                else replyTo.tell(CoordinatorProtocol.Moved.failed(err.getMessage()));
            });
            return;
        }
        if (ranks == null) {
            replyTo.tell(CoordinatorProtocol.Moved.failed("job " + spec.job() + " stopped"));
            return;
        }
        if (at.position() >= schedule.datasetSize()) {
            replyTo.tell(CoordinatorProtocol.Moved.failed("cannot resume at " + at + ": the data set has " + schedule.datasetSize() + " samples"));
            return;
        }
        var want = schedule.aligned(at);
        boolean handed = false;
        for (var st : ranks) handed |= st.out != null || st.batches > 0;
        // there already: a running job keeps its labels (every node's trainers get the same ones); one that handed out nothing takes
        // the trainer's, so that a job resized at that cursor goes on counting where its trainers' count was
        if (want.equals(start) && (handed || step < 0 || schedule.globalStep(want) == step)) {
            replyTo.tell(movedAnswer());
            return;
        }
        if (!handed) {
            restart(want, step);
            replyTo.tell(movedAnswer());
            return;
        }
        // batches were handed out: trainers restarted from a checkpoint (as an elastic restart does) move the job back, but only
        // once no node has a trainer of the job connected
        var counts = new ArrayList<CompletableFuture<NodeProtocol.TrainerCount>>();
        for (var agent : agents.values())
            counts.add(this.<NodeProtocol.TrainerCount>ask(agent, r -> new NodeProtocol.CountTrainers(spec.job(), r)).toCompletableFuture());
        CompletableFuture.allOf(counts.toArray(CompletableFuture[]::new)).whenComplete((x, err) -> {
            if (err != null) {
                replyTo.tell(CoordinatorProtocol.Moved.failed("could not ask every node whether its trainers stopped: " + err));
                return;
            }
            var connected = new ArrayList<String>();
            for (var c : counts) if (c.join().connected() > 0) connected.add(c.join().address() + " (" + c.join().connected() + ")");
            self.tell(new Restart(want, step, List.copyOf(connected), replyTo));
        });
    }

    /** A local message: every node said how many trainers of the job it has connected; move the job to {@code at} if none. */
    private record Restart(ScheduleCursor at, long step, List<String> connected, ActorRef<CoordinatorProtocol.Moved> replyTo)
            implements CoordinatorProtocol.Command {}

    /**
     * Moves the job back to {@code m.at()} once no node has a trainer of it connected, unless it is there already: the
     * trainers of several ranks, resuming at once from the same checkpoint, each ask for the move before any has seen it
     * done, and by the time the second is answered the first rank's trainer is connected and has been given batches at the
     * new place, which a second restart would take back.
     */
    private synchronized void moveBack(Restart m) {
        var want = m.at();
        if (want.equals(start) && (m.step() < 0 || schedule.globalStep(want) == m.step())) {
            m.replyTo().tell(movedAnswer());
            return;
        }
        if (!m.connected().isEmpty()) {
            m.replyTo().tell(CoordinatorProtocol.Moved.failed("the job has handed out batches from epoch " + start.epoch() + " position "
                    + start.position() + " on, and trainers are still connected on " + m.connected() + ", so it cannot move to epoch "
                    + want.epoch() + " position " + want.position() + ": stop every rank and resume each from the same saved state"));
            return;
        }
        moves++;
        restart(want, m.step());
        m.replyTo().tell(movedAnswer());
    }

    /** Success, with the labels the job's steps now have. */
    private synchronized CoordinatorProtocol.Moved movedAnswer() { return CoordinatorProtocol.Moved.labelledAs(schedule, moves); }

    /**
     * Starts every rank's sequence afresh at {@code want}: what was handed out and made ahead from
     * the old start is released (an answer still to come is dropped, and its object released); the
     * step at {@code want} is labelled {@code step} (−1: counted from the origin).
     */
    private synchronized void restart(ScheduleCursor want, long step) {
        schedule = schedule.labelled(want, step);
        for (int r = 0; r < ranks.length; r++) {
            var st = ranks[r];
            confirm(st);
            for (var t : st.window) {
                var made = t.done.getNow(null);
                t.attempt++;
                if (made != null && made.error() == null) {
                    var agent = agents.get(made.address());
                    if (agent != null) agent.tell(new NodeProtocol.Release(spec.job(), made.key()));
                }
            }
            st.window.clear();
            st.steps = schedule.iterator(want, r);
            st.issued = 0;
            st.batches = 0;
        }
        start = want;
        for (int r = 0; r < ranks.length; r++) topUp(r);
        LOG.log(System.Logger.Level.INFO, "job " + spec.job() + " moved to epoch " + want.epoch() + " position " + want.position());
    }

    /** A rank could not pull {@code key} from its owner: make the batch again, elsewhere when another node is live. */
    private synchronized void refetch(int rank, String key, String reason, ActorRef<CoordinatorProtocol.BatchRef> replyTo) {
        if (ranks == null || rank < 0 || rank >= ranks.length || ranks[rank].out == null) {
            replyTo.tell(CoordinatorProtocol.BatchRef.failed(rank, "rank " + rank + " has no batch out to fetch again"));
            return;
        }
        var t = ranks[rank].out;
        var p = t.done.getNow(null);
        if (p != null && p.key().equals(key)) { // the attempt the rank failed on: redo it
            refetched++;
            LOG.log(System.Logger.Level.WARNING, "rank " + rank + " could not pull " + key + " from " + p.address() + " (" + reason
                    + "); making step " + t.globalStep + " again");
            var owner = agents.get(p.address()); // the attempt it could not read is nobody's now (audit #14)
            if (owner != null) owner.tell(new NodeProtocol.Release(spec.job(), p.key()));
            String other = liveNodeOtherThan(t.node);
            if (other != null) workerNodeFor(t, other);
            t.done = new CompletableFuture<>();
            submit(t);
        }
        answer(t, replyTo, false);
    }

    private String liveNodeOtherThan(String node) {
        for (String a : order) if (!a.equals(node) && !dead.contains(a) && infos.get(a).slots() > 0) return a;
        return null;
    }

    /** Points the task at a worker on {@code node} (the first one there, else keeps its worker but moves it). */
    private void workerNodeFor(Task t, String node) {
        for (int w = 0; w < workerNode.length; w++)
            if (node.equals(workerNode[w])) {
                t.worker = w;
                return;
            }
    }

    /**
     * Tells every live node the job's cache homes: the live nodes that take workers, whose caches hold the entries
     * ({@code --cache-affinity}, docs/cluster.md). A node without affinity ignores it.
     */
    private void announceHomes() {
        var homes = new ArrayList<NodeProtocol.NodeInfo>();
        for (var a : agents.keySet()) {
            var info = infos.get(a);
            if (!dead.contains(a) && info != null && info.slots() > 0) homes.add(info);
        }
        var m = new NodeProtocol.CacheHomes(spec.job(), List.copyOf(homes));
        for (var e : agents.entrySet()) if (!dead.contains(e.getKey())) e.getValue().tell(m);
    }

    /** A node is gone (unreachable, downed, removed): place its workers elsewhere and redo what it owed. */
    private synchronized void nodeDown(String address, String why) {
        if (schedule == null || closed || !agents.containsKey(address) || !dead.add(address)) return;
        agents.remove(address);
        announceHomes(); // its entries get homes among the live nodes
        LOG.log(System.Logger.Level.WARNING, "node " + address + " is gone (" + why + "); redoing its work on " + agents.keySet());
        var live = new ArrayList<String>();
        for (String a : order) if (!dead.contains(a)) live.add(a);
        int[] slots = live.stream().mapToInt(a -> infos.get(a).slots()).toArray();
        var moved = new ArrayList<Integer>();
        for (int w = 0; w < workerNode.length; w++) if (address.equals(workerNode[w])) moved.add(w);
        if (!moved.isEmpty()) {
            boolean anyTakes = false;
            for (int s : slots) anyTakes |= s > 0;
            if (anyTakes) {
                // the live nodes keep their workers; the moved ones fill free slots by the same rule
                int[] free = slots.clone();
                for (int w = 0; w < workerNode.length; w++) {
                    int i = live.indexOf(workerNode[w]);
                    if (i >= 0) free[i] = Math.max(0, free[i] - 1);
                }
                boolean anyFree = false;
                for (int f : free) anyFree |= f > 0;
                int[] assignment = spec.placement().assign(moved.size(), anyFree ? free : slots);
                for (int k = 0; k < moved.size(); k++) workerNode[moved.get(k)] = live.get(assignment[k]);
            } else {
                for (int w : moved) workerNode[w] = null;
            }
        }
        for (var st : ranks) {
            var owed = new ArrayList<Task>();
            if (st.out != null) owed.add(st.out);
            owed.addAll(st.window);
            for (var t : owed) {
                if (!address.equals(t.node)) continue;
                if (t.done.isDone()) {
                    if (t.handedOut) continue; // the rank pulls it or asks again (Refetch)
                    t.done = new CompletableFuture<>();
                }
                redone++;
                submit(t);
            }
        }
    }

    /** The job's fingerprint (every node's). */
    public synchronized long fingerprint() { return fingerprint; }

    public synchronized StepSchedule schedule() { return schedule; }

    /** The coordinator's actor, which ranks ask for references. */
    public ActorRef<CoordinatorProtocol.Command> coordinator() { return self; }

    /** Each worker's node, in worker order (null: no live node takes it). */
    public synchronized List<String> workerNodes() { return java.util.Arrays.asList(workerNode.clone()); }

    /** Nodes in placement order, with their Flight endpoints and slots. */
    public synchronized List<NodeProtocol.NodeInfo> nodes() {
        var out = new ArrayList<NodeProtocol.NodeInfo>();
        for (String a : order) out.add(infos.get(a));
        return out;
    }

    /** Nodes given up on. */
    public synchronized Set<String> deadNodes() { return Set.copyOf(dead); }

    /** Batches made again because their node died, or because a rank could not pull them. */
    public synchronized long redone() { return redone + refetched; }

    /** The counters of every live node (asked now). */
    public List<NodeProtocol.NodeStats> nodeStats() throws InterruptedException {
        Map<String, ActorRef<NodeProtocol.Command>> live;
        synchronized (this) {
            live = new TreeMap<>(agents);
        }
        var out = new ArrayList<NodeProtocol.NodeStats>();
        for (var ref : live.values()) {
            try {
                out.add(this.<NodeProtocol.NodeStats>ask(ref, NodeProtocol.GetStats::new).toCompletableFuture().get(ASK.toSeconds(), TimeUnit.SECONDS));
            } catch (ExecutionException | TimeoutException e) {
                // a node that does not answer has no counters to give
            }
        }
        return out;
    }

    /**
     * The trainers' timings as last gathered ({@link #refreshTimings}); null before the job opened. Every rank's, wherever
     * its trainer is connected.
     */
    public ClusterTimings timings() { return timings; }

    /**
     * Asks every live node what its trainers reported (each answer checked by {@link ClusterTimings#offer}; a node that does not
     * answer within {@code timeout} keeps its last figures, and its late answer is dropped) and returns the gathered timings;
     * null before the job opened.
     */
    public ClusterTimings refreshTimings(Duration timeout) throws InterruptedException {
        var t = timings;
        if (t == null) return null;
        // one gathering at a time (the status line's and the metrics'): each node's answers are then offered in the order they
        // were given, so that an honest node's older totals never arrive after its newer ones and read as totals going down
        synchronized (refreshing) {
            return refreshTimings(t, timeout);
        }
    }

    private final Object refreshing = new Object();

    private ClusterTimings refreshTimings(ClusterTimings t, Duration timeout) throws InterruptedException {
        var live = new TreeMap<String, ActorRef<NodeProtocol.Command>>(); // by incarnation: one started again reports from zero
        synchronized (this) {
            for (var e : agents.entrySet()) live.put(incarnation(e.getKey()), e.getValue());
        }
        var asked = new LinkedHashMap<String, CompletableFuture<NodeProtocol.NodeTimings>>();
        for (var e : live.entrySet())
            asked.put(e.getKey(), AskPattern.<NodeProtocol.Command, NodeProtocol.NodeTimings>ask(e.getValue(),
                    r -> new NodeProtocol.GetTimings(spec.job(), r), timeout, system.scheduler()).toCompletableFuture());
        long deadline = System.nanoTime() + timeout.toNanos();
        for (var e : asked.entrySet()) {
            try {
                t.offer(e.getKey(), e.getValue().get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS));
            } catch (ExecutionException | TimeoutException late) {
                // a node that does not answer keeps the figures it gave before
            }
        }
        return t;
    }

    /**
     * What the job has handed out so far over all ranks (since it last moved): batches, the samples in them and the samples
     * skipped; and the batches made ahead and ready now.
     */
    public record Delivered(long batches, long samples, long skipped, long ready) {}

    /** {@link Delivered} now (all zero before the job opened). */
    public synchronized Delivered delivered() {
        long batches = 0, samples = 0, skipped = 0, ready = 0;
        if (ranks != null)
            for (var st : ranks) {
                batches += st.batches;
                samples += st.samples;
                skipped += st.skipped;
                for (var t : st.window) if (t.done.isDone() && !t.done.isCompletedExceptionally()) ready++;
            }
        return new Delivered(batches, samples, skipped, ready);
    }

    /** The job's world size (0 before it opened). */
    public synchronized int ranks() { return ranks == null ? 0 : ranks.length; }

    /** Batches per rank the job hands out (0: endless). */
    public long steps() { return spec.steps(); }

    /** Per-rank figures: batches handed out, samples in them, samples skipped; the trainers' timings as last gathered. */
    public synchronized Map<String, Object> summary() {
        var m = new LinkedHashMap<String, Object>();
        m.put("job", spec.job());
        m.put("placement", spec.placement().name().toLowerCase(java.util.Locale.ROOT));
        m.put("workers", spec.workers());
        m.put("worker_nodes", workerNode == null ? List.of() : List.of(workerNode.clone()));
        m.put("dead_nodes", List.copyOf(dead));
        m.put("admitted", admitted);
        m.put("redone", redone);
        m.put("refetched", refetched);
        m.put("late_dropped", lateDropped);
        var perRank = new ArrayList<Map<String, Object>>();
        if (ranks != null)
            for (int r = 0; r < ranks.length; r++) {
                var st = ranks[r];
                var x = new LinkedHashMap<String, Object>();
                x.put("rank", r);
                x.put("batches", st.batches);
                x.put("samples", st.samples);
                x.put("skipped", st.skipped);
                perRank.add(x);
            }
        m.put("ranks", perRank);
        var pack = packStats.summary();
        if (pack != null) m.put("packing", pack); // a packed job's, as a local one's pipeline.pack (docs/run-data.md)
        var t = timings;
        if (t != null) m.put("trainers", t.toJson());
        return m;
    }

    /** Stops the job on every node and the coordinator. */
    @Override
    public void close() {
        List<ActorRef<NodeProtocol.Command>> live;
        synchronized (this) {
            if (closed) return;
            closed = true;
            live = new ArrayList<>(agents.values());
        }
        opened.completeExceptionally(new IllegalStateException("job " + spec.job() + " stopped"));
        for (var a : live) a.tell(new NodeProtocol.StopJob(spec.job()));
        if (self != null) self.tell(new Stop());
    }
}
