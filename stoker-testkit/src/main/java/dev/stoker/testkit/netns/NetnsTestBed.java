package dev.stoker.testkit.netns;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A cluster of N nodes on one Linux machine: one network namespace per node, each joined by a
 * veth pair to a bridge, each node's link shaped by {@code tc tbf} in both directions to model
 * its network card. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), {@code ip} and {@code tc}.
 *
 * <pre>
 *   namespace TAG"n0"          namespace TAG"sw" (the switch)             namespace TAG"n1"
 *  +-----------------+      +-----------------------------------+      +-----------------+
 *  | lo 127.0.0.1    |      |               br0                 |      | lo 127.0.0.1    |
 *  |                 |      |          +----+-----+             |      |                 |
 *  | eth0 10.213.X.1 |======| n0 ------+          +------ n1    |======| eth0 10.213.X.2 |
 *  | tbf: upload     | veth | tbf: n0's download  tbf: n1's     | veth | tbf: upload     |
 *  +-----------------+      |                     download      |      +-----------------+
 *                           +-----------------------------------+
 * </pre>
 *
 * <p>Topology: the bridge lives in a dedicated switch namespace, so nothing at all is added to
 * the root namespace (no links, no addresses, no routes) and each bed is isolated from every
 * other bed and from the machine's own network. Node i has {@code eth0} with
 * {@code 10.213.X.(i+1)/24}, its loopback up and no default route; X is picked so that the /24
 * overlaps nothing routed in the root namespace (harmless anyway, since the nodes cannot reach
 * the root namespace). The tbf on the node-side end's egress limits the node's upload, the one on
 * the switch-side end's egress its download; traffic between two nodes passes both the sender's
 * upload and the receiver's download, like two hosts with one NIC each on a non-blocking switch.
 *
 * <p>Names: every namespace is {@code PREFIX PID "x" RAND4 ("sw" | "n" i)}, e.g.
 * {@code stk4711x3fa2n0}; the PID lets {@link #cleanupLeftovers} remove only the beds of processes
 * that no longer run, the random part lets one process hold several beds.
 *
 * <p>Threading: create, close and the accessors may be called from any thread; close is
 * idempotent and also runs from a JVM shutdown hook.
 */
public final class NetnsTestBed implements AutoCloseable {
    /** The namespace-name prefix of this project's beds. */
    public static final String DEFAULT_PREFIX = "stk";
    /** The node's interface inside its namespace. */
    public static final String NODE_DEVICE = "eth0";
    static final String BRIDGE = "br0";
    static final int MAX_NODES = 250;
    private static final long COMMAND_TIMEOUT_MS = 15_000;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static volatile Optional<String> unavailable;

    /**
     * How a bed is built.
     *
     * @param prefix namespace-name prefix, lower-case letters only ({@value #DEFAULT_PREFIX})
     * @param subnetOctet X of 10.213.X.0/24, or -1 to pick one not routed in the root namespace
     * @param burstBytes tbf bucket; 0 = max(32 KiB, 10 ms at the rate): large enough for the
     *     kernel's timer and TSO segments, small enough that a transfer of more than a few
     *     buckets runs at the rate
     * @param latencyMs tbf queue, as the time a full queue takes to drain at the rate (50 ms)
     */
    public record Options(String prefix, int subnetOctet, long burstBytes, int latencyMs) {
        public Options {
            Objects.requireNonNull(prefix, "prefix");
            if (!prefix.matches("[a-z]{1,8}")) throw new IllegalArgumentException("prefix must be 1-8 lower-case letters: " + prefix);
            if (subnetOctet < -1 || subnetOctet > 255) throw new IllegalArgumentException("subnetOctet must be -1 or 0..255: " + subnetOctet);
            if (burstBytes < 0) throw new IllegalArgumentException("burstBytes must be >= 0: " + burstBytes);
            if (latencyMs < 1) throw new IllegalArgumentException("latencyMs must be >= 1: " + latencyMs);
        }

        public static Options defaults() {
            return new Options(DEFAULT_PREFIX, -1, 0, 50);
        }

        public Options withSubnetOctet(int octet) {
            return new Options(prefix, octet, burstBytes, latencyMs);
        }

        public Options withPrefix(String p) {
            return new Options(p, subnetOctet, burstBytes, latencyMs);
        }

        public Options withBurstBytes(long b) {
            return new Options(prefix, subnetOctet, b, latencyMs);
        }

        public Options withLatencyMs(int ms) {
            return new Options(prefix, subnetOctet, burstBytes, ms);
        }
    }

    /** A node's interface statistics since the bed was created: tx = sent by the node, rx = received. */
    public record Counters(long txBytes, long rxBytes, long txPackets, long rxPackets, long txDropped, long rxDropped) {}

    private final String tag;
    private final int nodes;
    private final long nicMbit;
    private final int subnetOctet;
    private final long burstBytes;
    private final String ip;
    private final List<String> created = new ArrayList<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Thread shutdownHook;

    private NetnsTestBed(String tag, int nodes, long nicMbit, int subnetOctet, long burstBytes, String ip) {
        this.tag = tag;
        this.nodes = nodes;
        this.nicMbit = nicMbit;
        this.subnetOctet = subnetOctet;
        this.burstBytes = burstBytes;
        this.ip = ip;
        this.shutdownHook = new Thread(this::closeQuietly, "netns-testbed-cleanup-" + tag);
    }

    /**
     * Builds a bed of {@code nodes} nodes, each with a {@code nicMbit} Mbit/s card in each
     * direction (0 = unlimited: no qdisc is added). On any failure everything created so far is
     * removed and the failing command and its output are in the exception.
     */
    public static NetnsTestBed create(int nodes, long nicMbit, Options options) throws IOException {
        if (nodes < 1 || nodes > MAX_NODES) throw new IllegalArgumentException("nodes must be 1.." + MAX_NODES + ": " + nodes);
        if (nicMbit < 0) throw new IllegalArgumentException("nicMbit must be >= 0: " + nicMbit);
        Optional<String> why = unavailableReason();
        if (why.isPresent()) throw new IOException("network test bed unavailable: " + why.get());
        String ipTool = tool("ip").orElseThrow();
        String tag = newTag(options.prefix());
        int octet = options.subnetOctet() >= 0 ? options.subnetOctet() : pickSubnetOctet(ipTool);
        long rateBytesPerS = nicMbit * 1_000_000 / 8;
        long burst = options.burstBytes() > 0 ? options.burstBytes() : Math.max(32 * 1024, rateBytesPerS / 100);
        NetnsTestBed bed = new NetnsTestBed(tag, nodes, nicMbit, octet, burst, ipTool);
        Runtime.getRuntime().addShutdownHook(bed.shutdownHook);
        try {
            bed.build(options.latencyMs());
        } catch (IOException | RuntimeException e) {
            try {
                bed.close();
            } catch (RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        }
        return bed;
    }

    private void build(int latencyMs) throws IOException {
        String sw = switchNamespace();
        addNamespace(sw);
        run(ip, "-n", sw, "link", "add", "name", BRIDGE, "type", "bridge", "stp_state", "0");
        run(ip, "-n", sw, "link", "set", BRIDGE, "up");
        String tc = tool("tc").orElseThrow();
        for (int i = 0; i < nodes; i++) {
            String ns = namespace(i);
            String port = switchPort(i);
            addNamespace(ns);
            // created inside the switch namespace with its peer moved straight into the node's:
            // the pair never exists in the root namespace, not even for a moment
            run(ip, "-n", sw, "link", "add", "name", port, "type", "veth", "peer", "name", NODE_DEVICE, "netns", ns);
            run(ip, "-n", sw, "link", "set", port, "master", BRIDGE);
            run(ip, "-n", sw, "link", "set", port, "up");
            run(ip, "-n", ns, "addr", "add", address(i) + "/24", "dev", NODE_DEVICE);
            run(ip, "-n", ns, "link", "set", NODE_DEVICE, "up");
            run(ip, "-n", ns, "link", "set", "lo", "up");
            if (nicMbit > 0) {
                List<String> tbf = List.of("root", "tbf", "rate", nicMbit + "mbit", "burst", Long.toString(burstBytes), "latency", latencyMs + "ms");
                run(concat(List.of(tc, "-n", ns, "qdisc", "add", "dev", NODE_DEVICE), tbf));
                run(concat(List.of(tc, "-n", sw, "qdisc", "add", "dev", port), tbf));
            }
        }
    }

    private void addNamespace(String name) throws IOException {
        run(ip, "netns", "add", name);
        synchronized (created) {
            created.add(name);
        }
    }

    /** Node i's IPv4 address, e.g. {@code 10.213.7.1} for node 0. */
    public String address(int i) {
        checkNode(i);
        return "10.213." + subnetOctet + "." + (i + 1);
    }

    /** The bed's subnet, e.g. {@code 10.213.7.0/24}. */
    public String subnet() {
        return "10.213." + subnetOctet + ".0/24";
    }

    /** Node i's network namespace (usable with {@code ip netns exec} and {@code ip -n}). */
    public String namespace(int i) {
        checkNode(i);
        return tag + "n" + i;
    }

    /** The namespace holding the bridge and the switch-side ends. */
    public String switchNamespace() {
        return tag + "sw";
    }

    /** The switch-side end of node i's veth pair, inside {@link #switchNamespace()}. */
    public String switchPort(int i) {
        checkNode(i);
        return "n" + i;
    }

    /** The part every namespace of this bed starts with, e.g. {@code stk4711x3fa2}. */
    public String tag() {
        return tag;
    }

    public int nodes() {
        return nodes;
    }

    /** Each node's card in Mbit/s per direction; 0 = unlimited. */
    public long nicMbit() {
        return nicMbit;
    }

    /** The tbf bucket in bytes (unused when unlimited). */
    public long burstBytes() {
        return burstBytes;
    }

    /**
     * A process builder that runs {@code argv} inside node i's namespace through
     * {@code ip netns exec}, which execs argv in place: the started {@link Process} is argv itself,
     * so destroying it signals the program, not a wrapper. The environment is inherited.
     */
    public ProcessBuilder command(int i, List<String> argv) {
        if (argv.isEmpty()) throw new IllegalArgumentException("empty argv");
        return new ProcessBuilder(concat(List.of(ip, "netns", "exec", namespace(i)), argv));
    }

    /** Node i's {@link #NODE_DEVICE} statistics. */
    public Counters counters(int i) throws IOException {
        String out = run(ip, "-n", namespace(i), "-s", "-j", "link", "show", "dev", NODE_DEVICE);
        JsonNode link = JSON.readTree(out).path(0);
        JsonNode stats = link.path("stats64");
        if (stats.isMissingNode()) throw new IOException("no stats64 in `ip -s -j link show` of " + namespace(i) + ": " + out);
        JsonNode tx = stats.path("tx");
        JsonNode rx = stats.path("rx");
        return new Counters(tx.path("bytes").asLong(), rx.path("bytes").asLong(), tx.path("packets").asLong(),
                rx.path("packets").asLong(), tx.path("dropped").asLong(), rx.path("dropped").asLong());
    }

    /**
     * Every node's counters as the switch sees them, read in one command (cheap enough to sample
     * often): node i's port {@code n<i>} receives what node i sends, so here tx = the port's rx
     * (sent by the node) and rx = the port's tx (received by the node), as in {@link #counters}.
     * veth counts the same frames on both ends, so the two views agree but for what the bridge
     * itself sends (nothing, with STP off) and IPv6 neighbour discovery of the port.
     */
    public List<Counters> switchSideCounters() throws IOException {
        String out = run(ip, "-n", switchNamespace(), "-s", "-j", "link", "show");
        var byPort = new java.util.HashMap<String, JsonNode>();
        for (JsonNode link : JSON.readTree(out)) byPort.put(link.path("ifname").asText(), link.path("stats64"));
        var counters = new ArrayList<Counters>();
        for (int i = 0; i < nodes; i++) {
            JsonNode stats = byPort.get(switchPort(i));
            if (stats == null || stats.isMissingNode()) throw new IOException("no stats64 of port " + switchPort(i) + " in " + switchNamespace() + ": " + out);
            JsonNode fromNode = stats.path("rx");
            JsonNode toNode = stats.path("tx");
            counters.add(new Counters(fromNode.path("bytes").asLong(), toNode.path("bytes").asLong(), fromNode.path("packets").asLong(),
                    toNode.path("packets").asLong(), fromNode.path("dropped").asLong(), toNode.path("dropped").asLong()));
        }
        return counters;
    }

    /**
     * Removes every namespace this bed created; deleting the switch namespace removes the bridge
     * and, with each veth end, its peer. Processes still running in a node's namespace are killed
     * first (the caller should have stopped them; a leftover would keep the namespace alive
     * unnamed). Idempotent; throws if a namespace could not be removed.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        try {
            Runtime.getRuntime().removeShutdownHook(shutdownHook);
        } catch (IllegalStateException shuttingDown) {
            // running from the hook itself, or during shutdown: nothing to remove
        }
        List<String> names;
        synchronized (created) {
            names = new ArrayList<>(created);
        }
        List<String> failures = new ArrayList<>();
        Set<String> existing;
        try {
            existing = Set.copyOf(listNamespaces(ip));
        } catch (IOException e) {
            throw new IllegalStateException("network test bed " + tag + " not removed: " + e.getMessage(), e);
        }
        // nodes first, the switch last: reversed creation order
        for (int k = names.size() - 1; k >= 0; k--) {
            if (!existing.contains(names.get(k))) continue;
            String failure = deleteNamespace(ip, names.get(k));
            if (failure != null) failures.add(failure);
        }
        if (!failures.isEmpty()) throw new IllegalStateException("network test bed " + tag + " not fully removed: " + String.join("; ", failures));
    }

    private void closeQuietly() {
        try {
            close();
        } catch (RuntimeException e) {
            System.err.println("stoker: " + e.getMessage());
        }
    }

    @Override
    public String toString() {
        return "NetnsTestBed[" + tag + ", " + nodes + " nodes, " + subnet() + ", nic " + (nicMbit == 0 ? "unlimited" : nicMbit + " Mbit/s") + "]";
    }

    /**
     * Removes the namespaces of earlier beds with this prefix whose process no longer runs
     * (killed runs, crashed JVMs); beds of live processes, this one included, are left alone.
     * Removing the namespaces removes their links: a bed creates none in the root namespace.
     *
     * @return the namespaces removed
     */
    public static List<String> cleanupLeftovers(String prefix) throws IOException {
        Options.defaults().withPrefix(prefix); // validates
        String ipTool = tool("ip").orElseThrow(() -> new IOException("`ip` not found (Debian: apt-get install iproute2)"));
        Pattern mine = Pattern.compile(Pattern.quote(prefix) + "(\\d+)x[0-9a-f]{4}(sw|pr|n\\d+)");
        List<String> removed = new ArrayList<>();
        List<String> failures = new ArrayList<>();
        for (String name : listNamespaces(ipTool)) {
            Matcher m = mine.matcher(name);
            if (!m.matches()) continue;
            long pid = Long.parseLong(m.group(1));
            if (ProcessHandle.of(pid).isPresent()) continue;
            String failure = deleteNamespace(ipTool, name);
            if (failure == null) removed.add(name); else failures.add(failure);
        }
        if (!failures.isEmpty()) throw new IOException("leftover namespaces not removed: " + String.join("; ", failures));
        return removed;
    }

    /** The names in {@code ip netns list}. */
    public static List<String> listNamespaces() throws IOException {
        return listNamespaces(tool("ip").orElseThrow(() -> new IOException("`ip` not found")));
    }

    private static List<String> listNamespaces(String ipTool) throws IOException {
        String out = run(ipTool, "-j", "netns", "list");
        List<String> names = new ArrayList<>();
        if (out.isBlank()) return names; // iproute2 prints nothing at all when /run/netns is absent
        for (JsonNode ns : JSON.readTree(out)) names.add(ns.path("name").asText());
        return names;
    }

    /** Kills what still runs in the namespace, then deletes it; null on success, else why not. */
    private static String deleteNamespace(String ipTool, String name) {
        try {
            for (String pid : run(ipTool, "netns", "pids", name).split("\\s+")) {
                if (!pid.isBlank()) ProcessHandle.of(Long.parseLong(pid)).ifPresent(ProcessHandle::destroyForcibly);
            }
            run(ipTool, "netns", "del", name);
            return null;
        } catch (IOException | RuntimeException e) {
            return name + ": " + e.getMessage();
        }
    }

    /**
     * Why no bed can be built here, or empty if one can: not Linux, not root, {@code ip} or
     * {@code tc} missing, or a probe (a namespace with a bridge, a veth pair and a tbf qdisc,
     * removed at once) failed, with the failing command's output. Computed once.
     */
    public static Optional<String> unavailableReason() {
        Optional<String> why = unavailable;
        if (why == null) {
            synchronized (NetnsTestBed.class) {
                why = unavailable;
                if (why == null) unavailable = why = probe();
            }
        }
        return why;
    }

    private static Optional<String> probe() {
        if (!System.getProperty("os.name", "").toLowerCase().contains("linux")) return Optional.of("network namespaces need Linux, this is " + System.getProperty("os.name"));
        Optional<String> ipTool = tool("ip");
        if (ipTool.isEmpty()) return Optional.of("`ip` not found on PATH or in /usr/sbin, /sbin (Debian: apt-get install iproute2)");
        Optional<String> tcTool = tool("tc");
        if (tcTool.isEmpty()) return Optional.of("`tc` not found on PATH or in /usr/sbin, /sbin (Debian: apt-get install iproute2)");
        try {
            long euid = effectiveUid();
            if (euid != 0) return Optional.of("network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); effective uid is " + euid);
        } catch (IOException e) {
            return Optional.of("cannot read the effective uid from /proc/self/status: " + e.getMessage());
        }
        String ns = newTag(DEFAULT_PREFIX) + "pr";
        try {
            run(ipTool.get(), "netns", "add", ns);
            try {
                // `name` before each name: ip reads a bare word that abbreviates a keyword ("a") as that keyword
                run(ipTool.get(), "-n", ns, "link", "add", "name", "br0", "type", "bridge");
                run(ipTool.get(), "-n", ns, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb");
                run(ipTool.get(), "-n", ns, "link", "set", "va", "master", "br0");
                run(tcTool.get(), "-n", ns, "qdisc", "add", "dev", "vb", "root", "tbf", "rate", "100mbit", "burst", "32768", "latency", "50ms");
            } finally {
                run(ipTool.get(), "netns", "del", ns);
            }
        } catch (IOException e) {
            return Optional.of("probe failed: " + e.getMessage());
        }
        return Optional.empty();
    }

    private static long effectiveUid() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("Uid:")) return Long.parseLong(line.substring(4).trim().split("\\s+")[1]);
        }
        throw new IOException("no Uid: line");
    }

    /** The tool's absolute path: PATH first, then the sbin directories a non-login shell may lack. */
    static Optional<String> tool(String name) {
        List<String> dirs = new ArrayList<>();
        String path = System.getenv("PATH");
        if (path != null) dirs.addAll(List.of(path.split(":")));
        dirs.addAll(List.of("/usr/sbin", "/sbin", "/usr/bin", "/bin"));
        for (String dir : dirs) {
            if (dir.isEmpty()) continue;
            Path p = Path.of(dir, name);
            if (Files.isRegularFile(p) && Files.isExecutable(p)) return Optional.of(p.toString());
        }
        return Optional.empty();
    }

    private static String newTag(String prefix) {
        byte[] rand = new byte[2];
        ThreadLocalRandom.current().nextBytes(rand);
        return prefix + ProcessHandle.current().pid() + "x" + HexFormat.of().formatHex(rand);
    }

    /**
     * X for 10.213.X.0/24 such that the /24 overlaps no route or address of the root namespace,
     * starting at a random X so that beds made at the same time differ (easier to tell apart in
     * captures). If every X overlaps (a 10.0.0.0/8 route, say), a random one: the nodes' only
     * route is their /24 and they cannot reach the root namespace, so an overlap changes nothing.
     */
    static int pickSubnetOctet(String ipTool) throws IOException {
        List<long[]> used = new ArrayList<>();
        for (String line : (run(ipTool, "-4", "route", "show", "table", "all") + "\n" + run(ipTool, "-4", "-o", "addr", "show")).split("\n")) {
            for (String word : line.trim().split("\\s+")) {
                long[] net = parsePrefix(word);
                if (net != null) used.add(net);
            }
        }
        int start = ThreadLocalRandom.current().nextInt(256);
        for (int k = 0; k < 256; k++) {
            int x = (start + k) % 256;
            long base = (10L << 24) | (213L << 16) | ((long) x << 8);
            boolean clash = false;
            for (long[] net : used) {
                if (overlaps(base, 24, net[0], (int) net[1])) {
                    clash = true;
                    break;
                }
            }
            if (!clash) return x;
        }
        return start;
    }

    /** {address, prefix length} of {@code a.b.c.d} or {@code a.b.c.d/n}; null if the word is neither. */
    static long[] parsePrefix(String word) {
        Matcher m = Pattern.compile("(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})(?:/(\\d{1,2}))?").matcher(word);
        if (!m.matches()) return null;
        long a = 0;
        for (int g = 1; g <= 4; g++) {
            int octet = Integer.parseInt(m.group(g));
            if (octet > 255) return null;
            a = (a << 8) | octet;
        }
        int len = m.group(5) == null ? 32 : Integer.parseInt(m.group(5));
        if (len > 32) return null;
        return new long[] {a, len};
    }

    static boolean overlaps(long a, int aLen, long b, int bLen) {
        int len = Math.min(aLen, bLen);
        long mask = len == 0 ? 0 : (0xFFFF_FFFFL << (32 - len)) & 0xFFFF_FFFFL;
        return (a & mask) == (b & mask);
    }

    private void checkNode(int i) {
        if (i < 0 || i >= nodes) throw new IndexOutOfBoundsException("node " + i + " of " + nodes);
    }

    private static List<String> concat(List<String> a, List<String> b) {
        List<String> all = new ArrayList<>(a);
        all.addAll(b);
        return all;
    }

    private static String run(String... cmd) throws IOException {
        return run(List.of(cmd));
    }

    /** Runs a command to completion; its stdout, or an IOException naming it with its stderr. */
    private static String run(List<String> cmd) throws IOException {
        Process p = new ProcessBuilder(cmd).start();
        p.getOutputStream().close();
        // both pipes drained while the command runs, so a large output (a long route table) cannot stall it
        CompletableFuture<String> err = CompletableFuture.supplyAsync(() -> drain(p.getErrorStream()), Thread::startVirtualThread);
        CompletableFuture<String> out = CompletableFuture.supplyAsync(() -> drain(p.getInputStream()), Thread::startVirtualThread);
        try {
            if (!p.waitFor(COMMAND_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                p.destroyForcibly();
                throw new IOException("`" + String.join(" ", cmd) + "` did not finish in " + COMMAND_TIMEOUT_MS + " ms");
            }
            String stdout = out.join();
            String stderr = err.join().trim();
            if (p.exitValue() != 0) throw new IOException("`" + String.join(" ", cmd) + "` failed (exit " + p.exitValue() + "): " + (stderr.isEmpty() ? stdout.trim() : stderr));
            return stdout;
        } catch (InterruptedException e) {
            p.destroyForcibly();
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while running `" + String.join(" ", cmd) + "`", e);
        }
    }

    private static String drain(java.io.InputStream in) {
        try (in) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(output unreadable: " + e.getMessage() + ")";
        }
    }
}
