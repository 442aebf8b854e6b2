package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audit #27: the Java client's end-to-end deadline, against real silent services on a Unix socket:
 * one that never answers HELLO, one that welcomes and then never answers NEXT, one that trickles a
 * batch a byte at a time. Without the deadline each of these hangs the trainer (here: the class
 * timeout); with it each fails in its deadline, and a good trainer is then served.
 */
@Timeout(value = 20, threadMode = Timeout.ThreadMode.SEPARATE_THREAD) // a hung client must fail the test, not hang it
class TrainerClientDeadlineTest {
    @TempDir Path tmp;
    private final ExecutorService peers = Executors.newVirtualThreadPerTaskExecutor();

    @AfterEach
    void stop() { peers.shutdownNow(); }

    interface Peer { void serve(SocketChannel ch) throws Exception; }

    /** A service on {@code name} that accepts one trainer and does what {@code peer} says, holding the connection open. */
    private Path service(String name, Peer peer) throws IOException {
        Path sock = tmp.resolve(name);
        var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX).bind(UnixDomainSocketAddress.of(sock));
        peers.submit(() -> {
            try (server; var ch = server.accept()) {
                peer.serve(ch);
                Thread.sleep(60_000); // silent, but never closes
            }
            return null;
        });
        return sock;
    }

    private static void welcome(SocketChannel ch) throws IOException {
        var in = new FeedProtocol.FrameReader(ch);
        in.small(in.next()); // HELLO
        var w = new FeedProtocol.Welcome(FeedProtocol.VERSION, FeedProtocol.DELIVERY_COPY, 0, 0, 1, 10, 0, 0, 10, 1);
        FeedProtocol.writeFrame(ch, FeedProtocol.WELCOME, w.encode());
    }

    private static final TrainerClient.Options SHORT = TrainerClient.Options.COPY.withTimeout(Duration.ofMillis(500));

    @Test
    void theDefaultIsTenMinutesAndNoneMeansNone() {
        assertEquals(Duration.ofSeconds(600), TrainerClient.Options.COPY.timeout());
        assertEquals(Duration.ofSeconds(600), TrainerClient.Options.SHARED_MEMORY.timeout());
        assertEquals(Duration.ofSeconds(600), new TrainerClient.Options(false, null, 0, 0, -1).timeout());
        assertNull(TrainerClient.Options.COPY.withTimeout(null).timeout());
        assertThrows(IllegalArgumentException.class, () -> TrainerClient.Options.COPY.withTimeout(Duration.ZERO));
    }

    /**
     * CI stop 37: a service over its connection cap writes its ERROR and closes before the trainer's
     * HELLO is sent; the HELLO's write then fails with a broken pipe. The trainer reports what the
     * service said (the pipe error as its cause), as a trainer retrying on that message expects.
     */
    @Test
    void aServiceThatRefusedAndClosedBeforeTheHelloIsQuoted() throws Exception {
        Path sock = tmp.resolve("refusing.sock");
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX).bind(UnixDomainSocketAddress.of(sock));
                var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(sock));
            try (var peer = server.accept()) {
                FeedProtocol.writeFrame(peer, FeedProtocol.ERROR, FeedProtocol.utf8("over the cap: connection refused"));
            } // closed before the HELLO: its write can only fail
            var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, 1, 2, 0, null, 0, "t");
            var e = assertThrows(IOException.class, () -> TrainerClient.sayHello(ch, 1, hello));
            assertEquals("service refused rank 1: over the cap: connection refused", e.getMessage());
            assertNotNull(e.getCause(), "the failed write is kept as the cause");
        }
    }

    @Test
    void aSendThatFailsWithNothingSaidReportsTheSendError() throws Exception {
        Path sock = tmp.resolve("gone.sock");
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX).bind(UnixDomainSocketAddress.of(sock));
                var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(sock));
            server.accept().close();
            var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, 0, 1, 0, null, 0, "t");
            var e = assertThrows(IOException.class, () -> TrainerClient.sayHello(ch, 0, hello));
            assertTrue(String.valueOf(e.getMessage()).contains("Broken pipe"), String.valueOf(e.getMessage()));
        }
    }

    @Test
    void aServiceThatNeverWelcomesTimesOut() throws Exception {
        Path sock = service("silent.sock", ch -> {});
        var e = assertThrows(SocketTimeoutException.class, () -> TrainerClient.connect(sock, 0, 1, "t", SHORT));
        assertTrue(e.getMessage().startsWith("timed out after 0.5 s waiting for the Stoker service at " + sock), e.getMessage());
        goodTrainerServed();
    }

    @Test
    void aServiceThatNeverAnswersNextTimesOutAndClosesTheConnection() throws Exception {
        Path sock = service("wedged.sock", TrainerClientDeadlineTest::welcome);
        try (var client = TrainerClient.connect(sock, 0, 1, "t", SHORT)) {
            var e = assertThrows(SocketTimeoutException.class, client::next);
            assertTrue(e.getMessage().contains("timed out after 0.5 s") && e.getMessage().contains("batch 0 of rank 0"), e.getMessage());
            assertThrows(IOException.class, client::next, "the connection is closed, not left mid-frame");
        }
        goodTrainerServed();
    }

    @Test
    void aServiceThatTricklesABatchCannotStretchTheDeadline() throws Exception {
        Path sock = service("trickle.sock", ch -> {
            welcome(ch);
            var in = new FeedProtocol.FrameReader(ch);
            in.next(); // NEXT (its payload, if any, is never read: no matter)
            var header = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(FeedProtocol.BATCH).putLong(100_000).flip();
            FeedProtocol.writeFully(ch, header);
            for (int i = 0; i < 100_000; i++) { // one byte every 20 ms: each read makes progress, the request does not end
                FeedProtocol.writeFully(ch, ByteBuffer.wrap(new byte[] {0}));
                Thread.sleep(20);
            }
        });
        try (var client = TrainerClient.connect(sock, 0, 1, "t", SHORT)) {
            assertThrows(SocketTimeoutException.class, client::next);
        }
        goodTrainerServed();
    }

    @Test
    void aSecondCloseDoesNothing() throws Exception {
        Path sock = tmp.resolve("close.sock");
        try (var server = new FeedServer(sock, new FeedServerTest.Synthetic(1, 3), false);
             var client = TrainerClient.connect(sock, 0, 1, "t")) {
            assertNotNull(client.next());
            client.close();
            client.close(); // Closeable: a second close has no effect (try-with-resources closes a third time)
        }
        goodTrainerServed();
    }

    /** A trainer with the default deadline served every batch by a real {@link FeedServer}. */
    private void goodTrainerServed() throws IOException {
        Path sock = tmp.resolve("good-" + System.nanoTime() + ".sock");
        try (var server = new FeedServer(sock, new FeedServerTest.Synthetic(1, 3), false);
             var client = TrainerClient.connect(sock, 0, 1, "t")) {
            for (int step = 0; step < 3; step++)
                assertArrayEquals(FeedServerTest.Synthetic.batch(0, step).tensors().get(1).toFloats(),
                        client.next().batch().tensor("pixel_values").toFloats());
            assertNull(client.next());
        }
    }
}
