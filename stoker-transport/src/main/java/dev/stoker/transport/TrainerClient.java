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
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFileAttributes;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The Java trainer side of {@link FeedProtocol}: connects as one rank and receives batches, either
 * copied into a reusable buffer (valid until the next call to {@link #next()}) or, when the service
 * keeps batches in shared memory and {@link Options#sharedMemory()} is on, as read-only views of the
 * mapped segment (valid until the {@link Received} is closed, which releases the lease). A batch's
 * {@link BatchLayout.Batch#inputs() inputs()} are what the model's {@code forward} takes; its
 * {@link BatchLayout.Batch#metadata() metadata()} the rest ({@code sampleIndex()}, and in the compact
 * format {@code pixelNorm()} and {@code pixelPatch()}).
 *
 * <p>Trust (audit #19): before connecting, the socket and its folder must be this user's alone, and
 * before mapping a segment file the service names, that file must be a regular file of this user
 * that no one else may write, opened without following a link ({@link LocalTrust}); anything else
 * is refused with an {@link IOException} naming the path and the cause.
 *
 * <p>Mappings: each segment file is mapped once and reused for every later reference to it while it
 * is the same file: its identity (device, inode: {@code fileKey}) and size are checked on every
 * reference, and a file replaced at the same path is mapped afresh (audit #31). A mapping not in use
 * is unmapped as soon as a reference arrives after the service deleted or replaced its file (audit
 * #20: a deleted segment's memory is freed only when its last mapping goes, and the service's
 * {@code --shm-budget} no longer counts it), and in any case once it was not referenced in the last
 * {@link #MAPPING_IDLE_REFS} references. So this trainer keeps a deleted segment mapped only while it
 * holds a batch in it, or until its next batch arrives.
 *
 * <p>Deadline (audit #27): each request has an end-to-end deadline, {@link Options#timeout()}
 * ({@link #DEFAULT_TIMEOUT} unless told otherwise): the HELLO until its WELCOME, each {@link #next()}
 * until its whole batch or reference has arrived, however the service trickles its bytes. Past it
 * the call throws {@link java.net.SocketTimeoutException} and the connection is closed (a resume
 * from {@link #state()} continues on a new one).
 *
 * <p>Measurement: each request after a batch carries the trainer's timing of it (docs/protocol.md, NEXT):
 * how long {@link #next()} blocked for it, and the time from its return to the next call (the
 * trainer's step), so the service knows each rank's wait ratio without the trainer doing anything.
 * {@link #headspace(int, int)} measures the trainer's compute floor on replayed copies of its first batches.
 *
 * <p>Threading: one thread at a time per client (it may move between threads); {@link Received#close()}
 * only queues the release, which is sent with the next request or on {@link #close()}.
 */
public final class TrainerClient implements AutoCloseable {
    public static final int MAPPING_IDLE_REFS = 64;
    /** A request's deadline unless {@link Options#timeout()} says otherwise: NCCL's own default watchdog, 10 minutes. */
    public static final java.time.Duration DEFAULT_TIMEOUT = java.time.Duration.ofSeconds(600);
    /** How long a waiting trainer polls its socket before it sleeps (see {@link FeedProtocol.FrameReader}). */
    public static final long SPIN_NANOS = Long.getLong("stoker.client.spinNanos", 100_000);

    /**
     * How to join: shared-memory delivery wanted, a cursor to resume at (null: none) with the saved
     * fingerprint (0: none), the bytes of receive buffer to allocate and touch before saying
     * hello (0: after WELCOME, at the size the service suggests), the step label saved with the
     * cursor (−1: none), and each request's end-to-end deadline (null: none, wait forever).
     */
    public record Options(boolean sharedMemory, dev.stoker.core.ScheduleCursor resume, long fingerprint, long receiveBufferBytes,
                          long resumeStep, java.time.Duration timeout) {
        public static final Options COPY = new Options(false, null, 0, 0, -1);
        public static final Options SHARED_MEMORY = new Options(true, null, 0, 0, -1);

        public Options {
            if (timeout != null && (timeout.isNegative() || timeout.isZero()))
                throw new IllegalArgumentException("timeout must be > 0 or null (none), got " + timeout);
        }

        /** With the {@link #DEFAULT_TIMEOUT}. */
        public Options(boolean sharedMemory, dev.stoker.core.ScheduleCursor resume, long fingerprint, long receiveBufferBytes,
                       long resumeStep) {
            this(sharedMemory, resume, fingerprint, receiveBufferBytes, resumeStep, DEFAULT_TIMEOUT);
        }

        public Options withReceiveBuffer(long bytes) { return new Options(sharedMemory, resume, fingerprint, bytes, resumeStep, timeout); }

        /** With {@code t} as each request's deadline; null waits forever. */
        public Options withTimeout(java.time.Duration t) { return new Options(sharedMemory, resume, fingerprint, receiveBufferBytes, resumeStep, t); }

        /** Resuming from {@code state} (of any rank of the job, with any rank count: the cursor is global). */
        public Options resumingFrom(State state) {
            return new Options(sharedMemory, state.cursor(), state.fingerprint(), receiveBufferBytes, state.nextStep(), timeout);
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
            if (mapping.retired && mapping.inUse == 0) {
                retired.remove(mapping);
                mapping.arena.close(); // its file was deleted or replaced: its memory goes with this last view
            }
        }
    }

    /** One mapped segment file, with the identity and size it had when mapped. */
    private static final class Mapping {
        final Arena arena = Arena.ofShared();
        final MemorySegment segment;
        final Path file;
        final Object fileKey;
        long lastUsedRef;
        int inUse;
        boolean retired; // no longer in the cache: closed when its last Received is

        /** Maps {@code file}, checked by {@link LocalTrust#checkSegment} ({@code checked}), opened without following a link. */
        Mapping(Path file, PosixFileAttributes checked) throws IOException {
            this.file = file;
            this.fileKey = checked.fileKey();
            try (var fc = FileChannel.open(file, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
                long size = fc.size();
                if (size != checked.size() || !Objects.equals(fileKey, LocalTrust.checkSegment(file).fileKey()))
                    throw new IOException("the shared-memory segment " + file + " changed while it was being opened");
                segment = fc.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            } catch (IOException | RuntimeException e) {
                arena.close();
                throw e;
            }
        }

        /** Whether {@code now} (attributes read without following a link; null: no file) is still the file mapped. */
        boolean sameFile(BasicFileAttributes now) {
            return now != null && Objects.equals(fileKey, now.fileKey()) && now.size() == segment.byteSize();
        }
    }

    private final SocketChannel channel;
    private final FeedProtocol.FrameReader in;
    private final Arena arena;
    private boolean closed; // close() ran: a second call does nothing
    private final FeedProtocol.Welcome welcome;
    private final Map<String, Mapping> mappings = new HashMap<>();
    private final List<Mapping> retired = new ArrayList<>(); // out of the cache, still viewed by a Received
    private final java.time.Duration timeout;
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
                          int rank, int world, String job, java.time.Duration timeout) {
        this.timeout = timeout;
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

    /**
     * Connects and says hello with {@code options}; blocks until the service lets the trainer in, at
     * most {@link Options#timeout()}. Refuses a socket or socket folder that is not this user's alone
     * ({@link LocalTrust}).
     */
    public static TrainerClient connect(Path socket, int rank, int world, String job, Options options) throws IOException {
        LocalTrust.checkSocket(socket);
        Arena arena = Arena.ofShared();
        MemorySegment buffer = options.receiveBufferBytes() > 0 ? arena.allocate(options.receiveBufferBytes(), 64) : null;
        var ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        FeedProtocol.FrameReader in = null;
        try {
            ch.connect(UnixDomainSocketAddress.of(socket));
            var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, rank, world,
                    options.sharedMemory() ? FeedProtocol.FLAG_SHARED_MEMORY : 0, options.resume(), options.fingerprint(), job,
                    options.resumeStep());
            sayHello(ch, rank, hello);
            in = new FeedProtocol.FrameReader(ch, SPIN_NANOS);
            if (options.timeout() != null) in.deadline(System.nanoTime() + options.timeout().toNanos());
            FeedProtocol.Frame f;
            FeedProtocol.Welcome welcome;
            try {
                f = in.next();
                if (f.type() == FeedProtocol.ERROR)
                    throw new IOException("service refused rank " + rank + ": " + FeedProtocol.utf8(in.small(f)));
                if (f.type() != FeedProtocol.WELCOME) throw new IOException("expected WELCOME, got frame type " + f.type());
                welcome = FeedProtocol.Welcome.decode(in.small(f));
            } catch (java.net.SocketTimeoutException e) {
                throw timedOut(options.timeout(), socket, "its WELCOME");
            }
            var client = new TrainerClient(ch, in, welcome, arena, rank, world, job, options.timeout());
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

    /** How long a HELLO that could not be sent waits for the ERROR the service sent before closing. */
    static final long REFUSAL_READ_NANOS = 2_000_000_000L;

    /**
     * Sends the HELLO. A service that refuses a connection at once (over its connection cap) writes its
     * ERROR and closes before the HELLO is sent, so the write fails with a broken pipe while the ERROR
     * is already in this socket's receive queue: it is read (bounded by {@link #REFUSAL_READ_NANOS}) and
     * reported instead of the bare pipe error.
     */
    static void sayHello(SocketChannel ch, int rank, FeedProtocol.Hello hello) throws IOException {
        try {
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, hello.encode());
        } catch (IOException sendFailed) {
            String said;
            FeedProtocol.FrameReader in = null;
            try {
                in = new FeedProtocol.FrameReader(ch, SPIN_NANOS);
                in.deadline(System.nanoTime() + REFUSAL_READ_NANOS);
                var f = in.next();
                if (f.type() != FeedProtocol.ERROR) throw sendFailed;
                said = FeedProtocol.utf8(in.small(f));
            } catch (IOException | RuntimeException nothingSaid) {
                if (nothingSaid != sendFailed) sendFailed.addSuppressed(nothingSaid);
                throw sendFailed;
            } finally {
                if (in != null) in.close();
            }
            throw new IOException("service refused rank " + rank + ": " + said, sendFailed);
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
        FeedProtocol.Timing timing = null;
        if (timingPending) {
            if (lastWasReplay) replayStepNanos.add(start - lastReturnNanos); // a replayed step: the compute floor's
            else timing = new FeedProtocol.Timing(lastWaitNanos, start - lastReturnNanos);
            timingPending = false;
            lastWasReplay = false;
        }
        if (headspacePhase == HeadspacePhase.REPLAYING) {
            if (timing != null) heldTiming = timing; // the last real step's: sent with the first request after the replay
            timing = null;
            if (replayed < replaySteps) return replay(start);
            endReplay();
        }
        if (timing == null && heldTiming != null) {
            timing = heldTiming;
            heldTiming = null;
        }
        if (pendingFloorNanos >= 0 && timing != null && welcome.takesHeadspace()) {
            timing = new FeedProtocol.Timing(timing.waitNanos(), timing.stepNanos(), pendingFloorNanos, replayStepNanos.size());
            pendingFloorNanos = -1;
            headspaceReported = true;
        }
        if (timeout != null) in.deadline(start + timeout.toNanos());
        try {
            Received r = receive(start, timing);
            if (r != null && headspacePhase == HeadspacePhase.CACHING) keepForReplay();
            return r;
        } catch (java.net.SocketTimeoutException e) {
            channel.close(); // the stream may have stopped inside a frame: nothing more can be read from it
            throw timedOut(timeout, null, "batch " + consumed + " of rank " + rank);
        }
    }

    private static java.net.SocketTimeoutException timedOut(java.time.Duration timeout, Path socket, String what) {
        return new java.net.SocketTimeoutException("timed out after " + timeout.toMillis() / 1000.0 + " s waiting for the Stoker service"
                + (socket == null ? "" : " at " + socket) + " to send " + what + " (TrainerClient.Options.withTimeout; the connection is closed, "
                + "resume from state() on a new one)");
    }

    private Received receive(long start, FeedProtocol.Timing timing) throws IOException {
        sendReleasesAndNext(timing);
        var f = in.next();
        lastFrameHeaderNanos = System.nanoTime();
        switch (f.type()) {
            case FeedProtocol.END -> {
                evictMappings(null); // the feed is over: what the service deleted goes now, not at close
                return null;
            }
            case FeedProtocol.ERROR -> throw new IOException("service error: " + FeedProtocol.utf8(in.small(f)));
            case FeedProtocol.BATCH -> {
                if (buffer == null || buffer.byteSize() < f.length())
                    buffer = arena.allocate(Math.max(f.length(), buffer == null ? 0 : 2 * buffer.byteSize()), 64);
                in.into(buffer.asSlice(0, f.length()).asByteBuffer());
                bytesReceived += f.length();
                consumed++;
                lastBatchBytes = buffer.asSlice(0, f.length());
                var batch = BatchLayout.read(lastBatchBytes);
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
                evictMappings(m);
                consumed++;
                lastBatchBytes = m.segment.asSlice(ref.offset(), ref.length());
                var batch = BatchLayout.read(lastBatchBytes);
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

    // ---- headspace: the compute floor, measured on replayed copies of the first batches ----

    private enum HeadspacePhase { OFF, CACHING, REPLAYING, DONE }

    private HeadspacePhase headspacePhase = HeadspacePhase.OFF;
    private int cacheBatches, replaySteps, replayed;
    private Arena headspaceArena;
    private final List<BatchLayout.Batch> kept = new ArrayList<>();
    private final List<Long> replayStepNanos = new ArrayList<>();
    private boolean lastWasReplay;
    private FeedProtocol.Timing heldTiming;
    private long pendingFloorNanos = -1, computeFloorNanos = -1;
    private boolean headspaceReported;
    private MemorySegment lastBatchBytes; // the bytes of the batch receive() returned last

    /**
     * Measures this trainer's compute floor (headspace analysis, as SPDL's {@code CacheDataLoader}): the next
     * {@code cacheBatches} batches from the service are returned as usual and a private copy of each is kept (the copy's
     * time is part of those steps' wait); the {@code replaySteps} calls after them return those copies again, round robin,
     * without asking the service; then the copies are freed and batches come from the service again. A replayed batch is
     * valid until the next call (as a copied one). The median compute of the replayed steps, {@link #computeFloorNanos()},
     * goes to the service with the next request (docs/protocol.md, NEXT) when its WELCOME says it takes it; its verdict
     * then says how much per step the data side can win at most. Replayed steps are not reported as steps and move no
     * cursor ({@link #state()}). Call before the first {@link #next()}; at most 1024 batches are kept.
     */
    public TrainerClient headspace(int cacheBatches, int replaySteps) {
        if (cacheBatches < 1 || cacheBatches > 1024 || replaySteps < 1)
            throw new IllegalArgumentException("headspace needs 1 to 1024 batches to keep and at least 1 replayed step, got "
                    + cacheBatches + " and " + replaySteps);
        if (headspacePhase != HeadspacePhase.OFF || consumed > 0)
            throw new IllegalStateException("headspace is set once, before the first batch");
        this.cacheBatches = cacheBatches;
        this.replaySteps = replaySteps;
        headspacePhase = HeadspacePhase.CACHING;
        headspaceArena = Arena.ofShared();
        return this;
    }

    private void keepForReplay() {
        var copy = headspaceArena.allocate(lastBatchBytes.byteSize(), 64);
        copy.copyFrom(lastBatchBytes);
        kept.add(BatchLayout.read(copy));
        if (kept.size() == cacheBatches) headspacePhase = HeadspacePhase.REPLAYING;
        long now = System.nanoTime(); // the copy is part of this step's wait
        lastWaitNanos += now - lastReturnNanos;
        lastReturnNanos = now;
    }

    private Received replay(long start) {
        var batch = kept.get(replayed % kept.size());
        replayed++;
        lastReturnNanos = System.nanoTime();
        lastWaitNanos = lastReturnNanos - start;
        timingPending = true;
        lastWasReplay = true;
        return new Received(batch, 0, null);
    }

    private void endReplay() {
        headspacePhase = HeadspacePhase.DONE;
        kept.clear();
        headspaceArena.close(); // a replayed batch was valid until this call
        headspaceArena = null;
        var sorted = replayStepNanos.stream().mapToLong(Long::longValue).sorted().toArray();
        int n = sorted.length;
        if (n > 0) {
            computeFloorNanos = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
            pendingFloorNanos = computeFloorNanos;
        }
    }

    /** The compute floor once the replay is over (the median compute of the replayed steps), else −1. */
    public long computeFloorNanos() { return computeFloorNanos; }

    /** The compute of each replayed step so far, in order. */
    public List<Long> replayStepNanos() { return List.copyOf(replayStepNanos); }

    /** Batches returned from the headspace copies, without a request. */
    public int replayed() { return replayed; }

    /** Whether the compute floor went to the service (false: not yet, or a service that does not take it). */
    public boolean headspaceReported() { return headspaceReported; }

    /** Nanoseconds the last {@link #next()} that returned a batch was blocked (what the next request reports as wait_ns). */
    public long lastWaitNanos() { return lastWaitNanos; }

    /**
     * The mapping of {@code path}: the cached one while the file there is still the one mapped (same
     * {@code fileKey} and size), else a new one of the file there now, after {@link LocalTrust#checkSegment}.
     */
    private Mapping mapping(String path) throws IOException {
        var file = Path.of(path);
        var attrs = LocalTrust.checkSegment(file);
        Mapping m = mappings.get(path);
        if (m != null && !m.sameFile(attrs)) { // replaced at the same path (#31): map what is there now
            mappings.remove(path);
            retire(m);
            m = null;
        }
        if (m == null) {
            m = new Mapping(file, attrs);
            mappings.put(path, m);
        }
        m.lastUsedRef = refsReceived;
        return m;
    }

    /**
     * Unmaps the mappings not in use whose file the service deleted or replaced (#20: their memory
     * is freed only when the last mapping goes), or that were not referenced in the last
     * {@link #MAPPING_IDLE_REFS} references. {@code current} was just checked.
     */
    private void evictMappings(Mapping current) {
        for (Iterator<Mapping> it = mappings.values().iterator(); it.hasNext(); ) {
            Mapping m = it.next();
            if (m == current || m.inUse > 0) continue;
            if (refsReceived - m.lastUsedRef > MAPPING_IDLE_REFS || !m.sameFile(attributesOrNull(m.file))) {
                it.remove();
                m.arena.close();
            }
        }
    }

    private static BasicFileAttributes attributesOrNull(Path file) {
        try {
            return Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (IOException e) {
            return null; // deleted (or unreadable): not the file mapped any more
        }
    }

    /** Drops {@code m} from use: unmapped now when nothing views it, else when its last {@link Received} closes. */
    private void retire(Mapping m) {
        if (m.inUse == 0) {
            m.arena.close();
        } else {
            m.retired = true;
            retired.add(m);
        }
    }

    /** Pending releases and NEXT in one write: one system call, and the service wakes once. */
    private void sendReleasesAndNext(FeedProtocol.Timing timing) throws IOException {
        int n = Math.min(pendingReleases.size(), MAX_RELEASES_PER_FRAME);
        var out = ByteBuffer.allocate(2 * 12 + 8 * n + FeedProtocol.Timing.HEADSPACE_BYTES).order(ByteOrder.LITTLE_ENDIAN);
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

    /** Segment files mapped now (including replaced ones a {@link Received} still views). */
    public int mappedSegments() { return mappings.size() + retired.size(); }

    /** Bytes of segment files mapped now (including replaced ones a {@link Received} still views). */
    public long mappedBytes() {
        long n = 0;
        for (Mapping m : mappings.values()) n += m.segment.byteSize();
        for (Mapping m : retired) n += m.segment.byteSize();
        return n;
    }

    /** When the last reply's frame header arrived ({@link System#nanoTime()}): splits a wait into queueing and transfer. */
    public long lastFrameHeaderNanos() { return lastFrameHeaderNanos; }

    /**
     * Sends pending releases and BYE, closes the socket and unmaps every segment (views become
     * invalid). A second call does nothing, as {@link java.io.Closeable} asks (e.g. a close inside
     * try-with-resources).
     */
    @Override
    public void close() throws IOException {
        if (closed) return;
        closed = true;
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
            for (Mapping m : retired) m.arena.close();
            retired.clear();
            if (headspaceArena != null) headspaceArena.close();
            arena.close();
        }
    }
}
