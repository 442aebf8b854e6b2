package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.testkit.FakeTicker;
import dev.stoker.transport.FeedProtocol;
import dev.stoker.transport.FeedServer;
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
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Hostile or buggy peers on the trainer socket (audit #11, #24, #25): raw Unix-socket clients that
 * send garbage, lengths too large, truncated frames, nothing at all, a thousand connections at once,
 * or payloads where the protocol has none. Each peer gets an ERROR naming what was wrong (where one
 * can be sent) and only its own connection is closed; every test ends with a real {@link TrainerClient}
 * served its batches in order from the node's {@link RankLedger}, whose accounting (every epoch's
 * samples delivered exactly once) stays intact.
 */
@Timeout(120)
class HostileTrainerTest {
    @TempDir Path tmp;

    /** A ledger over the scripted schedule (one rank, 6 steps per epoch), with {@code expected} bytes per batch announced. */
    private static RankLedger ledger(long expected) {
        return new RankLedger(new LedgerAccountingTest.Scripted(c -> c), null, expected, 0);
    }

    private static FeedServer.Limits limits(long helloMillis, int connections, long copyBudget) {
        return new FeedServer.Limits(helloMillis, connections, copyBudget);
    }

    /**
     * A good trainer, fresh or resuming at the cursor of global step {@code from}, takes three
     * epochs' batches: each is the schedule's next, in order, and the ledger has checked every
     * epoch it finished without a violation.
     */
    private static void aGoodTrainerIsServedInOrder(FeedServer server, RankLedger ledger, long from) throws IOException {
        var schedule = LedgerAccountingTest.SCHEDULE;
        int spe = (int) schedule.stepsPerEpoch();
        var resume = from == 0 ? null : new ScheduleCursor(from / spe, (from % spe) * schedule.positionsPerStep());
        var options = new TrainerClient.Options(false, resume, from == 0 ? 0 : 42, 0, -1);
        long checkedBefore = ledger.epochsChecked();
        try (var trainer = TrainerClient.connect(server.socketPath(), 0, 1, "good", options)) {
            for (long g = from; g < from + 3 * spe; g++) {
                var got = trainer.next();
                assertNotNull(got, "batch of global step " + g);
                var meta = got.batch().meta();
                assertEquals(g, meta.globalStep(), "the batches come in order, none skipped");
                var cursor = new ScheduleCursor(g / spe, (g % spe) * schedule.positionsPerStep());
                int[] expected = schedule.batchAt(cursor, 0);
                long[] ids = new long[expected.length];
                for (int i = 0; i < ids.length; i++) ids[i] = expected[i];
                assertArrayEquals(ids, got.batch().sampleIndex(), "the scheduled samples of step " + g);
            }
        }
        assertTrue(ledger.epochsChecked() >= checkedBefore + 2, "the ledger checked the epochs the trainer finished");
        assertNull(ledger.ledgerMetrics().get("violation"), "accounting intact");
        assertTrue(!ledger.failure().isDone(), "the job did not fail");
    }

    /** A raw peer on the trainer socket: writes any bytes, reads frames with a deadline. */
    static final class Peer implements AutoCloseable {
        final SocketChannel ch;
        private Selector selector; // made on the first wait: a thousand peers need no thousand selectors

        Peer(Path socket) throws IOException {
            ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(socket));
            ch.configureBlocking(false);
        }

        void write(ByteBuffer b) throws IOException {
            while (b.hasRemaining()) {
                if (ch.write(b) == 0) Thread.onSpinWait();
            }
        }

        void frame(int type, long length, byte[] payload) throws IOException {
            var b = ByteBuffer.allocate(12 + payload.length).order(ByteOrder.LITTLE_ENDIAN).putInt(type).putLong(length).put(payload);
            write(b.flip());
        }

        void hello(int rank) throws IOException {
            var h = new FeedProtocol.Hello(FeedProtocol.VERSION, rank, 1, 0, null, 0, "raw").encode();
            byte[] p = new byte[h.remaining()];
            h.get(p);
            frame(FeedProtocol.HELLO, p.length, p);
        }

