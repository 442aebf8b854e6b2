package dev.stoker.cli;

import dev.stoker.bench.cluster.ClusterAblation;
import dev.stoker.bench.cluster.ClusterBench;
import dev.stoker.bench.cluster.ClusterEpochs;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.report.RunData;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench cluster}: a Stoker cluster on one machine, over the network test bed ({@link ClusterBench}). */
@Command(name = "cluster", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Run a Stoker cluster of --nodes nodes, each in a network namespace with a --nic-mbit card (node 0: serve "
                + "--join, the others: node --join), with one trainer process per rank on node (rank mod nodes), and report per-node "
                + "bytes sent and received, link utilisation, samples/s and the wait ratio.",
                "Feed options (--data, --ranks, --batch, --max-pixels, --fetch-latency-ms, --warm-up-ms, --threads …) go to the job as "
                        + "serve takes them; each node reads its settings from <work-dir>/nodeN.yaml.",
                "samples/s and link utilisation are over the slowest trainer's elapsed time (first request to last step); steady "
                        + "figures leave out each rank's first " + RunData.STEADY_SKIP_STEPS + " steps (steady link use: the wall-clock "
                        + "window from when every rank is past them to the last rank's end, from counters sampled every 250 ms).",
                "The last stdout line is JSON {\"samples_per_s\":…, \"wait_ratio\":…, \"per_node_bytes\":[…], \"per_node_rx_bytes\":[…], "
                        + "\"link_utilisation\":[…], \"worker_nodes\":[…], \"per_rank_wait_ratio\":[…], \"nodes\":…, \"placement\":…, "
                        + "\"nic_mbit\":…, \"settings\":{…}, …}."})
final class ClusterCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Option(names = "--nic-mbit", defaultValue = "1000",
            description = "Each node's network card in Mbit/s, per direction; 0: unlimited (default: ${DEFAULT-VALUE}).")
    long nicMbit;

    @Option(names = "--steps", defaultValue = "20", description = "Steps per rank (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--step-ms", defaultValue = "100", description = "Simulated GPU step per batch, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--work-dir", description = "Where sockets, logs, trainer reports and the nodes' counters go (default: a temp folder).")
    Path workDir;

    @Option(names = "--no-netns",
            description = "Run every node on 127.0.0.1 (a port each, no NIC limit) instead of in network namespaces; automatic when "
                    + "namespaces are unavailable (not root, no ip/tc).")
    boolean noNetns;

    @Option(names = "--port",
            description = "Cluster port: in namespaces every node binds it on its own address (default 2551); on 127.0.0.1 node i "
                    + "binds PORT+i (default: a free range).")
    Integer port;

    @Option(names = "--node-heap", defaultValue = "1g", description = "-Xmx of each node's JVM (default: ${DEFAULT-VALUE}).")
    String nodeHeap;

    @Option(names = "--timeout-s", description = "Longest the trainers may run (default: 120 s + 10 s per step; --ablate's large "
            + "setting: --ablate-scale squared times that).")
    Long timeoutSeconds;

    @Option(names = "--ablate",
            description = "The talk's scale ablation: the 2x2 of --retrieval {relay, direct} x --placement {pack, spread} at the "
                    + "setting given and at --ablate-scale times its ranks, workers and batch (8 runs); ends with one JSON line "
                    + "{\"ablation\": [...], \"gain\": {...}} and writes ablation.json into the work dir for `stoker report`.")
    boolean ablate;

    @Option(names = "--ablate-scale", defaultValue = "" + ClusterAblation.DEFAULT_SCALE,
            description = "With --ablate: the large setting's factor on ranks, workers and batch (default: ${DEFAULT-VALUE}).")
    int ablateScale;

    @Option(names = "--epochs", defaultValue = "1",
            description = "Run the job's first N epochs one after the other over the same nodes and their caches of preprocessed "
                    + "samples (each node its own folder; each epoch a run of its own in its own order, seed + epoch - 1, the nodes "
                    + "started again at the same addresses); needs --cache on or off; --steps defaults to one epoch's. Ends with one "
                    + "JSON line {\"epochs\": [{\"samples_per_s\", \"hits\", \"hits_local\", \"hits_at_home\", \"misses\", "
                    + "\"fallbacks\", \"cache_bytes_between_nodes\", …}], \"entries\", \"speedup\", …} (default: ${DEFAULT-VALUE}).")
    int epochs;

    @Override
    public List<ConfigKey<?>> settings() {
        var keys = new ArrayList<>(BenchCommand.FEED_SETTINGS);
        keys.addAll(List.of(NodeConfig.NODES, NodeConfig.PLACEMENT, NodeConfig.RETRIEVAL, NodeConfig.WORKERS, NodeConfig.PULL_AHEAD, NodeConfig.NODE_SHM_BUDGET));
        return keys;
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        var out = spec.commandLine().getOut();
        if (epochs > 1 && ablate) throw new dev.stoker.node.ConfigException("--epochs and --ablate do not go together: run them apart");
        int stepsPerRun = epochs > 1 && !spec.commandLine().getParseResult().hasMatchedOption("--steps") ? ClusterEpochs.stepsPerEpoch(config) : steps;
        var settings = new ClusterBench.Settings(config, stepsPerRun, stepMillis, nicMbit, noNetns, port, nodeHeap, timeoutSeconds, workDir);
        if (epochs > 1) return ClusterEpochs.run(settings, epochs, out, spec.commandLine().getErr());
        if (ablate) return ClusterAblation.run(settings, ablateScale, out, spec.commandLine().getErr());
        return ClusterBench.run(settings, out, spec.commandLine().getErr());
    }
}
