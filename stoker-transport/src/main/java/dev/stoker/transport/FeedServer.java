package dev.stoker.transport;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
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
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.HashMap;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Serves batches to trainer processes over a Unix domain socket ({@link FeedProtocol}): by value
 * (the batch's bytes are copied into the socket) or, when the provider keeps batches in shared
 * memory and the trainer maps it, by reference (a REF frame of a few hundred bytes; the trainer
 * reads the segment in place and releases its lease when done).
 *
 * <p>Leases: each REF carries a lease that the connection holds until the trainer sends RELEASE;
 * when a connection closes for any reason, every lease it still holds is released, so a trainer
 * that dies cannot pin shared memory.
 *
 * <p>Threading: one virtual thread accepts, one platform thread per connection; {@link BatchProvider}
 * futures are awaited on those threads; a connection's leases are touched only by its thread.
 */
public final class FeedServer implements AutoCloseable {
    /** How often a connection whose batch is being made checks that its trainer is still there. */
    private static final long PEER_POLL_MILLIS = 50;
    private final Path socketPath;
    private final ServerSocketChannel server;
    private final BatchProvider provider;
    private final CountDownLatch gate;
    private final Set<SocketChannel> clients = ConcurrentHashMap.newKeySet();
    private final AtomicInteger hellos = new AtomicInteger();
    private final AtomicLong batchesSent = new AtomicLong();
    private final AtomicLong bytesSent = new AtomicLong();
    private final AtomicLong refsSent = new AtomicLong();
    private final AtomicLong nextLease = new AtomicLong();
    private final AtomicLong connections = new AtomicLong();
    private final AtomicLong leasesReleased = new AtomicLong();
    private final AtomicLong leasesReleasedOnDisconnect = new AtomicLong();
    private final AtomicLong timingsReceived = new AtomicLong();
    private final Thread acceptor;
    private final Object socketFile; // the socket this server created (device and inode), the only one it deletes
    private volatile boolean closed;

    /**
     * Starts listening on {@code socketPath}. When {@code gated}, trainers get WELCOME only after
     * {@link #open()}, so that their first request measures the pipeline's cold start.
     */
    public FeedServer(Path socketPath, BatchProvider provider, boolean gated) throws IOException {
        this.socketPath = socketPath;
        this.provider = provider;
        this.gate = new CountDownLatch(gated ? 1 : 0);
        removeStale(socketPath);
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socketPath));
        socketFile = Files.readAttributes(socketPath, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
        acceptor = Thread.ofVirtual().name("stoker-feed-accept").start(this::acceptLoop);
    }

    public Path socketPath() { return socketPath; }

    /**
     * Deletes a socket left by a service that is gone; refuses to take the path of a live one (a
     * second service on it would take its new trainers, and delete its socket on closing).
     */
    private static void removeStale(Path socketPath) throws IOException {
        if (!Files.exists(socketPath, LinkOption.NOFOLLOW_LINKS)) return;
        try (var probe = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            probe.connect(UnixDomainSocketAddress.of(socketPath));
        } catch (IOException stale) { // nobody listens there: a socket file left by a service that died
            Files.deleteIfExists(socketPath);
            return;
        }
        throw new IOException("a live service is already listening on " + socketPath + ": stop it first, or give this one another "
                + "--socket or --job (services of one job on one host, one per node, each need a socket of their own)");
    }

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

    /** REF frames sent (batches handed over by reference, no bytes copied). */
    public long refsSent() { return refsSent.get(); }

    /** Leases handed out and not released yet. */
    public long leasesHeld() { return refsSent.get() - leasesReleased.get() - leasesReleasedOnDisconnect.get(); }

    /** NEXT requests that carried the trainer's measurement of its step before. */
    public long timingsReceived() { return timingsReceived.get(); }

    /** Leases the trainers released with RELEASE. */
    public long leasesReleased() { return leasesReleased.get(); }

    /** Leases released because their trainer's connection closed while holding them. */
    public long leasesReleasedOnDisconnect() { return leasesReleasedOnDisconnect.get(); }

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
        long connection = connections.incrementAndGet();
        Arena arena = Arena.ofConfined();
        MemorySegment buffer = null;
        var leases = new HashMap<Long, Runnable>();
        int joinedRank = -1;
        try (arena) { // ch is closed last, in finally: the catch below must still be able to send the ERROR
            var in = new FeedProtocol.FrameReader(ch);
            var helloFrame = in.next();
            if (helloFrame.type() != FeedProtocol.HELLO) {
                error(ch, "expected HELLO, got frame type " + helloFrame.type());
                return;
            }
            var hello = FeedProtocol.Hello.decode(in.small(helloFrame));
            if (hello.version() != FeedProtocol.VERSION) {
                error(ch, "protocol version " + hello.version() + " is not supported; this service speaks version " + FeedProtocol.VERSION);
                return;
            }
            int rank = hello.rank();
            try {
                provider.validate(rank, hello.world());
            } catch (IllegalArgumentException e) {
                error(ch, e.getMessage());
                return;
            }
            boolean shared = hello.sharedMemory() && provider.sharedMemory();
            long expected = provider.expectedBatchBytes();
            if (expected > 0 && !shared) buffer = arena.allocate(expected, 64); // zeroed, so its pages are touched now
            hellos.incrementAndGet(); // a gated trainer counts once its buffer is ready: the pipeline gets no head start
            gate.await();
            BatchProvider.Joined joined;
            try {
                joined = provider.join(rank, connection, hello.resume(), hello.resumeStep(), hello.fingerprint());
            } catch (IllegalArgumentException e) {
                error(ch, e.getMessage());
                return;
            }
            joinedRank = rank;
            var welcome = new FeedProtocol.Welcome(FeedProtocol.VERSION,
                    shared ? FeedProtocol.DELIVERY_SHARED_MEMORY : FeedProtocol.DELIVERY_COPY, expected,
                    joined.nextStep(), joined.fingerprint(), joined.stepsPerEpoch(), joined.cursor().epoch(), joined.cursor().position(),
                    joined.datasetSize(), joined.positionsPerStep());
            FeedProtocol.writeFrame(ch, FeedProtocol.WELCOME, welcome.encode());
            while (true) {
                var f = in.next();
                switch (f.type()) {
                    case FeedProtocol.BYE -> { return; }
                    case FeedProtocol.RELEASE -> {
                        ByteBuffer ids = in.small(f);
                        while (ids.remaining() >= 8) {
                            long id = ids.getLong();
                            Runnable release = leases.remove(id);
                            if (release == null) {
                                error(ch, "RELEASE of lease " + id + ", which this connection does not hold");
                                return;
                            }
                            release.run();
                            leasesReleased.incrementAndGet();
                        }
                    }
                    case FeedProtocol.NEXT -> {
                        // empty, or the trainer's measurement of the step before; any other length is refused unread
                        if (f.length() != 0 && f.length() != FeedProtocol.Timing.BYTES) {
                            error(ch, "NEXT payload of " + f.length() + " bytes; protocol version " + FeedProtocol.VERSION
                                    + " sends 0 or " + FeedProtocol.Timing.BYTES + " (wait_ns u64, step_ns u64)");
                            return;
                        }
                        if (f.length() > 0) {
                            FeedProtocol.Timing t;
                            try {
                                t = FeedProtocol.Timing.decode(in.small(f));
                            } catch (IOException bad) {
                                error(ch, bad.getMessage());
                                return;
                            }
                            provider.report(rank, connection, t.waitNanos(), t.stepNanos()); // the connection's own rank
                            timingsReceived.incrementAndGet();
                        }
                        var pending = provider.next(rank, connection);
                        try {
                            in.awaitWatchingPeer(ch, pending, PEER_POLL_MILLIS);
                        } catch (IOException gone) { // the trainer died while its batch was made: whoever takes the rank gets it
                            pending.thenAccept(FeedServer::discard);
                            throw gone;
                        }
                        BatchProvider.Delivery d = pending.join();
                        switch (d) {
                            case null -> FeedProtocol.writeFrame(ch, FeedProtocol.END, null);
                            case BatchProvider.Prepared batch -> {
                                long size = BatchLayout.sizeOf(batch.tensors());
                                if (buffer == null || buffer.byteSize() < size)
                                    buffer = arena.allocate(Math.max(size, buffer == null ? 0 : buffer.byteSize() * 2), 64);
                                BatchLayout.write(batch.meta(), batch.tensors(), buffer);
                                FeedProtocol.writeFrame(ch, FeedProtocol.BATCH, buffer.asSlice(0, size).asByteBuffer());
                                batchesSent.incrementAndGet();
                                bytesSent.addAndGet(size);
                            }
                            case BatchProvider.Stored stored when shared -> {
                                long id = nextLease.incrementAndGet();
                                leases.put(id, stored.release()); // released in finally if the REF cannot be sent
                                int header = BatchLayout.headerBytes(stored.batch());
                                var ref = new FeedProtocol.Ref(id, stored.offset(), stored.length(), stored.file().toString(),
                                        stored.batch().asSlice(0, header).asByteBuffer());
                                FeedProtocol.writeFrame(ch, FeedProtocol.REF, ref.encode());
                                refsSent.incrementAndGet();
                            }
                            case BatchProvider.Stored stored -> {
                                try {
                                    FeedProtocol.writeFrame(ch, FeedProtocol.BATCH, stored.batch().asByteBuffer());
                                } finally {
                                    stored.release().run();
                                }
                                batchesSent.incrementAndGet();
                                bytesSent.addAndGet(stored.length());
                            }
                        }
                    }
                    default -> {
                        error(ch, "unexpected frame type " + f.type());
                        return;
                    }
                }
            }
        } catch (IOException | InterruptedException e) {
            // The trainer went away; its leases are released below and its feed stays where it was.
        } catch (RuntimeException e) {
            try {
                Throwable cause = e instanceof java.util.concurrent.CompletionException && e.getCause() != null ? e.getCause() : e;
                error(ch, String.valueOf(cause.getMessage() != null ? cause.getMessage() : cause));
            } catch (IOException ignored) {
                // connection already gone
            }
        } finally {
            for (Runnable release : leases.values()) release.run();
            leasesReleasedOnDisconnect.addAndGet(leases.size());
            clients.remove(ch);
            try {
                ch.close();
            } catch (IOException ignored) {
                // nothing left to tell the trainer
            }
            if (joinedRank >= 0) provider.leave(joinedRank, connection); // last: the rank is free once this one is closed
        }
    }

    /** Ends the service's hold on a batch that no trainer will get on this connection. */
    private static void discard(BatchProvider.Delivery d) {
        if (d instanceof BatchProvider.Stored stored) stored.release().run();
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
        try { // only the socket this server made: a later service's at the same path is not ours to delete
            var now = Files.readAttributes(socketPath, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
            if (now != null && now.equals(socketFile)) Files.deleteIfExists(socketPath);
        } catch (java.nio.file.NoSuchFileException gone) {
            // removed already
        }
    }
}