        /** Fills {@code b}; false at a clean end of stream before the first byte. Fails the test after {@code millis}. */
        private boolean fill(ByteBuffer b, long millis) throws IOException {
            long deadline = System.nanoTime() + millis * 1_000_000;
            boolean any = false;
            while (b.hasRemaining()) {
                int n = ch.read(b);
                if (n < 0) {
                    if (!any && b.position() == 0) return false;
                    throw new IOException("end of stream inside a frame");
                }
                if (n > 0) {
                    any = true;
                    continue;
                }
                long left = (deadline - System.nanoTime()) / 1_000_000;
                if (left <= 0) fail("no answer from the service within " + millis + " ms");
                if (selector == null) {
                    selector = Selector.open();
                    ch.register(selector, SelectionKey.OP_READ);
                }
                selector.select(left);
                selector.selectedKeys().clear();
            }
            return true;
        }

        /** The next frame as (type, payload), or null at a clean end of stream. */
        Object[] read(long millis) throws IOException {
            var h = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
            if (!fill(h, millis)) return null;
            int type = h.getInt(0);
            long length = h.getLong(4);
            assertTrue(length >= 0 && length <= 1 << 26, "a sane frame length from the service: " + length);
            var p = ByteBuffer.allocate((int) length);
            fill(p, millis);
            return new Object[] {type, p.array()};
        }

        /** The ERROR the service answers with (its message), then the end of the connection. */
        String error(long millis) throws IOException {
            var f = read(millis);
            assertNotNull(f, "an ERROR before the service closes the connection");
            assertEquals(FeedProtocol.ERROR, (int) f[0], "frame type");
            String message = new String((byte[]) f[1], StandardCharsets.UTF_8);
            try { // closed after it; a reset is fine here: the service need not read what it refused
                assertNull(read(millis), "the service closed the connection after its ERROR");
            } catch (IOException reset) {
                assertTrue(String.valueOf(reset.getMessage()).contains("reset"), String.valueOf(reset));
            }
            return message;
        }

        /** Asserts that the service closed the connection (cleanly: nothing it did not read was left behind). */
        void closed(long millis) throws IOException {
            assertNull(read(millis), "the service closed the connection");
        }

