package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.cli.testbed.NetnsTestBed;
import dev.stoker.report.RunData;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker bench cluster}: a Stoker cluster of N nodes on one machine, each node in its own
 * network namespace of a {@link NetnsTestBed} behind a shaped network card, fed to one simulated
 * trainer per rank. Node 0 runs {@code serve --cluster} (coordinator, worker node and the node of
 * rank 0), nodes 1..N-1 run {@code node}; rank r's trainer runs on node r mod N and reads from that
 * node's socket, so every batch made on another node crosses the owner's upload and the rank node's
 * download. Measures what each card carried, the trainers' samples/s and wait ratio, and the nodes'
 * own counters (batches made, Flight bytes sent and pulled), which show where the bytes went.
 *
 * <p>Without namespaces ({@code --no-netns}, or when they are unavailable: not root, no
 * {@code ip}/{@code tc}) the same cluster runs on 127.0.0.1 with a port per node and no NIC limit;
 * per-node bytes then are the Flight bytes each node sent.
 */
@Command(name = "cluster", mixinStandardHelpOptions = true,
        description = {"Run a Stoker cluster of --nodes nodes, each in a network namespace with a --nic-mbit card (node 0: serve "
                + "--cluster, the others: node), with one trainer process per rank on node (rank mod nodes), and report per-node "
                + "bytes sent and received, link utilisation, samples/s and the wait ratio.",
                "--ranks defaults to --nodes here (one data-parallel rank per node). Feed options (--data, --batch, --max-pixels, "
                        + "--fetch-latency-ms, --warm-up-ms, --threads …) go to the job as serve takes them.",
                "samples/s and link utilisation are over the slowest trainer's elapsed time (first request to last step); steady "
                        + "figures leave out each rank's first " + RunData.STEADY_SKIP_STEPS + " steps (steady link use: the wall-clock "
                        + "window from when every rank is past them to the last rank's end, from counters sampled every 250 ms).",
                "The last stdout line is JSON {\"samples_per_s\":…, \"wait_ratio\":…, \"per_node_bytes\":[…], \"per_node_rx_bytes\":[…], "
                        + "\"link_utilisation\":[…], \"worker_nodes\":[…], \"per_rank_wait_ratio\":[…], \"nodes\":…, \"placement\":…, "
                        + "\"nic_mbit\":…, \"settings\":{…}, …}."})
final class ClusterBench implements Callable<Integer> {
    static final String JOB = "bench";
    static final String MODE = "cluster"; // trainer reports are MODE-rankR.json, as RunData reads them
    private static final long START_TIMEOUT_SECONDS = 180;
    private static final long STOP_TIMEOUT_SECONDS = 60;
    private static final int TAIL_LINES = 25;
    private static final long SAMPLE_MILLIS = 250;

    @Spec CommandSpec spec;
    @Mixin ProcessorOptions processor;
    @Mixin FeedOptions feed;

    @Option(names = "--nodes", defaultValue = "2", description = "Nodes, node 0 included (default: ${DEFAULT-VALUE}).")
    int nodes;

    @Option(names = "--placement", defaultValue = "spread",
            description = "pack (all workers on node 0 while its slots last) or spread (workers dealt over the nodes) (default: ${DEFAULT-VALUE}).")
    String placement;

    @Option(names = "--nic-mbit", defaultValue = "1000",
            description = "Each node's network card in Mbit/s, per direction; 0: unlimited (default: ${DEFAULT-VALUE}).")
    long nicMbit;

    @Option(names = "--workers", description = "Workers to place; every node offers this many slots (default: --nodes).")
    Integer workers;

    @Option(names = "--steps", defaultValue = "20", description = "Steps per rank (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--step-ms", defaultValue = "100", description = "Simulated GPU step per batch, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--work-dir", description = "Where sockets, logs, trainer reports and the nodes' counters go (default: a temp folder).")
    Path workDir;

    @Option(names = "--no-netns",
            description = "Run every node on 127.0.0.1 (a port each, no NIC limit) instead of in network namespaces; automatic when "
                    + "namespaces are unavailable (not root, no ip/tc).")
    boolean noNetns;

    @Option(names = "--port",
            description = "Cluster port: in namespaces every node binds it on its own address (default 2551); on 127.0.0.1 node i "
                    + "binds PORT+i (default: a free range).")
    Integer port;

