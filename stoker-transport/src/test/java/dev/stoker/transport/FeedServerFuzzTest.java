package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
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
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes the local socket's frame parsing on the service side: each input is the whole byte stream one trainer
 * connection sends (frames of {@code type:u32 | length:u64 | payload}, HELLO/NEXT/RELEASE/BYE and anything else) to a
 * real {@link FeedServer} on a Unix socket, after which the fuzzer half-closes the connection.
 *
 * <p>The contract checked on every input (docs/protocol.md §2, docs/security.md "Trainers on the local socket"): the
 * service answers with well-formed frames only — WELCOME, then BATCH/REF/END, and at most one ERROR, last, whose message
 * is one the protocol documents (a length, count or payload refused, an unexpected type, a refused rank) and never an
 * exception's text — and then closes the connection within a few seconds; every batch it handed out on that
 * connection is released (nothing lost); and every 200 inputs a good {@link TrainerClient} is still served.
 */
@Timeout(10)
class FeedServerFuzzTest {
    /** The ERROR messages the service may send a trainer: each a documented refusal (FeedServer, FeedProtocol). */
    private static final List<String> DOCUMENTED_ERRORS = List.of("bad frame length ", "HELLO frame of ", "BYE frame of ",
            "HELLO of ", "HELLO resumes at a negative", "HELLO gives a resume step without", "expected HELLO, got frame type ",
            "protocol version ", "world size ", "rank ", "RELEASE payload of ", "RELEASE of lease ", "NEXT payload of ",
            "NEXT timing out of range", "unexpected frame type ", "no HELLO within ");
    private static final long EXCHANGE_DEADLINE_NANOS = 5_000_000_000L;
    private static final int MAX_REPLY_BYTES = 16 << 20;

    private static Served served;
    private static long inputs;

    /** One server for the whole run (a server per input would measure start-up, not parsing). */
    private record Served(Path dir, Path socket, FeedServer server, Provider provider) {}

    private static synchronized Served served() throws IOException {
        if (served == null) {
            Path dir = Files.createTempDirectory("stoker-fuzz-feed");
            var provider = new Provider();
            var sock = dir.resolve("feed.sock");
            served = new Served(dir, sock, new FeedServer(sock, provider, false, new FeedServer.Limits(2_000, 32, 64L << 20)), provider);
        }
        return served;
    }

    @AfterAll
    static synchronized void closeServer() throws IOException {
        if (served == null) return;
        served.server().close();
        Files.deleteIfExists(served.socket());
        Files.deleteIfExists(served.dir());
        served = null;
    }

    @FuzzTest(maxDuration = "10s")
    void connection(byte[] stream) throws Exception {
        var s = served();
        long handedOutBefore = s.provider().storedHandedOut.get();
        byte[] reply = exchange(s.socket(), stream);
        checkReply(reply);
        // every Stored batch was released: by its BATCH write, by RELEASE or when its connection ended, before the
        // server counts that connection closed (the trainer may see the end of its stream a moment before that)
        awaitNoConnection(s.server());
        assertEquals(s.provider().storedHandedOut.get(), s.provider().storedReleased.get(),
                "stored batches handed out on this connection (" + (s.provider().storedHandedOut.get() - handedOutBefore) + ") not all released");
        if (++inputs % 200 == 0) {
            goodTrainerIsServed(s.socket());
            awaitNoConnection(s.server());
        }
    }

    private static void awaitNoConnection(FeedServer server) throws InterruptedException {
        long deadline = System.nanoTime() + EXCHANGE_DEADLINE_NANOS;
        while (server.connectionsOpen() > 0) {
            if (System.nanoTime() > deadline) fail(server.connectionsOpen() + " connections still open 5 s after their trainers closed");
            Thread.sleep(1);
        }
    }

    /** Sends {@code stream}, half-closes, and reads the service's answer to its end, within a deadline. */
    private static byte[] exchange(Path socket, byte[] stream) throws IOException {
        try (var ch = SocketChannel.open(StandardProtocolFamily.UNIX); var selector = Selector.open()) {
            ch.connect(UnixDomainSocketAddress.of(socket));
            ch.configureBlocking(false);
            var out = ByteBuffer.wrap(stream);
            var in = ByteBuffer.allocate(64 << 10);
            var reply = new ByteArrayOutputStream();
            var key = ch.register(selector, SelectionKey.OP_READ | (out.hasRemaining() ? SelectionKey.OP_WRITE : 0));
            if (!out.hasRemaining()) ch.shutdownOutput();
            long deadline = System.nanoTime() + EXCHANGE_DEADLINE_NANOS;
            while (true) {
                long left = deadline - System.nanoTime();
                if (left <= 0) fail("the service neither answered nor closed the connection within 5 s; it sent " + reply.size() + " bytes");
                selector.select(Math.max(1, left / 1_000_000));
                selector.selectedKeys().clear();
                if (out.hasRemaining()) {
                    try {
                        ch.write(out);
                    } catch (IOException closedByService) { // it may close after an ERROR while bytes are still unsent
                        out.position(out.limit());
                    }
                    if (!out.hasRemaining()) {
                        key.interestOps(SelectionKey.OP_READ);
                        try {
                            ch.shutdownOutput();
                        } catch (IOException alreadyClosed) {
                            // the service closed first: its answer is still there to read
                        }
                    }
                }
                int n;
                try {
                    n = ch.read(in.clear());
                } catch (IOException reset) { // closed with our bytes unread: a reset, after the answer
                    return reply.toByteArray();
                }
                if (n < 0) return reply.toByteArray();
                reply.write(in.array(), 0, n);
                if (reply.size() > MAX_REPLY_BYTES) fail("the service sent more than " + MAX_REPLY_BYTES + " bytes for " + stream.length);
            }
        }
    }

