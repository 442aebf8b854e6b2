package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedProtocol;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The socket's limits through a real {@code stoker serve} (issue 19): {@code --hello-timeout-ms} and
 * {@code --max-trainer-connections} reach the server from the command line. A raw connection that says nothing is told
 * {@code no HELLO within 1500 ms} and closed; with both ranks' trainers connected at a limit of 2, one more connection is
 * told why it is refused and closed; the trainers are served all the while, and a trainer that reconnects after one of
 * them leaves takes the batch after the last one that rank got (nothing lost). The values in the messages are the flags'
 * (the defaults are 10,000 ms and 256), so the test fails if a flag does not reach the server.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class HostileTrainerServeTest {
    @TempDir Path tmp;

    /** {@code n} one-image samples. */
    private Path dataset(int n) throws IOException {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < n; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"b.png\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\n"
                    + "What is %d?\"},{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i));
        return Files.writeString(ds.resolve("train.jsonl"), lines);
    }

    /** A raw peer on the socket: connects and reads frames with a deadline; writes nothing unless told. */
    private static final class RawPeer implements AutoCloseable {
        private final SocketChannel ch;
        private final Selector selector;

        RawPeer(Path socket) throws IOException {
            ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(socket));
            ch.configureBlocking(false);
            selector = Selector.open();
            ch.register(selector, SelectionKey.OP_READ);
        }

        /** Fills {@code b}; false at an end of stream before its first byte; fails the test after {@code seconds}. */
        private boolean fill(ByteBuffer b, long seconds) throws IOException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
            while (b.hasRemaining()) {
                int n = ch.read(b);
                if (n < 0) {
                    if (b.position() == 0) return false;
                    throw new IOException("end of stream inside a frame");
                }
                if (n > 0) continue;
                long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (left <= 0) fail("no answer from serve within " + seconds + " s");
                selector.select(left);
                selector.selectedKeys().clear();
            }
            return true;
        }

        /** The next frame's ERROR message; fails the test if it is another frame or the stream ends first. */
        String error(long seconds) throws IOException {
            var h = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
            assertTrue(fill(h, seconds), "serve closed the connection without a frame");
            int type = h.getInt(0);
            long length = h.getLong(4);
            assertEquals(FeedProtocol.ERROR, type, "frame type");
            assertTrue(length >= 0 && length < 4096, "ERROR length " + length);
            var p = ByteBuffer.allocate((int) length);
            if (length > 0) assertTrue(fill(p, seconds), "the ERROR's message");
            return new String(p.array(), StandardCharsets.UTF_8);
        }

        /** True when serve has closed the connection (end of stream) within {@code seconds}. */
        boolean closedBy(long seconds) throws IOException {
            return !fill(ByteBuffer.allocate(1), seconds);
        }

        @Override
        public void close() throws IOException {
            selector.close();
            ch.close();
        }
    }

    @Test
    void aSilentConnectionIsDroppedAtTheDeadlineOneOverTheCapIsToldWhyAndTrainersAreServed() throws Exception {
        Path manifest = dataset(24);
        Path socket = tmp.resolve("s.sock"), log = tmp.resolve("serve.log");
        var args = new ArrayList<>(List.of("--data", manifest.toString(), "--ranks", "2", "--batch", "2", "--max-pixels", "50176",
                "--threads", "1", "--warm-up-ms", "0", "--socket", socket.toString(),
                "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString(), "--shm-budget", "64M", "--max-images", "1",
                "--hello-timeout-ms", "1500", "--max-trainer-connections", "2"));
        Process p = ServeProcess.start(log, "512m", args);
        try {
            ServeProcess.awaitListening(p, log);
            // a connection that never says HELLO: ERROR at the deadline, then closed
            try (var silent = new RawPeer(socket)) {
                assertEquals("no HELLO within 1500 ms of connecting: closing the connection", silent.error(60));
                assertTrue(silent.closedBy(60), "closed after its ERROR");
            }
            long[] last = new long[2];
            // rank 1's first trainer is closed by hand, before its reconnect
            var rank1 = TrainerClient.connect(socket, 1, 2, "good", TrainerClient.Options.COPY);
            try (var rank0 = TrainerClient.connect(socket, 0, 2, "good", TrainerClient.Options.COPY)) {
                for (int s = 0; s < 2; s++) {
                    try (var b = rank0.next(); var c = rank1.next()) {
                        assertEquals(s, b.batch().meta().globalStep());
                        assertEquals(s, c.batch().meta().globalStep());
                    }
                }
                // both ranks' trainers hold the two connections the limit allows: a third is told why and closed
                try (var third = new RawPeer(socket)) {
                    assertEquals("this service has 2 trainer connections open, its limit: connection refused (close idle ones, or raise "
                            + "--max-trainer-connections)", third.error(60));
                    assertTrue(third.closedBy(60), "closed after its ERROR");
                }
                // the trainers go on, nothing skipped
                for (int s = 2; s < 4; s++) {
                    try (var b = rank0.next(); var c = rank1.next()) {
                        assertEquals(s, b.batch().meta().globalStep());
                        assertEquals(s, c.batch().meta().globalStep());
                        last[0] = b.batch().meta().globalStep();
                        last[1] = c.batch().meta().globalStep();
                    }
                }
                rank1.close();
                // rank 1's trainer comes back once a connection is free (once serve has seen the close: it may be
                // refused until then, as a trainer retrying its connect would be): the batch after its last one
                try (var again = connectOnceFree(socket, 1)) {
                    var b = again.next();
                    assertNotNull(b);
                    try (b) {
                        assertEquals(last[1] + 1, b.batch().meta().globalStep(), "nothing lost across the reconnect");
                    }
                }
                try (var b = rank0.next()) {
                    assertEquals(last[0] + 1, b.batch().meta().globalStep());
                }
            }
            assertTrue(p.isAlive(), "serve goes on: " + Files.readString(log));
        } catch (Throwable t) {
            throw new AssertionError(t + "; serve said: " + Files.readString(log), t);
        } finally {
            p.destroy();
            if (!p.waitFor(60, TimeUnit.SECONDS)) p.destroyForcibly();
        }
    }

    /** Connects rank {@code rank}, retrying for up to 30 s while serve still counts a closed connection against its cap. */
    private static TrainerClient connectOnceFree(Path socket, int rank) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try {
                return TrainerClient.connect(socket, rank, 2, "good", TrainerClient.Options.COPY);
            } catch (java.io.IOException e) {
                if (!String.valueOf(e.getMessage()).contains("trainer connections open") || System.nanoTime() > deadline) throw e;
                Thread.sleep(50);
            }
        }
    }
}
