package dev.stoker.transport;

import dev.stoker.core.ScheduleCursor;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;

/**
 * The local trainer protocol (version 5): length-prefixed frames over a stream socket (a Unix
 * domain socket). A frame is {@code type:u32 | length:u64 | payload}, little-endian. The full
 * specification, with every payload, is {@code docs/protocol.md}.
 *
 * <pre>
 *  trainer                                   service
 *    HELLO  (version, rank, world, flags, resume cursor, fingerprint, job) ──►
 *                       ◄── WELCOME (version, delivery, expected bytes, next step, fingerprint, steps/epoch, cursor, sizes) or ERROR
 *    RELEASE (lease…)   ──►   (no reply; leases of batches the trainer no longer reads)
 *    NEXT   ([wait_ns, step_ns[, floor_ns, floor_steps]]) ──►   (the trainer's measurement of the step before, or empty)
 *                       ◄── BATCH (STKB bytes, copy delivery) | REF (lease, offset, length, path, header) | END | ERROR
 *    …
 *    BYE    ()          ──►
 * </pre>
 * WELCOME may be held back until the service's pipeline is up, so that a trainer's first NEXT
 * measures a cold start.
 */
public final class FeedProtocol {
    public static final int VERSION = 5;

    public static final int HELLO = 1, NEXT = 2, BYE = 3, RELEASE = 4;
    public static final int WELCOME = 11, BATCH = 12, END = 13, ERROR = 14, REF = 15;

    /** HELLO flag: the trainer maps shared-memory segments and accepts REF frames. */
    public static final int FLAG_SHARED_MEMORY = 1;
    /** HELLO flag: the resume cursor is valid. */
    public static final int FLAG_RESUME = 2;
    /** HELLO flag: {@code resume_step}, the trainer's label of the step at the resume cursor, is valid. */
    public static final int FLAG_RESUME_STEP = 4;

    /** WELCOME delivery: batches are copied in BATCH frames, or referenced in REF frames. */
    public static final int DELIVERY_COPY = 0, DELIVERY_SHARED_MEMORY = 1;

    /**
     * WELCOME feature bit: the service takes a NEXT of {@link Timing#HEADSPACE_BYTES} bytes, a timing with the trainer's
     * measured compute floor (headspace analysis). A trainer sends that form only to a service that says so: a service
     * from before it answers ERROR to a NEXT of that length.
     */
    public static final long FEATURE_HEADSPACE = 1;
    /** The features this service has: what its WELCOME says. */
    public static final long FEATURES = FEATURE_HEADSPACE;

    /**
     * A trainer's HELLO. {@code resume} is null unless the trainer resumes from a saved state;
     * {@code resumeStep} is −1 unless it also gives its label of the step there.
     */
    public record Hello(int version, int rank, int world, int flags, ScheduleCursor resume, long fingerprint, String job, long resumeStep) {
        public Hello(int version, int rank, int world, int flags, ScheduleCursor resume, long fingerprint, String job) {
            this(version, rank, world, flags, resume, fingerprint, job, -1);
        }

        public boolean sharedMemory() { return (flags & FLAG_SHARED_MEMORY) != 0; }

        public ByteBuffer encode() {
            byte[] name = job.getBytes(StandardCharsets.UTF_8);
            boolean step = resume != null && resumeStep >= 0;
            return ByteBuffer.allocate(48 + name.length).order(ByteOrder.LITTLE_ENDIAN).putInt(version).putInt(rank).putInt(world)
                    .putInt(flags | (resume != null ? FLAG_RESUME : 0) | (step ? FLAG_RESUME_STEP : 0))
                    .putLong(resume == null ? 0 : resume.epoch()).putLong(resume == null ? 0 : resume.position()).putLong(fingerprint)
                    .putLong(step ? resumeStep : 0).put(name).flip();
        }