    /** The answer is a sequence of whole frames the protocol defines, at most one ERROR (documented, and last). */
    private static void checkReply(byte[] reply) throws IOException {
        var b = ByteBuffer.wrap(reply).order(ByteOrder.LITTLE_ENDIAN);
        boolean welcomed = false;
        while (b.hasRemaining()) {
            assertTrue(b.remaining() >= FeedProtocol.FRAME_HEADER_BYTES, "a cut frame header at the end of the answer");
            int type = b.getInt();
            long length = b.getLong();
            assertTrue(length >= 0 && length <= b.remaining(), "frame of " + length + " bytes with " + b.remaining() + " left");
            var payload = b.slice(b.position(), (int) length).order(ByteOrder.LITTLE_ENDIAN);
            b.position(b.position() + (int) length);
            switch (type) {
                case FeedProtocol.WELCOME -> {
                    assertFalse(welcomed, "a second WELCOME");
                    welcomed = true;
                    assertEquals(FeedProtocol.Welcome.BYTES, length);
                    FeedProtocol.Welcome.decode(payload);
                }
                case FeedProtocol.BATCH -> {
                    assertTrue(welcomed, "BATCH before WELCOME");
                    BatchLayout.read(MemorySegment.ofBuffer(payload));
                }
                case FeedProtocol.REF -> {
                    assertTrue(welcomed, "REF before WELCOME");
                    FeedProtocol.Ref.decode(payload);
                }
                case FeedProtocol.END -> {
                    assertTrue(welcomed, "END before WELCOME");
                    assertEquals(0, length);
                }
                case FeedProtocol.ERROR -> {
                    String message = StandardCharsets.UTF_8.decode(payload).toString();
                    assertFalse(b.hasRemaining(), "frames after ERROR " + message);
                    assertTrue(DOCUMENTED_ERRORS.stream().anyMatch(message::startsWith), "an undocumented ERROR: " + message);
                }
                default -> fail("the service sent frame type " + Integer.toUnsignedString(type));
            }
        }
    }

    private static void goodTrainerIsServed(Path socket) throws IOException {
        try (var client = TrainerClient.connect(socket, 0, 1, "good")) {
            for (int i = 0; i < 2; i++) {
                var received = client.next();
                assertNotNull(received, "a good trainer gets batches");
                assertEquals(List.of("input_ids"), received.batch().inputs().stream().map(Tensor::name).toList());
                received.close();
            }
        }
    }

    /**
     * World of up to 4 ranks, endless batches: even steps as {@link BatchProvider.Prepared} (copied), odd steps as
     * {@link BatchProvider.Stored} (by REF to a trainer that asked for shared memory, else copied), counting releases.
     */
    static final class Provider implements BatchProvider {
        final AtomicLong storedHandedOut = new AtomicLong(), storedReleased = new AtomicLong(), step = new AtomicLong();
        private final MemorySegment stored;

        Provider() {
            var prepared = prepared(1);
            stored = Arena.global().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
            BatchLayout.write(prepared.meta(), prepared.tensors(), stored);
        }

        private static Prepared prepared(long step) {
            return new Prepared(new BatchLayout.Meta(0, step, 0, 1, 1),
                    List.of(Tensor.of("input_ids", new long[] {151644, step, 151643}, 1, 3),
                            Tensor.of("sample_index", new long[] {step}, 1).asMetadata()));
        }

        @Override
        public void validate(int rank, int world) {
            if (world < 1 || world > 4) throw new IllegalArgumentException("world size " + world + " differs from the job's (1 to 4)");
            if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
        }

        @Override
        public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
            return new Joined(0, fingerprint, 100, resume == null ? ScheduleCursor.START : resume, 1000, 4);
        }

        @Override
        public CompletableFuture<? extends Delivery> next(int rank, long connection) {
            long n = step.incrementAndGet();
            if (n % 2 == 0) return CompletableFuture.completedFuture(prepared(n));
            storedHandedOut.incrementAndGet();
            return CompletableFuture.completedFuture(new Stored(Path.of("/dev/shm/stoker-fuzz-none"), 0, stored.byteSize(), stored,
                    storedReleased::incrementAndGet));
        }

        @Override
        public boolean sharedMemory() { return true; }
    }
}
