package dev.stoker.testkit.netns;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Instant;

/**
 * A tiny TCP tool that {@link NetnsTestBedTest} runs as a JVM inside a node's namespace: it shows
 * that a JVM there binds its node's address, reaches the other nodes through the bridge, and
 * whose loopback it sees. Prints one line per event, first word upper case.
 *
 * <pre>
 * recv ADDR              bind ADDR:0, print "LISTENING port", accept one connection, read to EOF,
 *                        print "RECEIVED bytes first-byte-epoch-ns EOF-epoch-ns peer-address" (epoch
 *                        times, so that concurrent streams in several processes can be combined)
 * send ADDR PORT MILLIS  write 64 KiB blocks for MILLIS, close, print "SENT bytes local-address"
 * listen ADDR            bind ADDR:0, print "LISTENING port", accept until stdin closes
 * connect ADDR PORT      print "CONNECTED local-address" or "REFUSED reason"
 * </pre>
 */
final class StreamProbe {
    private StreamProbe() {}

    public static void main(String[] args) throws IOException {
        switch (args[0]) {
            case "recv" -> {
                try (ServerSocket server = bind(args[1]); Socket s = server.accept(); InputStream in = s.getInputStream()) {
                    byte[] buf = new byte[1 << 20];
                    long bytes = 0;
                    long firstNanos = 0;
                    for (int r; (r = in.read(buf)) > 0; ) {
                        if (bytes == 0) firstNanos = epochNanos();
                        bytes += r;
                    }
                    System.out.println("RECEIVED " + bytes + " " + firstNanos + " " + epochNanos() + " " + s.getInetAddress().getHostAddress());
                }
            }
            case "send" -> {
                long bytes = 0;
                String local;
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress(InetAddress.getByName(args[1]), Integer.parseInt(args[2])), 5000);
                    local = s.getLocalAddress().getHostAddress();
                    OutputStream out = s.getOutputStream();
                    byte[] block = new byte[64 * 1024];
                    long deadline = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000;
                    while (System.nanoTime() < deadline) {
                        out.write(block);
                        bytes += block.length;
                    }
                }
                System.out.println("SENT " + bytes + " " + local);
            }
            case "listen" -> {
                ServerSocket server = bind(args[1]);
                Thread.startVirtualThread(() -> {
                    while (true) {
                        try {
                            server.accept().close(); // the peer only checks that it could connect
                        } catch (IOException e) {
                            return;
                        }
                    }
                });
                System.in.readAllBytes();
                server.close();
            }
            case "connect" -> {
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress(InetAddress.getByName(args[1]), Integer.parseInt(args[2])), 2000);
                    System.out.println("CONNECTED " + s.getLocalAddress().getHostAddress());
                } catch (IOException e) {
                    System.out.println("REFUSED " + e);
                }
            }
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    private static long epochNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    private static ServerSocket bind(String addr) throws IOException {
        ServerSocket server = new ServerSocket();
        server.bind(new InetSocketAddress(InetAddress.getByName(addr), 0));
        System.out.println("LISTENING " + server.getLocalPort());
        return server;
    }
}
