package dev.stoker.node.launch;

import dev.stoker.node.ConfigException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The job's process groups stopped when the launcher is gone, however it went — SIGKILL included, which runs no shutdown
 * hook: a small watchdog process ({@code bash}) whose standard input is a pipe that only this JVM writes to. The JVM
 * names each process group of the job on that pipe ({@link #watch}); when the pipe reaches end-of-file — the launcher
 * closed it at its end ({@link #close}) or the kernel closed it because the launcher died — the watchdog sends SIGTERM to
 * every named group that still has a process, and SIGKILL to what is left after the grace. The launcher starts each child
 * in a session (and so a process group) of its own ({@link #inOwnSession}), so that a group holds the child and every
 * process it starts, down to torchrun's workers, unless one of them leaves the group itself ({@code setsid}).
 *
 * <p>Why a pipe and not the parent-death signal ({@code prctl(PR_SET_PDEATHSIG)}): that signal fires when the
 * <em>thread</em> that forked the child exits, Java forks from whichever thread calls {@code ProcessBuilder.start}, and it
 * reaches only the child, not its children. A pipe's end-of-file needs nothing of the launcher's threads and comes within
 * the kernel's clean-up of the dead process.
 *
 * <p>The watchdog ignores SIGHUP, SIGINT, SIGQUIT and SIGTERM (a Ctrl-C or a hang-up at the terminal reaches the launcher's
 * process group, the watchdog's too, and must not stop it before it did its work); it needs bash, /proc and coreutils'
 * {@code sleep}. The children's sessions come from util-linux's {@code setsid}, which in a child of the JVM (never a
 * process-group leader) calls {@code setsid()} and execs in place: the child's pid, exit status and death by a signal are
 * what Java sees of it.
 *
 * <p>Threading: {@link #watch} and {@link #close} on the launcher's thread.
 */
public final class JobLifeline implements AutoCloseable {
    /** The longest grace between SIGTERM and SIGKILL to a dead launcher's leftovers (shorter when the stop timeout is). */
    public static final Duration GRACE_MAX = Duration.ofSeconds(5);
    /** How often the watchdog looks whether the groups are empty during the grace. */
    static final int POLL_TENTHS = 1;

    /**
     * The watchdog: reads "group PGID" lines until end-of-file, then stops those groups. $1: the grace in tenths of a second.
     * A group is alive while /proc lists a process of it (field 5 of {@code /proc/PID/stat}, after the command name in
     * parentheses) that is not a zombie: an orphan's zombie waits for init to reap it, which a container's init may do late
     * or never, and {@code kill -0 -- -PGID} would count it.
     */
    static final String SCRIPT = """
            trap '' HUP INT QUIT TERM PIPE
            grace=$1 groups=
            while IFS= read -r line; do
              case $line in "group "*) groups="$groups ${line#group }" ;; esac
            done
            alive() {
              local f s g
              for f in /proc/[0-9]*/stat; do
                { IFS= read -r s < "$f"; } 2>/dev/null || continue
                s=${s##*) }
                set -- $s
                [ "$1" = Z ] && continue
                for g in $groups; do [ "$3" = "$g" ] && return 0; done
              done
              return 1
            }
            alive || exit 0
            echo "stoker launch: process groups of the job still running (of$groups); SIGTERM to them" >&2
            for g in $groups; do kill -s TERM -- "-$g" 2>/dev/null; done
            n=0
            while alive; do
              if [ "$n" -ge "$grace" ]; then
                echo "stoker launch: left after $((grace / 10)).$((grace % 10)) s of SIGTERM; SIGKILL to them" >&2
                for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
                exit 0
              fi
              sleep 0.1
              n=$((n + 1))
            done
            """;

    private final Process watchdog;
    private final OutputStream pipe;
    private final Duration grace;
    private final Consumer<String> log;
    private boolean broken;

    private JobLifeline(Process watchdog, Duration grace, Consumer<String> log) {
        this.watchdog = watchdog;
        this.pipe = watchdog.getOutputStream();
        this.grace = grace;
        this.log = log;
    }

    /**
     * Starts the watchdog, its stderr this process's (its lines must reach the terminal or log after the launcher died).
     *
     * @param grace how long the groups get between SIGTERM and SIGKILL (at most {@link #GRACE_MAX} is used)
     * @param log   the launcher's lines (a watchdog that is gone)
     * @throws ConfigException when bash cannot be found or started
     */
    public static JobLifeline start(Duration grace, Consumer<String> log) {
        Duration g = grace.compareTo(GRACE_MAX) < 0 ? grace : GRACE_MAX;
        long tenths = Math.max(0, g.toMillis() / 100);
        var cmd = List.of(executable("bash", "bash (it watches the job's processes)"), "-c", SCRIPT, "stoker-lifeline", Long.toString(tenths));
        try {
            var p = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            return new JobLifeline(p, g, log);
        } catch (IOException e) {
            throw new ConfigException("cannot start the job's watchdog (" + cmd.get(0) + "): " + e.getMessage());
        }
    }

    /**
     * {@code command} run in a session and process group of its own, its pid its group's id: util-linux's {@code setsid}
     * before it.
     *
     * @throws ConfigException when {@code setsid} cannot be found
     */
    public static List<String> inOwnSession(List<String> command) {
        var cmd = new ArrayList<String>(command.size() + 1);
        cmd.add(executable("setsid", "util-linux's setsid (it gives the job's processes a group of their own)"));
        cmd.addAll(command);
        return cmd;
    }

    /** The pid of the watchdog process. */
    public long pid() { return watchdog.pid(); }

    /**
     * The process group {@code pgid} is the job's: stopped when the launcher is gone. A watchdog that is gone (killed from
     * outside) is said once in the log; the job then runs unguarded.
     */
    public void watch(long pgid) {
        if (broken) return;
        try {
            pipe.write(("group " + pgid + "\n").getBytes(StandardCharsets.US_ASCII));
            pipe.flush();
        } catch (IOException e) {
            broken = true;
            log.accept("warning: the job's watchdog (pid " + watchdog.pid() + ") is gone (" + e.getMessage()
                    + "); COMMAND's processes are not stopped if launch is killed");
        }
    }

    /**
     * Closes the pipe — what the launcher's death also does — and waits while the watchdog stops what is left of the
     * job's groups (a COMMAND's background processes that outlived it): at most the grace and a margin.
     */
    @Override
    public void close() throws InterruptedException {
        try {
            pipe.close();
        } catch (IOException e) {
            // a watchdog already gone: nothing to wait for
        }
        if (!watchdog.waitFor(grace.toMillis() + 2000, TimeUnit.MILLISECONDS))
            log.accept("the job's watchdog (pid " + watchdog.pid() + ") is still stopping the job's leftovers");
    }

    /** {@code name} in /usr/bin, /bin or $PATH. */
    static String executable(String name, String what) {
        var dirs = new ArrayList<>(List.of("/usr/bin", "/bin"));
        String path = System.getenv("PATH");
        if (path != null) dirs.addAll(List.of(path.split(":")));
        for (String d : dirs) {
            if (d.isEmpty()) continue;
            Path p = Path.of(d, name);
            if (Files.isExecutable(p)) return p.toString();
        }
        throw new ConfigException("launch needs " + what + ", found neither in /usr/bin, /bin nor $PATH; on Debian: apt-get install "
                + (name.equals("setsid") ? "util-linux" : name));
    }
}