    @Option(names = "--pull-ahead", defaultValue = "" + dev.stoker.cluster.ClusterRankFeed.PULL_AHEAD_DEFAULT,
            description = "Batches each node pulls for its ranks ahead of their trainers (default: ${DEFAULT-VALUE}).")
    int pullAhead;

    @Option(names = "--node-heap", defaultValue = "1g", description = "-Xmx of each node's JVM (default: ${DEFAULT-VALUE}).")
    String nodeHeap;

    @Option(names = "--node-shm-budget", converter = ByteSizeConverter.class, defaultValue = "2G",
            description = "Each node's object store budget (default: ${DEFAULT-VALUE}).")
    long nodeShmBudget;

    @Option(names = "--timeout-s", description = "Longest the trainers may run (default: 120 s + 10 s per step).")
    Long timeoutSeconds;

    /** A node's JVM: node 0 runs serve --cluster, the others node. */
    private record Member(int index, Process process, Path log, String banner) {
        String role() { return index == 0 ? "serve" : "node"; }
    }

    /** What went wrong, with the log to show. */
    static final class BenchFailure extends Exception {
        final Path log;

        BenchFailure(String message, Path log) {
            super(message);
            this.log = log;
        }
    }

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        long started = System.nanoTime();
        if (nodes < 1) throw new Main.InvalidInputException("--nodes must be at least 1");
        if (steps < 1 || stepMillis < 0) throw new Main.InvalidInputException("--steps must be >= 1 and --step-ms >= 0");
        if (nicMbit < 0) throw new Main.InvalidInputException("--nic-mbit must be >= 0");
        String place = placement.trim().toLowerCase(Locale.ROOT);
        if (!place.equals("pack") && !place.equals("spread")) throw new Main.InvalidInputException("--placement must be pack or spread");
        int w = workers != null ? workers : nodes;
        if (w < 1) throw new Main.InvalidInputException("--workers must be at least 1");
        boolean ranksGiven = spec.commandLine().getParseResult().hasMatchedOption("--ranks");
        int ranks = ranksGiven ? feed.ranks : nodes;
        if (ranks < 1) throw new Main.InvalidInputException("--ranks must be at least 1");
        processor.toEncodeOptions(); // invalid processor options stop here, not in every node

        boolean netns = !noNetns;
        if (netns) {
            Optional<String> why = NetnsTestBed.unavailableReason();
            if (why.isPresent()) {
                out.println("bench cluster: network namespaces unavailable (" + why.get() + "); running on 127.0.0.1 as with --no-netns: "
                        + "no NIC limit, per-node bytes from the nodes' Flight counters");
                netns = false;
            }
        }
        Path dir = workDir != null ? Files.createDirectories(workDir) : Files.createTempDirectory("stoker-cluster-bench");
        dir = dir.toAbsolutePath();
        for (int r = 0; r < Math.max(ranks, 64); r++) Files.deleteIfExists(report(dir, r));
        Path metricsFile = dir.resolve("serve-metrics.json");
        Files.deleteIfExists(metricsFile);
        for (int i = 0; i < nodes; i++) Files.deleteIfExists(statsFile(dir, i));

        var jobArgs = new ArrayList<>(ClusterJobArgs.of(spec));
        if (!ranksGiven) jobArgs.addAll(List.of("--ranks", Integer.toString(ranks)));
        if (!jobArgs.contains("--batch")) jobArgs.addAll(List.of("--batch", Integer.toString(feed.batch)));

        var children = new ArrayList<Process>();
        Thread cleanup = new Thread(() -> { synchronized (children) { children.forEach(Process::destroy); } }, "bench-cluster-cleanup");
        Runtime.getRuntime().addShutdownHook(cleanup);
        NetnsTestBed bed = null;
        try {
            String[] host = new String[nodes];
            int[] ports = new int[nodes];
            if (netns) {
                bed = NetnsTestBed.create(nodes, nicMbit, NetnsTestBed.Options.defaults());
                for (int i = 0; i < nodes; i++) {
                    host[i] = bed.address(i);
                    ports[i] = port != null ? port : 2551;
                }
            } else {
                int base = port != null ? port : freePortRange(nodes);
                for (int i = 0; i < nodes; i++) {
                    host[i] = "127.0.0.1";
                    ports[i] = base + i; // same number of digits: the coordinator orders nodes by address text, node 0 first
                }
            }
            String seed = host[0] + ":" + ports[0];
            out.printf("bench cluster: %d nodes (%s), placement %s, %d workers (%d slots per node), %d ranks × batch %d, step %d ms, "
                            + "%d steps; work dir %s%n", nodes, netns ? "network namespaces " + bed.subnet() + ", NIC "
                            + (nicMbit == 0 ? "unlimited" : nicMbit + " Mbit/s") + " each way" : "127.0.0.1, no NIC limit",
                    place, w, w, ranks, feed.batch, stepMillis, steps, dir);
            out.flush();

            // the nodes' Flight endpoints ask for a token off loopback (docs/cluster.md, Access): one for this run, 0600
            Path tokenFile = dir.resolve("cluster-token");
            byte[] secret = new byte[32];
            new java.security.SecureRandom().nextBytes(secret);
            java.nio.file.Files.writeString(tokenFile, java.util.HexFormat.of().formatHex(secret));
            java.nio.file.Files.setPosixFilePermissions(tokenFile, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));

