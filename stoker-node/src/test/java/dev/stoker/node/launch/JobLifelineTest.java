package dev.stoker.node.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The watchdog without a launcher: a group started in its own session, its leader gone, its children left — one of them
 * deaf to SIGTERM — and the watchdog's pipe closed, as the launcher's end closes it on exit and the kernel on its death
 * (the death itself, SIGKILL to a launch JVM, is {@code LaunchTest}'s). Waits are on conditions with deadlines.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class JobLifelineTest {
    @TempDir Path tmp;
    private final List<String> log = new CopyOnWriteArrayList<>();

    @Test
    void aChildStartedInItsOwnSessionLeadsItsGroupAndKeepsItsPid() throws Exception {
        var p = new ProcessBuilder(JobLifeline.inOwnSession(List.of("/bin/sh", "-c", "cut -d' ' -f1,5,6 /proc/self/stat; exit 3")))
                .redirectErrorStream(true).start();
        String line = new String(p.getInputStream().readAllBytes()).strip();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(3, p.exitValue(), "the child's status, not setsid's");
        // cut runs as the shell's child: its pid is its own, its group and session are the shell's, which is the child Java started
        String[] f = line.split(" ");
        assertEquals(List.of(Long.toString(p.pid()), Long.toString(p.pid())), List.of(f[1], f[2]), "group and session of " + line);
    }

    @Test
    void whatIsLeftInAWatchedGroupIsStoppedWhenThePipeCloses() throws Exception {
        Path pids = tmp.resolve("pids");
        // a child that stops on SIGTERM, one that ignores it (its sleep inherits the ignored signal), and a grandchild, which
        // says when all are started: with the shell's own redirection, not touch, whose process would be among the descendants
        // listed below and gone by the check that all still run (seen at load 12)
        String script = "sleep 600 & echo $! >> " + pids + "; (trap '' TERM; sleep 600) & echo $! >> " + pids
                + "; sh -c 'sleep 600 & echo $! >> " + pids + "; : > " + pids + ".ready; wait' & echo $! >> " + pids + "; wait";
        var leftovers = new ArrayList<Long>();
        var lifeline = JobLifeline.start(Duration.ofSeconds(1), log::add);
        var leader = new ProcessBuilder(JobLifeline.inOwnSession(List.of("/bin/sh", "-c", script))).start();
        try {
            lifeline.watch(leader.pid());
            awaitFile(tmp.resolve("pids.ready"));
            for (String s : Files.readAllLines(pids)) leftovers.add(Long.parseLong(s.strip()));
            leftovers.addAll(ProcessHandle.of(leader.pid()).orElseThrow().descendants().map(ProcessHandle::pid).toList());
            assertTrue(leftovers.stream().allMatch(JobLifelineTest::running), "all started: " + leftovers);
            leader.destroyForcibly(); // the leader is gone, its processes are not
            assertTrue(leader.waitFor(10, TimeUnit.SECONDS));
            assertTrue(leftovers.stream().allMatch(JobLifelineTest::running), "orphans, before the watchdog acts: " + leftovers);
            long t0 = System.nanoTime();
            lifeline.close(); // waits while the watchdog works: SIGTERM, then SIGKILL after the grace of 1 s
            double seconds = (System.nanoTime() - t0) / 1e9;
            assertTrue(seconds >= 0.9 && seconds < 3.5, "the deaf one was killed after the grace: " + seconds + " s");
            awaitGone(leftovers, Duration.ofSeconds(10));
            assertEquals(List.of(), log, "no warning");
        } finally {
            leader.destroyForcibly();
            for (long pid : leftovers) ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
        }
    }

    @Test
    void aPipeClosedWithNothingLeftEndsTheWatchdogAtOnce() throws Exception {
        var lifeline = JobLifeline.start(Duration.ofSeconds(30), log::add);
        var done = new ProcessBuilder(JobLifeline.inOwnSession(List.of("/bin/true"))).start();
        lifeline.watch(done.pid());
        assertTrue(done.waitFor(10, TimeUnit.SECONDS));
        long t0 = System.nanoTime();
        lifeline.close();
        assertTrue(ProcessHandle.of(lifeline.pid()).isEmpty() || !ProcessHandle.of(lifeline.pid()).get().isAlive());
        assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "no grace waited for an empty group");
    }

    /** Whether process {@code pid} exists and is not a zombie (state Z in /proc/PID/stat, after the name in parentheses). */
    static boolean running(long pid) {
        try {
            String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
            return stat.charAt(stat.lastIndexOf(')') + 2) != 'Z';
        } catch (IOException e) {
            return false; // gone
        }
    }

    /** Waits until none of {@code pids} runs; fails naming those still running at the deadline. */
    static void awaitGone(List<Long> pids, Duration within) throws InterruptedException {
        long deadline = System.nanoTime() + within.toNanos();
        while (pids.stream().anyMatch(JobLifelineTest::running)) {
            if (System.nanoTime() > deadline)
                throw new AssertionError("still running after " + within.toSeconds() + " s: " + pids.stream().filter(JobLifelineTest::running).toList());
            Thread.sleep(20);
        }
    }

    static void awaitFile(Path f) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Files.exists(f)) {
            if (System.nanoTime() > deadline) throw new AssertionError("no " + f + " within 30 s");
            Thread.sleep(20);
        }
    }
}