        /** Decodes a HELLO payload; only the version is read when it is not ours. */
        static Hello decode(ByteBuffer p) throws java.io.IOException {
            if (p.remaining() < 4) throw new ProtocolException("HELLO of " + p.remaining() + " bytes");
            int version = p.getInt();
            if (version != VERSION) return new Hello(version, -1, -1, 0, null, 0, "");
            if (p.remaining() < 44) throw new ProtocolException("HELLO of " + (p.remaining() + 4) + " bytes; version " + VERSION + " needs at least 48");
            int rank = p.getInt(), world = p.getInt(), flags = p.getInt();
            long epoch = p.getLong(), position = p.getLong(), fingerprint = p.getLong(), step = p.getLong();
            ScheduleCursor resume = null;
            if ((flags & FLAG_RESUME) != 0) {
                if (epoch < 0 || position < 0) throw new ProtocolException("HELLO resumes at a negative cursor");
                resume = new ScheduleCursor(epoch, position);
            }
            long resumeStep = -1;
            if ((flags & FLAG_RESUME_STEP) != 0) {
                if (resume == null) throw new ProtocolException("HELLO gives a resume step without a resume cursor");
                if (step < 0) throw new ProtocolException("HELLO resumes at a negative step");
                resumeStep = step;
            }
            return new Hello(version, rank, world, flags, resume, fingerprint, utf8(p), resumeStep);
        }
    }

    /**
     * The service's WELCOME: how batches come, where the trainer starts ({@code nextStep}, a label;
     * {@code epoch}/{@code position}, the cursor of its next batch) and what a client needs to follow
     * the cursor itself: after each batch it advances by {@code positionsPerStep} (ranks × batch
     * size), and to the next epoch's start when less than one step is left of {@code datasetSize}.
     */
    public record Welcome(int version, int delivery, long expectedBatchBytes, long nextStep, long fingerprint, long stepsPerEpoch,
                          long epoch, long position, long datasetSize, long positionsPerStep, long features) {
        /** What this version writes: the 72 bytes every version-5 service sends, then {@code features u64}. */
        static final int BYTES = 80;
        /** What a version-5 service from before {@code features} sends (a client reads its features as 0). */
        static final int MIN_BYTES = 72;

        /** A WELCOME that offers no feature (as a service from before {@code features}). */
        public Welcome(int version, int delivery, long expectedBatchBytes, long nextStep, long fingerprint, long stepsPerEpoch,
                       long epoch, long position, long datasetSize, long positionsPerStep) {
            this(version, delivery, expectedBatchBytes, nextStep, fingerprint, stepsPerEpoch, epoch, position, datasetSize, positionsPerStep, 0);
        }

        /** Whether the service takes the trainer's compute floor with a NEXT ({@link #FEATURE_HEADSPACE}). */
        public boolean takesHeadspace() { return (features & FEATURE_HEADSPACE) != 0; }

        ByteBuffer encode() {
            return ByteBuffer.allocate(BYTES).order(ByteOrder.LITTLE_ENDIAN).putInt(version).putInt(delivery)
                    .putLong(expectedBatchBytes).putLong(nextStep).putLong(fingerprint).putLong(stepsPerEpoch)
                    .putLong(epoch).putLong(position).putLong(datasetSize).putLong(positionsPerStep).putLong(features).flip();
        }

        /** Decodes a WELCOME of at least {@link #MIN_BYTES} bytes; bytes after the fields this version knows are ignored. */
        static Welcome decode(ByteBuffer p) throws java.io.IOException {
            if (p.remaining() < MIN_BYTES) throw new java.io.IOException("WELCOME of " + p.remaining() + " bytes, expected at least " + MIN_BYTES);
            var w = new Welcome(p.getInt(), p.getInt(), p.getLong(), p.getLong(), p.getLong(), p.getLong(), p.getLong(), p.getLong(),
                    p.getLong(), p.getLong());
            return p.remaining() >= 8 ? new Welcome(w.version, w.delivery, w.expectedBatchBytes, w.nextStep, w.fingerprint, w.stepsPerEpoch,
                    w.epoch, w.position, w.datasetSize, w.positionsPerStep, p.getLong()) : w;
        }

        /** The cursor where this trainer starts. */
        public ScheduleCursor cursor() { return new ScheduleCursor(epoch, position); }

        /**
         * The cursor {@code steps} batches after {@code c}, by the schedule's rule (drop_last at the end of each epoch).
         * Arithmetic, not a walk (audit #28: a client's state after 10^7 batches walked 10^7 steps); the same
         * result as taking one step at a time. Steps ≤ 0, and a schedule without steps, leave the cursor.
         */
        public ScheduleCursor advance(ScheduleCursor c, long steps) {
            long pps = positionsPerStep, n = datasetSize, pos = c.position();
            if (pps <= 0 || n <= 0 || steps <= 0) return c;
            // steps until this epoch ends: the first k ≥ 1 with pos + k·pps + pps > n
            long toEnd = pos > n - pps ? 1 : (n - pps - pos) / pps + 1;
            if (steps < toEnd) return new ScheduleCursor(c.epoch(), pos + steps * pps);
            // from the next epoch's start an epoch is max(1, n / pps) steps (one when a step is larger than it)
            long rest = steps - toEnd, perEpoch = Math.max(1, n / pps);
            return new ScheduleCursor(Math.addExact(c.epoch(), 1 + rest / perEpoch), rest % perEpoch * pps);
        }
    }

