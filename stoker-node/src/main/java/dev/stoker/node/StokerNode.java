package dev.stoker.node;

import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.io.AtomicFiles;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.transport.FeedServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * A running Stoker node: the service of one training node. {@link #launch(NodeConfig)} checks the
 * configuration (a refused Flight endpoint, a store smaller than one batch: nothing starts), opens
 * the node's feed (a local job's pipeline, its store and its ledger; or, through
 * {@code ClusteredNode} in {@code stoker-cluster}, this node's share of a cluster job), serves the
 * node's trainer ranks on a Unix socket, and, when configured, over Arrow Flight and a Prometheus
 * endpoint. {@link #close()} writes the run's counters ({@code --metrics-file}) and stops everything
 * in reverse order: sockets and shared-memory files are removed.
 *
 * <p>Local serve and cluster nodes are assembled here alike; they differ only in their {@link Feed}.
 *
 * <pre>{@code
 * try (var node = StokerNode.launch(NodeConfig.builder().data("ds/train.jsonl").ranks(2).build())) {
 *     // trainers connect to node.socket(); node.failure() completes if bad input or broken delivery accounting stops the feed
 * }
 * }</pre>
 *
 * <p>Threading: launch and close from one thread; the accessors from any.
 */
public final class StokerNode implements AutoCloseable {
    /** What feeds a node's trainers; the node closes it after its servers. */
    public interface Feed extends AutoCloseable {
        /** Rank r's next batch, for the node's socket and Flight endpoint. */
        BatchProvider provider();

        /** The counters {@code --metrics-file} holds (the node adds its servers'). */
        Map<String, Object> metrics();

        /** The local job's ledger (metrics, verdict, status), or null for a cluster node's feed. */
        default RankLedger ledger() { return null; }

        /**
         * What the status line shows for a feed without a local ledger (a cluster job's coordinator: every rank's delivery and
         * measured wait), or null when it shows none.
         */
        default StatusLine.Sample status() { return null; }

        /**
         * Whether this node's figures are the whole job's (every rank: a local job, or a cluster job's coordinator), so that it
         * shows the status line and writes {@code --report-dir}; a cluster member's are its own ranks' only.
         */
        default boolean holdsJob() { return ledger() != null; }

        /** Completes when bad input stops the feed ({@code --on-error fail}, {@code --max-error-rate}). */
        default CompletableFuture<? extends RuntimeException> failure() { return new CompletableFuture<>(); }

        @Override
        void close();
    }

    /** Opens a node's feed from its configuration, once the node's own checks have passed; progress lines go to {@code log}. */
    @FunctionalInterface
    public interface FeedOpener {
        Feed open(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException;
    }

    private final NodeConfig config;
    private final Path socket;
    private final Feed feed;
    private final FeedServer server;
    private final FlightBatchServer flight;
    private final FlightAccess flightAccess;
    private final PrometheusEndpoint metrics;
    private ReportDir reports; // --report-dir; set once, right after the node is made (its files hold the node's counters)
    private boolean closed;

    private StokerNode(NodeConfig config, Path socket, Feed feed, FeedServer server, FlightBatchServer flight, FlightAccess flightAccess,
                       PrometheusEndpoint metrics) {
        this.config = config;
        this.socket = socket;
        this.feed = feed;
        this.server = server;
        this.flight = flight;
        this.flightAccess = flightAccess;
        this.metrics = metrics;
    }

    /** Launches a node running the local job of {@code config} (its data, ranks, mode). */
    public static StokerNode launch(NodeConfig config) throws IOException, InterruptedException { return launch(config, line -> {}); }

    /** {@link #launch(NodeConfig)}, telling {@code log} what it started (the job, the data, the endpoints; the socket last). */
    public static StokerNode launch(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        return launch(config, config.job(), StokerNode::localFeed, log);
    }

    /**
     * Launches a node whose feed {@code opener} makes, serving on {@code --socket} or the default socket named
     * {@code socketName}: what every node is assembled by, local or clustered.
     */
    public static StokerNode launch(NodeConfig config, String socketName, FeedOpener opener, Consumer<String> log)
            throws IOException, InterruptedException {
        FlightAccess flightAccess = FlightAccess.plan(config, System.getenv()); // refused endpoints stop here, before any work
        InetAddress metricsAddress = config.get(NodeConfig.METRICS_PORT) == null ? null : metricsAddress(config);
        Path sock = SocketDir.prepare(config.get(NodeConfig.SOCKET), socketName);
        Feed feed = opener.open(config, log);
        FeedServer server = null;
        FlightBatchServer flight = null;
        PrometheusEndpoint metrics = null;
        try {
            server = new FeedServer(sock, feed.provider(), false, new FeedServer.Limits(config.get(NodeConfig.HELLO_TIMEOUT_MS),
                    config.get(NodeConfig.MAX_TRAINER_CONNECTIONS), config.get(NodeConfig.COPY_BUFFER_BUDGET)));
            SocketDir.restrict(sock);
            if (flightAccess != null) {
                flight = FlightBatchServer.start(flightAccess.location(), feed.provider(), null, null, flightAccess.security());
                flightAccess.warnings().forEach(log);
                log.accept("flight on " + flightAccess.url(flight.port()) + " (token required)");
                if (flightAccess.tokenFile() != null) log.accept("flight token in " + flightAccess.tokenFile() + " (only this user can read it)");
            }
            if (metricsAddress != null) {
                if (feed.ledger() == null) throw new ConfigException("--metrics-port is served for a local job only");
                metrics = new PrometheusEndpoint(feed.ledger(), metricsAddress, config.get(NodeConfig.METRICS_PORT));
                log.accept("metrics on " + metrics.url());
            }
            Path reportDir = config.get(NodeConfig.REPORT_DIR);
            if (reportDir != null && !feed.holdsJob()) // a cluster member: its coordinator writes the job's
                throw new ConfigException("--report-dir is written by a local job or a cluster job's coordinator (serve --join), not by "
                        + "a cluster member (stoker node): its ranks' figures are in the coordinator's");
            var node = new StokerNode(config, sock, feed, server, flight, flightAccess, metrics);
            if (reportDir != null) {
                node.reports = new ReportDir(reportDir, feed.ledger(), node::metrics, ReportDir.INTERVAL_MILLIS, log);
                log.accept("run data in " + reportDir + " (stoker report " + reportDir + ")");
            }
            log.accept("listening on " + sock); // last: tells scripts everything is up
            return node;
        } catch (IOException | RuntimeException e) {
            closeQuietly(metrics, flight, server, feed);
            throw e;
        }
    }

    /** The local job: its pipeline (and store) behind a ledger. */
    private static Feed localFeed(NodeConfig config, Consumer<String> log) throws IOException, InterruptedException {
        FeedMode mode = config.mode(); // zero-copy or prefetch: NodeConfig refuses the other rungs
        var feeds = NodeFeeds.open(config);
        RankLedger ledger;
        ShmBudget shm = null;
        try {
            if (mode == FeedMode.ZERO_COPY) { // the store's largest batch from the data where the worst case would not fit
                shm = feeds.shmBudget(line -> log.accept(line));
                shm.check();
            }
            ledger = feeds.start(mode, config.get(NodeConfig.ERRORS_FILE), shm != null ? shm : config.shm());
        } catch (IOException | InterruptedException | RuntimeException e) {
            feeds.close();
            throw e;
        }
        var feeder = ledger.feeder();
        var local = config.localRanks();
        var packing = config.packing();
        String perRank = !packing.on() ? "batch " + config.batch()
                : String.format(Locale.ROOT, "packs of at most %d tokens%s (balance %s, cost model %s)", packing.tokens(),
                        packing.patches() > 0 ? " and " + packing.patches() + " patches" : "", ConfigKey.cliName(packing.balance()),
                        packing.cost().describe());
        log.accept(String.format(Locale.ROOT, "job %s, %d ranks%s × %s, mode %s, %s, pixels %s", config.job(), config.ranks(),
                local.isAll(config.ranks()) ? "" : " (this node serves ranks " + local + ")", perRank, ConfigKey.cliName(mode), ledger.store() != null ? "shared memory " + ledger.store().arenaDir()
                        + " (budget " + ledger.store().budgetBytes() + " bytes) " + shm.sizedFrom() : "copies", ConfigKey.cliName(config.get(NodeConfig.PIXEL_FORMAT))));
        var encode = config.encodeOptions();
        var transformers = config.get(NodeConfig.TRANSFORMERS);
        log.accept(String.format(Locale.ROOT, "processor %s, %d…%d pixels, patch %d%s; inputs %s (%s)", encode.preset().cliName(),
                encode.vision().minPixels(), encode.vision().maxPixels(), encode.vision().patchSize(),
                config.model() == null ? "" : ", model " + config.model().describe(), ConfigKey.cliName(encode.inputContract()),
                transformers == null ? "no --transformers" : "transformers " + transformers));
        long stepsPerEpoch = feeder.schedule().stepsPerEpoch(); // 0: a step's samples vary (packs)
        log.accept(String.format(Locale.ROOT, "data %s (%d samples, %s), fingerprint %016x", config.data(), feeder.datasetSize(),
                stepsPerEpoch > 0 ? stepsPerEpoch + " steps per epoch" : "a variable number of samples per step", feeder.fingerprint()));
        var rehearsal = feeder.rehearsalSummary();
        if (rehearsal != null) log.accept(rehearsal);
        var failure = new CompletableFuture<RuntimeException>();
        feeder.errors().onFailure(failure::complete);
        ledger.failure().thenAccept(failure::complete);
        return new Feed() {
            @Override public BatchProvider provider() { return ledger; }

            @Override public Map<String, Object> metrics() { return ledger.metrics(); }

            @Override public RankLedger ledger() { return ledger; }

            @Override public CompletableFuture<RuntimeException> failure() { return failure; }

            @Override
            public void close() {
                try {
                    ledger.close();
                } finally {
                    feeds.close();
                }
            }
        };
    }

    private static InetAddress metricsAddress(NodeConfig config) {
        String bind = config.get(NodeConfig.METRICS_BIND);
        try {
            return InetAddress.getByName(bind);
        } catch (UnknownHostException e) {
            throw new ConfigException("--metrics-bind: cannot resolve '" + bind + "'");
        }
    }

    public NodeConfig config() { return config; }

    /** The Unix socket the node's trainers connect to. */
    public Path socket() { return socket; }

    /** The local job's ledger, or null on a cluster node. */
    public RankLedger ledger() { return feed.ledger(); }

    /** The node's trainer socket server (its counters). */
    public FeedServer server() { return server; }

    /** The Flight endpoint trainers on other hosts connect to, or null without {@code --flight}. */
    public String flightUrl() { return flight == null ? null : flightAccess.url(flight.port()); }

    /** {@code --report-dir}'s writer, or null without it. */
    public ReportDir reportDir() { return reports; }

    /** The Prometheus scrape URL, or null without {@code --metrics-port}. */
    public String metricsUrl() { return metrics == null ? null : metrics.url(); }

    /**
     * What the status line shows now: a local job's ledger's figures, else the feed's own (a cluster coordinator's); null
     * when the node shows none (a cluster member: its coordinator's line shows the job).
     */
    public StatusLine.Sample status() { return feed.ledger() != null ? StatusLine.Sample.of(feed.ledger()) : feed.status(); }

    /** Whether this node's figures are the whole job's ({@link Feed#holdsJob}): it shows the status line. */
    public boolean holdsJob() { return feed.holdsJob(); }

    /** Completes when bad input stops the feed; trainers get the error in reply to their requests. */
    public CompletableFuture<? extends RuntimeException> failure() { return feed.failure(); }

    /** The node's counters now: its feed's and its socket server's, as {@code --metrics-file} holds them. */
    public Map<String, Object> metrics() {
        var m = new LinkedHashMap<>(feed.metrics());
        var s = new LinkedHashMap<String, Object>();
        s.put("batches_sent", server.batchesSent());
        s.put("bytes_sent", server.bytesSent());
        s.put("refs_sent", server.refsSent());
        s.put("leases_held", server.leasesHeld());
        s.put("leases_released", server.leasesReleased());
        s.put("leases_released_on_disconnect", server.leasesReleasedOnDisconnect());
        m.put("server", s);
        if (flight != null) m.put("flight", Map.of("batches_sent", flight.batchesSent(), "bytes_sent", flight.bytesSent()));
        return m;
    }

    /**
     * Writes {@code --report-dir}'s files and {@code --metrics-file} (when set), then stops the endpoints, the socket server and
     * the feed, in that order.
     */
    @Override
    public void close() throws IOException {
        if (closed) return;
        closed = true;
        Path file = config.get(NodeConfig.METRICS_FILE);
        try {
            try {
                if (reports != null) reports.close();
            } finally {
                if (file != null) AtomicFiles.writeJson(file, metrics());
            }
        } finally {
            closeQuietly(metrics, flight, server, feed);
        }
    }

    private static void closeQuietly(AutoCloseable... resources) {
        RuntimeException first = null;
        for (AutoCloseable r : resources) {
            if (r == null) continue;
            try {
                r.close();
            } catch (Exception e) {
                if (first == null) first = e instanceof RuntimeException re ? re : new IllegalStateException("closing " + r + ": " + e, e);
                else first.addSuppressed(e);
            }
        }
        if (first != null) throw first;
    }
}
