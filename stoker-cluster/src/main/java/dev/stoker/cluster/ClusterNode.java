package dev.stoker.cluster;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.pipeline.feed.FeedEngine;
import dev.stoker.store.ShmObjectStore;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.RootAllocator;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.Adapter;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.receptionist.Receptionist;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.typed.Cluster;

/**
 * One JVM of a Stoker cluster: a member of a Pekko Cluster (Artery TCP, the split-brain resolver
 * on, keep-majority) whose agent makes batches for the jobs a coordinator starts, keeps them in
 * the node's shared-memory store, and lends them over Arrow Flight to ranks on other nodes.
 * {@code ./stoker node} runs one; {@code ./stoker serve --cluster} runs one too and starts a job
 * ({@link #runJob}).
 *
 * <p>Threading: thread-safe; the agent's messages are handled on Pekko's dispatcher, jobs open
 * and batches complete on the pipeline's threads.
 */
public final class ClusterNode implements AutoCloseable {
    public static final String SYSTEM_NAME = "stoker";
    /**
     * Artery's untrusted mode: inbound actor selections are dropped except to the cluster's own three paths (the core
     * daemon: join and gossip; the heartbeat receiver; the receptionist's replicator), and PossiblyHarmful messages and
     * remote deployment are refused. Without those paths joining breaks (measured: a member with the key never got Up,
     * its InitJoin by selection to /system/cluster/core/daemon dropped); docs/security.md has the details.
     */
    static final boolean UNTRUSTED_MODE = true;

    /**
     * How to run a node.
     *
     * @param host        address Pekko remoting and Flight bind to and advertise (an address the other nodes reach)
     * @param port        Pekko remoting port (0: any free one)
     * @param seeds       seed nodes "host:port" (this node's own address when it is the first)
     * @param slots       workers this node takes (pack fills these before the next node); 0: none (coordinator only)
     * @param flightPort  Flight port (0: any free one)
     * @param roles       cluster roles
     * @param downAfter   how long the split-brain resolver waits for a stable unreachable set before downing it, and this
     *                    node for its job's unreachable coordinator before ending the job (docs/cluster.md, "Pauses")
     * @param heartbeatPause how long a node may miss heartbeats before it is unreachable
     * @param flightToken the token every node's Flight endpoint asks for and every node sends (the same on all nodes);
     *                    null: none (loopback only, by the CLI's policy)
     * @param pullAhead   batches a local rank's node pulls ahead of its trainer ({@link ClusterRankFeed})
     * @param clusterKey  the key the members authenticate each other with ({@link ClusterKey}); null: this user's own
     *                    ({@link ClusterKey#userDefault}), allowed only when this member and every seed are on loopback
     */
    public record Options(String host, int port, List<String> seeds, int slots, int flightPort, List<String> roles,
                          Duration downAfter, Duration heartbeatPause, String flightToken, int pullAhead, ClusterKey clusterKey) {
        public Options {
            Objects.requireNonNull(host, "host");
            seeds = List.copyOf(seeds);
            roles = List.copyOf(roles);
            if (slots < 0) throw new IllegalArgumentException("slots must be >= 0, got " + slots);
            if (seeds.isEmpty()) throw new IllegalArgumentException("at least one seed node HOST:PORT is needed");
            for (String s : seeds) ConfigKey.HostPort.parse(s);
        }

        public static Options of(String host, int port, List<String> seeds, int slots) {
            return new Options(host, port, seeds, slots, 0, List.of("worker"),
                    Duration.ofMillis(dev.stoker.node.NodeSettings.DOWN_AFTER_MS.defaultValue()),
                    Duration.ofMillis(dev.stoker.node.NodeSettings.HEARTBEAT_PAUSE_MS.defaultValue()), null,
                    ClusterRankFeed.PULL_AHEAD_DEFAULT, null);
        }

        public Options withTimings(Duration down, Duration pause) {
            return new Options(host, port, seeds, slots, flightPort, roles, down, pause, flightToken, pullAhead, clusterKey);
        }

        public Options withFlightPort(int p) { return new Options(host, port, seeds, slots, p, roles, downAfter, heartbeatPause, flightToken, pullAhead, clusterKey); }

        public Options withFlightToken(String token) {
            return new Options(host, port, seeds, slots, flightPort, roles, downAfter, heartbeatPause, token, pullAhead, clusterKey);
        }

        public Options withPullAhead(int n) {
            return new Options(host, port, seeds, slots, flightPort, roles, downAfter, heartbeatPause, flightToken, n, clusterKey);
        }

        public Options withClusterKey(ClusterKey key) {
            return new Options(host, port, seeds, slots, flightPort, roles, downAfter, heartbeatPause, flightToken, pullAhead, key);
        }

        /** Whether this member and every seed are on loopback addresses (so no other host takes part). */
        public boolean loopbackOnly() {
            if (!dev.stoker.node.FlightAccess.isLoopback(host, "--bind")) return false;
            for (String s : seeds) if (!dev.stoker.node.FlightAccess.isLoopback(ConfigKey.HostPort.parse(s).host(), "--join")) return false;
            return true;
        }

        @Override
        public String toString() { // never the token
            return "Options[" + host + ":" + port + " seeds " + seeds + ", " + slots + " slots, flight port " + flightPort
                    + (flightToken != null ? ", token set" : "") + (clusterKey != null ? ", key " + clusterKey.file() : "") + "]";
        }
    }

