package dev.stoker.cli;

import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.launch.JobLauncher;
import dev.stoker.node.launch.JobWorld;
import java.io.PrintWriter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.function.Consumer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code stoker launch [options] -- COMMAND…}: this node's service and the trainer launcher beside it, as one command
 * for a job script. The world is {@code --nnodes} × {@code --nproc-per-node} ranks (else SLURM's variables), this node
 * serving ranks {@code node-rank × P … node-rank × P + P − 1}; the service is {@code stoker serve} in a child JVM, so that
 * when launch is killed outright (SIGKILL) the service sees its parent gone ({@code --exit-with-parent}) and stops
 * cleanly, removing its socket and shared memory; a watchdog ({@code JobLifeline}) then also stops COMMAND's process
 * group, so that no trainer outlives launch. Once the service listens, COMMAND runs with {@code STOKER_SOCKET} and
 * {@code STOKER_JOB} in its environment; SIGINT and SIGTERM to launch are passed on to COMMAND; when COMMAND ends the
 * service is stopped and launch exits with COMMAND's status (128 + N when a signal N ended it, as a shell says). A
 * service that dies while COMMAND runs stops COMMAND, and launch exits non-zero.
 *
 * <p>This class reads the options and the world ({@link JobWorld}); {@link JobLauncher} supervises the two processes.
 * Signal handlers only forward the signal to COMMAND (or, before COMMAND starts, mark the launch as stopped).
 */
@Command(name = "launch", mixinStandardHelpOptions = true,
        description = {"Run this node's Stoker service and COMMAND (e.g. torchrun) beside it; stop the service when COMMAND ends.",
                "",
                "World: --nnodes N (default 1, else $SLURM_NNODES) nodes of --nproc-per-node P ranks (else $SLURM_NTASKS_PER_NODE, "
                        + "else $SLURM_GPUS_ON_NODE); this node is --node-rank I (default 0, else $SLURM_NODEID). The service feeds "
                        + "ranks I*P .. I*P+P-1 of N*P (serve --ranks N*P --local-ranks I*P-(I*P+P-1)); options on the command line "
                        + "win over SLURM's variables. Without these, --ranks/--local-ranks may be given as for serve; with them, "
                        + "--ranks/--local-ranks are refused unless they agree.",
                "",
                "Every serve option applies (--data, --batch, --config FILE, ...), with the same defaults; --print-config prints "
                        + "the service's configuration (the world's --ranks, this node's --local-ranks) and exits.",
                "",
                "The service runs as a child JVM (stoker serve); its output lines are copied to this command's stdout/stderr. "
                        + "Once it prints 'listening on SOCKET' (at most --ready-timeout seconds), COMMAND runs with STOKER_SOCKET "
                        + "(the socket) and STOKER_JOB (--job) in its environment and this terminal's input and output.",
                "",
                "SIGINT and SIGTERM to launch are passed on to COMMAND (SIGTERM to its process, SIGINT to its process group; "
                        + "the service ignores SIGINT, so a Ctrl-C lets the trainer finish with the service still up). When COMMAND "
                        + "ends, the service gets SIGTERM (killed after --stop-timeout seconds), what COMMAND left running in its "
                        + "process group is stopped, and launch exits with COMMAND's status, 128+N if signal N ended it. If the "
                        + "service exits first, launch says so, stops COMMAND the same way and exits non-zero (the service's "
                        + "status, or 1).",
                "",
                "No orphans: the service and COMMAND run in sessions (process groups) of their own. If launch itself is killed, "
                        + "SIGKILL included, a watchdog sends SIGTERM to both groups at once (every process of COMMAND's, its "
                        + "children's children too, unless one left the group with setsid) and SIGKILL after 5 s (or --stop-timeout "
                        + "if shorter); the service stops cleanly, removing its socket and shared memory. Needs bash and "
                        + "util-linux's setsid.",
                "",
                "Example: stoker launch --data ds/train.jsonl --batch 4 --nproc-per-node 2 -- /usr/bin/python3 -m "
                        + "torch.distributed.run --nproc_per_node 2 train.py",
                ""})
final class LaunchCommand implements Callable<Integer>, NodeOptions.Configured {
    /** Default of {@code --ready-timeout}: a service indexes its data set and warms up before it listens; S3 and large manifests take a while. */
    static final long READY_TIMEOUT_SECONDS_DEFAULT = 300;
    /** Default of {@code --stop-timeout}: a service closes its pipeline within seconds. */
    static final long STOP_TIMEOUT_SECONDS_DEFAULT = 30;

    @Spec CommandSpec spec;

    @Option(names = "--nnodes", paramLabel = "N", description = "Nodes of the job (default: $SLURM_NNODES, else 1).")
    Integer nnodes;

    @Option(names = "--node-rank", paramLabel = "I", description = "This node's number, 0 .. N-1 (default: $SLURM_NODEID, else 0).")
    Integer nodeRank;

    @Option(names = "--nproc-per-node", paramLabel = "P",
            description = "Trainer ranks per node (default: $SLURM_NTASKS_PER_NODE, else $SLURM_GPUS_ON_NODE; required without them "
                    + "unless --ranks is given).")
    Integer nprocPerNode;

    @Option(names = "--ready-timeout", paramLabel = "S", defaultValue = "" + READY_TIMEOUT_SECONDS_DEFAULT,
            description = "Seconds the service may take to listen before launch gives up (default: ${DEFAULT-VALUE}).")
    long readyTimeoutSeconds;

    @Option(names = "--stop-timeout", paramLabel = "S", defaultValue = "" + STOP_TIMEOUT_SECONDS_DEFAULT,
            description = "Seconds a child (the service, or COMMAND when the service died) may take to exit after SIGTERM "
                    + "before it is killed (default: ${DEFAULT-VALUE}).")
    long stopTimeoutSeconds;

    @Parameters(paramLabel = "COMMAND", arity = "0..*", description = "The command to run beside the service, after --.")
    List<String> command = new ArrayList<>();

    @Override
    public List<ConfigKey<?>> settings() { return NodeConfig.keys(); }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        Consumer<String> log = ServeCommand.log("launch", out, err);
        var builder = NodeOptions.builder(spec, settings());
        var given = builder.build(); // validated as given, before launch adds the world
        JobWorld world = JobWorld.resolve(nnodes, nodeRank, nprocPerNode, System.getenv());
        boolean worldOptions = nnodes != null || nodeRank != null || nprocPerNode != null;
        if (worldOptions && (given.isGiven(NodeConfig.RANKS) || given.isGiven(NodeConfig.LOCAL_RANKS)))
            throw new ConfigException("give the world either as --nnodes/--node-rank/--nproc-per-node or as --ranks/--local-ranks, not both");
        if (world == null && !given.isGiven(NodeConfig.RANKS))
            throw new ConfigException("--nproc-per-node is required (ranks per node; under SLURM, $SLURM_NTASKS_PER_NODE or "
                    + "$SLURM_GPUS_ON_NODE gives it), or give --ranks as for serve");
        if (world != null) {
            if (given.isGiven(NodeConfig.RANKS) && given.ranks() != world.ranks())
                throw new ConfigException("--ranks " + given.ranks() + " disagrees with the world of " + world.ranks() + " ranks (" + world.how()
                        + "); leave --ranks out");
            if (given.isGiven(NodeConfig.LOCAL_RANKS) && !given.localRanks().equals(world.local()))
                throw new ConfigException("--local-ranks " + given.localRanks() + " disagrees with this node's ranks " + world.local() + " ("
                        + world.how() + "); leave --local-ranks out");
            builder.set(NodeConfig.RANKS, world.ranks()).set(NodeConfig.LOCAL_RANKS, world.local().isAll(world.ranks()) ? null : world.local());
        }
        NodeConfig config = builder.build();
        for (String w : config.warnings()) err.println("stoker: warning: " + w);
        err.flush();
        if (NodeOptions.printConfig(spec)) {
            out.print(config.toYaml(settings()));
            out.flush();
            return 0;
        }
        if (command.isEmpty()) throw new Main.InvalidInputException("launch needs a COMMAND to run beside the service: stoker launch [options] -- COMMAND");
        if (!config.join().isEmpty()) throw new ConfigException("launch runs a job of this node's own; --join is for serve and node");
        log.accept(world != null ? String.format(Locale.ROOT, "world %d ranks (%s); this node serves ranks %s", world.ranks(),
                world.how(), world.local()) : "world " + config.ranks() + " ranks (--ranks); this node serves ranks " + config.localRanks());
        return run(config, log, err);
    }

    /** Starts the service, waits until it listens, runs COMMAND beside it, stops it; returns launch's exit status. */
    private int run(NodeConfig config, Consumer<String> log, PrintWriter err) throws Exception {
        var launcher = new JobLauncher(JobLauncher.serviceCommand(config, Main.class.getName()), command, config.job(),
                Duration.ofSeconds(readyTimeoutSeconds), Duration.ofSeconds(stopTimeoutSeconds), spec.commandLine().getOut(), err, log);
        Signals.on("TERM", () -> launcher.signal("TERM"));
        Signals.on("INT", () -> launcher.signal("INT"));
        return launcher.run();
    }
}
