package dev.stoker.cli;

import dev.stoker.cluster.ClusteredNode;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import java.io.PrintWriter;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

/**
 * {@code stoker node}: one worker node of a Stoker cluster ({@link ClusteredNode#launchMember}) until
 * SIGTERM: it joins through {@code --join}, makes the batches a job's coordinator ({@code serve
 * --join}) asks of it into its own store, lends them over Arrow Flight to ranks on other nodes, and
 * serves the ranks on its own node through its Unix socket (the same protocol as {@code serve}).
 */
@Command(name = "node", mixinStandardHelpOptions = true,
        description = {"Run a worker node of a Stoker cluster until stopped (SIGTERM/SIGINT).",
                "Start the first with --join its own --bind address; jobs are started by `serve --join`."})
final class NodeCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Override
    public List<ConfigKey<?>> settings() {
        // a member's settings, and where its own cache of preprocessed samples lives (every job's, whatever folder the job names)
        var keys = new java.util.ArrayList<>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.MEMBER)));
        keys.add(NodeConfig.CACHE_DIR);
        return keys;
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        PrintWriter out = spec.commandLine().getOut();
        var stop = new CountDownLatch(1);
        // a stop while the node still joins (its seeds may be gone: it would wait out the join timeout) ends the join at once
        var joining = new AtomicReference<Thread>(Thread.currentThread());
        Signals.onTermination(() -> {
            stop.countDown();
            synchronized (joining) {
                if (joining.get() != null) joining.get().interrupt();
            }
        });
        var log = ServeCommand.log("node", out, spec.commandLine().getErr());
        StokerNode launched;
        try {
            launched = ClusteredNode.launchMember(config, log);
        } catch (Exception e) {
            if (stop.getCount() > 0) throw e;
            log.accept("stopped before it had joined the cluster");
            return 0;
        } finally {
            synchronized (joining) {
                joining.set(null);
                Thread.interrupted(); // a stop that came once the node had joined is seen by stop.await() below
            }
        }
        try (var node = launched) {
            var failed = new AtomicReference<RuntimeException>();
            node.failure().thenAccept(e -> { // removed from the cluster: exit, so that a supervisor restarts it and it rejoins
                failed.set(e);
                stop.countDown();
            });
            stop.await();
            log.accept("stopping");
            if (failed.get() != null) throw failed.get();
        }
        return 0;
    }
}