    private final ActorSystem<NodeProtocol.Command> system;
    private final NodeRuntime runtime;
    private final FlightBatchServer flight;
    private final RootAllocator allocator;
    private final Options options;
    private final ClusterKey key;
    private final ClusterKey.TlsFiles tls;
    private final FlightBatchClient.Options pullOptions;
    private final List<ClusterRankFeed> feeds = new java.util.concurrent.CopyOnWriteArrayList<>();

    /**
     * Sizes this node's store for each job it is sent, from the job's largest batch (its data's where the shapes are
     * known): the store's budget was not given, so a job that needs more raises it, within half of what its folder has free.
     */
    public void growStorePerJob() { runtime.growStorePerJob(); }

    private ClusterNode(ActorSystem<NodeProtocol.Command> system, NodeRuntime runtime, FlightBatchServer flight, RootAllocator allocator,
                        Options options, ClusterKey key, ClusterKey.TlsFiles tls, FlightBatchClient.Options pullOptions) {
        this.system = system;
        this.runtime = runtime;
        this.flight = flight;
        this.allocator = allocator;
        this.options = options;
        this.key = key;
        this.tls = tls;
        this.pullOptions = pullOptions;
    }

    /**
     * The key {@code options} name, or this user's own when none is named and the member and its seeds are all on
     * loopback; refused otherwise (a key made here could not be on the other hosts).
     */
    static ClusterKey keyFor(Options options) {
        if (options.clusterKey() != null) return options.clusterKey();
        if (!options.loopbackOnly())
            throw new ConfigException("this member binds " + options.host() + " or joins " + options.seeds() + ", beyond loopback, so it "
                    + "needs the cluster's key: make one with `stoker cluster-key FILE`, copy it to every member (mode 0600) and pass "
                    + "--cluster-key FILE");
        return ClusterKey.userDefault(System.getenv());
    }

    /**
     * Starts the node: its Flight server (TLS with the cluster key's certificate; the token given, else one derived from
     * the key), then its cluster member (Artery over TLS, mutual authentication with the key), which joins through the
     * seeds. {@code store} is the node's object store (closed by the caller after the node).
     *
     * @throws ConfigException when there is no key to use, or it cannot be read
     */
    public static ClusterNode start(Options options, ShmObjectStore store) throws IOException {
        var key = keyFor(options);
        var tls = key.materialize();
        String token = options.flightToken() != null ? options.flightToken() : key.flightToken();
        var runtime = new NodeRuntime(store, options.slots());
        var allocator = new RootAllocator();
        FlightBatchServer flight;
        try {
            flight = FlightBatchServer.start(Location.forGrpcTls(options.host(), options.flightPort()), null, runtime, allocator,
                    new FlightBatchServer.Security(token, tls.certificatePem(), tls.privateKeyPem()));
        } catch (IOException | RuntimeException e) {
            allocator.close();
            tls.close();
            throw e;
        }
        var holder = new CompletableFuture<ClusterNode>();
        ActorSystem<NodeProtocol.Command> system;
        try {
            system = ActorSystem.create(agent(runtime, holder, options.downAfter()), SYSTEM_NAME, config(options, tls, UNTRUSTED_MODE));
        } catch (RuntimeException e) {
            flight.close();
            allocator.close();
            tls.close();
            throw e;
        }
        var pull = new FlightBatchClient.Options(token, true, tls.certificatePem(), ClusterKey.NAME);
        runtime.runOn(system); // the process's one actor system: its jobs' task producers run their streams on it
        var members = system;
        runtime.relayThrough(new BatchRelay(pull, allocator, host -> { // a relay fetches only from a member's host
            for (var m : Cluster.get(members).state().getMembers())
                if (host.equals(m.address().getHost().orElse(null))) return true;
            return false;
        }));
        var affinity = new CacheAffinity(pull, allocator, runtime::affineCache);
        runtime.cacheAffinity(affinity);
        flight.serveActions(affinity);
        var node = new ClusterNode(system, runtime, flight, allocator, options, key, tls, pull);
        holder.complete(node);
        return node;
    }

