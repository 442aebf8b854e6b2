package dev.stoker.transport;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Serves batches to trainer processes over a Unix domain socket ({@link FeedProtocol}); each
 * batch's bytes are copied into the socket (the copy path; shared memory comes later).
 *
 * <p>Threading: one virtual thread accepts, one virtual thread per connection; {@link BatchProvider}
 * futures are awaited on those threads.
 */
public final class FeedServer implements AutoCloseable {
    private final Path socketPath;
    private final ServerSocketChannel server;
    private final BatchProvider provider;
    private final CountDownLatch gate;
    private final Set<SocketChannel> clients = ConcurrentHashMap.newKeySet();
    private final AtomicInteger hellos = new AtomicInteger();
    private final AtomicLong batchesSent = new AtomicLong();
    private final AtomicLong bytesSent = new AtomicLong();
    private final Thread acceptor;
    private volatile boolean closed;

    /**
     * Starts listening on {@code socketPath}. When {@code gated}, trainers get WELCOME only after
     * {@link #open()}, so that their first request measures the pipeline's cold start.
     */
    public FeedServer(Path socketPath, BatchProvider provider, boolean gated) throws IOException {
        this.socketPath = socketPath;
        this.provider = provider;
        this.gate = new CountDownLatch(gated ? 1 : 0);
        Files.deleteIfExists(socketPath);
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socketPath));
        acceptor = Thread.ofVirtual().name("stoker-feed-accept").start(this::acceptLoop);
    }

    public Path socketPath() { return socketPath; }

    /** Lets gated trainers in. */
    public void open() { gate.countDown(); }

    /** Waits until {@code n} trainers have said hello. */
    public boolean awaitHellos(int n, long timeoutMillis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
        while (hellos.get() < n) {
            if (System.nanoTime() > deadline) return false;
            Thread.sleep(5);
        }
        return true;
    }

    public long batchesSent() { return batchesSent.get(); }

    public long bytesSent() { return bytesSent.get(); }

    private void acceptLoop() {
        while (!closed) {
            try {
                SocketChannel ch = server.accept();
                clients.add(ch);
                Thread.ofPlatform().daemon().name("stoker-feed-conn").start(() -> serve(ch));
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                if (!closed) System.getLogger(FeedServer.class.getName()).log(System.Logger.Level.WARNING, "accept failed", e);
            }
        }
    }

    private void serve(SocketChannel ch) {
        Arena arena = Arena.ofConfined();
        MemorySegment buffer = null;
        try (ch; arena) {
            var hello = FeedProtocol.readFrame(ch);
            if (hello.type() != FeedProtocol.HELLO) {
                error(ch, "expected HELLO, got frame type " + hello.type());
                return;
            }
            ByteBuffer p = FeedProtocol.readSmall(ch, hello);
            int version = p.getInt();
            if (version != FeedProtocol.VERSION) {
                error(ch, "protocol version " + version + " is not supported; this service speaks version " + FeedProtocol.VERSION);
                return;
            }
            int rank = p.getInt();
            int world = p.getInt();
            try {
                provider.validate(rank, world);
            } catch (IllegalArgumentException e) {
                error(ch, e.getMessage());
                return;
            }
            long expected = provider.expectedBatchBytes();
            if (expected > 0) buffer = arena.allocate(expected, 64); // zeroed, so its pages are touched now
            hellos.incrementAndGet();
            gate.await();
            var welcome = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(FeedProtocol.VERSION).putLong(expected).flip();
            FeedProtocol.writeFrame(ch, FeedProtocol.WELCOME, welcome);
            while (true) {
                var f = FeedProtocol.readFrame(ch);
                if (f.type() == FeedProtocol.BYE) return;
                if (f.type() != FeedProtocol.NEXT) {
                    error(ch, "unexpected frame type " + f.type());
                    return;
                }
                BatchProvider.Prepared batch = provider.next(rank).join();
                if (batch == null) {
                    FeedProtocol.writeFrame(ch, FeedProtocol.END, null);
                    continue;
                }
                long size = BatchLayout.sizeOf(batch.tensors());
                if (buffer == null || buffer.byteSize() < size) buffer = arena.allocate(Math.max(size, buffer == null ? 0 : buffer.byteSize() * 2), 64);
                BatchLayout.write(batch.meta(), batch.tensors(), buffer);
                FeedProtocol.writeFrame(ch, FeedProtocol.BATCH, buffer.asSlice(0, size).asByteBuffer());
                batchesSent.incrementAndGet();
                bytesSent.addAndGet(size);
            }
        } catch (IOException | InterruptedException e) {
            // The trainer went away; its feed stays where it was.
        } catch (RuntimeException e) {
            try {
                error(ch, String.valueOf(e.getCause() != null ? e.getCause() : e));
            } catch (IOException ignored) {
                // connection already gone
            }
        } finally {
            clients.remove(ch);
        }
    }

    private static void error(SocketChannel ch, String message) throws IOException {
        FeedProtocol.writeFrame(ch, FeedProtocol.ERROR, FeedProtocol.utf8(message));
    }

    @Override
    public void close() throws IOException {
        closed = true;
        gate.countDown();
        server.close();
        for (SocketChannel c : clients) c.close();
        Files.deleteIfExists(socketPath);
    }
}
