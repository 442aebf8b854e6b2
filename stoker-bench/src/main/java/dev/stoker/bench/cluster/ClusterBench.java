package dev.stoker.bench.cluster;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ChildJvm;
import dev.stoker.bench.ChildProcesses;
import dev.stoker.bench.trainer.SimulatedTrainer;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.testkit.netns.NetnsTestBed;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code stoker bench cluster}: a Stoker cluster of N nodes on one machine, each node in its own
 * network namespace of a {@link NetnsTestBed} behind a shaped network card, fed to one simulated
 * trainer per rank. Node 0 runs {@code serve --join} (coordinator, worker node and the node of
 * rank 0), nodes 1..N-1 run {@code node --join}, each from a config file written into the work dir;
 * rank r's trainer runs on node r mod N and reads from that node's socket, so every batch made on
 * another node crosses the owner's upload and the rank node's download. Measures what each card
 * carried, the trainers' samples/s and wait ratio, and the nodes' own counters (batches made, Flight
 * bytes sent and pulled), which show where the bytes went ({@link ClusterSummary}).
 *
 * <p>Without namespaces ({@code noNetns}, or when they are unavailable: not root, no
 * {@code ip}/{@code tc}) the same cluster runs on 127.0.0.1 with a port per node and no NIC limit;
 * per-node bytes then are the Flight bytes each node sent.
 */
public final class ClusterBench {
    static final String JOB = "bench";
    static final String MODE = "cluster"; // trainer reports are MODE-rankR.json, as RunData reads them
    private static final long START_TIMEOUT_SECONDS = 180;
    private static final int TAIL_LINES = 25;
    private static final long SAMPLE_MILLIS = 250;

    /**
     * @param config         the job: processor, data, ranks, batch, and the cluster's nodes, placement, workers, pull-ahead and
     *                       node store budget
     * @param steps          steps per rank
     * @param stepMillis     simulated GPU step per batch
     * @param nicMbit        each node's card in Mbit/s, per direction; 0: unlimited
     * @param noNetns        run every node on 127.0.0.1 instead of in network namespaces
     * @param port           cluster port (null: 2551 in namespaces, a free range on 127.0.0.1)
     * @param nodeHeap       -Xmx of each node's JVM
     * @param timeoutSeconds longest the trainers may run (null: 120 s + 10 s per step)
     * @param workDir        where sockets, logs, trainer reports and the nodes' counters go (null: a temp folder)
     */
    public record Settings(NodeConfig config, int steps, long stepMillis, long nicMbit, boolean noNetns, Integer port, String nodeHeap,
                           Long timeoutSeconds, Path workDir) {}

    /** What went wrong, with the log to show. */
    static final class BenchFailure extends Exception {
        private static final long serialVersionUID = 1L;
        final transient Path log;

        BenchFailure(String message, Path log) {
            super(message);
            this.log = log;
        }
    }

    private ClusterBench() {}

    /**
     * A run's exit code (0: every node exited 0 and every rank took every step), its JSON line's figures (null: none) and the
     * network namespaces' subnet octet it ran in (null: on 127.0.0.1).
     */
    record Outcome(int exit, java.util.Map<String, Object> result, Integer subnetOctet) {
        Outcome(int exit, java.util.Map<String, Object> result) { this(exit, result, null); }
    }

    /**
     * What one run of a series over the same nodes' caches ({@link ClusterEpochs}) fixes: the namespaces' subnet (null: any
     * free one), so that every run's nodes have the same addresses (a cache entry's home is named by its node's address); the
     * folder under which node i keeps its cache in {@code nodeI} (null: {@code --cache-dir}, else the work dir's {@code cache});
     * serve's {@code --report-dir} (null: none); and whether to wait, once the trainers are done, until every cache entry
     * offered to its home was taken (or dropped) before the nodes stop, so that the next run finds each one at its home.
     */
    record Pass(Integer subnetOctet, Path cacheRoot, Path reportDir, boolean awaitOffers) {
        static final Pass ONE = new Pass(null, null, null, false);
    }

    /** How long a run waits for the cache entries offered to their homes to be taken (the report dir is written every 5 s). */
    private static final long OFFERS_TIMEOUT_SECONDS = 30;

    /** Runs the cluster; 0 when every node exited 0 and every rank took every step, else 1 (said on {@code err}). */
    public static int run(Settings s, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        return measure(s, out, err).exit();
    }

