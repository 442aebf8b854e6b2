package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.bench.ChildJvm;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** A real {@code stoker serve} (or {@code node}) child process for the CLI tests ({@link ChildJvm}), its output in a log file. */
final class ServeProcess {
    static final long LISTEN_TIMEOUT_SECONDS = 120;

    private ServeProcess() {}

    /** {@code stoker serve <args>} with {@code -Xmx<heap>}, stdout and stderr to {@code log}. */
    static Process start(Path log, String heap, List<String> args) throws IOException {
        return start(log, heap, "serve", args);
    }

    /** {@code stoker <command> <args>} (serve, node) with {@code -Xmx<heap>}, output to {@code log}. */
    static Process start(Path log, String heap, String command, List<String> args) throws IOException {
        return start(log, heap, command, args, java.util.Map.of());
    }

    /** {@link #start(Path, String, String, List)} with {@code env} added to the inherited environment. */
    static Process start(Path log, String heap, String command, List<String> args, java.util.Map<String, String> env) throws IOException {
        var argv = new java.util.ArrayList<String>(List.of(command));
        argv.addAll(args);
        var pb = new ProcessBuilder(ChildJvm.stoker(jvmFlags(log, heap), argv)).redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().putAll(env);
        return pb.start();
    }

    /**
     * A child JVM's flags: {@code -Xmx<heap>}, and its {@code java.io.tmpdir} a folder {@code child-tmp} beside its
     * {@code log} (in the test's temporary folder). What the child writes there goes with the test's folder, also when the
     * test kills it with SIGKILL, which no clean-up in the child survives: a cluster member's TLS files
     * ({@code stoker-cluster-tls*}, written at start, deleted only when the member closes) were left in /tmp by every
     * member a test killed.
     */
    static List<String> jvmFlags(Path log, String heap) throws IOException {
        Path tmp = Files.createDirectories(log.toAbsolutePath().resolveSibling("child-tmp"));
        return List.of("-Xmx" + heap, "-Djava.io.tmpdir=" + tmp);
    }

    /** Waits until the service prints its last start-up line; returns its log so far. Fails if it exits or takes too long. */
    static String awaitListening(Process p, Path log) throws Exception {
        return awaitLine(p, log, "stoker serve: listening on ");
    }

    /** Waits until the child's log holds {@code marker}; returns the log so far. Fails if it exits or takes too long. */
    static String awaitLine(Process p, Path log, String marker) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(LISTEN_TIMEOUT_SECONDS);
        while (System.nanoTime() < deadline) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains(marker)) return text;
            assertTrue(p.isAlive(), "the child exited before '" + marker + "': " + text);
            Thread.sleep(20);
        }
        throw new AssertionError("no '" + marker + "' within " + LISTEN_TIMEOUT_SECONDS + " s: " + Files.readString(log));
    }
}