    /**
     * The member's Pekko configuration: Artery over TLS ({@code tls-tcp}) with the cluster key as key store and trust store
     * and mutual authentication, so that only holders of the key complete a handshake with a member; hostname
     * verification is off (every member presents the one self-signed certificate). {@code untrusted} turns on Artery's
     * untrusted mode, with the selection paths the cluster itself needs trusted ({@link #UNTRUSTED_MODE}).
     */
    static Config config(Options o, ClusterKey.TlsFiles tls, boolean untrusted) {
        var seeds = new StringBuilder();
        for (String s : o.seeds()) {
            if (!seeds.isEmpty()) seeds.append(", ");
            seeds.append('"').append("pekko://").append(SYSTEM_NAME).append('@').append(s).append('"');
        }
        var roles = new StringBuilder();
        for (String r : o.roles()) {
            if (!roles.isEmpty()) roles.append(", ");
            roles.append('"').append(r).append('"');
        }
        String text = """
                pekko {
                  daemonic = off
                  coordinated-shutdown.exit-jvm = off
                  actor {
                    provider = cluster
                    serialization-bindings { "dev.stoker.cluster.ClusterMessage" = jackson-cbor }
                    default-dispatcher.fork-join-executor {
                      parallelism-min = 8
                      parallelism-max = 64
                    }
                  }
                  remote.artery {
                    transport = tls-tcp
                    canonical.hostname = "%s"
                    canonical.port = %d
                    untrusted-mode = %s
                    trusted-selection-paths = ["/system/cluster/core/daemon", "/system/cluster/heartbeatReceiver",
                                               "/system/clusterReceptionist/replicator"]
                    ssl {
                      ssl-engine-provider = org.apache.pekko.remote.artery.tcp.ConfigSSLEngineProvider
                      config-ssl-engine {
                        key-store = "%s"
                        key-store-password = "%s"
                        key-password = "%s"
                        trust-store = "%s"
                        trust-store-password = "%s"
                        protocol = "TLSv1.3"
                        enabled-algorithms = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"]
                        require-mutual-authentication = on
                        hostname-verification = off
                      }
                    }
                  }
                  cluster {
                    seed-nodes = [%s]
                    roles = [%s]
                    downing-provider-class = "org.apache.pekko.cluster.sbr.SplitBrainResolverProvider"
                    split-brain-resolver {
                      active-strategy = keep-majority
                      stable-after = %d ms
                    }
                    failure-detector {
                      heartbeat-interval = 1 s
                      acceptable-heartbeat-pause = %d ms
                    }
                    jmx.enabled = off
                    log-info = off
                    shutdown-after-unsuccessful-join-seed-nodes = off
                  }
                }
                """.formatted(o.host(), o.port(), untrusted ? "on" : "off", tls.keyStore(), tls.password(),
                tls.password(), tls.trustStore(), tls.password(), seeds, roles, o.downAfter().toMillis(), o.heartbeatPause().toMillis());
        // over the settings every system of a Stoker process has (logging, shutdown): the member's system is the process's
        // one, its job's streams run on it too; its own threads and dispatcher stay Pekko's defaults, as before it was shared
        return ConfigFactory.parseString(text).withFallback(FeedEngine.pekkoConfig()).resolve();
    }