        @Override
        public void close() throws IOException {
            if (selector != null) selector.close();
            ch.close();
        }
    }

    @Test
    void garbageGetsAnErrorNamingTheProblemAndClosesThatConnectionOnly() throws Exception {
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("g.sock"), ledger, false)) {
            // a good trainer is mid-stream while the garbage comes
            var trainer = TrainerClient.connect(server.socketPath(), 0, 1, "good");
            assertEquals(0, trainer.next().batch().meta().globalStep());
            var random = new Random(19);
            for (int i = 0; i < 20; i++) {
                byte[] junk = new byte[64];
                random.nextBytes(junk);
                try (var peer = new Peer(server.socketPath())) {
                    peer.write(ByteBuffer.wrap(junk));
                    String m = peer.error(10_000);
                    assertTrue(m.contains("frame") || m.contains("HELLO"), m);
                }
            }
            try (var peer = new Peer(server.socketPath())) { // a HELLO header whose length is negative as a signed 64-bit number
                peer.frame(FeedProtocol.HELLO, -16, new byte[0]);
                assertEquals("bad frame length 18446744073709551600 (type 1, HELLO): frames a trainer sends are at most 1048576 bytes",
                        peer.error(10_000));
            }
            try (var peer = new Peer(server.socketPath())) { // a well-formed HELLO for the rank the trainer holds
                peer.hello(0);
                String m = peer.error(10_000);
                assertTrue(m.contains("rank 0 is already being fed"), m);
            }
            assertEquals(1, trainer.next().batch().meta().globalStep(), "the trainer is still served");
            trainer.close();
            aGoodTrainerIsServedInOrder(server, ledger, 2);
        }
    }

    @Test
    void anOversizedLengthIsRefusedBeforeAnythingIsAllocated() throws Exception {
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("o.sock"), ledger, false)) {
            try (var peer = new Peer(server.socketPath())) {
                peer.frame(FeedProtocol.HELLO, 1L << 40, new byte[0]);
                assertEquals("HELLO frame of 1099511627776 bytes: frames a trainer sends are at most 1048576 bytes", peer.error(10_000));
            }
            for (long length : new long[] {0, 4, 12, (1 << 20) + 8, 1L << 40}) { // RELEASE: 1 to 131,072 lease ids of 8 bytes
                try (var peer = new Peer(server.socketPath())) {
                    peer.hello(0);
                    assertEquals(FeedProtocol.WELCOME, (int) peer.read(10_000)[0]);
                    peer.frame(FeedProtocol.RELEASE, length, new byte[(int) Math.min(length, 16)]);
                    String m = peer.error(10_000);
                    assertEquals("RELEASE payload of " + length + " bytes; it carries lease ids of 8 bytes each, 1 to 131072 of them", m);
                }
            }
            try (var peer = new Peer(server.socketPath())) { // a frame type the protocol does not have
                peer.hello(0);
                assertEquals(FeedProtocol.WELCOME, (int) peer.read(10_000)[0]);
                peer.frame(99, 1 << 16, new byte[1 << 16]);
                assertEquals("unexpected frame type 99", peer.error(10_000));
            }
            aGoodTrainerIsServedInOrder(server, ledger, 0);
        }
    }

    /**
     * The deadline on a clock moved by hand: the good trainer is served however slow the machine, and the silent and
     * truncated peers are closed once the clock passes 300 ms. (HostileTrainerServeTest has it on the real clock.)
     */
    @Test
    void aSilentOrTruncatedHelloIsClosedAfterTheDeadline() throws Exception {
        var ticker = new FakeTicker();
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("s.sock"), ledger, false, limits(300, 16, 1 << 30), ticker)) {
            try (var silent = new Peer(server.socketPath()); var truncated = new Peer(server.socketPath())) {
                truncated.frame(FeedProtocol.HELLO, 60, new byte[20]); // 20 of 60 bytes, then nothing
                var trainer = TrainerClient.connect(server.socketPath(), 0, 1, "good"); // served meanwhile
                assertEquals(0, trainer.next().batch().meta().globalStep());
                ticker.advanceMillis(300); // accepted before the trainer, their deadlines were running before its HELLO
                assertEquals("no HELLO within 300 ms of connecting: closing the connection", silent.error(10_000));
                assertEquals("no HELLO within 300 ms of connecting: closing the connection", truncated.error(10_000));
                assertEquals(1, trainer.next().batch().meta().globalStep());
                trainer.close();
            }
            try (var peer = new Peer(server.socketPath())) { // a frame cut off after the HELLO: the peer goes, nothing else does
                peer.hello(0);
                assertEquals(FeedProtocol.WELCOME, (int) peer.read(10_000)[0]);
                peer.frame(FeedProtocol.RELEASE, 16, new byte[8]);
            }
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (server.connectionsOpen() > 0 && System.nanoTime() < deadline) Thread.sleep(5);
            assertEquals(0, server.connectionsOpen());
            aGoodTrainerIsServedInOrder(server, ledger, 2);
        }
    }

    @Test
    void aThousandConnectionsAtOnceAreRefusedBeyondTheCapAndTheServiceLives() throws Exception {
        int cap = 100;
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("k.sock"), ledger, false, limits(60_000, cap, 1 << 30))) {
            var peers = new ArrayList<Peer>();
            try {
                for (int i = 0; i < 1000; i++) peers.add(new Peer(server.socketPath()));
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (server.connectionsRefused() < 1000 - cap && System.nanoTime() < deadline) Thread.sleep(5);
                assertEquals(1000 - cap, server.connectionsRefused());
                assertEquals(cap, server.connectionsOpen());
                int refused = 0;
                for (var p : peers) {
                    var b = ByteBuffer.allocate(4096);
                    if (p.ch.read(b) > 0) {
                        String m = new String(b.array(), 12, b.position() - 12, StandardCharsets.UTF_8);
                        assertEquals(FeedProtocol.ERROR, b.order(ByteOrder.LITTLE_ENDIAN).getInt(0));
                        assertEquals("this service has " + cap + " trainer connections open, its limit: connection refused "
                                + "(close idle ones, or raise --max-trainer-connections)", m);
                        refused++;
                    }
                }
                assertEquals(1000 - cap, refused, "each refused peer was told why");
            } finally {
                for (var p : peers) p.close();
            }
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (server.connectionsOpen() > 0 && System.nanoTime() < deadline) Thread.sleep(5);
            aGoodTrainerIsServedInOrder(server, ledger, 0);
        }
    }

    @Test
    void aPeerReconnectingInALoopLeavesNoReadBufferBehind() throws Exception {
        var direct = java.lang.management.ManagementFactory.getPlatformMXBeans(java.lang.management.BufferPoolMXBean.class).stream()
                .filter(p -> p.getName().equals("direct")).findFirst().orElseThrow();
        int rounds = 300;
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("r.sock"), ledger, false)) {
            try (var warm = new Peer(server.socketPath())) { // the server's threads and their cached temporary buffers exist
                warm.frame(0x7777, 0, new byte[0]);
                assertNotNull(warm.error(10_000));
            }
            long before = direct.getMemoryUsed();
            for (int i = 0; i < rounds; i++) {
                try (var peer = new Peer(server.socketPath())) {
                    peer.frame(0x7777, 0, new byte[0]); // not a HELLO: an ERROR, and the connection goes
                    assertNotNull(peer.error(10_000));
                    peer.closed(10_000);
                }
            }
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (server.connectionsOpen() > 0 && System.nanoTime() < deadline) Thread.sleep(5);
            long grown = direct.getMemoryUsed() - before;
            // a 64 KiB direct read buffer per connection, left for a garbage collection, would be ~19 MiB here
            assertTrue(grown < 16L * FeedProtocol.FrameReader.BUFFER_BYTES,
                    "direct memory grew by " + grown + " bytes over " + rounds + " closed connections");
            aGoodTrainerIsServedInOrder(server, ledger, 0);
        }
    }

    @Test
    void nextAndByeWithPayloadsAreParsedAsTheProtocolDefines() throws Exception {
        try (var ledger = ledger(0); var server = new FeedServer(tmp.resolve("n.sock"), ledger, false)) {
            try (var peer = new Peer(server.socketPath())) {
                peer.hello(0);
                assertEquals(FeedProtocol.WELCOME, (int) peer.read(10_000)[0]);
                peer.frame(FeedProtocol.NEXT, 0, new byte[0]);
                assertEquals(FeedProtocol.BATCH, (int) peer.read(10_000)[0]);
                var timing = new FeedProtocol.Timing(1000, 2000).encode();
                byte[] t = new byte[16];
                timing.get(t);
                peer.frame(FeedProtocol.NEXT, 16, t); // confirms step 0, reports its timing
                assertEquals(FeedProtocol.BATCH, (int) peer.read(10_000)[0]);
                // BYE with a payload larger than the service's read buffer: read to its end, then a clean close
                peer.frame(FeedProtocol.BYE, 100_000, new byte[100_000]);
                peer.closed(10_000);
            }
            assertEquals(1, server.timingsReceived(), "the timing the peer sent");
            aGoodTrainerIsServedInOrder(server, ledger, 1); // step 1 went to the peer unconfirmed: it comes again
        }
    }

    @Test
    void copyBuffersAPeerCanMakeTheServiceAllocateAreBounded() throws Exception {
        long expected = 1 << 20;
        try (var ledger = ledger(expected);
             var server = new FeedServer(tmp.resolve("m.sock"), ledger, false, limits(10_000, 64, 3 * expected))) {
            var trainer = TrainerClient.connect(server.socketPath(), 0, 1, "good");
            assertEquals(0, trainer.next().batch().meta().globalStep());
            var peers = new ArrayList<Peer>();
            try {
                for (int i = 0; i < 10; i++) { // copy-mode HELLOs for the held rank: each waits for it, then is refused
                    var p = new Peer(server.socketPath());
                    p.hello(0);
                    peers.add(p);
                }
                for (var p : peers) assertTrue(p.error(20_000).contains("rank 0 is already being fed"));
            } finally {
                for (var p : peers) p.close();
            }
            assertTrue(server.copyBufferBytesHighWater() <= 3 * expected,
                    "copy buffers held at once: " + server.copyBufferBytesHighWater() + " bytes, budget " + 3 * expected);
            assertEquals(1, trainer.next().batch().meta().globalStep());
            trainer.close();
            aGoodTrainerIsServedInOrder(server, ledger, 2);
        }
    }
}
