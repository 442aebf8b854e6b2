package dev.stoker.node.launch;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeSettings;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * A node's service and a training command beside it, supervised as one job: the service ({@code stoker serve} in a
 * child JVM, {@link #serviceCommand}) starts first; once it prints that it listens, COMMAND runs with
 * {@value #SOCKET_ENV} and {@value #JOB_ENV} in its environment; signals given to the launcher ({@link #signal}) go to
 * COMMAND; when COMMAND ends the service is stopped and {@link #run} returns COMMAND's status (128 + N when signal N
 * ended it, as a shell says). A service that exits while COMMAND runs stops COMMAND, and the job fails.
 *
 * <p>The service is a child process rather than a node in this JVM so that a launcher killed outright (SIGKILL) cannot
 * leave it running: it watches its parent ({@code --exit-with-parent}) and stops cleanly, removing its socket and
 * shared memory. Stopping a child is SIGTERM, then SIGKILL after the stop timeout.
 *
 * <p>No orphans: the service and COMMAND each run in a session and process group of their own, and a {@link JobLifeline}
 * watchdog stops both groups — every process in them, torchrun's workers included — when the launcher is gone, SIGKILL
 * included (SIGTERM, SIGKILL after at most {@link JobLifeline#GRACE_MAX}); when {@link #run} returns, the same watchdog
 * has stopped what COMMAND left running in its group. A process that leaves its group ({@code setsid}) escapes.
 *
 * <p>Threading: {@link #run} on one thread, which waits for the children; one daemon thread per child output stream
 * copies its lines; {@link #signal} from any thread (a signal handler), once {@link #run} may have started.
 */
public final class JobLauncher {
    /** The line a service prints last once everything is up ({@code StokerNode.launch}). */
    public static final String LISTENING = "stoker serve: listening on ";
    /** COMMAND's environment: the socket its trainer ranks connect to, and the job's name. */
    public static final String SOCKET_ENV = "STOKER_SOCKET", JOB_ENV = "STOKER_JOB";

    private final List<String> service;
    private final List<String> command;
    private final String job;
    private final Duration readyTimeout;
    private final Duration stopTimeout;
    private final PrintWriter out;
    private final PrintWriter err;
    private final Consumer<String> log;
    /** A signal that arrived before COMMAND started: the launch stops instead of starting it. */
    private final AtomicReference<String> stopped = new AtomicReference<>();
    private final AtomicReference<Process> running = new AtomicReference<>();

    /**
     * @param service      the service's command line ({@link #serviceCommand})
     * @param command      COMMAND, run beside the service once it listens
     * @param job          the job's name, for COMMAND's {@value #JOB_ENV}
     * @param readyTimeout how long the service may take to listen
     * @param stopTimeout  how long a child may take to exit after SIGTERM before it is killed
     * @param out          where the service's stdout lines are copied
     * @param err          where its stderr lines are copied
     * @param log          the launcher's own lines (what started, what ended)
     */
    public JobLauncher(List<String> service, List<String> command, String job, Duration readyTimeout, Duration stopTimeout,
                       PrintWriter out, PrintWriter err, Consumer<String> log) {
        if (command.isEmpty()) throw new IllegalArgumentException("no COMMAND to run beside the service");
        this.service = List.copyOf(service);
        this.command = List.copyOf(command);
        this.job = job;
        this.readyTimeout = readyTimeout;
        this.stopTimeout = stopTimeout;
        this.out = out;
        this.err = err;
        this.log = log;
    }

    /**
     * The service's command line: this JVM's java, its JVM options and class path, {@code mainClass serve} with the
     * configuration's given settings ({@code --name=value}, so that values read as they were given) and
     * {@code --exit-with-parent} this process.
     */
    public static List<String> serviceCommand(NodeConfig config, String mainClass) {
        var cmd = new ArrayList<String>();
        cmd.add(ProcessHandle.current().info().command().orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments())
            if (!a.startsWith("-agentlib:jdwp") && !a.startsWith("-Xrunjdwp")) cmd.add(a); // a debugger's port is the launcher's
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), mainClass, "serve"));
        for (var k : NodeSettings.keys()) {
            if (!config.isGiven(k)) continue;
            cmd.add(k.option() + "=" + k.format(config.get(k)));
        }
        cmd.add("--exit-with-parent=" + ProcessHandle.current().pid());
        return cmd;
    }

    /**
     * Signal {@code name} ({@code TERM}, {@code INT}) to COMMAND; before COMMAND runs, the launch stops instead of
     * starting it.
     */
    public void signal(String name) { forward(running.get(), name); }

    /**
     * Starts the service, waits until it listens, runs COMMAND beside it, stops it; returns the job's exit status:
     * COMMAND's, the service's when it exited first (1 if that was 0), 128 + N when signal N stopped the launch first.
     *
     * @throws ConfigException when COMMAND cannot be started (the service is stopped first)
     */
    public int run() throws IOException, InterruptedException {
        try (var lifeline = JobLifeline.start(stopTimeout, log)) {
            return run(lifeline);
        }
    }

    private int run(JobLifeline lifeline) throws IOException, InterruptedException {
        var process = new ProcessBuilder(JobLifeline.inOwnSession(service)).start();
        lifeline.watch(process.pid());
        var socket = new CompletableFuture<String>();
        var copiers = List.of(copyLines(process.getInputStream(), out, line -> {
            if (line.startsWith(LISTENING)) socket.complete(line.substring(LISTENING.length()).strip());
        }), copyLines(process.getErrorStream(), err, line -> {}));
        try {
            log.accept("service pid " + process.pid() + " starting");
            String path = awaitReady(process, socket);
            if (path == null) {
                if (stopped.get() != null) return 128 + signalNumber(stopped.get());
                return process.isAlive() ? 1 : process.exitValue();
            }
            if (stopped.get() != null) {
                log.accept("SIG" + stopped.get() + " before COMMAND started; stopping the service");
                return 128 + signalNumber(stopped.get());
            }
            var pb = new ProcessBuilder(JobLifeline.inOwnSession(command)).inheritIO();
            pb.environment().put(SOCKET_ENV, path);
            pb.environment().put(JOB_ENV, job);
            String unrunnable = unrunnable(command.get(0));
            if (unrunnable != null) throw new ConfigException("cannot run " + command.get(0) + ": " + unrunnable);
            Process cmd;
            try {
                cmd = pb.start();
            } catch (IOException e) {
                throw new ConfigException("cannot run " + command.get(0) + ": " + e.getMessage());
            }
            lifeline.watch(cmd.pid());
            running.set(cmd);
            if (stopped.get() != null) forward(cmd, stopped.get()); // a signal between the check and the start
            log.accept("service ready on " + path + "; running " + String.join(" ", command) + " (pid " + cmd.pid() + ")");
            CompletableFuture.anyOf(cmd.onExit(), process.onExit()).join();
            if (cmd.isAlive()) { // the service went first
                int status = process.exitValue();
                log.accept("the service exited with status " + status + " while COMMAND ran; stopping COMMAND (pid " + cmd.pid() + ")");
                stop(cmd, "COMMAND");
                return status != 0 ? status : 1;
            }
            int status = cmd.exitValue(); // Java reports a death by signal N as 128 + N, as a shell does
            log.accept("COMMAND exited with status " + status + "; stopping the service");
            return status;
        } finally {
            stop(process, "the service");
            for (var t : copiers) t.join(TimeUnit.SECONDS.toMillis(2)); // its last lines ("stopping") before the launcher's exit
        }
    }

    /**
     * Waits until the service listens; returns its socket, or null (having said why) when it exited first, did not
     * listen within the ready timeout, or the launch was told to stop meanwhile.
     */
    private String awaitReady(Process service, CompletableFuture<String> socket) throws InterruptedException {
        long deadline = System.nanoTime() + readyTimeout.toNanos();
        while (true) {
            try {
                return socket.get(100, TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                // not yet
            } catch (ExecutionException e) {
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
                long s = readyTimeout.toSeconds();
                log.accept("the service did not listen within " + s + " s (--ready-timeout " + s + "); stopping it");
                return null;
            }
        }
    }

    /**
     * Why {@code program} cannot be run, or null: setsid execs COMMAND, so a program that is not there would only show as
     * setsid's exit status 127; looked for as {@code execvp} does, in $PATH unless it names a path.
     */
    static String unrunnable(String program) {
        if (program.contains("/")) {
            Path p = Path.of(program);
            if (!Files.exists(p)) return "no such file";
            return Files.isRegularFile(p) && Files.isExecutable(p) ? null : "not an executable file";
        }
        String path = System.getenv("PATH");
        for (String d : (path == null ? "/usr/bin:/bin" : path).split(":")) {
            Path p = Path.of(d.isEmpty() ? "." : d, program);
            if (Files.isRegularFile(p) && Files.isExecutable(p)) return null;
        }
        return "not found in $PATH";
    }

    /**
     * Signal {@code name} to COMMAND, or, before it runs, remembered so that the launch stops instead of starting it.
     * SIGTERM goes to COMMAND's process (torchrun passes it on to its workers); SIGINT to its whole process group, as a
     * terminal's Ctrl-C reached it when COMMAND shared launch's group: now in a session of its own, the terminal's SIGINT
     * reaches launch alone.
     */
    private void forward(Process cmd, String name) {
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
            new ProcessBuilder(kill, "-" + name, "--", "-" + cmd.pid()).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor(5, TimeUnit.SECONDS);
        } catch (IOException e) {
            cmd.toHandle().destroy(); // no kill command: SIGTERM stops it too
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static int signalNumber(String name) { return name.equals("INT") ? 2 : 15; }

    /**
     * SIGTERM to {@code p}; after the stop timeout, SIGKILL. Through its handle: {@code Process.destroy()} also closes our
     * ends of its pipes, and the service's last lines would be lost.
     */
    private void stop(Process p, String what) throws InterruptedException {
        if (!p.isAlive()) return;
        p.toHandle().destroy();
        if (p.waitFor(stopTimeout.toMillis(), TimeUnit.MILLISECONDS)) return;
        log.accept(what + " did not exit within " + stopTimeout.toSeconds() + " s of SIGTERM (--stop-timeout); killing it");
        p.toHandle().destroyForcibly();
        p.waitFor(stopTimeout.toMillis(), TimeUnit.MILLISECONDS);
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
