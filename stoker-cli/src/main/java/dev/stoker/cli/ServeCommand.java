package dev.stoker.cli;

import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.transport.FeedServer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker serve}: the embedded service of one training node. Runs the feeding pipeline for R
 * ranks, writes each batch once into the shared-memory store, and serves trainer ranks on a Unix
 * socket (references to shared memory, or copies for clients that ask for them) until SIGTERM or
 * SIGINT, then stops cleanly: sockets and shared-memory files are removed. When the bad-input
 * policy stops the feed ({@code --on-error fail}, {@code --max-error-rate}), the trainers get the
 * error in reply to their requests and the service stops {@value #FAILED_FEED_GRACE_MILLIS} ms later
 * with exit status 2.
 */
@Command(name = "serve", mixinStandardHelpOptions = true,
        description = {"Serve training batches to the trainer ranks of this node until stopped (SIGTERM/SIGINT).",
                "Trainers connect to --socket with the Python client (clients/python) or the Java TrainerClient."})
final class ServeCommand implements Callable<Integer> {
    /** How long a feed stopped by bad input is still served, so that trainers between two requests get its error, not a closed socket. */
    static final long FAILED_FEED_GRACE_MILLIS = 2000;

    @Spec CommandSpec spec;
    @Mixin ProcessorOptions processor;
    @Mixin FeedOptions feed;

    @Option(names = "--job", defaultValue = "default", description = "Job name (default: ${DEFAULT-VALUE}).")
    String job;

    @Option(names = "--socket",
            description = "Unix socket trainers connect to (default: $XDG_RUNTIME_DIR/stoker/<job>.sock, else /tmp/stoker-<uid>/<job>.sock).")
    Path socket;

    @Option(names = "--flight",
            description = "Also serve the ranks' batches over Arrow Flight on PORT (127.0.0.1), HOST:PORT or [IPv6]:PORT (port 0: "
                    + "any free port), for trainers on other nodes; a rank reads either here or over the socket, not both. "
                    + "An address other hosts can reach (0.0.0.0 included) needs a token (default: off).")
    String flight;

    @Option(names = "--flight-token-file",
            description = "File holding the token every Flight call must carry (authorization: Bearer TOKEN); mode 0600, "
                    + "or set $" + FlightEndpoint.TOKEN_ENV + " instead. Required unless --flight is a loopback address.")
    Path flightTokenFile;

    @Option(names = "--flight-tls-cert", description = "PEM certificate chain: Flight speaks TLS (grpc+tls) with --flight-tls-key.")
    Path flightTlsCert;

    @Option(names = "--flight-tls-key", description = "PEM private key (PKCS#8) of --flight-tls-cert.")
    Path flightTlsKey;

    @Option(names = "--metrics-port",
            description = "Serve Prometheus metrics (counters, buffers, store, bottleneck verdict) at http://ADDR:PORT/metrics "
                    + "(ADDR: --metrics-bind); 0 picks a free port (default: off).")
    Integer metricsPort;

    @Option(names = "--metrics-bind", defaultValue = "127.0.0.1",
            description = "Address the metrics endpoint listens on; the metrics have no access control, so bind another address "
                    + "only where everyone who can reach it may read them (default: ${DEFAULT-VALUE}).")
    String metricsBind;

    @Option(names = "--mode", defaultValue = "zero-copy",
            description = "zero-copy (batches in shared memory, trainers read them in place) or prefetch (batches copied "
                    + "through the socket) (default: ${DEFAULT-VALUE}).")
    String mode;

    @Option(names = "--start-step", defaultValue = "0",
            description = "Global step every rank starts at, to resume a job from a saved position (default: ${DEFAULT-VALUE}).")
    long startStep;

    @Option(names = "--steps", defaultValue = "0",
            description = "Stop each rank after this many steps (END); 0 runs until the service is stopped (default: ${DEFAULT-VALUE}).")
    long steps;

    @Option(names = "--metrics-file",
            description = "On shutdown, write the pipeline's, the store's and the server's counters to this file as JSON.")
    Path metricsFile;

    @Option(names = "--cluster",
            description = "Run the job over a Stoker cluster: join it through this seed node HOST:PORT (see `stoker node`), "
                    + "place workers on the nodes, and serve this node's ranks; ranks on other nodes connect to their node's socket.")
    String clusterSeed;

    @Option(names = "--placement", defaultValue = "spread",
            description = "With --cluster: pack fills one node's slots before the next; spread deals the workers over the "
                    + "nodes (default: ${DEFAULT-VALUE}).")
    String placement;

    @Option(names = "--workers", description = "With --cluster: workers to place (default: --nodes).")
    Integer workers;

    @Option(names = "--nodes", defaultValue = "1",
            description = "With --cluster: worker nodes (slots > 0, this one included) to wait for before the job starts "
                    + "(default: ${DEFAULT-VALUE}).")
    int clusterNodes;

    @Mixin ClusterOptions cluster;

    /** Where the Python client looks by default: $XDG_RUNTIME_DIR/stoker/JOB.sock, else /tmp/stoker-UID/JOB.sock. */
    static Path defaultSocket(String job) throws java.io.IOException {
        String xdg = System.getenv("XDG_RUNTIME_DIR");
        if (xdg != null && !xdg.isEmpty()) return Path.of(xdg, "stoker", job + ".sock");
        Object uid = Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        return Path.of("/tmp", "stoker-" + uid, job + ".sock");
    }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        FlightEndpoint flightEndpoint = flightEndpoint(); // refused endpoints stop here, before any work
        java.net.InetAddress metricsAddress = metricsAddress();
        EncodeOptions options = feed.withPixelFormat(processor.toEncodeOptions());
        var feedMode = FeedFactory.mode(mode);
        if (feedMode != FeedMode.ZERO_COPY && feedMode != FeedMode.PREFETCH)
            throw new Main.InvalidInputException("--mode must be zero-copy or prefetch, got " + mode);
        if (startStep < 0 || steps < 0) throw new Main.InvalidInputException("--start-step and --steps must be >= 0");
        long oneBatch = feed.batch * options.maxPixelBytesPerImage();
        long budget = clusterSeed != null ? cluster.nodeShmBudget : feed.shmBudgetBytes(); // a cluster job's batches live in the node's store
        if (feedMode == FeedMode.ZERO_COPY && budget < oneBatch)
            throw new Main.InvalidInputException((clusterSeed != null ? "--node-shm-budget " : "--shm-budget ") + budget + " is smaller than one batch: " + feed.batch
                    + " samples of one image at --max-pixels " + options.vision().maxPixels() + " take " + oneBatch + " bytes");
        Path sock = socket != null ? socket : defaultSocket(job);
        Path dir = sock.toAbsolutePath().getParent();
        if (!Files.isDirectory(dir))
            Files.createDirectories(dir, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                    java.nio.file.attribute.PosixFilePermissions.fromString("rwx------")));
        if (socket == null) checkPrivateDir(dir);

        var stop = new CountDownLatch(1);
        Signals.onTermination(stop::countDown);
        if (clusterSeed != null) return ClusterServe.run(this, sock, stop);
        try (var factory = FeedFactory.open(feed, options);
             var service = factory.start(mode, Math.min(feed.prefetchBytes, 2 * oneBatch), startStep, steps);
             var server = new FeedServer(sock, service, false);
             var flightServer = flightEndpoint == null ? null : startFlight(service, flightEndpoint);
             var metricsEndpoint = metricsPort == null ? null : new MetricsEndpoint(service, metricsAddress, metricsPort)) {
            Files.setPosixFilePermissions(sock, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")); // this user's trainers only
            out.printf("stoker serve: job %s, %d ranks × batch %d, mode %s, %s, pixels %s%n", job, feed.ranks, feed.batch, mode,
                    service.store() != null ? "shared memory " + service.store().arenaDir() + " (budget " + budget + " bytes)" : "copies",
                    options.pixelFormat().name().toLowerCase(java.util.Locale.ROOT));
            out.printf("stoker serve: data %s (%d samples, %d steps per epoch), fingerprint %016x%n", feed.data,
                    service.feeder().datasetSize(), service.feeder().schedule().stepsPerEpoch(), service.feeder().fingerprint());
            if (flightServer != null) {
                for (String w : flightEndpoint.warnings()) spec.commandLine().getErr().println("stoker serve: " + w);
                out.println("stoker serve: flight on " + flightEndpoint.url(flightServer.port())
                        + (flightEndpoint.security().token() != null ? " (token required)" : ""));
            }
            if (metricsEndpoint != null) out.println("stoker serve: metrics on " + metricsEndpoint.url());
            out.println("stoker serve: listening on " + sock); // last: tells scripts everything is up
            out.flush();
            var badInput = new java.util.concurrent.atomic.AtomicReference<dev.stoker.pipeline.feed.BadInputException>();
            service.feeder().errors().onFailure(e -> {
                badInput.set(e);
                stop.countDown();
            });
            try (var status = StatusLine.start(spec.commandLine().getErr(), () -> statusSample(service))) {
                stop.await();
                if (badInput.get() != null) Thread.sleep(FAILED_FEED_GRACE_MILLIS);
            }
            out.println("stoker serve: stopping");
            out.flush();
            if (metricsFile != null) writeMetrics(service, server);
            if (badInput.get() != null) throw badInput.get();
        }
        return 0;
    }

    /**
     * Refuses a socket folder another user could have prepared: under /tmp the default folder's name
     * is predictable, and whoever owns it (or may write to it) can replace the socket with their own
     * and feed the trainers. The folder must be this user's, a real folder, and writable by no one else.
     */
    static void checkPrivateDir(Path dir) throws java.io.IOException {
        var noFollow = java.nio.file.LinkOption.NOFOLLOW_LINKS;
        Object owner = Files.getAttribute(dir, "unix:uid", noFollow);
        var mode = Files.getPosixFilePermissions(dir, noFollow);
        if (Files.isSymbolicLink(dir) || !owner.equals(Files.getAttribute(Path.of("/proc/self"), "unix:uid"))
                || mode.contains(java.nio.file.attribute.PosixFilePermission.GROUP_WRITE)
                || mode.contains(java.nio.file.attribute.PosixFilePermission.OTHERS_WRITE))
            throw new Main.InvalidInputException("the socket folder " + dir + " is a link, another user's, or writable by others (mode "
                    + java.nio.file.attribute.PosixFilePermissions.toString(mode) + "); remove it or pass --socket");
    }

    /** What the status line shows: the feed's delivery and buffers, its verdict kind, and the total when --steps bounds the run. */
    private StatusLine.Sample statusSample(FeedService service) {
        var feeder = service.feeder();
        var m = feeder.metrics();
        return new StatusLine.Sample(System.nanoTime(), m.deliveredSamples(), m.deliveredBatches(), m.bufferedBatches(),
                java.util.OptionalDouble.empty(), feeder.verdict().kind().label(), steps > 0 ? steps * feed.ranks : -1);
    }

    /** The Flight endpoint the options ask for, if allowed ({@link FlightEndpoint} has the policy); null without --flight. */
    private FlightEndpoint flightEndpoint() {
        if (flight == null) {
            if (flightTokenFile != null || flightTlsCert != null || flightTlsKey != null)
                throw new Main.InvalidInputException("--flight-token-file and --flight-tls-* need --flight");
            return null;
        }
        return FlightEndpoint.plan(flight, flightTokenFile, flightTlsCert, flightTlsKey, System.getenv());
    }

    private static dev.stoker.flight.FlightBatchServer startFlight(FeedService service, FlightEndpoint endpoint) throws java.io.IOException {
        return dev.stoker.flight.FlightBatchServer.start(endpoint.location(), new FlightFeed(service), null, endpoint.security());
    }

    /** --metrics-bind, resolved; loopback unless the user names another address. */
    private java.net.InetAddress metricsAddress() {
        try {
            return java.net.InetAddress.getByName(metricsBind);
        } catch (java.net.UnknownHostException e) {
            throw new Main.InvalidInputException("--metrics-bind: cannot resolve '" + metricsBind + "'");
        }
    }

    private void writeMetrics(FeedService service, FeedServer server) throws java.io.IOException {
        var metrics = service.metrics();
        var s = new java.util.LinkedHashMap<String, Object>();
        s.put("batches_sent", server.batchesSent());
        s.put("bytes_sent", server.bytesSent());
        s.put("refs_sent", server.refsSent());
        s.put("leases_held", server.leasesHeld());
        s.put("leases_released", server.leasesReleased());
        s.put("leases_released_on_disconnect", server.leasesReleasedOnDisconnect());
        metrics.put("server", s);
        writeJson(metricsFile, metrics);
    }

    /** Writes {@code value} as pretty JSON to {@code file} atomically (a temporary file beside it, then a rename). */
    static void writeJson(Path file, Object value) throws java.io.IOException {
        Path abs = file.toAbsolutePath();
        if (abs.getParent() != null) Files.createDirectories(abs.getParent());
        Path tmp = abs.resolveSibling(abs.getFileName() + ".tmp");
        new com.fasterxml.jackson.databind.ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(tmp.toFile(), value);
        Files.move(tmp, abs, java.nio.file.StandardCopyOption.REPLACE_EXISTING, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }
}