    /** A REF: where a batch lies in shared memory, and a copy of its header and descriptor table. */
    public record Ref(long lease, long offset, long length, String path, ByteBuffer header) {
        ByteBuffer encode() {
            byte[] p = path.getBytes(StandardCharsets.UTF_8);
            var b = ByteBuffer.allocate(28 + p.length + header.remaining()).order(ByteOrder.LITTLE_ENDIAN);
            return b.putLong(lease).putLong(offset).putLong(length).putInt(p.length).put(p).put(header.duplicate()).flip();
        }

        static Ref decode(ByteBuffer p) throws java.io.IOException {
            if (p.remaining() < 28) throw new java.io.IOException("REF of " + p.remaining() + " bytes");
            long lease = p.getLong(), offset = p.getLong(), length = p.getLong();
            int n = p.getInt();
            if (n < 0 || n > p.remaining()) throw new java.io.IOException("REF path of " + n + " bytes");
            byte[] path = new byte[n];
            p.get(path);
            return new Ref(lease, offset, length, new String(path, StandardCharsets.UTF_8), p.slice().order(ByteOrder.LITTLE_ENDIAN));
        }
    }

    /**
     * A trainer's measurement of one step, carried by the NEXT after it: {@code waitNanos} the time it
     * was blocked in the client call that returned the batch, {@code stepNanos} the time from that
     * call's return to this NEXT (its compute). Both are unsigned on the wire and must fit a long.
     * With {@code floorSteps > 0} it also carries the trainer's headspace report: {@code floorNanos}, the median
     * compute of {@code floorSteps} steps on batches it replayed from its own copies without asking the service (its
     * compute floor with no wait for data; docs/protocol.md, NEXT).
     */
    public record Timing(long waitNanos, long stepNanos, long floorNanos, long floorSteps) {
        /** The payload length of a NEXT that carries a timing; the other allowed lengths are 0 and {@link #HEADSPACE_BYTES}. */
        public static final int BYTES = 16;
        /** The payload length of a NEXT that carries a timing and a headspace report ({@link FeedProtocol#FEATURE_HEADSPACE}). */
        public static final int HEADSPACE_BYTES = 32;

        /** A timing without a headspace report. */
        public Timing(long waitNanos, long stepNanos) { this(waitNanos, stepNanos, 0, 0); }

        /** Whether this timing carries a headspace report. */
        public boolean hasHeadspace() { return floorSteps > 0; }

        public ByteBuffer encode() {
            var b = ByteBuffer.allocate(hasHeadspace() ? HEADSPACE_BYTES : BYTES).order(ByteOrder.LITTLE_ENDIAN).putLong(waitNanos).putLong(stepNanos);
            if (hasHeadspace()) b.putLong(floorNanos).putLong(floorSteps);
            return b.flip();
        }

