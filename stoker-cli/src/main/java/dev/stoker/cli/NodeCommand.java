package dev.stoker.cli;

import dev.stoker.cluster.ClusterNode;
import dev.stoker.transport.FeedServer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker node}: one worker node of a Stoker cluster. Joins the Pekko Cluster through the
 * seed, makes the batches a job's coordinator ({@code serve --cluster}) asks of it into its own
 * shared-memory store, lends them over Arrow Flight to ranks on other nodes, and serves the ranks
 * on its own node through its Unix socket (the same protocol as {@code serve}). Runs until SIGTERM.
 */
@Command(name = "node", mixinStandardHelpOptions = true,
        description = {"Run a worker node of a Stoker cluster until stopped (SIGTERM/SIGINT).",
                "Start the first with --seed its own --bind address; jobs are started by `serve --cluster`."})
final class NodeCommand implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ClusterOptions cluster;

    @Option(names = "--seed", required = true, split = ",",
            description = "Seed node(s) HOST:PORT to join through (the first node names its own --bind).")
    List<String> seeds;

    @Option(names = "--socket",
            description = "Unix socket this node's trainer ranks connect to (default: $XDG_RUNTIME_DIR/stoker/node.sock, else "
                    + "/tmp/stoker-<uid>/node.sock).")
    Path socket;

    @Option(names = "--stats-file", description = "On shutdown, write this node's counters (batches made, bytes sent and pulled) as JSON.")
    Path statsFile;

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        var options = cluster.nodeOptions(seeds);
        Path sock = socket != null ? socket : ServeCommand.defaultSocket("node");
        Path dir = sock.toAbsolutePath().getParent();
        if (!Files.isDirectory(dir))
            Files.createDirectories(dir, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                    java.nio.file.attribute.PosixFilePermissions.fromString("rwx------")));
        if (socket == null) ServeCommand.checkPrivateDir(dir);
        var stop = new CountDownLatch(1);
        Signals.onTermination(stop::countDown);
        try (var store = cluster.openStore("stoker_node");
             var node = ClusterNode.start(options, store, ClusterJobArgs.factory());
             var feed = node.trainerFeed(Duration.ofMinutes(10));
             var server = new FeedServer(sock, feed, false)) {
            Files.setPosixFilePermissions(sock, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));
            if (!node.awaitUp(Duration.ofSeconds(60)))
                throw new Main.InvalidInputException("could not join the cluster through " + seeds + " within 60 s");
            out.printf("stoker node: up as %s, %d slots, flight %s:%d, store %s%n", node.address(), options.slots(), options.host(),
                    node.flightPort(), store.arenaDir());
            out.println("stoker node: listening on " + sock);
            out.flush();
            stop.await();
            out.println("stoker node: stopping");
            out.flush();
            if (statsFile != null) ServeCommand.writeJson(statsFile, node.stats());
        }
        return 0;
    }
}