            // node 0 first: it is the seed
            var members = new ArrayList<Member>();
            for (int i = 0; i < nodes; i++) {
                var argv = new ArrayList<String>(SoakCommand.javaCommand());
                argv.add("-Xmx" + nodeHeap);
                argv.addAll(SoakCommand.envOptions("STOKER_JAVA_OPTS"));
                argv.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
                String bind = host[i] + ":" + ports[i];
                if (i == 0) {
                    argv.addAll(List.of("serve", "--cluster", seed, "--bind", bind, "--slots", Integer.toString(w), "--nodes",
                            Integer.toString(nodes), "--placement", place, "--workers", Integer.toString(w), "--steps",
                            Integer.toString(steps), "--job", JOB, "--metrics-file", metricsFile.toString()));
                    argv.addAll(jobArgs);
                } else {
                    argv.addAll(List.of("node", "--seed", seed, "--bind", bind, "--slots", Integer.toString(w),
                            "--stats-file", statsFile(dir, i).toString()));
                }
                argv.addAll(List.of("--socket", socket(dir, i).toString(), "--node-shm-budget", Long.toString(nodeShmBudget),
                        "--cluster-token-file", tokenFile.toString(), "--pull-ahead", Integer.toString(pullAhead)));
                Path log = dir.resolve("node" + i + ".log");
                var pb = bed != null ? bed.command(i, argv) : new ProcessBuilder(argv);
                Process p = pb.redirectErrorStream(true).redirectOutput(log.toFile()).start();
                synchronized (children) {
                    children.add(p);
                }
                members.add(new Member(i, p, log, null));
            }
            members = awaitListening(members);
            var indexOf = new HashMap<String, Integer>(); // pekko address → node index
            for (Member m : members) {
                String address = find(m.banner(), m.index() == 0 ? "cluster member (\\S+) \\(" : "up as ([^,\\s]+),");
                if (address != null) indexOf.put(address, m.index());
            }
            out.printf("bench cluster: all nodes up after %.1f s; %s%n", (System.nanoTime() - started) / 1e9,
                    firstLine(members.getFirst().banner(), "stoker serve: job "));
            out.flush();

            NetnsTestBed.Counters[] before = new NetnsTestBed.Counters[nodes];
            if (bed != null) for (int i = 0; i < nodes; i++) before[i] = bed.counters(i);
            LinkSampler sampler = bed != null ? new LinkSampler(bed, SAMPLE_MILLIS) : null;
            long t0 = System.nanoTime();
            var trainers = new ArrayList<Process>();
            for (int r = 0; r < ranks; r++) {
                int node = r % nodes;
                var argv = new ArrayList<String>(SoakCommand.javaCommand());
                // as bench ladder's trainers: a small heap; the nodes' figures are what this run measures
                argv.addAll(List.of("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                        Main.class.getName(), "trainer", "--socket", socket(dir, node).toString(), "--rank", Integer.toString(r),
                        "--world", Integer.toString(ranks), "--steps", Integer.toString(steps), "--step-ms", Long.toString(stepMillis),
                        "--job", JOB, "--report", report(dir, r).toString()));
                var pb = bed != null ? bed.command(node, argv) : new ProcessBuilder(argv);
                Process p = pb.redirectErrorStream(true).redirectOutput(trainerLog(dir, r).toFile()).start();
                synchronized (children) {
                    children.add(p);
                }
                trainers.add(p);
            }
            long timeout = timeoutSeconds != null ? timeoutSeconds : 120 + steps * (10 + stepMillis / 1000);
            try {
                awaitTrainers(trainers, members, dir, timeout);
            } finally {
                if (sampler != null) sampler.close();
            }
            double wallSeconds = (System.nanoTime() - t0) / 1e9;
            List<LinkSampler.Sample> linkSamples = sampler != null ? sampler.samples() : List.of();
            if (sampler != null) writeLinkSamples(dir.resolve("link-samples.csv"), linkSamples);
            NetnsTestBed.Counters[] after = new NetnsTestBed.Counters[nodes];
            if (bed != null) for (int i = 0; i < nodes; i++) after[i] = bed.counters(i);

