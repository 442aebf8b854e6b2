package dev.stoker.node.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The job supervisor without the command line: shell scripts stand in for the service (they print the line a service
 * prints once it listens, and note the SIGTERM that stops them) and for COMMAND. Each case waits on files the scripts
 * write, not on time, but for the two timeouts, which are what is tested there.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class JobLauncherTest {
    @TempDir Path tmp;

    private final StringWriter out = new StringWriter();
    private final List<String> log = new CopyOnWriteArrayList<>();

    /** A service that listens on {@code socket} at once, then runs until SIGTERM, which it notes in {@code stopped}. */
    private List<String> service(String socket, Path stopped) {
        return sh("trap 'echo stopped > " + stopped + "; exit 0' TERM; echo '" + JobLauncher.LISTENING + socket + "'; "
                + "while true; do sleep 0.05; done");
    }

    private static List<String> sh(String script) { return List.of("/bin/sh", "-c", script); }

    private JobLauncher launcher(List<String> service, List<String> command, Duration ready, Duration stop) {
        var err = new PrintWriter(new StringWriter(), true);
        return new JobLauncher(service, command, "job-a", ready, stop, new PrintWriter(out, true), err, log::add);
    }

    private JobLauncher launcher(List<String> service, List<String> command) {
        return launcher(service, command, Duration.ofSeconds(30), Duration.ofSeconds(10));
    }

    @Test
    void commandRunsOnceTheServiceListensWithItsSocketAndItsStatusIsTheJobs() throws Exception {
        Path seen = tmp.resolve("seen"), stopped = tmp.resolve("stopped");
        int status = launcher(service("/run/s.sock", stopped), sh("echo \"$STOKER_SOCKET $STOKER_JOB\" > " + seen + "; exit 7")).run();
        assertEquals(7, status);
        assertEquals("/run/s.sock job-a", Files.readString(seen).strip(), "COMMAND's environment");
        assertTrue(Files.exists(stopped), "the service was stopped with SIGTERM once COMMAND ended");
        assertTrue(out.toString().contains(JobLauncher.LISTENING + "/run/s.sock"), "the service's lines are copied: " + out);
        assertTrue(log.stream().anyMatch(l -> l.startsWith("service ready on /run/s.sock; running /bin/sh -c echo")), log.toString());
        assertEquals("COMMAND exited with status 7; stopping the service", log.getLast());
    }

    @Test
    void aServiceThatExitsBeforeItListensEndsTheJobWithItsStatusAndCommandNeverRuns() throws Exception {
        Path ran = tmp.resolve("ran");
        assertEquals(2, launcher(sh("echo 'stoker: --shm-budget too small' >&2; exit 2"), sh("touch " + ran)).run());
        assertTrue(log.contains("the service exited with status 2 before it was ready"), log.toString());
        assertFalse(Files.exists(ran));
    }

    @Test
    void aServiceThatExitsWhileCommandRunsStopsCommandAndFailsTheJob() throws Exception {
        Path started = tmp.resolve("started"), commandStopped = tmp.resolve("command-stopped");
        var service = sh("echo '" + JobLauncher.LISTENING + "/s.sock'; while [ ! -e " + started + " ]; do sleep 0.05; done; exit 3");
        var command = sh("trap 'touch " + commandStopped + "; exit 0' TERM; touch " + started + "; while true; do sleep 0.05; done");
        assertEquals(3, launcher(service, command).run());
        assertTrue(log.stream().anyMatch(l -> l.startsWith("the service exited with status 3 while COMMAND ran; stopping COMMAND")),
                log.toString());
        assertTrue(Files.exists(commandStopped), "COMMAND got SIGTERM");
        var ok = sh("echo '" + JobLauncher.LISTENING + "/s.sock'; while [ ! -e " + started + "-2 ]; do sleep 0.05; done; exit 0");
        assertEquals(1, launcher(ok, sh("touch " + started + "-2; while true; do sleep 0.05; done")).run(),
                "a service that exits 0 under a running COMMAND still fails the job");
    }

    @Test
    void signalsGoToCommandAndBeforeItRunsStopTheLaunch() throws Exception {
        // SIGTERM: a shell cannot trap a SIGINT its parent ignored, as a JVM started in the background may (LaunchTest's Python can)
        Path started = tmp.resolve("started"), terminated = tmp.resolve("terminated"), stopped = tmp.resolve("stopped");
        var launcher = launcher(service("/s.sock", stopped),
                sh("trap 'touch " + terminated + "; exit 5' TERM; touch " + started + "; while true; do sleep 0.05; done"));
        var signaller = Thread.ofPlatform().start(() -> {
            try {
                while (!Files.exists(started)) Thread.sleep(20); // COMMAND runs: from now on a signal is its
                launcher.signal("TERM");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        assertEquals(5, launcher.run(), "COMMAND's status after its SIGTERM");
        signaller.join();
        assertTrue(Files.exists(terminated) && Files.exists(stopped), log.toString());

        Path ran = tmp.resolve("ran");
        var early = launcher(sh("trap 'exit 0' TERM; while true; do sleep 0.05; done"), sh("touch " + ran));
        early.signal("TERM"); // before COMMAND runs: the launch stops instead of starting it
        assertEquals(128 + 15, early.run());
        assertTrue(log.contains("SIGTERM while the service was starting; stopping it"), log.toString());
        assertFalse(Files.exists(ran));
    }

    @Test
    void aServiceThatDoesNotListenInTimeOrIgnoresSigtermIsStoppedAnyway() throws Exception {
        var silent = launcher(sh("trap 'exit 0' TERM; while true; do sleep 0.05; done"), sh("true"), Duration.ofSeconds(1),
                Duration.ofSeconds(10));
        assertEquals(1, silent.run());
        assertTrue(log.contains("the service did not listen within 1 s (--ready-timeout 1); stopping it"), log.toString());

        var stubborn = launcher(sh("trap '' TERM; echo '" + JobLauncher.LISTENING + "/s.sock'; while true; do sleep 0.05; done"),
                sh("exit 0"), Duration.ofSeconds(30), Duration.ofSeconds(1));
        assertEquals(0, stubborn.run());
        assertTrue(log.contains("the service did not exit within 1 s of SIGTERM (--stop-timeout); killing it"), log.toString());
    }

    /** No orphans: what COMMAND left running in its process group is stopped before the job ends (SIGKILL: LaunchTest). */
    @Test
    void whatCommandLeavesRunningIsStoppedBeforeTheJobEnds() throws Exception {
        Path pid = tmp.resolve("pid"), stopped = tmp.resolve("stopped");
        var command = sh("sleep 600 & echo $! > " + pid + "; exit 0");
        long left = -1;
        try {
            assertEquals(0, launcher(service("/s.sock", stopped), command, Duration.ofSeconds(30), Duration.ofSeconds(1)).run());
            left = Long.parseLong(Files.readString(pid).strip());
            assertFalse(JobLifelineTest.running(left), "COMMAND's background sleep is gone when run returns");
            assertTrue(Files.exists(stopped), "the service was stopped");
        } finally {
            if (left > 0) ProcessHandle.of(left).ifPresent(ProcessHandle::destroyForcibly);
        }
    }

    @Test
    void aCommandThatCannotRunIsRefusedAndTheServiceStopped() {
        Path stopped = tmp.resolve("stopped");
        var command = List.of(tmp.resolve("no-such").toString());
        var e = assertThrows(ConfigException.class, () -> launcher(service("/s.sock", stopped), command).run());
        assertTrue(e.getMessage().startsWith("cannot run " + tmp.resolve("no-such") + ": "), e.getMessage());
        assertTrue(Files.exists(stopped), "the service was stopped");
    }

    /** The service is this JVM running {@code serve} with the settings given, as given, and the launcher's pid to watch. */
    @Test
    void theServiceCommandCarriesTheGivenSettingsAndTheParent() {
        var config = NodeConfig.builder().data("ds/train.jsonl").ranks(2).build();
        var cmd = JobLauncher.serviceCommand(config, "dev.stoker.cli.Main");
        int main = cmd.indexOf("dev.stoker.cli.Main");
        assertEquals(System.getProperty("java.class.path"), cmd.get(main - 1));
        assertEquals("-cp", cmd.get(main - 2));
        assertEquals(List.of("serve", "--data=ds/train.jsonl", "--ranks=2", "--exit-with-parent=" + ProcessHandle.current().pid()),
                cmd.subList(main + 1, cmd.size()), "only the settings given, in the table's order");
    }
}
