package dev.stoker.cli;

import dev.stoker.cluster.ClusteredNode;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StatusLine;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.BadInputException;
import java.io.PrintWriter;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

/**
 * {@code stoker serve}: the service of one training node ({@link StokerNode}), until SIGTERM or
 * SIGINT; with {@code --join}, the job runs over a Stoker cluster from this node
 * ({@link ClusteredNode}). When the bad-input policy stops the feed, the trainers get the error in
 * reply to their requests and the service stops {@value #FAILED_FEED_GRACE_MILLIS} ms later with
 * exit status 2.
 */
@Command(name = "serve", mixinStandardHelpOptions = true,
        description = {"Serve training batches to the trainer ranks of this node until stopped (SIGTERM/SIGINT).",
                "Trainers connect to --socket with the Python client (clients/python) or the Java TrainerClient."})
final class ServeCommand implements Callable<Integer>, NodeOptions.Configured {
    /** How long a feed stopped by bad input is still served, so that trainers between two requests get its error, not a closed socket. */
    static final long FAILED_FEED_GRACE_MILLIS = 2000;

    @Spec CommandSpec spec;

    /** How often {@code --exit-with-parent} looks whether its process is still alive. */
    static final long PARENT_POLL_MILLIS = 200;

    @Option(names = "--exit-with-parent", hidden = true, paramLabel = "PID",
            description = "Stop (as on SIGTERM) once process PID is gone; SIGINT is then ignored. stoker launch runs serve with it.")
    Long exitWithParent;

    @Override
    public List<ConfigKey<?>> settings() { return NodeConfig.keys(); }

    @Override
    public boolean feedsAudio() { return true; }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        var stop = new CountDownLatch(1);
        Consumer<String> log = log("serve", out, err);
        if (exitWithParent == null) {
            Signals.onTermination(stop::countDown);
        } else {
            // under stoker launch: a Ctrl-C at the terminal reaches the whole process group, and the trainer must be able to
            // finish (save its state) with the service still up; launch stops the service with SIGTERM once COMMAND is done
            Signals.on("TERM", stop::countDown);
            Signals.on("INT", () -> {});
            watchParent(exitWithParent, () -> {
                log.accept("the launching process " + exitWithParent + " is gone; stopping");
                stop.countDown();
            });
        }
        try (var node = config.join().isEmpty() ? StokerNode.launch(config, log) : ClusteredNode.launchCoordinator(config, log)) {
            var badInput = new AtomicReference<RuntimeException>();
            node.failure().thenAccept(e -> {
                badInput.set(e);
                stop.countDown();
            });
            try (var status = !node.holdsJob() ? null : StatusLine.start(err, () -> status(node))) {
                stop.await();
                if (badInput.get() != null) Thread.sleep(FAILED_FEED_GRACE_MILLIS);
            }
            log.accept("stopping");
            if (badInput.get() != null) throw badInput.get();
        }
        return 0;
    }

    /**
     * Runs {@code gone} once process {@code pid} has exited (polled every {@value #PARENT_POLL_MILLIS} ms on a daemon
     * thread): a parent killed with SIGKILL cannot stop its child itself, so the child watches. A process of that pid
     * started after this one (the pid reused) counts as gone.
     */
    static void watchParent(long pid, Runnable gone) {
        var parent = ProcessHandle.of(pid);
        var started = parent.flatMap(p -> p.info().startInstant());
        var watcher = new Thread(() -> {
            try {
                while (true) {
                    var now = ProcessHandle.of(pid);
                    boolean alive = now.isPresent() && now.get().isAlive()
                            && (started.isEmpty() || started.equals(now.get().info().startInstant()));
                    if (!alive) break;
                    Thread.sleep(PARENT_POLL_MILLIS);
                }
                gone.run();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "stoker-parent-watch");
        watcher.setDaemon(true);
        watcher.start();
    }

    /** The node's lines as {@code stoker CMD: …}, warnings on stderr. */
    static Consumer<String> log(String command, PrintWriter out, PrintWriter err) {
        return line -> {
            var to = line.startsWith("warning:") ? err : out;
            to.println("stoker " + command + ": " + line);
            to.flush();
        };
    }

    /**
     * What the status line shows: the feed's delivery, buffers and skipped samples, the trainers' wait ratio over their recent
     * steps as they reported it, the verdict kind (with that wait ratio), and the total when --steps bounds the run; for a
     * cluster job ({@code --join}) every rank's, remote ones too, as its coordinator gathers them from the nodes.
     */
    static StatusLine.Sample status(StokerNode node) { return node.status(); }
}