            // serve first (its metrics file asks every node for its counters), then the nodes
            int[] exits = stop(members);
            if (bed != null) {
                bed.close();
                bed = null;
            }

            var result = summarize(dir, metricsFile, indexOf, ranks, w, place, netns, before, after, linkSamples, wallSeconds, jobArgs);
            printTable(out, result);
            out.println(new ObjectMapper().writeValueAsString(result));
            out.flush();
            var problems = new ArrayList<String>();
            for (int i = 0; i < nodes; i++) if (exits[i] != 0) problems.add("node " + i + " (" + members.get(i).role() + ") exited " + exits[i]);
            @SuppressWarnings("unchecked")
            var stepsPerRank = (List<Integer>) result.get("steps_per_rank");
            for (int r = 0; r < ranks; r++) if (stepsPerRank.get(r) != steps) problems.add("rank " + r + " took " + stepsPerRank.get(r) + " of " + steps + " steps");
            if (!problems.isEmpty()) {
                err.println("stoker: bench cluster did not end cleanly: " + String.join("; ", problems) + "; see " + dir);
                return 1;
            }
            return 0;
        } catch (BenchFailure f) {
            err.println("stoker: bench cluster: " + f.getMessage());
            if (f.log != null) {
                err.println("--- last lines of " + f.log + " ---");
                err.println(tail(f.log));
            }
            err.println("(logs in " + dir + ")");
            return 1;
        } finally {
            synchronized (children) {
                for (Process p : children) if (p.isAlive()) p.destroy();
                for (Process p : children) {
                    if (!p.waitFor(10, TimeUnit.SECONDS)) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                }
            }
            if (bed != null) bed.close();
            try {
                Runtime.getRuntime().removeShutdownHook(cleanup);
            } catch (IllegalStateException e) {
                // the JVM is shutting down: the hook runs anyway
            }
        }
    }

    /** Waits for every member's "listening on" line; node 0 (serve) prints it only once the job runs on all nodes. */
    private static ArrayList<Member> awaitListening(List<Member> members) throws IOException, InterruptedException, BenchFailure {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(START_TIMEOUT_SECONDS);
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
                        throw new BenchFailure("node " + m.index() + " (" + m.role() + ") was not up within " + START_TIMEOUT_SECONDS + " s", m.log());
            }
            Thread.sleep(100);
        }
        var out = new ArrayList<Member>();
        for (Member m : members) out.add(new Member(m.index(), m.process(), m.log(), banners[m.index()]));
        return out;
    }

    /** Waits for every trainer to exit 0, while every node stays up. */
    private static void awaitTrainers(List<Process> trainers, List<Member> members, Path dir, long timeoutSeconds)
            throws InterruptedException, BenchFailure {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (true) {
            boolean running = false;
            for (int r = 0; r < trainers.size(); r++) {
                Process t = trainers.get(r);
                if (t.isAlive()) running = true;
                else if (t.exitValue() != 0) throw new BenchFailure("trainer of rank " + r + " exited with " + t.exitValue(), trainerLog(dir, r));
            }
            if (!running) return;
            for (Member m : members)
                if (!m.process().isAlive())
                    throw new BenchFailure("node " + m.index() + " (" + m.role() + ") exited with " + m.process().exitValue()
                            + " while the trainers ran", m.log());
            if (System.nanoTime() - deadline > 0) {
                for (int r = 0; r < trainers.size(); r++)
                    if (trainers.get(r).isAlive())
                        throw new BenchFailure("trainer of rank " + r + " did not finish within " + timeoutSeconds + " s", trainerLog(dir, r));
            }
            trainers.stream().filter(Process::isAlive).findFirst().orElseThrow().waitFor(100, TimeUnit.MILLISECONDS);
        }
    }

    /** SIGTERM to serve, then to the nodes; their exit statuses (-1: had to be killed). */
    private static int[] stop(List<Member> members) throws InterruptedException {
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

    /** Everything the run measured, as the JSON line (also the table's source). */
    private Map<String, Object> summarize(Path dir, Path metricsFile, Map<String, Integer> indexOf, int ranks, int w, String place,
                                          boolean netns, NetnsTestBed.Counters[] before, NetnsTestBed.Counters[] after,
                                          List<LinkSampler.Sample> linkSamples, double wallSeconds, List<String> jobArgs) throws IOException {
        var mapper = new ObjectMapper();
        RunData.Mode mode = RunData.load(dir).modes().stream().filter(m -> m.name().equals(MODE)).findFirst()
                .orElseThrow(() -> new IOException("no trainer reports in " + dir));
        var summary = RunData.summarize(mode);
        double elapsedSeconds = 0;
        var perRankWait = new ArrayList<Double>();
        var perRankSteady = new ArrayList<Double>();
        var stepsPerRank = new ArrayList<Integer>();
        var samplesPerRank = new ArrayList<Long>();
        long steadySamples = 0;
        double steadySeconds = 0;
        // the steady window in wall-clock time: from when every rank is past its first steps to the last rank's end (a rank
        // whose batches are all local, rank 0 under pack, may finish long before the others: its end would close the window)
        double windowStart = Double.NEGATIVE_INFINITY, windowEnd = Double.NEGATIVE_INFINITY;
        var starts = new HashMap<Integer, Long>();
        for (int r = 0; r < ranks; r++) {
            Path p = report(dir, r);
            if (Files.isRegularFile(p)) {
                JsonNode rep = mapper.readTree(p.toFile());
                if (rep.has("start_unix_ms")) starts.put(r, rep.get("start_unix_ms").asLong());
            }
        }
        for (int r = 0; r < ranks; r++) {
            int rank = r;
            var rep = mode.ranks().stream().filter(x -> x.rank() == rank).findFirst().orElse(null);
            if (rep == null) {
                perRankWait.add(null);
                perRankSteady.add(null);
                stepsPerRank.add(0);
                samplesPerRank.add(0L);
                continue;
            }
            elapsedSeconds = Math.max(elapsedSeconds, rep.elapsedMillis() / 1000);
            long wait = 0, compute = 0, sw = 0, sc = 0, samples = 0, ss = 0;
            for (int i = 0; i < rep.steps().size(); i++) {
                var s = rep.steps().get(i);
                wait += s.waitNanos();
                compute += s.computeNanos();
                samples += s.samples();
                if (i >= RunData.STEADY_SKIP_STEPS) {
                    sw += s.waitNanos();
                    sc += s.computeNanos();
                    ss += s.samples();
                }
            }
            perRankWait.add(round(ratio(wait, compute)));
            perRankSteady.add(sw + sc == 0 ? null : round(ratio(sw, sc)));
            stepsPerRank.add(rep.steps().size());
            samplesPerRank.add(samples);
            steadySamples += ss;
            steadySeconds = Math.max(steadySeconds, (sw + sc) / 1e9);
            Long start = starts.get(r);
            if (start == null || rep.steps().size() <= RunData.STEADY_SKIP_STEPS) {
                windowStart = Double.NaN;
            } else {
                long warm = 0;
                for (int i = 0; i < RunData.STEADY_SKIP_STEPS; i++) warm += rep.steps().get(i).waitNanos() + rep.steps().get(i).computeNanos();
                windowStart = Math.max(windowStart, start + warm / 1e6);
                windowEnd = Math.max(windowEnd, start + rep.elapsedMillis());
            }
        }
        // the samples that bound the window from inside it
        LinkSampler.Sample first = null, last = null;
        for (var ls : linkSamples) {
            if (ls.unixMillis() >= windowStart && first == null) first = ls;
            if (ls.unixMillis() <= windowEnd) last = ls;
        }
        boolean steadyLinks = first != null && last != null && last.unixMillis() - first.unixMillis() >= 1000;
        double steadyLinkSeconds = steadyLinks ? (last.unixMillis() - first.unixMillis()) / 1000.0 : 0;

        JsonNode metrics = Files.isRegularFile(metricsFile) ? mapper.readTree(metricsFile.toFile()) : mapper.createObjectNode();
        // each node's own counters: from serve's metrics file (asked of every node at stop), else the node's stats file
        var stats = new JsonNode[nodes];
        for (JsonNode s : metrics.path("nodes")) {
            Integer i = indexOf.get(s.path("address").asText());
            if (i != null) stats[i] = s;
        }
        for (int i = 1; i < nodes; i++)
            if (stats[i] == null && Files.isRegularFile(statsFile(dir, i))) stats[i] = mapper.readTree(statsFile(dir, i).toFile());
        var workerNodes = new ArrayList<Integer>();
        for (JsonNode a : metrics.path("worker_nodes")) workerNodes.add(a.isNull() ? null : indexOf.get(a.asText()));
        var workersPerNode = new ArrayList<Integer>();
        for (int i = 0; i < nodes; i++) {
            int node = i;
            workersPerNode.add((int) workerNodes.stream().filter(x -> x != null && x == node).count());
        }

        var tx = new ArrayList<Long>();
        var rx = new ArrayList<Long>();
        var utilTx = new ArrayList<Double>();
        var utilRx = new ArrayList<Double>();
        var steadyUtilTx = new ArrayList<Double>();
        var steadyUtilRx = new ArrayList<Double>();
        var flightSent = new ArrayList<Long>();
        var pulled = new ArrayList<Long>();
        var produced = new ArrayList<Long>();
        var local = new ArrayList<Long>();
        double linkBytesPerSecond = nicMbit * 1e6 / 8;
        for (int i = 0; i < nodes; i++) {
            long flight = stats[i] == null ? -1 : stats[i].path("flightBytesSent").asLong();
            long pull = stats[i] == null ? -1 : stats[i].path("pulledBytes").asLong();
            flightSent.add(flight);
            pulled.add(pull);
            produced.add(stats[i] == null ? -1 : stats[i].path("produced").asLong());
            local.add(stats[i] == null ? -1 : stats[i].path("localHandOuts").asLong());
            if (netns) {
                tx.add(after[i].txBytes() - before[i].txBytes());
                rx.add(after[i].rxBytes() - before[i].rxBytes());
            } else {
                tx.add(flight);
                rx.add(pull);
            }
            boolean limited = netns && nicMbit > 0 && elapsedSeconds > 0;
            utilTx.add(limited ? round(tx.get(i) / (elapsedSeconds * linkBytesPerSecond)) : null);
            utilRx.add(limited ? round(rx.get(i) / (elapsedSeconds * linkBytesPerSecond)) : null);
            boolean steady = limited && steadyLinks;
            steadyUtilTx.add(steady ? round((last.counters().get(i).txBytes() - first.counters().get(i).txBytes())
                    / (steadyLinkSeconds * linkBytesPerSecond)) : null);
            steadyUtilRx.add(steady ? round((last.counters().get(i).rxBytes() - first.counters().get(i).rxBytes())
                    / (steadyLinkSeconds * linkBytesPerSecond)) : null);
        }

        var json = new LinkedHashMap<String, Object>();
        json.put("samples_per_s", round2(summary.samplesPerSecond()));
        json.put("steady_samples_per_s", steadySeconds == 0 ? null : round2(steadySamples / steadySeconds));
        json.put("wait_ratio", round(summary.waitRatio()));
        json.put("steady_wait_ratio", round(summary.steadyWaitRatio()));
        json.put("per_node_bytes", tx);
        json.put("per_node_rx_bytes", rx);
        json.put("link_utilisation", utilTx);
        json.put("link_utilisation_rx", utilRx);
        json.put("steady_link_utilisation", steadyUtilTx);
        json.put("steady_link_utilisation_rx", steadyUtilRx);
        json.put("steady_link_window_s", steadyLinks ? round2(steadyLinkSeconds) : null);
        json.put("bytes_source", netns ? "interfaces" : "flight_counters");
        json.put("per_node_flight_bytes_sent", flightSent);
        json.put("per_node_pulled_bytes", pulled);
        json.put("per_node_batches_made", produced);
        json.put("per_node_local_handouts", local);
        json.put("worker_nodes", workerNodes);
        json.put("workers_per_node", workersPerNode);
        json.put("per_rank_wait_ratio", perRankWait);
        json.put("per_rank_steady_wait_ratio", perRankSteady);
        json.put("steps_per_rank", stepsPerRank);
        json.put("samples_per_rank", samplesPerRank);
        json.put("samples", summary.samples());
        json.put("bytes_to_trainers", mode.ranks().stream().mapToLong(r -> r.steps().stream().mapToLong(RunData.Step::batchBytes).sum()).sum());
        json.put("ttfb_ms", round2(summary.firstBatchMillis()));
        json.put("mean_wait_ms", round2(summary.meanWaitMillis()));
        json.put("elapsed_s", round2(elapsedSeconds));
        json.put("wall_s", round2(wallSeconds));
        json.put("placement", place);
        json.put("nodes", nodes);
        json.put("nic_mbit", netns ? nicMbit : 0);
        json.put("netns", netns);
        json.put("dead_nodes", metrics.path("dead_nodes").size());
        json.put("redone", metrics.path("redone").asLong() + metrics.path("refetched").asLong());
        var settings = new LinkedHashMap<String, Object>();
        settings.put("ranks", ranks);
        settings.put("batch", feed.batch);
        settings.put("step_ms", stepMillis);
        settings.put("steps", steps);
        settings.put("workers", w);
        settings.put("slots_per_node", w);
        settings.put("max_pixels", processor.maxPixels);
        settings.put("fetch_latency_ms", feed.fetchLatencyMillis);
        settings.put("data", feed.data);
        settings.put("job_args", jobArgs);
        settings.put("node_heap", nodeHeap);
        settings.put("cores", Runtime.getRuntime().availableProcessors());
        settings.put("work_dir", dir.toString());
        json.put("settings", settings);
        return json;
    }

    @SuppressWarnings("unchecked")
    private void printTable(PrintWriter out, Map<String, Object> j) {
        boolean netns = (Boolean) j.get("netns");
        var tx = (List<Long>) j.get("per_node_bytes");
        var rx = (List<Long>) j.get("per_node_rx_bytes");
        var utx = (List<Double>) j.get("link_utilisation");
        var urx = (List<Double>) j.get("link_utilisation_rx");
        var sutx = (List<Double>) j.get("steady_link_utilisation");
        var surx = (List<Double>) j.get("steady_link_utilisation_rx");
        var flight = (List<Long>) j.get("per_node_flight_bytes_sent");
        var pulled = (List<Long>) j.get("per_node_pulled_bytes");
        var made = (List<Long>) j.get("per_node_batches_made");
        var local = (List<Long>) j.get("per_node_local_handouts");
        var wpn = (List<Integer>) j.get("workers_per_node");
        int ranks = (Integer) ((Map<String, Object>) j.get("settings")).get("ranks");
        out.printf("%-4s %-6s %7s %5s %10s %10s %13s %13s %13s %10s %5s %5s%n", "node", "role", "workers", "ranks",
                netns ? "tx MB" : "sent MB", netns ? "rx MB" : "recv MB", "tx use/steady", "rx use/steady", "flight out MB", "pulled MB",
                "made", "local");
        for (int i = 0; i < nodes; i++) {
            int node = i;
            long myRanks = java.util.stream.IntStream.range(0, ranks).filter(r -> r % nodes == node).count();
            out.printf("%-4d %-6s %7d %5d %10.1f %10.1f %13s %13s %13.1f %10.1f %5d %5d%n", i, i == 0 ? "serve" : "node", wpn.get(i), myRanks,
                    tx.get(i) / 1e6, rx.get(i) / 1e6, pct(utx.get(i)) + "/" + pct(sutx.get(i)), pct(urx.get(i)) + "/" + pct(surx.get(i)),
                    flight.get(i) / 1e6, pulled.get(i) / 1e6, made.get(i), local.get(i));
        }
        out.printf("samples/s  %.2f (steady %s) over %.2f s, the slowest trainer's connect-to-end (wall from trainer launch: %.2f s)%n",
                (Double) j.get("samples_per_s"), j.get("steady_samples_per_s"), (Double) j.get("elapsed_s"), (Double) j.get("wall_s"));
        out.printf("wait ratio %.3f (steady %.3f); per rank %s, steady %s%n", (Double) j.get("wait_ratio"), (Double) j.get("steady_wait_ratio"),
                j.get("per_rank_wait_ratio"), j.get("per_rank_steady_wait_ratio"));
        out.printf("steps per rank %s, samples %s, first batch %.0f ms, mean wait %.1f ms; dead nodes %s, redone %s%n", j.get("steps_per_rank"),
                j.get("samples"), (Double) j.get("ttfb_ms"), (Double) j.get("mean_wait_ms"), j.get("dead_nodes"), j.get("redone"));
        if (netns && j.get("nic_mbit") instanceof Long m && m > 0)
            out.printf("link use: bytes over (the slowest trainer's elapsed × %d Mbit/s) / over the steady window (%s s, every rank past its "
                    + "first %d steps to the last one's end; link-samples.csv)%n", m, j.get("steady_link_window_s"), RunData.STEADY_SKIP_STEPS);
        if (!netns) out.println("(no namespaces: bytes are the nodes' Flight counters, sent and pulled; no NIC, no utilisation)");
        out.flush();
    }

    /** The bed's per-node counters every interval while the trainers run, read from the switch (one command a sample). */
    static final class LinkSampler implements AutoCloseable {
        /** One reading: node i's counters at {@code unixMillis} (the middle of the command). */
        record Sample(long unixMillis, List<NetnsTestBed.Counters> counters) {}

        private final NetnsTestBed bed;
        private final List<Sample> samples = java.util.Collections.synchronizedList(new ArrayList<>());
        private final Thread thread;
        private volatile boolean stopped;

        LinkSampler(NetnsTestBed bed, long intervalMillis) {
            this.bed = bed;
            sample();
            this.thread = Thread.ofPlatform().daemon().name("bench-cluster-links").start(() -> {
                while (!stopped) {
                    try {
                        Thread.sleep(intervalMillis);
                    } catch (InterruptedException e) {
                        return;
                    }
                    sample();
                }
            });
        }

        private void sample() {
            try {
                long t0 = System.currentTimeMillis();
                var c = bed.switchSideCounters();
                samples.add(new Sample((t0 + System.currentTimeMillis()) / 2, c));
            } catch (IOException e) {
                // a missed reading: the next one covers it
            }
        }

        List<Sample> samples() {
            synchronized (samples) {
                return List.copyOf(samples);
            }
        }

        @Override
        public void close() throws InterruptedException {
            stopped = true;
            thread.interrupt();
            thread.join(5000);
            sample();
        }
    }

    private static void writeLinkSamples(Path file, List<LinkSampler.Sample> samples) throws IOException {
        if (samples.isEmpty()) return;
        var sb = new StringBuilder("t_ms");
        int n = samples.getFirst().counters().size();
        for (int i = 0; i < n; i++) sb.append(",tx_bytes_").append(i).append(",rx_bytes_").append(i);
        sb.append('\n');
        long t0 = samples.getFirst().unixMillis();
        for (var s : samples) {
            sb.append(s.unixMillis() - t0);
            for (var c : s.counters()) sb.append(',').append(c.txBytes()).append(',').append(c.rxBytes());
            sb.append('\n');
        }
        Files.writeString(file, sb);
    }

    private static String pct(Double v) { return v == null ? "-" : String.format(Locale.ROOT, "%.0f%%", v * 100); }

    private static Path socket(Path dir, int node) { return dir.resolve("n" + node + ".sock"); }

    private static Path statsFile(Path dir, int node) { return dir.resolve("node" + node + "-stats.json"); }

    private static Path report(Path dir, int rank) { return dir.resolve(MODE + "-rank" + rank + ".json"); }

    private static Path trainerLog(Path dir, int rank) { return dir.resolve("trainer" + rank + ".log"); }

    /** {@code n} consecutive ports free on 127.0.0.1 now, all with five digits. */
    private static int freePortRange(int n) throws IOException {
        var loopback = InetAddress.getLoopbackAddress();
        for (int attempt = 0; attempt < 100; attempt++) {
            int base = ThreadLocalRandom.current().nextInt(20000, 30000 - n);
            boolean free = true;
            for (int i = 0; i < n && free; i++) {
                try (var s = new ServerSocket(base + i, 1, loopback)) {
                    s.setReuseAddress(true);
                } catch (IOException e) {
                    free = false;
                }
            }
            if (free) return base;
        }
        throw new IOException("no " + n + " consecutive free ports on 127.0.0.1 in 20000..29999");
    }

    private static String find(String text, String regex) {
        Matcher m = Pattern.compile(regex).matcher(text);
        return m.find() ? m.group(1) : null;
    }

    private static String firstLine(String text, String prefix) {
        for (String line : text.split("\n")) if (line.startsWith(prefix)) return line.substring("stoker serve: ".length());
        return "";
    }

    static String tail(Path log) {
        try {
            String[] lines = Files.readString(log).split("\n");
            return String.join("\n", Arrays.copyOfRange(lines, Math.max(0, lines.length - TAIL_LINES), lines.length));
        } catch (IOException e) {
            return "(cannot read " + log + ": " + e.getMessage() + ")";
        }
    }

    private static double ratio(long wait, long compute) { return wait + compute == 0 ? 0 : (double) wait / (wait + compute); }

    private static double round(double v) { return Math.round(v * 10000) / 10000.0; }

    private static double round2(double v) { return Math.round(v * 100) / 100.0; }
}
