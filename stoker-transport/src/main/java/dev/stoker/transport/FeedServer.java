package dev.stoker.transport;

import dev.stoker.core.Ticker;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
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
 * <p>Hostile or buggy peers ({@link Limits}): a connection must send its whole HELLO within
 * {@link Limits#helloTimeoutMillis()} or is closed with ERROR; at most {@link Limits#maxConnections()}
 * are open at once, and the acceptor refuses more with an ERROR that says so; copy-delivery buffers
 * allocated when trainers say hello stay within {@link Limits#copyBufferBudgetBytes()} (beyond it a
 * trainer's buffer is allocated at its first batch, once it holds its rank, of which there is one per
 * rank). Every length a peer sends is checked before it is used (frames at most
 * {@link FeedProtocol#MAX_TRAINER_FRAME_BYTES}; RELEASE 1 to 131,072 lease ids of 8 bytes; NEXT empty,
 * a 16-byte timing or a 32-byte timing with a compute floor; BYE's payload read to its end). A protocol error gets ERROR naming it and closes
 * that connection only; the acceptor survives any error (logged, then a short pause).
 *
 * <p>Threading: one virtual thread accepts; connections are served on a pool of platform threads
 * bounded by the connection limit (platform, not virtual: a blocked read wakes its own thread, with
 * no poller hop on the hand-off path); one timer thread enforces HELLO deadlines. {@link BatchProvider}
 * futures are awaited on the connection threads; a connection's leases are touched only by its thread.
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
    private final Limits limits;
    private final java.util.concurrent.ThreadPoolExecutor connectionThreads;
    private final java.util.concurrent.ScheduledThreadPoolExecutor helloTimer;
    private final Ticker ticker;
    private final AtomicInteger connectionsOpen = new AtomicInteger();
    private final AtomicLong connectionsRefused = new AtomicLong();
    private final AtomicLong copyBufferBytes = new AtomicLong();
    private final AtomicLong copyBufferBytesHighWater = new AtomicLong();
    private final Object socketFile; // the socket this server created (device and inode), the only one it deletes
    private volatile boolean closed;

    /**
     * Starts listening on {@code socketPath}. When {@code gated}, trainers get WELCOME only after
     * {@link #open()}, so that their first request measures the pipeline's cold start.
     */
    public FeedServer(Path socketPath, BatchProvider provider, boolean gated) throws IOException {
        this(socketPath, provider, gated, Limits.DEFAULT);
    }

    /** {@link #FeedServer(Path, BatchProvider, boolean)} with the limits a peer is held to. */
    public FeedServer(Path socketPath, BatchProvider provider, boolean gated, Limits limits) throws IOException {
        this(socketPath, provider, gated, limits, Ticker.system());
    }

    /**
     * {@link #FeedServer(Path, BatchProvider, boolean, Limits)} with the clock a HELLO's deadline is measured by: a test
     * moves one by hand, so that no peer's HELLO can miss the deadline on a slow machine and the deadline passes when the
     * test says.
     */
    public FeedServer(Path socketPath, BatchProvider provider, boolean gated, Limits limits, Ticker ticker) throws IOException {
        this(socketPath, provider, gated, limits, ticker, Thread.ofPlatform().daemon().name("stoker-feed-conn").factory());
    }

    /** With the factory of connection threads (tests make it fail). */
    FeedServer(Path socketPath, BatchProvider provider, boolean gated, Limits limits, java.util.concurrent.ThreadFactory connectionThreads)
            throws IOException {
        this(socketPath, provider, gated, limits, Ticker.system(), connectionThreads);
    }

    private FeedServer(Path socketPath, BatchProvider provider, boolean gated, Limits limits, Ticker ticker,
            java.util.concurrent.ThreadFactory connectionThreads) throws IOException {
        this.limits = limits;
        this.ticker = ticker;
        // bounded by the connection limit; a few spare threads absorb connections whose thread is still on its way back
        this.connectionThreads = new java.util.concurrent.ThreadPoolExecutor(0, limits.maxConnections() + 8, 30, TimeUnit.SECONDS,
                new java.util.concurrent.SynchronousQueue<>(), connectionThreads);
        this.helloTimer = new java.util.concurrent.ScheduledThreadPoolExecutor(1,
                Thread.ofPlatform().daemon().name("stoker-feed-hello-deadline").factory());
        helloTimer.setRemoveOnCancelPolicy(true);
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

    /** Trainer connections open now (accepted and not closed). */
    public int connectionsOpen() { return connectionsOpen.get(); }

    /** Connections refused because {@link Limits#maxConnections()} were open. */
    public long connectionsRefused() { return connectionsRefused.get(); }

    /** The most bytes of copy-delivery buffers the connections held at once. */
    public long copyBufferBytesHighWater() { return copyBufferBytesHighWater.get(); }

    /**
     * What a peer is held to: {@code helloTimeoutMillis} to send its whole HELLO after connecting;
     * {@code maxConnections} open at once (more are refused with ERROR); {@code copyBufferBudgetBytes}
     * of copy-delivery buffers allocated when trainers say hello, over all connections.
     */
    public record Limits(long helloTimeoutMillis, int maxConnections, long copyBufferBudgetBytes) {
        public static final long HELLO_TIMEOUT_MILLIS_DEFAULT = 10_000;
        public static final int MAX_CONNECTIONS_DEFAULT = 256;
        public static final long COPY_BUFFER_BUDGET_BYTES_DEFAULT = 4L << 30;
        public static final Limits DEFAULT = new Limits(HELLO_TIMEOUT_MILLIS_DEFAULT, MAX_CONNECTIONS_DEFAULT, COPY_BUFFER_BUDGET_BYTES_DEFAULT);

        public Limits {
            if (helloTimeoutMillis <= 0) throw new IllegalArgumentException("HELLO timeout must be > 0 ms, got " + helloTimeoutMillis);
            if (maxConnections <= 0) throw new IllegalArgumentException("trainer connection limit must be > 0, got " + maxConnections);
            if (copyBufferBudgetBytes < 0) throw new IllegalArgumentException("copy-buffer budget must be >= 0 bytes, got " + copyBufferBudgetBytes);
        }
    }

    /** How long the acceptor pauses after an unexpected error (out of memory or threads), so that it does not spin. */
    private static final long ACCEPT_BACKOFF_MILLIS = 100;

    private void acceptLoop() {
        while (!closed) {
            SocketChannel ch = null;
            HelloDeadline deadline = null;
            boolean counted = false;
            try {
                ch = server.accept();
                if (connectionsOpen.get() >= limits.maxConnections()) {
                    refuse(ch);
                    continue;
                }
                deadline = new HelloDeadline(ch); // from the moment of connecting, however long the connection thread takes to start
                connectionsOpen.incrementAndGet();
                counted = true;
                clients.add(ch);
                SocketChannel accepted = ch;
                HelloDeadline acceptedDeadline = deadline;
                try {
                    connectionThreads.execute(() -> serve(accepted, acceptedDeadline));
                } catch (java.util.concurrent.RejectedExecutionException full) { // every pool thread busy: as good as the limit
                    deadline.met();
                    clients.remove(ch);
                    connectionsOpen.decrementAndGet();
                    counted = false;
                    if (!closed) refuse(ch);
                }
            } catch (ClosedChannelException e) {
                return;
            } catch (Throwable t) { // out of memory or threads, an I/O error: this connection is lost, the service is not
                if (closed) return;
                if (deadline != null) deadline.met();
                if (counted) {
                    clients.remove(ch);
                    connectionsOpen.decrementAndGet();
                }
                closeQuietly(ch);
                System.getLogger(FeedServer.class.getName()).log(System.Logger.Level.WARNING,
                        "accepting a trainer connection failed; the service goes on accepting", t);
                try {
                    Thread.sleep(ACCEPT_BACKOFF_MILLIS);
                } catch (InterruptedException stop) {
                    return;
                }
            }
        }
    }

    /** Tells a connection over the limit why it is closed (one non-blocking write of a fresh socket), and closes it. */
    private void refuse(SocketChannel ch) {
        try (ch) {
            ch.configureBlocking(false);
            var frame = FeedProtocol.appendFrame(ByteBuffer.allocate(512), FeedProtocol.ERROR, FeedProtocol.utf8("this service has "
                    + limits.maxConnections() + " trainer connections open, its limit: connection refused (close idle ones, or raise "
                    + "--max-trainer-connections)")).flip();
            ch.write(frame);
        } catch (IOException | RuntimeException gone) {
            // the peer left already
        }
        connectionsRefused.incrementAndGet();
    }

    private static void closeQuietly(SocketChannel ch) {
        if (ch == null) return;
        try {
            ch.close();
        } catch (IOException ignored) {
            // nothing to tell
        }
    }

    /**
     * The HELLO deadline of one connection: whichever comes first, the whole HELLO ({@link #met()}) or
     * the timer (ERROR, then the channel closed), wins; the loser does nothing. The deadline is measured
     * on the server's {@link Ticker}: when the timer fires before the ticker says it is due (a ticker
     * moved by hand), it looks again after the time left; on the system clock it is due at the first look.
     */
    private final class HelloDeadline {
        private final java.util.concurrent.atomic.AtomicBoolean decided = new java.util.concurrent.atomic.AtomicBoolean();
        private final SocketChannel ch;
        private final long startNanos, limitNanos;
        private volatile java.util.concurrent.ScheduledFuture<?> timer;

        HelloDeadline(SocketChannel ch) {
            this.ch = ch;
            this.startNanos = ticker.read();
            this.limitNanos = TimeUnit.MILLISECONDS.toNanos(limits.helloTimeoutMillis());
            timer = helloTimer.schedule(this::due, limitNanos, TimeUnit.NANOSECONDS);
        }

        private void due() {
            if (decided.get()) return;
            long left = limitNanos - (ticker.read() - startNanos);
            if (left > 0) {
                timer = helloTimer.schedule(this::due, left, TimeUnit.NANOSECONDS);
                return;
            }
            if (!decided.compareAndSet(false, true)) return;
            try {
                error(ch, "no HELLO within " + limits.helloTimeoutMillis() + " ms of connecting: closing the connection");
            } catch (IOException | RuntimeException gone) {
                // the peer left already
            } finally {
                closeQuietly(ch); // its connection thread's read ends, and it cleans up
            }
        }

        /** True when the HELLO came in time; false when the deadline has answered (and closed the channel) already. */
        boolean met() {
            if (!decided.compareAndSet(false, true)) return false;
            timer.cancel(false); // a timer set again after this finds the deadline decided
            return true;
        }
    }

    /** Reserves {@code bytes} of the copy-buffer budget; false when they do not fit. */
    private boolean reserveCopyBuffer(long bytes) {
        while (true) {
            long now = copyBufferBytes.get();
            if (now + bytes > limits.copyBufferBudgetBytes()) return false;
            if (copyBufferBytes.compareAndSet(now, now + bytes)) {
                copyBufferBytesHighWater.accumulateAndGet(now + bytes, Math::max);
                return true;
            }
        }
    }

    private void serve(SocketChannel ch, HelloDeadline deadline) {
        long connection = connections.incrementAndGet();
        Arena arena = Arena.ofConfined();
        MemorySegment buffer = null;
        var leases = new HashMap<Long, Runnable>();
        long bufferBytes = 0; // copy buffers this connection allocated, counted in copyBufferBytes
        int joinedRank = -1;
        try (arena) { // ch is closed last, in finally: the catch below must still be able to send the ERROR
            // the read buffer goes with the connection's arena, not at some later garbage collection
            var in = new FeedProtocol.FrameReader(ch, arena.allocate(FeedProtocol.FrameReader.BUFFER_BYTES).asByteBuffer());
            FeedProtocol.Frame helloFrame;
            ByteBuffer helloBytes = null;
            try {
                helloFrame = in.next();
                if (helloFrame.type() == FeedProtocol.HELLO) helloBytes = in.small(helloFrame);
            } catch (FeedProtocol.ProtocolException bad) {
                if (deadline.met()) error(ch, bad.getMessage());
                return;
            }
            if (!deadline.met()) return; // too late: the deadline has answered and closed the connection
            if (helloFrame.type() != FeedProtocol.HELLO) {
                error(ch, "expected HELLO, got frame type " + Integer.toUnsignedString(helloFrame.type()));
                return;
            }
            var hello = FeedProtocol.Hello.decode(helloBytes);
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
            if (expected > 0 && !shared && reserveCopyBuffer(expected)) { // else allocated at the first batch, once the rank is held
                bufferBytes = expected;
                buffer = arena.allocate(expected, 64); // zeroed, so its pages are touched now
            }
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
                    joined.datasetSize(), joined.positionsPerStep(), FeedProtocol.FEATURES);
            FeedProtocol.writeFrame(ch, FeedProtocol.WELCOME, welcome.encode());
            while (true) {
                var f = in.next();
                switch (f.type()) {
                    case FeedProtocol.BYE -> {
                        in.small(f); // empty in this version; read to its end, so that the close is clean
                        return;
                    }
                    case FeedProtocol.RELEASE -> {
                        if (f.length() == 0 || f.length() % 8 != 0 || f.length() > FeedProtocol.MAX_TRAINER_FRAME_BYTES) {
                            error(ch, "RELEASE payload of " + f.length() + " bytes; it carries lease ids of 8 bytes each, 1 to "
                                    + FeedProtocol.MAX_RELEASES_PER_FRAME + " of them");
                            return;
                        }
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
                        // empty, or the trainer's measurement of the step before (with its compute floor, when it measured
                        // one); any other length is refused unread
                        if (f.length() != 0 && f.length() != FeedProtocol.Timing.BYTES && f.length() != FeedProtocol.Timing.HEADSPACE_BYTES) {
                            error(ch, "NEXT payload of " + f.length() + " bytes; protocol version " + FeedProtocol.VERSION
                                    + " sends 0, " + FeedProtocol.Timing.BYTES + " (wait_ns u64, step_ns u64) or "
                                    + FeedProtocol.Timing.HEADSPACE_BYTES + " (wait_ns, step_ns, floor_ns, floor_steps u64)");
                            return;
                        }
                        if (f.length() > 0) {
                            // a bad timing is a ProtocolException (ERROR, below); a trainer gone mid-payload is not told
                            // "peer closed the connection" as if it were one (a fuzzer's finding)
                            FeedProtocol.Timing t = FeedProtocol.Timing.decode(in.small(f));
                            provider.report(rank, connection, t.waitNanos(), t.stepNanos()); // the connection's own rank
                            if (t.hasHeadspace()) provider.reportHeadspace(rank, connection, t.floorNanos(), t.floorSteps());
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
                                if (buffer == null || buffer.byteSize() < size) { // the service's batch size: one connection per held rank
                                    long grown = Math.max(size, buffer == null ? 0 : buffer.byteSize() * 2);
                                    buffer = arena.allocate(grown, 64);
                                    bufferBytes += grown;
                                    copyBufferBytesHighWater.accumulateAndGet(copyBufferBytes.addAndGet(grown), Math::max);
                                }
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
                        error(ch, "unexpected frame type " + Integer.toUnsignedString(f.type()));
                        return;
                    }
                }
            }
        } catch (FeedProtocol.ProtocolException bad) { // a length or payload out of bounds: this connection only
            try {
                error(ch, bad.getMessage());
            } catch (IOException ignored) {
                // connection already gone
            }
        } catch (IOException | InterruptedException e) {
            // The trainer went away; its leases are released below and its feed stays where it was.
        } catch (OutOfMemoryError e) { // a buffer this connection needed: it fails, the service goes on
            try {
                error(ch, "the service ran out of memory serving this connection: " + e.getMessage());
            } catch (IOException ignored) {
                // connection already gone
            }
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
            deadline.met(); // a connection that ended before its HELLO needs no timer
            copyBufferBytes.addAndGet(-bufferBytes);
            connectionsOpen.decrementAndGet();
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
        helloTimer.shutdownNow();
        connectionThreads.shutdown(); // the connections' threads end as their channels close, below
        for (SocketChannel c : clients) c.close();
        try { // only the socket this server made: a later service's at the same path is not ours to delete
            var now = Files.readAttributes(socketPath, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
            if (now != null && now.equals(socketFile)) Files.deleteIfExists(socketPath);
        } catch (java.nio.file.NoSuchFileException gone) {
            // removed already
        }
    }
}
