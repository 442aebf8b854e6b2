package dev.stoker.cli;

import dev.stoker.cluster.ClusterJob;
import dev.stoker.cluster.ClusterNode;
import dev.stoker.cluster.Placement;
import dev.stoker.transport.FeedServer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;

/**
 * {@code serve --cluster SEED}: runs a job over a Stoker cluster from this trainer node. This
 * process joins the cluster as a node itself (taking {@code --slots} workers), coordinates the job
 * ({@link ClusterJob}: placement, references, redoing a dead node's work) and serves this node's
 * trainer ranks on its socket; ranks on other nodes connect to their own node's socket.
 */
final class ClusterServe {
    private ClusterServe() {}

    static int run(ServeCommand serve, Path sock, CountDownLatch stop) throws Exception {
        PrintWriter out = serve.spec.commandLine().getOut();
        Placement placement;
        try {
            placement = Placement.valueOf(serve.placement.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--placement must be pack or spread, got " + serve.placement);
        }
        if (serve.clusterNodes < 1) throw new Main.InvalidInputException("--nodes must be at least 1");
        int workers = serve.workers != null ? serve.workers : serve.clusterNodes;
        if (workers < 1) throw new Main.InvalidInputException("--workers must be at least 1");
        if (serve.startStep != 0) throw new Main.InvalidInputException("--start-step is not supported with --cluster yet");
        // what a cluster job does not do (yet) is refused rather than silently ignored
        if (serve.flight != null)
            throw new Main.InvalidInputException("--flight is not used with --cluster: every node lends its batches over its own Flight "
                    + "endpoint (--flight-port), and ranks on other nodes connect to their node's socket");
        if (serve.metricsPort != null)
            throw new Main.InvalidInputException("--metrics-port is not supported with --cluster yet; --metrics-file writes the job's "
                    + "per-rank and per-node counters on shutdown");
        if (FeedFactory.mode(serve.mode) != dev.stoker.pipeline.feed.FeedMode.ZERO_COPY)
            throw new Main.InvalidInputException("--cluster runs zero-copy only (a rank's node leases or pulls each batch into its "
                    + "shared-memory store), got --mode " + serve.mode);
        var args = ClusterJobArgs.of(serve.spec);
        var spec = new ClusterJob.Spec(serve.job, args, serve.clusterNodes, placement, workers, serve.steps, serve.feed.prefetchBatches);
        var options = serve.cluster.nodeOptions(List.of(serve.clusterSeed));
        try (var store = serve.cluster.openStore("stoker_serve");
             var node = ClusterNode.start(options, store, ClusterJobArgs.factory())) {
            if (!node.awaitUp(Duration.ofSeconds(60)))
                throw new Main.InvalidInputException("could not join the cluster through " + serve.clusterSeed + " within 60 s");
            out.printf("stoker serve: cluster member %s (%d slots), waiting for %d worker nodes%n", node.address(), options.slots(),
                    serve.clusterNodes);
            out.flush();
            try (var job = node.runJob(spec, Duration.ofMinutes(5));
                 var feed = node.trainerFeed(Duration.ofSeconds(30));
                 var server = new FeedServer(sock, feed, false)) {
                Files.setPosixFilePermissions(sock, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));
                out.printf("stoker serve: job %s over %d nodes, %d workers %s: %s%n", serve.job, job.nodes().size(), workers,
                        placement.name().toLowerCase(Locale.ROOT), job.workerNodes());
                out.printf("stoker serve: data %s (%d samples, %d steps per epoch), fingerprint %016x%n", serve.feed.data,
                        job.schedule().datasetSize(), job.schedule().stepsPerEpoch(), job.fingerprint());
                out.println("stoker serve: listening on " + sock);
                out.flush();
                stop.await();
                out.println("stoker serve: stopping");
                out.flush();
                if (serve.metricsFile != null) {
                    var m = new LinkedHashMap<String, Object>(job.summary());
                    m.put("nodes", job.nodeStats());
                    m.put("server", java.util.Map.of("refs_sent", server.refsSent(), "batches_sent", server.batchesSent()));
                    ServeCommand.writeJson(serve.metricsFile, m);
                }
            }
        }
        return 0;
    }
}
