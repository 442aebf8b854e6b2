package dev.stoker.cli;

import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.pipeline.feed.RankRange;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
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
 * cleanly, removing its socket and shared memory. Once the service listens, COMMAND runs with {@code STOKER_SOCKET} and
 * {@code STOKER_JOB} in its environment; SIGINT and SIGTERM to launch are passed on to COMMAND; when COMMAND ends the
 * service is stopped and launch exits with COMMAND's status (128 + N when a signal N ended it, as a shell says). A
 * service that dies while COMMAND runs stops COMMAND, and launch exits non-zero.
 *
 * <p>Threading: the main thread waits for the children; one thread per child output stream copies its lines; signal
 * handlers only forward the signal to COMMAND (or, before COMMAND starts, mark the launch as stopped).
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
                "SIGINT and SIGTERM to launch are passed on to COMMAND (the service ignores SIGINT, so a Ctrl-C lets the trainer "
                        + "finish with the service still up). When COMMAND ends, the service gets SIGTERM (killed after "
                        + "--stop-timeout seconds) and launch exits with COMMAND's status, 128+N if signal N ended it. If the "
                        + "service exits first, launch says so, stops COMMAND the same way and exits non-zero (the service's "
                        + "status, or 1). If launch itself is killed (SIGKILL), the service notices within a second and stops, "
                        + "removing its socket and shared memory.",
                "",
                "Example: stoker launch --data ds/train.jsonl --batch 4 --nproc-per-node 2 -- /usr/bin/python3 -m "
                        + "torch.distributed.run --nproc_per_node 2 train.py",
                ""})
final class LaunchCommand implements Callable<Integer>, NodeOptions.Configured {
    /** Default of {@code --ready-timeout}: a service indexes its data set and warms up before it listens; S3 and large manifests take a while. */
    static final long READY_TIMEOUT_SECONDS_DEFAULT = 300;
    /** Default of {@code --stop-timeout}: a service closes its pipeline within seconds. */
    static final long STOP_TIMEOUT_SECONDS_DEFAULT = 30;
    static final String SOCKET_ENV = "STOKER_SOCKET", JOB_ENV = "STOKER_JOB";
    /** The line a service prints last once everything is up ({@code StokerNode.launch}). */
    static final String LISTENING = "stoker serve: listening on ";

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

    /**
     * The job's world as this node sees it: {@code ranks} in all, {@code local} on this node, and where each figure came
     * from ({@code how}, for the log).
     */
    record World(int ranks, RankRange local, String how) {
        /**
         * The world from launch's options (null: not given) and, for those not given, SLURM's variables in {@code env};
         * null when neither gives a world (then {@code --ranks}/{@code --local-ranks} or serve's defaults apply).
         */
        static World resolve(Integer nnodes, Integer nodeRank, Integer nproc, Map<String, String> env) {
            var how = new ArrayList<String>();
            int n = pick("--nnodes", nnodes, env, List.of("SLURM_NNODES"), 1, how);
            int i = pick("--node-rank", nodeRank, env, List.of("SLURM_NODEID"), 0, how);
            int p = pick("--nproc-per-node", nproc, env, List.of("SLURM_NTASKS_PER_NODE", "SLURM_GPUS_ON_NODE"), -1, how);
            if (p < 0) {
                if (nnodes != null || nodeRank != null || how.stream().anyMatch(h -> h.contains("SLURM_")))
                    throw new ConfigException("--nproc-per-node is required (ranks per node; under SLURM, $SLURM_NTASKS_PER_NODE or "
                            + "$SLURM_GPUS_ON_NODE gives it)");
                return null;
            }
            if (n < 1) throw new ConfigException("--nnodes must be at least 1, got " + n);
            if (p < 1) throw new ConfigException("--nproc-per-node must be at least 1, got " + p);
            if (i < 0 || i >= n) throw new ConfigException("--node-rank must be between 0 and " + (n - 1) + " (--nnodes " + n + "), got " + i);
            if ((long) n * p > 1 << 16) throw new ConfigException("--nnodes × --nproc-per-node is " + (long) n * p + " ranks, more than " + (1 << 16));
            return new World(n * p, new RankRange(i * p, i * p + p - 1), String.join(", ", how));
        }