        /**
         * Decodes a NEXT payload of {@link #BYTES} or {@link #HEADSPACE_BYTES} bytes; refuses a value over 2^63 − 1 ns (292
         * years: not a measurement) and a headspace report of no step.
         */
        static Timing decode(ByteBuffer p) throws IOException {
            if (p.remaining() != BYTES && p.remaining() != HEADSPACE_BYTES) throw new ProtocolException("NEXT payload of " + p.remaining()
                    + " bytes; version " + VERSION + " sends 0, " + BYTES + " (wait_ns u64, step_ns u64) or " + HEADSPACE_BYTES
                    + " (wait_ns, step_ns, floor_ns, floor_steps u64)");
            boolean headspace = p.remaining() == HEADSPACE_BYTES;
            long wait = p.getLong(), step = p.getLong();
            if (wait < 0 || step < 0) throw new ProtocolException("NEXT timing out of range: wait_ns " + Long.toUnsignedString(wait)
                    + ", step_ns " + Long.toUnsignedString(step));
            if (!headspace) return new Timing(wait, step);
            long floor = p.getLong(), floorSteps = p.getLong();
            if (floor < 0 || floorSteps <= 0) throw new ProtocolException("NEXT headspace report out of range: floor_ns "
                    + Long.toUnsignedString(floor) + ", floor_steps " + Long.toUnsignedString(floorSteps) + " (at least 1)");
            return new Timing(wait, step, floor, floorSteps);
        }
    }

    static final int FRAME_HEADER_BYTES = 12;

    /** The most payload bytes of a frame a trainer sends (every type: HELLO, NEXT, BYE, RELEASE). */
    public static final int MAX_TRAINER_FRAME_BYTES = 1 << 20;

    /** The most lease ids one RELEASE carries: a frame of {@link #MAX_TRAINER_FRAME_BYTES}. */
    public static final int MAX_RELEASES_PER_FRAME = MAX_TRAINER_FRAME_BYTES / 8;

    /**
     * A peer's bytes broke the protocol (a length or count out of bounds, a payload that does not
     * parse): the service answers ERROR with this message and closes that connection only; unlike
     * other IOExceptions it does not mean the peer went away.
     */
    public static final class ProtocolException extends IOException {
        public ProtocolException(String message) { super(message); }
    }

    /** "type 1, HELLO", or "type 99" for a type the protocol does not have. */
    static String describe(int type) {
        String name = typeName(type);
        return name.startsWith("type ") ? name : "type " + type + ", " + name;
    }

    /** A frame type's name for messages ("type 1, HELLO"; unknown types by number only). */
    static String typeName(int type) {
        String name = switch (type) {
            case HELLO -> "HELLO";
            case NEXT -> "NEXT";
            case BYE -> "BYE";
            case RELEASE -> "RELEASE";
            case WELCOME -> "WELCOME";
            case BATCH -> "BATCH";
            case END -> "END";
            case ERROR -> "ERROR";
            case REF -> "REF";
            default -> null;
        };
        return name == null ? "type " + Integer.toUnsignedString(type) : name;
    }

    /** A received frame header. */
    public record Frame(int type, long length) {}

    private FeedProtocol() {}

    /** Writes one frame with a single gathering write (header and payload in one system call where the channel allows). */
    public static void writeFrame(WritableByteChannel ch, int type, ByteBuffer payload) throws IOException {
        var header = ByteBuffer.allocate(FRAME_HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        header.putInt(type).putLong(payload == null ? 0 : payload.remaining()).flip();
        if (payload == null || !(ch instanceof java.nio.channels.GatheringByteChannel g)) {
            writeFully(ch, header);
            if (payload != null) writeFully(ch, payload);
            return;
        }
        var both = new ByteBuffer[] {header, payload};
        while (header.hasRemaining() || payload.hasRemaining()) g.write(both); // an empty payload still sends its header (#24)
    }

    /** Appends a frame to {@code out} (for several small frames sent in one write). */
    public static ByteBuffer appendFrame(ByteBuffer out, int type, ByteBuffer payload) {
        out.order(ByteOrder.LITTLE_ENDIAN).putInt(type).putLong(payload == null ? 0 : payload.remaining());
        if (payload != null) out.put(payload.duplicate());
        return out;
    }

    public static void writeFully(WritableByteChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) ch.write(buf);
    }