    /**
     * The node's agent: registers with the receptionist and answers the coordinator. It watches
     * each job's coordinator: when the coordinator's member has been unreachable for {@code grace}
     * (the split-brain resolver's down time), or has left, or its actor stops, the job ends on this
     * node (its trainers get the error within the failure detector's pause and that time, not after
     * an hour). A coordinator unreachable for less — a pause of either member, rode out — keeps the
     * job: ending it at once would fail the trainers of a cluster that stays whole.
     */
    private static Behavior<NodeProtocol.Command> agent(NodeRuntime runtime, CompletableFuture<ClusterNode> node, Duration grace) {
        return Behaviors.setup(ctx -> {
            var episodes = new java.util.HashMap<String, Long>(); // per member address: its unreachability episodes (members bound it)
            ctx.getSystem().receptionist().tell(Receptionist.register(NodeProtocol.KEY, ctx.getSelf()));
            var cluster = Cluster.get(ctx.getSystem());
            String address = cluster.selfMember().address().toString();
            cluster.subscriptions().tell(org.apache.pekko.cluster.typed.Subscribe.create(ctx.messageAdapter(
                    org.apache.pekko.cluster.ClusterEvent.ReachabilityEvent.class, e -> new NodeProtocol.MemberGone(e.member().address().toString(),
                            e instanceof org.apache.pekko.cluster.ClusterEvent.UnreachableMember ? "is unreachable" : null)),
                    org.apache.pekko.cluster.ClusterEvent.ReachabilityEvent.class));
            cluster.subscriptions().tell(org.apache.pekko.cluster.typed.Subscribe.create(ctx.messageAdapter(
                    org.apache.pekko.cluster.ClusterEvent.MemberRemoved.class, e -> new NodeProtocol.MemberGone(e.member().address().toString(),
                            "left the cluster")), org.apache.pekko.cluster.ClusterEvent.MemberRemoved.class));
            return Behaviors.receive(NodeProtocol.Command.class)
                    .onMessage(NodeProtocol.MemberGone.class, m -> {
                        long episode = episodes.merge(m.address(), 1L, Long::sum); // a reachable event cancels the check pending
                        if ("is unreachable".equals(m.why()))
                            ctx.scheduleOnce(grace, ctx.getSelf(), new NodeProtocol.CoordinatorCheck(m.address(), episode));
                        else if (m.why() != null) runtime.coordinatorLost(m.address(), m.why());
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.CoordinatorCheck.class, m -> {
                        boolean still = false;
                        for (var u : cluster.state().getUnreachable()) still |= u.address().toString().equals(m.address());
                        if (still && episodes.getOrDefault(m.address(), 0L) == m.episode())
                            runtime.coordinatorLost(m.address(), "is unreachable for " + grace.toMillis() + " ms");
                        return Behaviors.same();
                    })
                    .onSignal(org.apache.pekko.actor.typed.Terminated.class, t -> {
                        runtime.coordinatorStopped(t.getRef());
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.Hello.class, m -> {
                        node.thenAccept(n -> m.replyTo().tell(new NodeProtocol.NodeInfo(address, n.options.host(), n.flight.port(), runtime.slots())));
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.StartJob.class, m -> {
                        if (m.coordinator().path().address().hasGlobalScope()) ctx.watch(m.coordinator());
                        runtime.startJob(m, address);
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.Produce.class, m -> {
                        runtime.produce(m, address);
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.Release.class, m -> {
                        runtime.release(m.job(), m.key());
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.StopJob.class, m -> {
                        runtime.stopJob(m.job());
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.CountTrainers.class, m -> {
                        m.replyTo().tell(new NodeProtocol.TrainerCount(address, runtime.trainersConnected(m.job())));
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.GetTimings.class, m -> {
                        m.replyTo().tell(runtime.timings(m.job(), address));
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.CacheHomes.class, m -> {
                        runtime.cacheHomes(m, address);
                        return Behaviors.same();
                    })
                    .onMessage(NodeProtocol.GetStats.class, m -> {
                        node.thenAccept(n -> m.replyTo().tell(n.stats()));
                        return Behaviors.same();
                    })
                    .build();
        });
    }

    /** This node's counters now. */
    public NodeProtocol.NodeStats stats() {
        return new NodeProtocol.NodeStats(address(), runtime.produced.get(), flight.batchesSent(), flight.bytesSent(),
                runtime.pulledBatches.get(), runtime.pulledBytes.get(), runtime.localHandOuts.get(), runtime.heldObjects(),
                runtime.relayedBatches(), runtime.relayedBytes(), runtime.affinityStats());
    }

    private volatile boolean closing;

    /**
     * Completes when this member leaves the cluster without {@link #close()}: the cluster removed
     * it (the split-brain resolver downed it after it was unreachable). A removed member cannot
     * come back; its process should exit and be started again, and it then joins anew.
     *
     * <p>It completes when the member's cluster part stops (Pekko stops it once the member sees
     * itself down or removed, early in its shutdown), or else when the actor system ends: a removed
     * node once waited on the actor system's end, whose last shutdown phase timed out, and lingered
     * past a minute.
     */
    public CompletableFuture<Void> removed() {
        var out = new CompletableFuture<Void>();
        Runnable gone = () -> {
            if (!closing) out.complete(null);
        };
        org.apache.pekko.cluster.Cluster.get(Adapter.toClassic(system)).registerOnMemberRemoved(gone);
        system.getWhenTerminated().thenRun(gone);
        return out;
    }

    /** This member's address, {@code pekko://stoker@host:port}. */
    public String address() { return Cluster.get(system).selfMember().address().toString(); }

    /**
     * The cluster's members as this member sees them now, address to status ({@code up}, {@code down},
     * {@code leaving}…), {@code (unreachable)} added where this member's view has them so: whether a
     * node was downed and removed, or has joined.
     */
    public java.util.Map<String, String> members() {
        var state = Cluster.get(system).state();
        var unreachable = new java.util.HashSet<String>();
        state.getUnreachable().forEach(m -> unreachable.add(m.address().toString()));
        var out = new java.util.TreeMap<String, String>();
        state.getMembers().forEach(m -> out.put(m.address().toString(), m.status().toString().toLowerCase(java.util.Locale.ROOT)
                + (unreachable.contains(m.address().toString()) ? " (unreachable)" : "")));
        return out;
    }

    /** The node's actor system (for tests that ask the coordinator as a node does). */
    ActorSystem<NodeProtocol.Command> system() { return system; }

    public int flightPort() { return flight.port(); }

    /** This node's Flight server (tests: a home whose cache actions stop answering while it stays a member). */
    FlightBatchServer flightServer() { return flight; }

    /** The cache actions this node's Flight server answers (tests: delegated to until a home goes silent). */
    FlightBatchServer.Actions cacheActions() { return runtime.cacheAffinity(); }

    /**
     * Keeps this node's cache of preprocessed samples in {@code dir} for every job from now on, whatever folder the job's
     * configuration names: a node's own {@code --cache-dir} (the job's is the coordinator's machine's).
     */
    public void useCacheDir(java.nio.file.Path dir) { runtime.cacheDir(dir); }

    /** What the cache's affinity did on this node over the jobs open now ({@link NodeProtocol.NodeStats#cacheAffinity}). */
    public dev.stoker.cache.AffineCache.Stats cacheAffinityStats() { return runtime.affinityStats(); }

    /** The key this member authenticates with. */
    public ClusterKey clusterKey() { return key; }

    /** How this node's pullers reach the other nodes' Flight endpoints: TLS trusting only the cluster key, with the token. */
    public FlightBatchClient.Options flightClientOptions() { return pullOptions; }

    public Options options() { return options; }

    /** Waits until this member is Up in the cluster (it has joined through a seed); false on timeout. */
    public boolean awaitUp(Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        var cluster = Cluster.get(system);
        while (System.nanoTime() < deadline) {
            if (cluster.selfMember().status() == MemberStatus.up()) return true;
            Thread.sleep(50);
        }
        return false;
    }

    /**
     * Starts a job over the cluster from this node: waits for {@code spec.nodes()} worker nodes,
     * places the workers and opens the job on every node. The returned job serves every rank's
     * batch references; trainers on this node read through {@link #trainerFeed}.
     */
    public ClusterJob runJob(ClusterJob.Spec spec, Duration timeout) throws IOException, InterruptedException {
        return ClusterJob.start(system, spec, timeout, runtime::planned);
    }

    /** The trainer-facing side of the job currently running on this node, for a {@code FeedServer}. */
    public ClusterRankFeed trainerFeed(Duration waitForJob) {
        var feed = new ClusterRankFeed(system, runtime, waitForJob, allocator, pullOptions, options.pullAhead());
        feeds.add(feed);
        return feed;
    }

    @Override
    public void close() {
        closing = true;
        feeds.forEach(ClusterRankFeed::close);
        runtime.close();
        try {
            Cluster.get(system).manager().tell(org.apache.pekko.cluster.typed.Leave.create(Cluster.get(system).selfMember().address()));
        } catch (RuntimeException e) {
            // leaving is a courtesy; terminating below is what counts
        }
        system.terminate();
        try {
            system.getWhenTerminated().toCompletableFuture().get(10, TimeUnit.SECONDS);
        } catch (Exception e) {
            // stopped or not, the resources below go
        }
        flight.close();
        allocator.close();
        tls.close();
    }
}