        /** The option's value, else the first of {@code vars} set in {@code env}, else {@code fallback}; notes which in {@code how}. */
        private static int pick(String option, Integer given, Map<String, String> env, List<String> vars, int fallback, List<String> how) {
            if (given != null) {
                how.add(option + " " + given);
                return given;
            }
            for (String v : vars) {
                String text = env.get(v);
                if (text == null || text.isBlank()) continue;
                // SLURM writes per-node counts of uneven allocations as "2(x3),1": the first node's count is this form's first number
                var m = java.util.regex.Pattern.compile("^\\s*(\\d+)").matcher(text);
                if (!m.find()) throw new ConfigException("$" + v + " is '" + text + "', not a number; give " + option);
                int value = Integer.parseInt(m.group(1));
                how.add(option + " " + value + " from $" + v);
                return value;
            }
            if (fallback >= 0) how.add(option + " " + fallback + " (default)");
            return fallback;
        }
    }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        Consumer<String> log = ServeCommand.log("launch", out, err);
        var builder = NodeOptions.builder(spec, settings());
        var given = builder.build(); // validated as given, before launch adds the world
        World world = World.resolve(nnodes, nodeRank, nprocPerNode, System.getenv());
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
        log.accept(world != null ? String.format(java.util.Locale.ROOT, "world %d ranks (%s); this node serves ranks %s", world.ranks(),
                world.how(), world.local()) : "world " + config.ranks() + " ranks (--ranks); this node serves ranks " + config.localRanks());
        return run(config, log, err);
    }

    /** Starts the service, waits until it listens, runs COMMAND beside it, stops it; returns launch's exit status. */
    private int run(NodeConfig config, Consumer<String> log, PrintWriter err) throws Exception {
        var stopped = new AtomicReference<String>(); // a signal that arrived before COMMAND started
        var commandRef = new AtomicReference<Process>();
        Signals.on("TERM", () -> forward(commandRef.get(), "TERM", stopped));
        Signals.on("INT", () -> forward(commandRef.get(), "INT", stopped));

        var service = new ProcessBuilder(serviceCommand(config)).start();
        var socket = new CompletableFuture<String>();
        var copiers = List.of(copyLines(service.getInputStream(), spec.commandLine().getOut(), line -> {
            if (line.startsWith(LISTENING)) socket.complete(line.substring(LISTENING.length()).strip());
        }), copyLines(service.getErrorStream(), err, line -> {}));
        try {
            log.accept("service pid " + service.pid() + " starting");
            String path = awaitReady(service, socket, stopped, log);
            if (path == null) {
                if (stopped.get() != null) return 128 + signalNumber(stopped.get());
                return service.isAlive() ? 1 : service.exitValue();
            }
            if (stopped.get() != null) {
                log.accept("SIG" + stopped.get() + " before COMMAND started; stopping the service");
                return 128 + signalNumber(stopped.get());
            }
            var pb = new ProcessBuilder(command).inheritIO();
            pb.environment().put(SOCKET_ENV, path);
            pb.environment().put(JOB_ENV, config.job());
            Process cmd;
            try {
                cmd = pb.start();
            } catch (IOException e) {
                throw new Main.InvalidInputException("cannot run " + command.get(0) + ": " + e.getMessage());
            }
            commandRef.set(cmd);
            if (stopped.get() != null) forward(cmd, stopped.get(), stopped); // a signal between the check and the start
            log.accept("service ready on " + path + "; running " + String.join(" ", command) + " (pid " + cmd.pid() + ")");
            CompletableFuture.anyOf(cmd.onExit(), service.onExit()).join();
            if (cmd.isAlive()) { // the service went first
                int status = service.exitValue();
                log.accept("the service exited with status " + status + " while COMMAND ran; stopping COMMAND (pid " + cmd.pid() + ")");
                stop(cmd, "COMMAND", log);
                return status != 0 ? status : 1;
            }
            int status = cmd.exitValue(); // Java reports a death by signal N as 128 + N, as a shell does
            log.accept("COMMAND exited with status " + status + "; stopping the service");
            return status;
        } finally {
            stop(service, "the service", log);
            for (var t : copiers) t.join(TimeUnit.SECONDS.toMillis(2)); // its last lines ("stopping") before launch's exit
        }
    }

    /**
     * Waits until the service listens; returns its socket, or null (having said why) when it exited first, did not
     * listen within {@code --ready-timeout}, or launch was told to stop meanwhile.
     */
    private String awaitReady(Process service, CompletableFuture<String> socket, AtomicReference<String> stopped, Consumer<String> log)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(readyTimeoutSeconds);
        while (true) {
            try {
                return socket.get(100, TimeUnit.MILLISECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                // not yet
            } catch (java.util.concurrent.ExecutionException e) {
                throw new IllegalStateException(e.getCause());
            }
            if (!service.isAlive()) {
                // its last lines may still be on their way: the socket line wins over the exit
                if (socket.isDone()) continue;
                log.accept("the service exited with status " + service.exitValue() + " before it was ready");
                return null;
            }
            if (stopped.get() != null) {
                log.accept("SIG" + stopped.get() + " while the service was starting; stopping it");
                return null;
            }
            if (System.nanoTime() > deadline) {
                log.accept("the service did not listen within " + readyTimeoutSeconds + " s (--ready-timeout " + readyTimeoutSeconds
                        + "); stopping it");
                return null;
            }
        }
    }

    /** Signal {@code name} to COMMAND, or, before it runs, remembered so that launch stops instead of starting it. */
    private static void forward(Process cmd, String name, AtomicReference<String> stopped) {
        if (cmd == null) {
            stopped.compareAndSet(null, name);
            return;
        }
        if (!cmd.isAlive()) return;
        if (name.equals("TERM")) {
            cmd.toHandle().destroy(); // SIGTERM
            return;
        }
        try { // Java sends no SIGINT itself
            String kill = Files.isExecutable(Path.of("/bin/kill")) ? "/bin/kill" : "kill";
            new ProcessBuilder(kill, "-" + name, Long.toString(cmd.pid())).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor(5, TimeUnit.SECONDS);
        } catch (IOException e) {
            cmd.toHandle().destroy(); // no kill command: SIGTERM stops it too
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static int signalNumber(String name) { return name.equals("INT") ? 2 : 15; }

    /**
     * SIGTERM to {@code p}; after {@code --stop-timeout} seconds, SIGKILL. Through its handle: {@code Process.destroy()}
     * also closes our ends of its pipes, and the service's last lines would be lost.
     */
    private void stop(Process p, String what, Consumer<String> log) throws InterruptedException {
        if (!p.isAlive()) return;
        p.toHandle().destroy();
        if (p.waitFor(stopTimeoutSeconds, TimeUnit.SECONDS)) return;
        log.accept(what + " did not exit within " + stopTimeoutSeconds + " s of SIGTERM (--stop-timeout); killing it");
        p.toHandle().destroyForcibly();
        p.waitFor(stopTimeoutSeconds, TimeUnit.SECONDS);
    }

    /**
     * The service's command line: this JVM's java, its JVM options and class path, {@code stoker serve} with the
     * configuration's given settings ({@code --name=value}, so that values read as they were given) and
     * {@code --exit-with-parent} this process.
     */
    List<String> serviceCommand(NodeConfig config) {
        var cmd = new ArrayList<String>();
        cmd.add(ProcessHandle.current().info().command().orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments())
            if (!a.startsWith("-agentlib:jdwp") && !a.startsWith("-Xrunjdwp")) cmd.add(a); // a debugger's port is launch's
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName(), "serve"));
        for (var k : settings()) {
            if (!config.isGiven(k)) continue;
            cmd.add(k.option() + "=" + k.format(config.get(k)));
        }
        cmd.add("--exit-with-parent=" + ProcessHandle.current().pid());
        return cmd;
    }

    /** Copies {@code in}'s lines to {@code to} on a daemon thread, showing each to {@code seen} first. */
    private static Thread copyLines(InputStream in, PrintWriter to, Consumer<String> seen) {
        var t = new Thread(() -> {
            try (var r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    to.println(line);
                    to.flush();
                    seen.accept(line);
                }
            } catch (IOException e) {
                // the child closed its end
            }
        }, "stoker-launch-output");
        t.setDaemon(true);
        t.start();
        return t;
    }
}
