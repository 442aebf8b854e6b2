package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** A real {@code stoker serve} child process for the CLI tests: started with this JVM's classpath, its output in a log file. */
final class ServeProcess {
    /** The parent pom's {@code stoker.jvm.flags}. */
    static final List<String> JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--sun-misc-unsafe-memory-access=allow", "-Dai.djl.offline=true", "-Djava.awt.headless=true");
    static final long LISTEN_TIMEOUT_SECONDS = 120;

    private ServeProcess() {}

    /** {@code java <flags> -Xmx<heap> -cp <ours> dev.stoker.cli.Main serve <args>}, stdout and stderr to {@code log}. */
    static Process start(Path log, String heap, List<String> args) throws IOException {
        return start(log, heap, "serve", args);
    }

    /** {@code java <flags> -Xmx<heap> -cp <ours> dev.stoker.cli.Main <command> <args>} (serve, node), output to {@code log}. */
    static Process start(Path log, String heap, String command, List<String> args) throws IOException {
        var cmd = new ArrayList<String>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(JVM_FLAGS);
        cmd.addAll(List.of("-Xmx" + heap, "-cp", System.getProperty("java.class.path"), "dev.stoker.cli.Main", command));
        cmd.addAll(args);
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
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
