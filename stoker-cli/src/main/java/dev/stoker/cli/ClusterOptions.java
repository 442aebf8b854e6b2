package dev.stoker.cli;

import dev.stoker.cluster.ClusterNode;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import picocli.CommandLine.Option;

/** Options of a cluster member ({@code node}, {@code serve --cluster}): its address, slots, store and failure timings. */
final class ClusterOptions {
    @Option(names = "--bind", defaultValue = "127.0.0.1:0",
            description = "HOST:PORT this node's cluster member binds and advertises; the other nodes must reach HOST; port 0: "
                    + "any free port (default: ${DEFAULT-VALUE}).")
    String bind;

    @Option(names = "--slots", defaultValue = "4",
            description = "Workers this node takes; pack placement fills them before the next node; 0: none (default: ${DEFAULT-VALUE}).")
    int slots;

    @Option(names = "--flight-port", defaultValue = "0",
            description = "Port of the node's Arrow Flight endpoint on HOST of --bind, from which ranks on other nodes pull the "
                    + "batches this node made (default: any free port).")
    int flightPort;

    @Option(names = "--node-shm-budget", converter = ByteSizeConverter.class, defaultValue = "2G",
            description = "Budget of this node's object store, which holds the batches it made until their ranks pulled "
                    + "them, and the batches pulled for its own ranks (default: ${DEFAULT-VALUE}).")
    long nodeShmBudget;

    @Option(names = "--node-shm-dir", defaultValue = "/dev/shm", description = "Folder of this node's object store (default: ${DEFAULT-VALUE}).")
    Path nodeShmDir;

    @Option(names = "--down-after-ms", defaultValue = "3000",
            description = "How long the split-brain resolver waits for a stable set of unreachable nodes before downing them "
                    + "(default: ${DEFAULT-VALUE}).")
    long downAfterMillis;

    @Option(names = "--heartbeat-pause-ms", defaultValue = "4000",
            description = "How long a node may miss heartbeats before it counts as unreachable and its work is redone "
                    + "elsewhere (default: ${DEFAULT-VALUE}).")
    long heartbeatPauseMillis;

    @Option(names = "--pull-ahead", defaultValue = "" + dev.stoker.cluster.ClusterRankFeed.PULL_AHEAD_DEFAULT,
            description = "Batches this node pulls for each of its ranks ahead of the trainer's request, so that a batch's "
                    + "transfer from its owner overlaps the trainer's step (default: ${DEFAULT-VALUE}).")
    int pullAhead;

    static final String TOKEN_ENV = "STOKER_CLUSTER_TOKEN";

    @Option(names = "--cluster-token-file",
            description = "File (mode 0600) holding the token the nodes' Flight endpoints ask for and send, the same on every "
                    + "node; or set $" + TOKEN_ENV + ". Required when --bind is not a loopback address.")
    Path tokenFile;

    /** The cluster token from --cluster-token-file or the environment; required off loopback. */
    String token(String host, java.util.Map<String, String> env) {
        String fromEnv = env.get(TOKEN_ENV);
        if (fromEnv != null && fromEnv.isEmpty()) fromEnv = null;
        if (tokenFile != null && fromEnv != null)
            throw new Main.InvalidInputException("give the cluster token one way: --cluster-token-file or $" + TOKEN_ENV + ", not both");
        String token = tokenFile != null ? FlightEndpoint.readToken(tokenFile, "--cluster-token-file")
                : fromEnv != null ? FlightEndpoint.checked(fromEnv.strip(), "$" + TOKEN_ENV) : null;
        if (token == null && !FlightEndpoint.isLoopback(host))
            throw new Main.InvalidInputException("--bind " + bind + " can be reached from other hosts, so the nodes' Flight endpoints "
                    + "need a token: pass --cluster-token-file FILE (mode 0600, the same on every node; e.g. openssl rand -hex 32 > FILE) "
                    + "or set $" + TOKEN_ENV + "; or bind 127.0.0.1");
        return token;
    }

    ClusterNode.Options nodeOptions(List<String> seeds) {
        ClusterNode.HostPort hp;
        try {
            hp = ClusterNode.HostPort.parse(bind);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--bind: " + e.getMessage());
        }
        if (slots < 0) throw new Main.InvalidInputException("--slots must be >= 0");
        try {
            return ClusterNode.Options.of(hp.host(), hp.port(), seeds, slots)
                    .withTimings(Duration.ofMillis(downAfterMillis), Duration.ofMillis(heartbeatPauseMillis)).withFlightPort(flightPort)
                    .withFlightToken(token(hp.host(), System.getenv())).withPullAhead(pullAhead);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException(e.getMessage());
        }
    }

    ShmObjectStore openStore(String name) throws IOException {
        try {
            return ShmObjectStore.open(new StoreConfig(nodeShmDir, nodeShmBudget, name));
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--node-shm-*: " + e.getMessage());
        }
    }
}
