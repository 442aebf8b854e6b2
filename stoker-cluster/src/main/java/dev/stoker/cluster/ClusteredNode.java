package dev.stoker.cluster;

import dev.stoker.core.batch.BatchProvider;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.FlightAccess;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StatusLine;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.store.ShmObjectStore;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * A {@link StokerNode} that is a member of a Stoker cluster: the same node (trainer socket, counters,
 * close order), whose feed is this node's share of a cluster job. {@link #launchMember} runs a worker
 * node ({@code stoker node}): it makes the batches the job's coordinator asks of it into its own
 * store, lends them over Arrow Flight, and serves its own ranks. {@link #launchCoordinator} runs the
 * job from this node ({@code stoker serve --join}): it is a member too, places the workers, hands
 * each rank references to its batches, and serves this node's ranks.
 */
public final class ClusteredNode {
    /** How long a member waits to be Up in the cluster. */
    static final Duration JOIN_TIMEOUT = Duration.ofSeconds(60);
    /** How long the coordinator waits for its worker nodes and their jobs to open. */
    static final Duration JOB_START_TIMEOUT = Duration.ofMinutes(5);
    /** How long the coordinator waits for the nodes' trainer timings when it writes its metrics. */
    static final Duration TIMINGS_TIMEOUT = Duration.ofSeconds(5);
    /** How long the status line waits for them (it is redrawn every second; a slow node keeps its last figures). */
    static final Duration STATUS_TIMINGS_TIMEOUT = Duration.ofMillis(800);

    private ClusteredNode() {}

    /** A worker node by {@code config}'s MEMBER settings ({@code --join} required); its socket defaults to {@code node.sock}. */
    public static StokerNode launchMember(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        return StokerNode.launch(config, "node", ClusteredNode::member, log);
    }

    /** The job of {@code config} run over the cluster {@code --join} names, this node coordinating it. */
    public static StokerNode launchCoordinator(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        checkCoordinator(config);
        checkCoordinatorStore(config, log);
        return StokerNode.launch(config, config.job(), ClusteredNode::coordinator, log);
    }

    /** What a cluster job does not do (yet) is refused rather than silently ignored. */
    static void checkCoordinator(NodeConfig config) {
        if (config.data() == null) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…)");
        if (config.startStep() != 0) throw new ConfigException("--start-step is not supported with --join yet");
        if (config.get(NodeConfig.FLIGHT) != null)
            throw new ConfigException("--flight is not used with --join: every node lends its batches over its own Flight endpoint "
                    + "(--flight-port), and ranks on other nodes connect to their node's socket");
        if (config.get(NodeConfig.METRICS_PORT) != null)
            throw new ConfigException("--metrics-port is not supported with --join yet; --metrics-file writes the job's per-rank and "
                    + "per-node counters on shutdown");
        if (config.mode() != FeedMode.ZERO_COPY)
            throw new ConfigException("--join runs zero-copy only (a rank's node leases or pulls each batch into its shared-memory "
                    + "store), got --mode " + ConfigKey.cliName(config.mode()));
    }

    /**
     * This node serves trainers of the job too: a budget given ({@code --node-shm-budget}) too small for the batches they hold
     * is refused before anything starts, the largest batch the data's where the worst case does not fit and the shapes can be
     * read ({@link NodeShares#sized}). None given, the store is sized for the job when it opens here.
     */
    static void checkCoordinatorStore(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        if (!config.isGiven(NodeConfig.NODE_SHM_BUDGET)) return;
        long budget = config.get(NodeConfig.NODE_SHM_BUDGET);
        try (var feeds = dev.stoker.node.NodeFeeds.open(config)) {
            NodeShares.checkPulled(config, NodeShares.sized(config, feeds, budget, log), budget);
        }
    }

    /**
     * The cluster member's options by {@code config}: its address, seeds, slots, timings, token and key ({@code --cluster-key},
     * read and checked here; none: this user's own, made on first use, allowed on loopback only).
     */
    static ClusterNode.Options memberOptions(NodeConfig config) {
        if (config.join().isEmpty()) throw new ConfigException("--join is required: the cluster member(s) HOST:PORT to join through "
                + "(the first node names its own --bind)");
        var hp = ConfigKey.HostPort.parse(config.get(NodeConfig.BIND));
        var options = ClusterNode.Options.of(hp.host(), hp.port(), config.join(), config.get(NodeConfig.SLOTS))
                .withTimings(Duration.ofMillis(config.get(NodeConfig.DOWN_AFTER_MS)), Duration.ofMillis(config.get(NodeConfig.HEARTBEAT_PAUSE_MS)))
                .withFlightPort(config.get(NodeConfig.FLIGHT_PORT)).withFlightToken(FlightAccess.clusterToken(config, hp.host(), System.getenv()))
                .withPullAhead(config.get(NodeConfig.PULL_AHEAD));
        Path keyFile = config.get(NodeConfig.CLUSTER_KEY);
        if (keyFile != null) return options.withClusterKey(ClusterKey.load(keyFile));
        if (!options.loopbackOnly())
            throw new ConfigException("--bind " + config.get(NodeConfig.BIND) + " / --join " + String.join(",", config.join()) + " reach "
                    + "beyond loopback, so the members need the cluster's key: make one with `stoker cluster-key FILE`, copy it to "
                    + "every member (scp -p; mode 0600) and pass --cluster-key FILE");
        return options;
    }

    /** The member's store and cluster node, Up in the cluster; everything closed again when joining fails. */
    private record Member(ShmObjectStore store, ClusterNode node) implements AutoCloseable {
        static Member join(NodeConfig config, String storeName) throws IOException, InterruptedException {
            var options = memberOptions(config);
            var store = ShmObjectStore.open(config.nodeStoreConfig(storeName));
            ClusterNode node = null;
            try {
                node = ClusterNode.start(options, store);
                if (!config.isGiven(NodeConfig.NODE_SHM_BUDGET)) node.growStorePerJob(); // sized for each job from its largest batch
                if (config.isGiven(NodeConfig.CACHE_DIR)) node.useCacheDir(config.get(NodeConfig.CACHE_DIR)); // the node's own folder
                if (!node.awaitUp(JOIN_TIMEOUT))
                    throw new ConfigException("could not join the cluster through " + config.join() + " within " + JOIN_TIMEOUT.toSeconds() + " s");
                return new Member(store, node);
            } catch (IOException | InterruptedException | RuntimeException e) {
                if (node != null) node.close();
                store.close();
                throw e;
            }
        }

        @Override
        public void close() {
            try {
                node.close();
            } finally {
                store.close();
            }
        }
    }

    private static StokerNode.Feed member(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        var m = Member.join(config, "stoker_node");
        var feed = m.node().trainerFeed(Duration.ofMinutes(10));
        var o = m.node().options();
        log.accept("up as " + m.node().address() + ", " + o.slots() + " slots, flight " + o.host() + ":" + m.node().flightPort()
                + ", store " + m.store().arenaDir());
        return new StokerNode.Feed() {
            @Override public BatchProvider provider() { return feed; }

            @Override
            @SuppressWarnings("unchecked")
            public Map<String, Object> metrics() {
                Map<String, Object> out = new com.fasterxml.jackson.databind.ObjectMapper().convertValue(m.node().stats(), LinkedHashMap.class);
                var ledger = feed.currentLedger();
                if (ledger != null) {
                    out.put("ledger", ledger.ledgerMetrics());
                    out.put("trainers", ledger.timings().toJson()); // this node's trainers'; the coordinator's metrics hold every rank's
                }
                out.put("stalls", feed.stalls());
                return out;
            }

            @Override
            public CompletableFuture<IllegalStateException> failure() {
                return m.node().removed().thenApply(x -> new IllegalStateException("this node was removed from the cluster (downed after "
                        + "it was unreachable); it exits so that it can be started again and rejoin"));
            }

            @Override public void close() { m.close(); }
        };
    }

    /**
     * The cache's affinity over the job's nodes: each counter of {@link dev.stoker.cache.AffineCache.Stats} added up, and
     * {@code hit_rate}, media reads that hit (at the maker or the home) over all; null when no node has the cache on.
     */
    static Map<String, Object> cacheAffinity(java.util.List<NodeProtocol.NodeStats> nodes) {
        Map<String, Object> out = null;
        long hits = 0, reads = 0;
        for (var n : nodes) {
            var s = n.cacheAffinity();
            if (s == null) continue;
            if (out == null) out = new LinkedHashMap<>();
            Map<String, Object> one = new com.fasterxml.jackson.databind.ObjectMapper().convertValue(s, LinkedHashMap.class);
            for (var e : one.entrySet())
                if (e.getValue() instanceof Number v) out.merge(e.getKey(), v.longValue(), (x, y) -> (Long) x + (Long) y);
            hits += s.localHits() + s.remoteHits();
            reads += s.localHits() + s.remoteHits() + s.localMisses() + s.remoteMisses() + s.fallbacks();
        }
        if (out != null) out.put("hit_rate", reads == 0 ? 0.0 : (double) hits / reads);
        return out;
    }

    private static StokerNode.Feed coordinator(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        var placement = Placement.valueOf(config.get(NodeConfig.PLACEMENT).name());
        int nodes = config.get(NodeConfig.NODES), workers = config.workers();
        var m = Member.join(config, "stoker_serve");
        try {
            log.accept("cluster member " + m.node().address() + " (" + m.node().options().slots() + " slots), waiting for " + nodes
                    + " worker nodes");
            // the job's nodes read its data, processor and store settings; where they listen is their own
            var jobConfig = config.only(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));
            var spec = new ClusterJob.Spec(config.job(), jobConfig.toJson(), nodes, placement, workers, config.steps(),
                    config.get(NodeConfig.PREFETCH_BATCHES), config.get(NodeConfig.RETRIEVAL) == NodeConfig.Retrieval.RELAY);
            var job = m.node().runJob(spec, JOB_START_TIMEOUT);
            var feed = m.node().trainerFeed(Duration.ofSeconds(30));
            log.accept(String.format(Locale.ROOT, "job %s over %d nodes, %d workers %s, retrieval %s: %s", config.job(), job.nodes().size(),
                    workers, placement.name().toLowerCase(Locale.ROOT), spec.relay() ? "relayed by this node" : "direct", job.workerNodes()));
            var steps = job.schedule();
            log.accept(String.format(Locale.ROOT, "data %s (%d samples, %s), fingerprint %016x", config.data(), steps.datasetSize(),
                    steps.stepsPerEpoch() > 0 ? steps.stepsPerEpoch() + " steps per epoch"
                            : "packs of at most " + config.get(NodeConfig.PACK_TOKENS) + " tokens a rank, as stoker plan --pack-tokens prints them",
                    job.fingerprint()));
            return new StokerNode.Feed() {
                @Override public BatchProvider provider() { return feed; }

                @Override
                public Map<String, Object> metrics() {
                    try {
                        job.refreshTimings(TIMINGS_TIMEOUT); // every rank's trainer timings, from the node it is connected to
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    var out = new LinkedHashMap<String, Object>(job.summary());
                    var timings = job.timings();
                    if (timings != null) out.put("verdict", timings.verdict().toJson()); // over every rank, wherever it is served
                    var ledger = feed.currentLedger();
                    if (ledger != null) out.put("ledger", ledger.ledgerMetrics());
                    out.put("stalls", feed.stalls());
                    try {
                        var nodes = job.nodeStats();
                        out.put("nodes", nodes);
                        var affinity = cacheAffinity(nodes);
                        if (affinity != null) out.put("cache_affinity", affinity); // the nodes' figures added up (docs/cluster.md)
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    return out;
                }

                /** The coordinator's figures are every rank's: it shows the status line and writes --report-dir. */
                @Override public boolean holdsJob() { return true; }

                private ClusterTimings.Figures lastSeen = ClusterTimings.Figures.NONE;
                private java.util.OptionalDouble lastRecent = java.util.OptionalDouble.empty();

                /**
                 * The job over every rank: batches and samples handed out, batches made ahead, skipped samples, and the
                 * trainers' wait over the steps reported since the last line (every node asked), with the verdict's kind.
                 */
                @Override
                public StatusLine.Sample status() {
                    ClusterTimings timings;
                    try {
                        timings = job.refreshTimings(STATUS_TIMINGS_TIMEOUT);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return null;
                    }
                    var d = job.delivered();
                    var wait = java.util.OptionalDouble.empty();
                    String verdict = null;
                    if (timings != null) {
                        var now = timings.all();
                        var recent = ClusterTimings.waitRatioBetween(lastSeen, now);
                        if (recent.isPresent()) lastRecent = recent; // no step since the last line: the last figure stands
                        lastSeen = now;
                        wait = lastRecent.isPresent() ? lastRecent : now.waitRatio();
                        verdict = timings.verdict().kind().label();
                    }
                    long total = job.steps() > 0 ? job.steps() * job.ranks() : -1;
                    // skipped samples are not split into errors and filtered ones here (the nodes' metrics files hold their causes)
                    return new StatusLine.Sample(System.nanoTime(), d.samples(), d.batches(), d.ready(), wait, verdict, total, 0, 0,
                            java.util.List.of());
                }

                /** Downed, the coordinator cannot return; the job has ended on the other nodes (they lost it): it exits too. */
                @Override
                public CompletableFuture<IllegalStateException> failure() {
                    return m.node().removed().thenApply(x -> new IllegalStateException("this node, the job's coordinator, was removed "
                            + "from the cluster (the split-brain resolver downed it: it could not reach the other nodes, or they it); "
                            + "the job has ended on every node. Start serve --join again: the trainers resume from their states"));
                }

                @Override
                public void close() {
                    try {
                        job.close();
                    } finally {
                        m.close();
                    }
                }
            };
        } catch (IOException | InterruptedException | RuntimeException e) {
            m.close();
            throw e;
        }
    }
}