    /**
     * Reads frames through a buffer, so that a small frame and its payload (and any frame behind it
     * already sent) cost one system call instead of two or three.
     *
     * <p>Threading: one reader per connection, used by one thread at a time.
     */
    public static final class FrameReader {
        /** The size of the read buffer. */
        public static final int BUFFER_BYTES = 64 << 10;
        private final ReadableByteChannel ch;
        private final ByteBuffer buf;
        private final java.nio.channels.Selector selector;
        private final long spinNanos;
        private boolean hasDeadline;
        private long deadlineNanos; // System.nanoTime() past which a read fails, when hasDeadline

        /** Reads a blocking channel, through a direct buffer of its own (freed by the garbage collector). */
        public FrameReader(ReadableByteChannel ch) {
            this(ch, ByteBuffer.allocateDirect(BUFFER_BYTES));
        }

        /**
         * Reads a blocking channel through {@code buffer} ({@link #BUFFER_BYTES} or more), which the
         * caller owns: a server frees it with the connection (a peer reconnecting in a loop must not
         * leave 64 KiB per connection waiting for a garbage collection).
         */
        public FrameReader(ReadableByteChannel ch, ByteBuffer buffer) {
            if (buffer.capacity() < BUFFER_BYTES) throw new IllegalArgumentException("a read buffer needs " + BUFFER_BYTES + " bytes");
            this.ch = ch;
            this.buf = buffer.clear().order(ByteOrder.LITTLE_ENDIAN);
            this.selector = null;
            this.spinNanos = 0;
            buf.limit(0);
        }

