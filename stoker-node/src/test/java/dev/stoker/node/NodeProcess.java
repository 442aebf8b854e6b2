package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import sun.misc.Signal;

/**
 * A node in a process of its own, as a deployment embeds one: {@code NodeProcess CONFIG.yaml} launches
 * {@link StokerNode} from the file, prints its lines as {@code node: …}, and on SIGTERM closes it and
 * exits 0. The tests start it with this JVM's flags and class path ({@link #start}).
 */
final class NodeProcess {
    static final long LISTEN_TIMEOUT_SECONDS = 120;

    private NodeProcess() {}

    public static void main(String[] args) throws Exception {
        var config = NodeConfig.fromYaml(Path.of(args[0]));
        var stop = new CountDownLatch(1);
        for (String name : List.of("TERM", "INT")) Signal.handle(new Signal(name), s -> stop.countDown());
        try (var node = StokerNode.launch(config, line -> {
            System.out.println("node: " + line);
            System.out.flush();
        })) {
            stop.await();
        }
        System.exit(0);
    }

    /** Writes {@code config} to {@code dir/NAME.yaml} and starts a node process on it, its output in {@code dir/NAME.log}. */
    static Process start(NodeConfig config, Path dir, String name, String heap) throws IOException {
        Path yaml = Files.writeString(dir.resolve(name + ".yaml"), config.toYaml(NodeConfig.keys()));
        var cmd = new ArrayList<String>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) // the flags this JVM runs with (surefire's argLine)
            if (a.startsWith("--") || a.startsWith("-D")) cmd.add(a);
        cmd.addAll(List.of("-Xmx" + heap, "-cp", System.getProperty("java.class.path"), NodeProcess.class.getName(), yaml.toString()));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile()).start();
    }

    /** Waits until the node prints its last start-up line; returns its log so far. */
    static String awaitListening(Process p, Path log) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(LISTEN_TIMEOUT_SECONDS);
        while (System.nanoTime() < deadline) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains("node: listening on ")) return text;
            assertTrue(p.isAlive(), "the node exited before listening: " + text);
            Thread.sleep(20);
        }
        throw new AssertionError("not listening within " + LISTEN_TIMEOUT_SECONDS + " s: " + Files.readString(log));
    }
}