    /** Runs the cluster once: its exit code as {@link #run}'s, and its figures. */
    static Outcome measure(Settings s, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        return measure(s, Pass.ONE, out, err);
    }

    /** Runs the cluster once, with {@code pass}'s subnet, cache folders, report dir and wait for offers. */
    static Outcome measure(Settings s, Pass pass, PrintWriter out, PrintWriter err) throws IOException, InterruptedException {
        var config = s.config();
        long started = System.nanoTime();
        if (config.data() == null) throw new ConfigException("--data is required: the manifest (a path, file://… or s3://…)");
        if (s.steps() < 1 || s.stepMillis() < 0) throw new ConfigException("--steps must be >= 1 and --step-ms >= 0");
        if (s.nicMbit() < 0) throw new ConfigException("--nic-mbit must be >= 0");
        int nodes = config.get(NodeConfig.NODES), w = config.workers(), ranks = config.ranks();

        boolean netns = !s.noNetns();
        if (netns) {
            Optional<String> why = NetnsTestBed.unavailableReason();
            if (why.isPresent()) {
                out.println("bench cluster: network namespaces unavailable (" + why.get() + "); running on 127.0.0.1 as with --no-netns: "
                        + "no NIC limit, per-node bytes from the nodes' Flight counters");
                netns = false;
            }
        }
        Path dir = (s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-cluster-bench")).toAbsolutePath();
        for (int r = 0; r < Math.max(ranks, 64); r++) Files.deleteIfExists(report(dir, r));
        Files.deleteIfExists(metricsFile(dir));
        for (int i = 0; i < nodes; i++) Files.deleteIfExists(statsFile(dir, i));
        List<String> jobArgs = jobArgs(config);

        NetnsTestBed bed = null;
        try (var children = new ChildProcesses("bench-cluster")) {
            String[] host = new String[nodes];
            int[] ports = new int[nodes];
            if (netns) {
                var options = NetnsTestBed.Options.defaults();
                if (pass.subnetOctet() != null) options = options.withSubnetOctet(pass.subnetOctet());
                bed = NetnsTestBed.create(nodes, s.nicMbit(), options);
                for (int i = 0; i < nodes; i++) {
                    host[i] = bed.address(i);
                    ports[i] = s.port() != null ? s.port() : 2551;
                }
            } else {
                int base = s.port() != null ? s.port() : freePortRange(nodes);
                for (int i = 0; i < nodes; i++) {
                    host[i] = "127.0.0.1";
                    ports[i] = base + i; // same number of digits: the coordinator orders nodes by address text, node 0 first
                }
            }
            out.printf("bench cluster: %d nodes (%s), placement %s, retrieval %s, %d workers (%d slots per node), %d ranks × batch %d, step %d ms, "
                            + "%d steps; work dir %s%n", nodes, netns ? "network namespaces " + bed.subnet() + ", NIC "
                            + (s.nicMbit() == 0 ? "unlimited" : s.nicMbit() + " Mbit/s") + " each way" : "127.0.0.1, no NIC limit",
                    placement(config), retrieval(config), w, w, ranks, config.batch(), s.stepMillis(), s.steps(), dir);
            out.flush();

            var members = new ArrayList<Members.Member>();
            Path tokenFile = writeToken(dir);
            Path keyFile = dir.resolve("cluster.key"); // the work dir's own, 0600: made on its first run, kept for the next
            keyFile = (Files.exists(keyFile, java.nio.file.LinkOption.NOFOLLOW_LINKS) ? dev.stoker.cluster.ClusterKey.load(keyFile)
                    : dev.stoker.cluster.ClusterKey.create(keyFile)).file();
            for (int i = 0; i < nodes; i++) { // node 0 first: it is the seed
                Path file = dir.resolve("node" + i + ".yaml");
                Files.writeString(file, memberConfig(s, pass, i, host[i] + ":" + ports[i], host[0] + ":" + ports[0], tokenFile, keyFile, dir)
                        .toYaml(i == 0 ? NodeConfig.keys() : nodeKeys()));
                var jvm = new ArrayList<>(List.of("-Xmx" + s.nodeHeap()));
                jvm.addAll(ChildJvm.envOptions("STOKER_JAVA_OPTS"));
                var argv = ChildJvm.stoker(jvm, List.of(i == 0 ? "serve" : "node", "--config", file.toString()));
                Path log = dir.resolve("node" + i + ".log");
                var pb = bed != null ? bed.command(i, argv) : new ProcessBuilder(argv);
                members.add(new Members.Member(i, children.start(pb.redirectErrorStream(true).redirectOutput(log.toFile())), log, null));
                if (i == 0) Members.awaitSeed(members.getFirst(), START_TIMEOUT_SECONDS); // the others join a seed that answers
            }
            members = Members.awaitListening(members, START_TIMEOUT_SECONDS);
            var indexOf = new HashMap<String, Integer>(); // pekko address → node index
            for (var m : members) {
                String address = find(m.banner(), m.index() == 0 ? "cluster member (\\S+) \\(" : "up as ([^,\\s]+),");
                if (address != null) indexOf.put(address, m.index());
            }
            out.printf("bench cluster: all nodes up after %.1f s; %s%n", (System.nanoTime() - started) / 1e9,
                    firstLine(members.getFirst().banner(), "stoker serve: job "));
            out.flush();

            Integer subnetOctet = bed != null ? Integer.valueOf(bed.subnet().split("\\.")[2]) : null;
            NetnsTestBed.Counters[] before = new NetnsTestBed.Counters[nodes];
            if (bed != null) for (int i = 0; i < nodes; i++) before[i] = bed.counters(i);
            LinkSampler sampler = bed != null ? new LinkSampler(bed, SAMPLE_MILLIS) : null;
            long t0 = System.nanoTime();
            var trainers = new ArrayList<Process>();
            for (int r = 0; r < ranks; r++) {
                int node = r % nodes;
                var trainer = SimulatedTrainer.Settings.of(socket(dir, node), r, ranks, s.steps(), s.stepMillis(), report(dir, r)).withJob(JOB);
                // as the ladder's trainers: a small heap; the nodes' figures are what this run measures
                var argv = TrainerProcesses.javaCommand(TrainerProcesses.SMALL_JVM, trainer);
                var pb = bed != null ? bed.command(node, argv) : new ProcessBuilder(argv);
                trainers.add(children.start(pb.redirectErrorStream(true).redirectOutput(trainerLog(dir, r).toFile())));
            }
            long timeout = s.timeoutSeconds() != null ? s.timeoutSeconds() : defaultTimeoutSeconds(s.steps(), s.stepMillis());
            try {
                Members.awaitTrainers(trainers, members, r -> trainerLog(dir, r), timeout);
            } finally {
                if (sampler != null) sampler.close();
            }
            double wallSeconds = (System.nanoTime() - t0) / 1e9;
            if (pass.awaitOffers() && pass.reportDir() != null) awaitOffersTaken(pass.reportDir(), out);
            List<LinkSampler.Sample> linkSamples = sampler != null ? sampler.samples() : List.of();
            if (sampler != null) LinkSampler.write(dir.resolve("link-samples.csv"), linkSamples);
            NetnsTestBed.Counters[] after = new NetnsTestBed.Counters[nodes];
            if (bed != null) for (int i = 0; i < nodes; i++) after[i] = bed.counters(i);

            int[] exits = Members.stop(members); // serve first (its metrics file asks every node for its counters), then the nodes
            if (bed != null) {
                bed.close();
                bed = null;
            }

            var facts = new ClusterSummary.Facts(dir, indexOf, ranks, w, netns, before, after, linkSamples, wallSeconds, jobArgs);
            var result = ClusterSummary.summarize(s, facts);
            ClusterSummary.printTable(out, result);
            out.println(new ObjectMapper().writeValueAsString(result));
            out.flush();
            var problems = new ArrayList<String>();
            for (int i = 0; i < nodes; i++) if (exits[i] != 0) problems.add("node " + i + " (" + members.get(i).role() + ") exited " + exits[i]);
            @SuppressWarnings("unchecked")
            var stepsPerRank = (List<Integer>) result.get("steps_per_rank");
            for (int r = 0; r < ranks; r++)
                if (stepsPerRank.get(r) != s.steps()) problems.add("rank " + r + " took " + stepsPerRank.get(r) + " of " + s.steps() + " steps");
            if (!problems.isEmpty()) {
                err.println("stoker: bench cluster did not end cleanly: " + String.join("; ", problems) + "; see " + dir);
                return new Outcome(1, result, subnetOctet);
            }
            return new Outcome(0, result, subnetOctet);
        } catch (BenchFailure f) {
            err.println("stoker: bench cluster: " + f.getMessage());
            if (f.log != null) {
                err.println("--- last lines of " + f.log + " ---");
                err.println(ChildProcesses.tail(f.log, TAIL_LINES));
            }
            err.println("(logs in " + dir + ")");
            return new Outcome(1, null);
        } finally {
            if (bed != null) bed.close();
        }
    }

    /**
     * Node {@code i}'s configuration: node 0 runs the job ({@code serve --join}: the job's settings, the cluster's, its steps and
     * metrics file), the others are members ({@code node --join}); every one binds {@code bind}, offers a slot per worker, and
     * has its socket, store budget, token file, cluster key and pull-ahead.
     */
    private static NodeConfig memberConfig(Settings s, Pass pass, int i, String bind, String seed, Path tokenFile, Path keyFile, Path dir) {
        var c = s.config();
        var b = i == 0 ? c.toBuilder().set(NodeConfig.RANKS, c.ranks()).set(NodeConfig.BATCH, c.batch())
                .set(NodeConfig.NODES, c.get(NodeConfig.NODES)).set(NodeConfig.PLACEMENT, c.get(NodeConfig.PLACEMENT))
                .set(NodeConfig.RETRIEVAL, c.get(NodeConfig.RETRIEVAL))
                .set(NodeConfig.WORKERS, c.workers()).set(NodeConfig.STEPS, (long) s.steps()).set(NodeConfig.JOB, JOB)
                .set(NodeConfig.METRICS_FILE, metricsFile(dir))
                : NodeConfig.builder().set(NodeConfig.METRICS_FILE, statsFile(dir, i));
        if (i == 0 && pass.reportDir() != null) b.set(NodeConfig.REPORT_DIR, pass.reportDir());
        // the cache of preprocessed samples: off unless --cache is given (every run decodes, as bench ladder's rungs do), and
        // then each node's in a folder of its own, as on machines of their own (nodes sharing one would find each other's
        // entries locally, which no cluster does): nodeI under --cache-dir, else under the work dir's cache
        boolean cache = c.isGiven(NodeConfig.CACHE) && c.get(NodeConfig.CACHE);
        b.set(NodeConfig.CACHE, cache);
        if (cache) b.set(NodeConfig.CACHE_DIR, cacheRoot(s, pass, dir).resolve("node" + i));
        if (c.isGiven(NodeConfig.CACHE_BYTES)) copy(b, c, NodeConfig.CACHE_BYTES);
        if (c.isGiven(NodeConfig.CACHE_COMPRESS)) b.set(NodeConfig.CACHE_COMPRESS, c.get(NodeConfig.CACHE_COMPRESS));
        // a budget given is every node's; none given, each node sizes its store for the job (from its data's largest batch)
        if (c.isGiven(NodeConfig.NODE_SHM_BUDGET)) b.set(NodeConfig.NODE_SHM_BUDGET, c.get(NodeConfig.NODE_SHM_BUDGET));
        return b.set(NodeConfig.JOIN, List.of(seed)).set(NodeConfig.BIND, bind).set(NodeConfig.SLOTS, c.workers())
                .set(NodeConfig.SOCKET, socket(dir, i))
                .set(NodeConfig.CLUSTER_TOKEN_FILE, tokenFile).set(NodeConfig.CLUSTER_KEY, keyFile).set(NodeConfig.PULL_AHEAD, c.get(NodeConfig.PULL_AHEAD)).build();
    }

    /** The settings a member's file holds ({@code stoker node}'s): the member's, and its own cache folder. */
    private static List<ConfigKey<?>> nodeKeys() {
        var keys = new ArrayList<ConfigKey<?>>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.MEMBER)));
        keys.add(NodeConfig.CACHE_DIR);
        return keys;
    }

    /** The folder under which node i keeps its cache in {@code nodeI}: the pass's, else {@code --cache-dir}, else the work dir's. */
    static Path cacheRoot(Settings s, Pass pass, Path dir) {
        if (pass.cacheRoot() != null) return pass.cacheRoot();
        return s.config().isGiven(NodeConfig.CACHE_DIR) ? s.config().get(NodeConfig.CACHE_DIR) : dir.resolve("cache");
    }

    /**
     * Waits until serve's report dir, written after the trainers ended, shows every cache entry offered to its home taken,
     * dropped or given up ({@code cache_affinity}: offered &lt;= taken + takeDropped + outboxDropped), at most
     * {@link #OFFERS_TIMEOUT_SECONDS}; says so when it is not.
     */
    private static void awaitOffersTaken(Path reportDir, PrintWriter out) throws IOException, InterruptedException {
        Path file = reportDir.resolve(dev.stoker.node.ReportDir.MODE + "-pipeline.json");
        long since = System.currentTimeMillis();
        long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(OFFERS_TIMEOUT_SECONDS);
        var mapper = new ObjectMapper();
        String seen = "no report written";
        while (System.nanoTime() - deadline < 0) {
            if (Files.isRegularFile(file) && Files.getLastModifiedTime(file).toMillis() > since) {
                var a = mapper.readTree(file.toFile()).path("cache_affinity");
                if (a.isMissingNode() || a.isNull()) return; // no node has the cache's affinity on
                long offered = a.path("offered").asLong(), settled = a.path("taken").asLong() + a.path("takeDropped").asLong()
                        + a.path("outboxDropped").asLong();
                if (settled >= offered) return;
                seen = settled + " of " + offered;
            }
            Thread.sleep(200); // the report dir is rewritten every 5 s: polling its file under a deadline
        }
        out.println("bench cluster: the homes had not taken every entry offered within " + OFFERS_TIMEOUT_SECONDS + " s (" + seen
                + "); the next run misses the rest");
    }

    private static <T> void copy(NodeConfig.Builder b, NodeConfig c, dev.stoker.node.ConfigKey<T> k) { b.set(k, c.get(k)); }

    /** The job's feed settings as options: those given, and the ranks and batch always (the settings JSON's job_args). */
    static List<String> jobArgs(NodeConfig config) {
        var given = config.toBuilder().set(NodeConfig.RANKS, config.ranks()).set(NodeConfig.BATCH, config.batch()).build();
        var out = new ArrayList<String>();
        for (var k : NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE)))
            if (given.isGiven(k)) {
                out.add(k.option());
                out.add(k.format(given.get(k)));
            }
        return out;
    }

    /** The nodes' Flight endpoints ask for a token off loopback (docs/cluster.md, Access): one for this run, 0600. */
    private static Path writeToken(Path dir) throws IOException {
        Path tokenFile = dir.resolve("cluster-token");
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        Files.writeString(tokenFile, HexFormat.of().formatHex(secret));
        Files.setPosixFilePermissions(tokenFile, PosixFilePermissions.fromString("rw-------"));
        return tokenFile;
    }

    /** The trainers' time limit when none is given: 120 s + 10 s (and the step) per step. */
    static long defaultTimeoutSeconds(int steps, long stepMillis) { return 120 + steps * (10 + stepMillis / 1000); }

    static String placement(NodeConfig config) { return ConfigKey.cliName(config.get(NodeConfig.PLACEMENT)); }

    static String retrieval(NodeConfig config) { return ConfigKey.cliName(config.get(NodeConfig.RETRIEVAL)); }

    static Path metricsFile(Path dir) { return dir.resolve("serve-metrics.json"); }

    static Path statsFile(Path dir, int node) { return dir.resolve("node" + node + "-stats.json"); }

    static Path report(Path dir, int rank) { return dir.resolve(MODE + "-rank" + rank + ".json"); }

    private static Path socket(Path dir, int node) { return dir.resolve("n" + node + ".sock"); }

    private static Path trainerLog(Path dir, int rank) { return dir.resolve("trainer" + rank + ".log"); }

    /** {@code n} consecutive ports free on 127.0.0.1 now, all with five digits. */
    static int freePortRange(int n) throws IOException {
        var loopback = InetAddress.getLoopbackAddress();
        for (int attempt = 0; attempt < 100; attempt++) {
            int base = ThreadLocalRandom.current().nextInt(20000, 30000 - n);
            boolean free = true;
            for (int i = 0; i < n && free; i++) {
                try (var sock = new ServerSocket(base + i, 1, loopback)) {
                    sock.setReuseAddress(true);
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
}
