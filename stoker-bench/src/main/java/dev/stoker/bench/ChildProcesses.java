package dev.stoker.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The child processes of a benchmark run (services, nodes, trainers): ended when the run ends, and
 * by a shutdown hook should this JVM be stopped first, so that none outlives it.
 */
public final class ChildProcesses implements AutoCloseable {
    private final List<Process> children = new ArrayList<>();
    private final Thread hook;

    public ChildProcesses(String name) {
        hook = new Thread(() -> {
            synchronized (children) {
                children.forEach(Process::destroy);
            }
        }, name + "-cleanup");
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /** Starts {@code pb}'s process as one of the children. */
    public Process start(ProcessBuilder pb) throws IOException {
        Process p = pb.start();
        synchronized (children) {
            children.add(p);
        }
        return p;
    }

    /** SIGTERM to the children still running, SIGKILL to those still running 10 s later (at once when interrupted). */
    @Override
    public void close() {
        synchronized (children) {
            for (Process p : children) if (p.isAlive()) p.destroy();
            try {
                for (Process p : children) if (!p.waitFor(10, TimeUnit.SECONDS)) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                children.forEach(Process::destroyForcibly);
                Thread.currentThread().interrupt();
            }
        }
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            // the JVM is shutting down: the hook runs anyway
        }
    }

    /** The last {@code lines} lines of {@code log}, or why it cannot be read. */
    public static String tail(Path log, int lines) {
        try {
            return tail(Files.readString(log), lines);
        } catch (IOException e) {
            return "(cannot read " + log + ": " + e.getMessage() + ")";
        }
    }

    /** The last {@code lines} lines of {@code text}. */
    public static String tail(String text, int lines) {
        String[] all = text.split("\n");
        return String.join("\n", Arrays.copyOfRange(all, Math.max(0, all.length - lines), all.length));
    }

    /** Waits until {@code log} holds {@code line} and returns its text; fails when {@code p} exits first or the time is up. */
    public static String awaitLine(Process p, Path log, String line, long timeoutSeconds, String what)
            throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (System.nanoTime() - deadline < 0) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains(line)) return text;
            if (!p.isAlive()) throw new IOException(what + " exited with " + p.exitValue() + " before listening:\n" + tail(text, 20));
            Thread.sleep(50);
        }
        throw new IOException(what + " did not listen within " + timeoutSeconds + " s; see " + log);
    }
}
