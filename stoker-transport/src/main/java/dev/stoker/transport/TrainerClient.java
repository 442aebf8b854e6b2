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
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * The Java trainer side of {@link FeedProtocol}: connects as one rank and receives batches, either
 * copied into a reusable buffer (valid until the next call to {@link #next()}) or, when the service
 * keeps batches in shared memory and {@link Options#sharedMemory()} is on, as read-only views of the
 * mapped segment (valid until the {@link Received} is closed, which releases the lease). A batch's
 * {@link BatchLayout.Batch#inputs() inputs()} are what the model's {@code forward} takes; its
 * {@link BatchLayout.Batch#metadata() metadata()} the rest ({@code sampleIndex()}, and in the compact
 * format {@code pixelNorm()} and {@code pixelPatch()}).
 *
 * <p>Mappings: each segment file is mapped once and reused for every later reference to it; a
 * mapping not referenced in the last {@link #MAPPING_IDLE_REFS} references and not in use is
 * unmapped (the service may have deleted the file, and a mapping keeps its memory alive).
 *
 * <p>Measurement: each request after a batch carries the trainer's timing of it (docs/protocol.md, NEXT):
 * how long {@link #next()} blocked for it, and the time from its return to the next call (the
 * trainer's step), so the service knows each rank's wait ratio without the trainer doing anything.
 *
 * <p>Threading: one thread at a time per client (it may move between threads); {@link Received#close()}
 * only queues the release, which is sent with the next request or on {@link #close()}.
 */
public final class TrainerClient implements AutoCloseable {
    public static final int MAPPING_IDLE_REFS = 64;
    /** How long a waiting trainer polls its socket before it sleeps (see {@link FeedProtocol.FrameReader}). */
    public static final long SPIN_NANOS = Long.getLong("stoker.client.spinNanos", 100_000);

    /**
     * How to join: shared-memory delivery wanted, a cursor to resume at (null: none) with the saved
     * fingerprint (0: none), the bytes of receive buffer to allocate and touch before saying
     * hello (0: after WELCOME, at the size the service suggests), and the step label saved with the
     * cursor (−1: none).
     */
    public record Options(boolean sharedMemory, dev.stoker.core.ScheduleCursor resume, long fingerprint, long receiveBufferBytes,
                          long resumeStep) {
        public static final Options COPY = new Options(false, null, 0, 0, -1);
        public static final Options SHARED_MEMORY = new Options(true, null, 0, 0, -1);

        public Options withReceiveBuffer(long bytes) { return new Options(sharedMemory, resume, fingerprint, bytes, resumeStep); }

        /** Resuming from {@code state} (of any rank of the job, with any rank count: the cursor is global). */
        public Options resumingFrom(State state) {
            return new Options(sharedMemory, state.cursor(), state.fingerprint(), receiveBufferBytes, state.nextStep());
        }
    }

    /**
     * What a trainer saves in its checkpoint to resume exactly: the cursor of the next batch it
     * would take (global: valid for any rank and rank count), the job's fingerprint, and labels.
     */
    public record State(String job, int rank, int world, long fingerprint, long epoch, long position, long nextStep,
                        BatchLayout.Resume sources) {
        /** A state without the sources' own cursors (the global cursor resumes; they are informative). */
        public State(String job, int rank, int world, long fingerprint, long epoch, long position, long nextStep) {
            this(job, rank, world, fingerprint, epoch, position, nextStep, null);
        }

        public dev.stoker.core.ScheduleCursor cursor() { return new dev.stoker.core.ScheduleCursor(epoch, position); }
    }

    /** One received batch; close it when done reading (releases a shared-memory lease; no-op for copies). */
    public final class Received implements AutoCloseable {
        private final BatchLayout.Batch batch;
        private final long lease;
        private final Mapping mapping;
        private boolean closed;

        private Received(BatchLayout.Batch batch, long lease, Mapping mapping) {
            this.batch = batch;
            this.lease = lease;
            this.mapping = mapping;
        }

        public BatchLayout.Batch batch() { return batch; }

        /** Whether the tensors are views of shared memory written by the service (no copy was made). */
        public boolean byReference() { return mapping != null; }

        @Override
        public void close() {
            if (closed || mapping == null) return;
            closed = true;
            mapping.inUse--;
            pendingReleases.add(lease);
        }
    }

    private static final class Mapping {
        final Arena arena = Arena.ofShared();
        final MemorySegment segment;
        long lastUsedRef;
        int inUse;

        Mapping(Path file) throws IOException {
            try (var fc = FileChannel.open(file, StandardOpenOption.READ)) {
                segment = fc.map(FileChannel.MapMode.READ_ONLY, 0, fc.size(), arena);
            } catch (IOException | RuntimeException e) {
                arena.close();
                throw e;
            }
        }
    }

    private final SocketChannel channel;
    private final FeedProtocol.FrameReader in;
    private final Arena arena;
    private final FeedProtocol.Welcome welcome;
    private final Map<String, Mapping> mappings = new HashMap<>();
    private final List<Long> pendingReleases = new ArrayList<>();
    private MemorySegment buffer;
    private long bytesReceived;
    private long refsReceived;
    private long lastFrameHeaderNanos;
    private long lastReturnNanos; // when next() last returned a batch
    private boolean timingPending; // that batch's timing is not sent yet
    private long lastWaitNanos;

    private final int rank;
    private final int world;
    private final String job;
    private long consumed;
    /** The resume block of the last batch taken; null before one, or from a service that sends none. */
    private BatchLayout.Resume lastResume;

    private TrainerClient(SocketChannel channel, FeedProtocol.FrameReader in, FeedProtocol.Welcome welcome, Arena arena,
                          int rank, int world, String job) {
        this.rank = rank;
        this.world = world;
        this.job = job;
        this.arena = arena;
        this.channel = channel;
        this.in = in;
        this.welcome = welcome;
    }

    /** Connects for copy delivery and says hello; blocks until the service lets the trainer in. */
    public static TrainerClient connect(Path socket, int rank, int world, String job) throws IOException {
        return connect(socket, rank, world, job, Options.COPY);
    }

    /** Connects and says hello with {@code options}; blocks until the service lets the trainer in. */
    public static TrainerClient connect(Path socket, int rank, int world, String job, Options options) throws IOException {
        Arena arena = Arena.ofShared();
        MemorySegment buffer = options.receiveBufferBytes() > 0 ? arena.allocate(options.receiveBufferBytes(), 64) : null;
        var ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        FeedProtocol.FrameReader in = null;
        try {
            ch.connect(UnixDomainSocketAddress.of(socket));
            var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, rank, world,
                    options.sharedMemory() ? FeedProtocol.FLAG_SHARED_MEMORY : 0, options.resume(), options.fingerprint(), job,
                    options.resumeStep());
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, hello.encode());
            in = new FeedProtocol.FrameReader(ch, SPIN_NANOS);
            var f = in.next();
            if (f.type() == FeedProtocol.ERROR)
                throw new IOException("service refused rank " + rank + ": " + FeedProtocol.utf8(in.small(f)));
            if (f.type() != FeedProtocol.WELCOME) throw new IOException("expected WELCOME, got frame type " + f.type());
            var welcome = FeedProtocol.Welcome.decode(in.small(f));
            var client = new TrainerClient(ch, in, welcome, arena, rank, world, job);
            client.buffer = buffer;
            if (buffer == null && welcome.expectedBatchBytes() > 0 && welcome.delivery() == FeedProtocol.DELIVERY_COPY)
                client.buffer = arena.allocate(welcome.expectedBatchBytes(), 64); // touched now, not on the first step
            return client;
        } catch (IOException | RuntimeException e) {
            if (in != null) in.close();
            ch.close();
            arena.close();
            throw e;
        }
    }

    public FeedProtocol.Welcome welcome() { return welcome; }

    /**
     * This trainer's position now: the cursor after the batches {@link #next()} has returned on this
     * connection. Save it with the model's checkpoint and pass it to {@link Options#resumingFrom}.
     */
    public State state() {
        if (lastResume != null) // the service's own word on where the job resumes after the last batch taken
            return new State(job, rank, world, welcome.fingerprint(), lastResume.epoch(), lastResume.position(), lastResume.step(), lastResume);
        var c = welcome.advance(welcome.cursor(), consumed);
        return new State(job, rank, world, welcome.fingerprint(), c.epoch(), c.position(), welcome.nextStep() + consumed);
    }

    /** Whether the service hands this client shared-memory references. */
    public boolean sharedMemory() { return welcome.delivery() == FeedProtocol.DELIVERY_SHARED_MEMORY; }

    /**
     * The next batch, or null when the feed has ended. A copied batch is valid until the next call;
     * a referenced one until its {@link Received} is closed.
     */
    public Received next() throws IOException {
        long start = System.nanoTime();
        // the step before: how long next() blocked for its batch, then the trainer's compute until now
        var timing = timingPending ? new FeedProtocol.Timing(lastWaitNanos, start - lastReturnNanos) : null;
        timingPending = false;
        sendReleasesAndNext(timing);
        var f = in.next();
        lastFrameHeaderNanos = System.nanoTime();
        switch (f.type()) {
            case FeedProtocol.END -> { return null; }
            case FeedProtocol.ERROR -> throw new IOException("service error: " + FeedProtocol.utf8(in.small(f)));
            case FeedProtocol.BATCH -> {
                if (buffer == null || buffer.byteSize() < f.length())
                    buffer = arena.allocate(Math.max(f.length(), buffer == null ? 0 : 2 * buffer.byteSize()), 64);
                in.into(buffer.asSlice(0, f.length()).asByteBuffer());
                bytesReceived += f.length();
                consumed++;
                var batch = BatchLayout.read(buffer.asSlice(0, f.length()));
                lastResume = batch.meta().resume();
                returned(start);
                return new Received(batch, 0, null);
            }
            case FeedProtocol.REF -> {
                var ref = FeedProtocol.Ref.decode(in.small(f));
                refsReceived++;
                Mapping m = mapping(ref.path());
                if (ref.offset() < 0 || ref.length() < 0 || ref.offset() + ref.length() > m.segment.byteSize())
                    throw new IOException("REF outside segment " + ref.path() + ": offset " + ref.offset() + ", length " + ref.length()
                            + ", segment of " + m.segment.byteSize() + " bytes");
                m.inUse++;
                evictIdleMappings();
                consumed++;
                var batch = BatchLayout.read(m.segment.asSlice(ref.offset(), ref.length()));
                lastResume = batch.meta().resume();
                returned(start);
                return new Received(batch, ref.lease(), m);
            }
            default -> throw new IOException("unexpected frame type " + f.type());
        }
    }

    /** Marks the return of a batch from a {@link #next()} that began at {@code start}: its wait goes with the next request. */
    private void returned(long start) {
        lastReturnNanos = System.nanoTime();
        lastWaitNanos = lastReturnNanos - start;
        timingPending = true;
    }

    /** Nanoseconds the last {@link #next()} that returned a batch was blocked (what the next request reports as wait_ns). */
    public long lastWaitNanos() { return lastWaitNanos; }

    private Mapping mapping(String path) throws IOException {
        Mapping m = mappings.get(path);
        if (m == null) {
            m = new Mapping(Path.of(path));
            mappings.put(path, m);
        }
        m.lastUsedRef = refsReceived;
        return m;
    }

    private void evictIdleMappings() {
        for (Iterator<Mapping> it = mappings.values().iterator(); it.hasNext(); ) {
            Mapping m = it.next();
            if (m.inUse == 0 && refsReceived - m.lastUsedRef > MAPPING_IDLE_REFS) {
                it.remove();
                m.arena.close();
            }
        }
    }

    /** Pending releases and NEXT in one write: one system call, and the service wakes once. */
    private void sendReleasesAndNext(FeedProtocol.Timing timing) throws IOException {
        int n = Math.min(pendingReleases.size(), MAX_RELEASES_PER_FRAME);
        var out = ByteBuffer.allocate(2 * 12 + 8 * n + FeedProtocol.Timing.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        if (n > 0) {
            var ids = ByteBuffer.allocate(8 * n).order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < n; i++) ids.putLong(pendingReleases.get(i));
            pendingReleases.subList(0, n).clear();
            FeedProtocol.appendFrame(out, FeedProtocol.RELEASE, ids.flip());
        }
        flushReleases(); // more than one frame's worth, rarely
        FeedProtocol.appendFrame(out, FeedProtocol.NEXT, timing == null ? null : timing.encode());
        FeedProtocol.writeFully(channel, out.flip());
    }

    private static final int MAX_RELEASES_PER_FRAME = FeedProtocol.MAX_RELEASES_PER_FRAME;

    /** Sends every pending release, in frames of at most {@link #MAX_RELEASES_PER_FRAME} ids (a service refuses larger ones). */
    private void flushReleases() throws IOException {
        while (!pendingReleases.isEmpty()) {
            int n = Math.min(pendingReleases.size(), MAX_RELEASES_PER_FRAME);
            var ids = ByteBuffer.allocate(8 * n).order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < n; i++) ids.putLong(pendingReleases.get(i));
            pendingReleases.subList(0, n).clear();
            FeedProtocol.writeFrame(channel, FeedProtocol.RELEASE, ids.flip());
        }
    }

    /** Bytes of batches copied to this client (0 for batches received by reference). */
    public long bytesReceived() { return bytesReceived; }

    public long refsReceived() { return refsReceived; }

    /** Segment files mapped now. */
    public int mappedSegments() { return mappings.size(); }

    /** When the last reply's frame header arrived ({@link System#nanoTime()}): splits a wait into queueing and transfer. */
    public long lastFrameHeaderNanos() { return lastFrameHeaderNanos; }

    /** Sends pending releases and BYE, closes the socket and unmaps every segment (views become invalid). */
    @Override
    public void close() throws IOException {
        try {
            if (channel.isOpen()) {
                flushReleases();
                FeedProtocol.writeFrame(channel, FeedProtocol.BYE, null);
            }
        } catch (IOException ignored) {
            // closing anyway
        } finally {
            in.close();
            channel.close();
            for (Mapping m : mappings.values()) m.arena.close();
            mappings.clear();
            arena.close();
        }
    }
}
