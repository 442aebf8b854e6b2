package dev.stoker.testkit;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Loopback TCP ports for a test to hand to a child process that binds them later.
 *
 * <p>Why not a port picked by binding port 0 and closing: the kernel gives that from its ephemeral range
 * ({@code /proc/sys/net/ipv4/ip_local_port_range}, 32768–60999 by default), the range every outgoing connection on the
 * host takes its local port from, and between the pick and the child's bind (a JVM's start: seconds) one may take it —
 * {@code ClusterTest}'s node failed so in CI ("Address already in use", 2026-12-08). A port below that range is taken
 * only by a bind that names it.
 */
public final class Ports {
    private static final int LOW = 20_000;
    /** Ports handed out by this JVM: never twice (two cases of one run could draw the same). */
    private static final Set<Integer> GIVEN = ConcurrentHashMap.newKeySet();

    private Ports() {}

    /** A loopback port free now, below the ephemeral range (or, where that range leaves fewer than 1,000 ports under it, any free one). */
    public static int free() throws IOException {
        int high = ephemeralLow() - 1;
        if (high - LOW < 1_000) return anyFree();
        for (int tries = 0; tries < 500; tries++) {
            int port = ThreadLocalRandom.current().nextInt(LOW, high + 1);
            if (GIVEN.contains(port)) continue;
            try (var s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
                if (GIVEN.add(port)) return s.getLocalPort();
            } catch (IOException e) {
                // in use: draw another
            }
        }
        throw new IOException("no free loopback port in " + LOW + "–" + high + " after 500 draws");
    }

    private static int anyFree() throws IOException {
        try (var s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /**
     * The first port of the kernel's ephemeral range (32768 where it cannot be read). Read line by line: procfs reports
     * the file's size as 0, and {@code Files.readString} returned a bare "3" for it here.
     */
    static int ephemeralLow() {
        try (var r = Files.newBufferedReader(Path.of("/proc/sys/net/ipv4/ip_local_port_range"))) {
            String line = r.readLine();
            if (line == null) return 32_768;
            return Integer.parseInt(line.trim().split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            return 32_768;
        }
    }
}
