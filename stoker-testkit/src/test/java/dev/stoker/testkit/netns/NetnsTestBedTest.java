package dev.stoker.testkit.netns;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The bed on the real kernel: tbf holds a node to its card, the unlimited bed is far faster, the
 * counters see the traffic, JVMs in the namespaces bind their node's address and reach each other
 * through the bridge, loopback is private per namespace, and nothing is left behind — after
 * close, after SIGTERM (the shutdown hook) and, through cleanupLeftovers, after SIGKILL. Needs root,
 * {@code ip} and {@code tc}; skipped with the reason otherwise.
 */
@Tag("slow")
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class NetnsTestBedTest {
    static final long NIC_MBIT = 100;

    @BeforeEach // not @BeforeAll: surefire reports a class-level skip as zero tests, without the reason
    void needsTheBed() {
        Optional<String> why = NetnsTestBed.unavailableReason();
        assumeTrue(why.isEmpty(), () -> "network test bed unavailable: " + why.orElse(""));
    }

    /**
     * Three nodes: node 0 sends to nodes 1 and 2 at once (fan-out: only node 0's upload tbf holds
     * the sum to its card), then nodes 1 and 2 send to node 0 at once (fan-in: only node 0's
     * download tbf does). A missing tbf on either end doubles one of the two sums.
     */
    @Test
    void tbfHoldsEachNodesUploadAndDownloadToItsCardAndTheUnlimitedBedIsMuchFaster() throws Exception {
        List<String> rootLinksBefore = rootLinks();
        String tag;
        try (NetnsTestBed bed = NetnsTestBed.create(3, NIC_MBIT, NetnsTestBed.Options.defaults())) {
            tag = bed.tag();
            assertTrue(NetnsTestBed.listNamespaces().containsAll(List.of(bed.namespace(0), bed.namespace(1), bed.namespace(2), bed.switchNamespace())));
            assertEquals(rootLinksBefore, rootLinks(), "a bed adds no link to the root namespace");
            for (String direction : List.of("upload", "download")) {
                boolean up = direction.equals("upload");
                List<int[]> pairs = up ? List.of(new int[] {0, 1}, new int[] {0, 2}) : List.of(new int[] {1, 0}, new int[] {2, 0});
                NetnsTestBed.Counters before = bed.counters(0);
                List<Transfer> ts = streams(bed, pairs, 1500);
                NetnsTestBed.Counters after = bed.counters(0);
                double mbit = mbitPerS(ts);
                long bytes = ts.stream().mapToLong(Transfer::received).sum();
                System.out.printf("netns bed %s: node 0 %s, %d Mbit/s tbf, 2 streams of 1.5 s -> %.1f Mbit/s (%d bytes)%n", bed.subnet(), direction, NIC_MBIT, mbit, bytes);
                for (int k = 0; k < pairs.size(); k++) {
                    Transfer t = ts.get(k);
                    String from = bed.address(pairs.get(k)[0]);
                    assertEquals(t.sent, t.received, "bytes sent vs received, " + direction + " stream " + k);
                    assertEquals(from, t.senderLocal, "the sender JVM's source address");
                    assertEquals(from, t.receiverPeer, "the peer the receiver JVM saw");
                }
                assertTrue(mbit >= 0.6 * NIC_MBIT && mbit <= 1.1 * NIC_MBIT, direction + " rate " + mbit + " Mbit/s outside [0.6, 1.1] x " + NIC_MBIT);
                long moved = up ? after.txBytes() - before.txBytes() : after.rxBytes() - before.rxBytes();
                assertTrue(moved >= bytes, "node 0 " + (up ? "tx" : "rx") + " moved " + moved + " < " + bytes + " bytes streamed");
                long back = up ? after.rxPackets() - before.rxPackets() : after.txPackets() - before.txPackets();
                assertTrue(back > 0, "node 0 saw no ACK packets the other way");
            }
        }
        assertNothingLeft(tag, rootLinksBefore);

        double unlimitedMbit;
        try (NetnsTestBed bed = NetnsTestBed.create(2, 0, NetnsTestBed.Options.defaults())) {
            tag = bed.tag();
            List<Transfer> ts = streams(bed, List.<int[]>of(new int[] {0, 1}), 1000);
            unlimitedMbit = mbitPerS(ts);
            System.out.printf("netns bed %s: unlimited, 1 stream -> %.1f Mbit/s (%d bytes)%n", bed.subnet(), unlimitedMbit, ts.get(0).received);
            assertEquals(ts.get(0).sent, ts.get(0).received, "bytes sent vs received");
        }
        assertNothingLeft(tag, rootLinksBefore);
        assertTrue(unlimitedMbit >= 3 * NIC_MBIT, "unlimited " + unlimitedMbit + " Mbit/s is not >= 3 x " + NIC_MBIT);
    }

    @Test
    void loopbackIsPrivateToEachNamespace() throws Exception {
        try (NetnsTestBed bed = NetnsTestBed.create(2, 0, NetnsTestBed.Options.defaults())) {
            Probe listener = Probe.start(bed, 0, "listen", "127.0.0.1");
            try {
                String port = listener.await("LISTENING").split(" ")[1];
                assertEquals("CONNECTED 127.0.0.1", Probe.start(bed, 0, "connect", "127.0.0.1", port).await(""), "same namespace");
                assertTrue(Probe.start(bed, 1, "connect", "127.0.0.1", port).await("").startsWith("REFUSED"), "another node's namespace reached node 0's loopback");
                assertThrows(ConnectException.class, () -> {
                    try (Socket s = new Socket()) {
                        s.connect(new InetSocketAddress("127.0.0.1", Integer.parseInt(port)), 2000);
                    }
                }, "the root namespace reached node 0's loopback");
            } finally {
                listener.process.getOutputStream().close();
                listener.stop();
            }
        }
    }

    @Test
    void closeIsIdempotentAndNothingOutlivesSigtermOrSigkillAfterCleanup() throws Exception {
        NetnsTestBed bed = NetnsTestBed.create(1, NIC_MBIT, NetnsTestBed.Options.defaults());
        bed.close();
        bed.close();
        assertNothingLeft(bed.tag(), null);

        Probe term = Probe.holder(2);
        Probe kill = Probe.holder(2);
        String termTag = term.await("TAG").split(" ")[1];
        String killTag = kill.await("TAG").split(" ")[1];
        assertEquals(3, namespacesOf(termTag).size(), "the holder's bed");
        term.process.destroy();
        kill.process.destroyForcibly();
        assertTrue(term.process.waitFor(15, TimeUnit.SECONDS) && kill.process.waitFor(15, TimeUnit.SECONDS));
        assertNothingLeft(termTag, null);
        assertEquals(3, namespacesOf(killTag).size(), "SIGKILL runs no hook: the bed is left over");

        // a leftover-looking name of a live process (pid 1) must survive the cleanup
        String live = NetnsTestBed.DEFAULT_PREFIX + "1xbeefn0";
        ip("netns", "add", live);
        try {
            List<String> removed = NetnsTestBed.cleanupLeftovers(NetnsTestBed.DEFAULT_PREFIX);
            assertEquals(3, namespacesOf(killTag, removed).size(), "removed " + removed);
            assertFalse(removed.contains(live), "removed a bed of a live process");
            assertTrue(NetnsTestBed.listNamespaces().contains(live));
        } finally {
            ip("netns", "del", live);
        }
        assertNothingLeft(killTag, null);
    }

    record Transfer(long sent, long received, long firstByteEpochNanos, long eofEpochNanos, String senderLocal, String receiverPeer) {}

    /** All bytes over the span from the first stream's first byte to the last stream's EOF. */
    private static double mbitPerS(List<Transfer> ts) {
        long bytes = ts.stream().mapToLong(Transfer::received).sum();
        long first = ts.stream().mapToLong(Transfer::firstByteEpochNanos).min().orElseThrow();
        long last = ts.stream().mapToLong(Transfer::eofEpochNanos).max().orElseThrow();
        return bytes * 8.0 / ((last - first) / 1e9) / 1e6;
    }

    /**
     * One stream per {from, to} pair, all at once: a JVM receiver in namespace `to` bound to its
     * node's address, a JVM sender in `from` writing for millis.
     */
    private static List<Transfer> streams(NetnsTestBed bed, List<int[]> pairs, long millis) throws Exception {
        List<Probe> probes = new ArrayList<>();
        try {
            List<Probe> receivers = new ArrayList<>();
            for (int[] p : pairs) receivers.add(Probe.start(bed, p[1], "recv", bed.address(p[1])));
            probes.addAll(receivers);
            List<String> ports = new ArrayList<>();
            for (Probe r : receivers) ports.add(r.await("LISTENING").split(" ")[1]);
            List<Probe> senders = new ArrayList<>();
            for (int k = 0; k < pairs.size(); k++) {
                senders.add(Probe.start(bed, pairs.get(k)[0], "send", bed.address(pairs.get(k)[1]), ports.get(k), Long.toString(millis)));
            }
            probes.addAll(senders);
            List<Transfer> ts = new ArrayList<>();
            for (int k = 0; k < pairs.size(); k++) {
                String[] sent = senders.get(k).await("SENT").split(" ");
                String[] received = receivers.get(k).await("RECEIVED").split(" ");
                ts.add(new Transfer(Long.parseLong(sent[1]), Long.parseLong(received[1]), Long.parseLong(received[2]), Long.parseLong(received[3]), sent[2], received[4]));
            }
            return ts;
        } finally {
            for (Probe p : probes) p.stop();
        }
    }

    /** A child JVM and its output lines (stdout and stderr together). */
    record Probe(Process process, BlockingQueue<String> lines, List<String> seen) {
        static Probe start(NetnsTestBed bed, int node, String... args) throws Exception {
            Path classes = Path.of(StreamProbe.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            List<String> argv = new ArrayList<>(List.of(java(), "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classes.toString(), StreamProbe.class.getName()));
            argv.addAll(List.of(args));
            return of(bed.command(node, argv));
        }

        static Probe holder(int nodes) throws Exception {
            return of(new ProcessBuilder(java(), "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                    BedHolder.class.getName(), Integer.toString(nodes), Long.toString(NIC_MBIT)));
        }

        private static Probe of(ProcessBuilder pb) throws IOException {
            Process p = pb.redirectErrorStream(true).start();
            BlockingQueue<String> lines = new LinkedBlockingQueue<>();
            Thread.startVirtualThread(() -> {
                try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                    for (String line; (line = r.readLine()) != null; ) lines.add(line);
                } catch (IOException e) {
                    lines.add("(output unreadable: " + e + ")");
                }
            });
            return new Probe(p, lines, new ArrayList<>());
        }

        /** The next line starting with prefix; fails with everything seen if none comes in 20 s. */
        String await(String prefix) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (true) {
                String line = lines.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                if (line == null) throw new AssertionError("no '" + prefix + "' line from " + process.info().commandLine().orElse("?") + "; output: " + seen);
                seen.add(line);
                if (line.startsWith(prefix)) return line;
            }
        }

        void stop() throws InterruptedException {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }

    private static String java() {
        return Path.of(System.getProperty("java.home"), "bin", "java").toString();
    }

    private static List<String> namespacesOf(String tag) throws IOException {
        return namespacesOf(tag, NetnsTestBed.listNamespaces());
    }

    private static List<String> namespacesOf(String tag, List<String> names) {
        return names.stream().filter(n -> n.startsWith(tag)).toList();
    }

    private static void assertNothingLeft(String tag, List<String> rootLinksBefore) throws IOException, InterruptedException {
        assertEquals(List.of(), namespacesOf(tag), "namespaces left by " + tag);
        List<String> links = rootLinks();
        assertTrue(links.stream().noneMatch(l -> l.startsWith(tag)), "links left by " + tag + ": " + links);
        if (rootLinksBefore != null) assertEquals(rootLinksBefore, links, "root namespace links");
    }

    /** The root namespace's link names, from {@code ip -o link show}. */
    private static List<String> rootLinks() throws IOException, InterruptedException {
        List<String> names = new ArrayList<>();
        for (String line : ip("-o", "link", "show").split("\n")) {
            String[] parts = line.split(": ", 3);
            if (parts.length >= 2) names.add(parts[1].split("@")[0]);
        }
        return names;
    }

    private static String ip(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(NetnsTestBed.tool("ip").orElseThrow()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(15, TimeUnit.SECONDS) && p.exitValue() == 0, cmd + ": " + out);
        return out;
    }
}