        /**
         * Reads a non-blocking socket channel: when no byte is there, polls for up to
         * {@code spinNanos} before parking in a selector. A trainer waiting for its batch spins for a
         * few tens of microseconds instead of paying a process wake-up (about 20 µs on a VM) on
         * every hand-off; past that it sleeps, so a slow batch costs no CPU.
         */
        public FrameReader(java.nio.channels.SocketChannel ch, long spinNanos) throws IOException {
            ch.configureBlocking(false);
            this.ch = ch;
            this.buf = ByteBuffer.allocateDirect(BUFFER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            this.selector = java.nio.channels.Selector.open();
            ch.register(selector, java.nio.channels.SelectionKey.OP_READ);
            this.spinNanos = spinNanos;
            buf.limit(0);
        }

        /**
         * Makes every read of a non-blocking reader fail with {@link java.net.SocketTimeoutException}
         * once {@link System#nanoTime()} passes {@code deadlineNanos}: one deadline for a whole request,
         * however the peer trickles its bytes. A blocking reader has no deadline (use the socket's own).
         */
        public void deadline(long deadlineNanos) {
            if (selector == null) throw new IllegalStateException("a blocking reader has no deadline");
            this.hasDeadline = true;
            this.deadlineNanos = deadlineNanos;
        }

        /** Reads wait as long as it takes (the default). */
        public void noDeadline() { hasDeadline = false; }

        /** Closes the selector of a non-blocking reader. */
        public void close() throws IOException {
            if (selector != null) selector.close();
        }

        /** One read that makes progress: returns bytes read (> 0), or throws at end of stream. */
        private int read(ByteBuffer dst) throws IOException {
            int n = ch.read(dst);
            if (n != 0 || selector == null) {
                if (n < 0) throw new EOFException("peer closed the connection");
                return n;
            }
            long start = System.nanoTime();
            while (System.nanoTime() - start < spinNanos) {
                Thread.onSpinWait();
                n = ch.read(dst);
                if (n < 0) throw new EOFException("peer closed the connection");
                if (n > 0) return n;
            }
            while (true) {
                if (hasDeadline) {
                    long left = deadlineNanos - System.nanoTime();
                    if (left <= 0) throw new java.net.SocketTimeoutException("no answer within the deadline");
                    selector.select(Math.max(1, Math.ceilDiv(left, 1_000_000)));
                } else {
                    selector.select();
                }
                // an interrupted thread's select returns at once: end the wait instead of spinning
                if (Thread.currentThread().isInterrupted()) throw new java.io.InterruptedIOException("interrupted while waiting for the peer");
                selector.selectedKeys().clear();
                n = ch.read(dst);
                if (n < 0) throw new EOFException("peer closed the connection");
                if (n > 0) return n;
            }
        }

        /**
         * Waits until {@code done} completes while watching the peer of {@code sc} (the blocking
         * channel this reader reads): throws EOFException as soon as the peer closes, so that a
         * trainer that died while its request was being served is noticed at once, not when its
         * answer is written. Bytes that arrive meanwhile are kept for the next frames. {@code done}
         * completing wakes the wait at once; {@code pollMillis} only bounds each select (before, the
         * wait saw {@code done} at the select's next timeout: a batch made while its trainer waited
         * reached it a median 35 ms late at a 50-ms poll, docs/benchmarks.md).
         */
        public void awaitWatchingPeer(java.nio.channels.SocketChannel sc, java.util.concurrent.CompletableFuture<?> done, long pollMillis)
                throws IOException {
            if (done.isDone() || selector != null) return;
            sc.configureBlocking(false);
            try (var watch = java.nio.channels.Selector.open()) {
                sc.register(watch, java.nio.channels.SelectionKey.OP_READ);
                // a wakeup after the selector is closed does nothing (the JDK's selectors ignore it)
                done.whenComplete((value, error) -> watch.wakeup());
                while (!done.isDone()) {
                    if (watch.select(pollMillis) == 0) continue;
                    watch.selectedKeys().clear();
                    if (buf.limit() == buf.capacity() && buf.position() == 0) { // full: the rest waits in the socket
                        sc.keyFor(watch).interestOps(0);
                        continue;
                    }
                    buf.compact();
                    int n;
                    try {
                        n = sc.read(buf);
                    } finally {
                        buf.flip();
                    }
                    if (n < 0) throw new EOFException("peer closed the connection");
                }
            } finally {
                sc.configureBlocking(true); // the selector is closed, so the channel is deregistered
            }
        }

        /** The next frame's header; a length over 2^63 − 1 is a {@link ProtocolException}. */
        public Frame next() throws IOException {
            ensure(FRAME_HEADER_BYTES);
            int type = buf.getInt();
            long length = buf.getLong();
            if (length < 0) throw new ProtocolException("bad frame length " + Long.toUnsignedString(length) + " (" + describe(type)
                    + "): frames a trainer sends are at most " + MAX_TRAINER_FRAME_BYTES + " bytes");
            return new Frame(type, length);
        }

        /**
         * The payload of a small frame (at most {@link #MAX_TRAINER_FRAME_BYTES}), in a buffer of its
         * own; a longer one is a {@link ProtocolException}, refused before anything is allocated or read.
         */
        public ByteBuffer small(Frame f) throws IOException {
            if (f.length() > MAX_TRAINER_FRAME_BYTES) throw new ProtocolException(typeName(f.type()) + " frame of " + f.length()
                    + " bytes: frames a trainer sends are at most " + MAX_TRAINER_FRAME_BYTES + " bytes");
            var out = ByteBuffer.allocate((int) f.length()).order(ByteOrder.LITTLE_ENDIAN);
            into(out);
            return out.flip();
        }

        /** Fills {@code dst} with the next payload bytes: what is buffered first, then straight from the channel. */
        public void into(ByteBuffer dst) throws IOException {
            int n = Math.min(buf.remaining(), dst.remaining());
            if (n > 0) {
                var slice = buf.slice(buf.position(), n);
                dst.put(slice);
                buf.position(buf.position() + n);
            }
            while (dst.hasRemaining()) read(dst);
        }

        private void ensure(int n) throws IOException {
            if (buf.remaining() >= n) return;
            buf.compact();
            while (buf.position() < n) read(buf);
            buf.flip();
        }
    }

    public static void readFully(ReadableByteChannel ch, ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) if (ch.read(buf) < 0) throw new EOFException("peer closed the connection");
    }


    static ByteBuffer utf8(String s) {
        return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
    }

    static String utf8(ByteBuffer b) {
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
