package dev.stoker.bench.cluster;

import dev.stoker.bench.cluster.ClusterBench.BenchFailure;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;

/** The node processes of a cluster run: waiting for them to be up, watching them while the trainers run, stopping them. */
final class Members {
    private static final long STOP_TIMEOUT_SECONDS = 60;

    /** A node's JVM: node 0 runs serve --join, the others node; {@code banner} is its log once it listens. */
    record Member(int index, Process process, Path log, String banner) {
        String role() { return index == 0 ? "serve" : "node"; }
    }

    private Members() {}

    /** Waits for every member's "listening on" line; node 0 (serve) prints it only once the job runs on all nodes. */
    /**
     * Waits until the seed (node 0, {@code serve}) says its cluster member is up ({@code "cluster member … waiting for"}), so
     * that the other nodes start joining a seed that answers: one that asks before fails its first join and tries again only
     * seconds later (measured in network namespaces: every member up 18 s after the bed was made, rather than 49-55 s).
     */
    static void awaitSeed(Member seed, long timeoutSeconds) throws IOException, InterruptedException, BenchFailure {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (!(Files.exists(seed.log()) && Files.readString(seed.log()).contains("cluster member "))) {
            if (!seed.process().isAlive())
                throw new BenchFailure("node " + seed.index() + " (" + seed.role() + ") exited with " + seed.process().exitValue()
                        + " before it was up", seed.log());
            if (System.nanoTime() - deadline > 0)
                throw new BenchFailure("node " + seed.index() + " (" + seed.role() + ") was not up within " + timeoutSeconds + " s", seed.log());
            Thread.sleep(50);
        }
    }

    static ArrayList<Member> awaitListening(List<Member> members, long timeoutSeconds) throws IOException, InterruptedException, BenchFailure {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        var banners = new String[members.size()];
        while (true) {
            boolean all = true;
            for (Member m : members) {
                if (banners[m.index()] != null) continue;
                String text = Files.exists(m.log()) ? Files.readString(m.log()) : "";
                if (text.contains("stoker " + m.role() + ": listening on ")) {
                    banners[m.index()] = text;
                    continue;
                }
                all = false;
                if (!m.process().isAlive())
                    throw new BenchFailure("node " + m.index() + " (" + m.role() + ") exited with " + m.process().exitValue()
                            + " before it was up", m.log());
            }
            if (all) break;
            if (System.nanoTime() - deadline > 0) {
                for (Member m : members)
                    if (banners[m.index()] == null)
                        throw new BenchFailure("node " + m.index() + " (" + m.role() + ") was not up within " + timeoutSeconds + " s", m.log());
            }
            Thread.sleep(100);
        }
        var out = new ArrayList<Member>();
        for (Member m : members) out.add(new Member(m.index(), m.process(), m.log(), banners[m.index()]));
        return out;
    }

    /** Waits for every trainer to exit 0, while every node stays up; {@code logOf} names rank r's log. */
    static void awaitTrainers(List<Process> trainers, List<Member> members, IntFunction<Path> logOf, long timeoutSeconds)
            throws InterruptedException, BenchFailure {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (true) {
            boolean running = false;
            for (int r = 0; r < trainers.size(); r++) {
                Process t = trainers.get(r);
                if (t.isAlive()) running = true;
                else if (t.exitValue() != 0) throw new BenchFailure("trainer of rank " + r + " exited with " + t.exitValue(), logOf.apply(r));
            }
            if (!running) return;
            for (Member m : members)
                if (!m.process().isAlive())
                    throw new BenchFailure("node " + m.index() + " (" + m.role() + ") exited with " + m.process().exitValue()
                            + " while the trainers ran", m.log());
            if (System.nanoTime() - deadline > 0) {
                for (int r = 0; r < trainers.size(); r++)
                    if (trainers.get(r).isAlive())
                        throw new BenchFailure("trainer of rank " + r + " did not finish within " + timeoutSeconds + " s", logOf.apply(r));
            }
            // the trainer seen running above may have ended since: then look again (the loop returns when none runs)
            var alive = trainers.stream().filter(Process::isAlive).findFirst();
            if (alive.isPresent()) alive.get().waitFor(100, TimeUnit.MILLISECONDS);
        }
    }

    /** SIGTERM to serve, then to the nodes; their exit statuses (-1: had to be killed). */
    static int[] stop(List<Member> members) throws InterruptedException {
        int[] exits = new int[members.size()];
        stopOne(members.getFirst(), exits);
        for (Member m : members.subList(1, members.size())) m.process().destroy();
        for (Member m : members.subList(1, members.size())) stopOne(m, exits);
        return exits;
    }

    private static void stopOne(Member m, int[] exits) throws InterruptedException {
        m.process().destroy();
        if (m.process().waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
            exits[m.index()] = m.process().exitValue();
        } else {
            m.process().destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            exits[m.index()] = -1;
        }
    }
}
