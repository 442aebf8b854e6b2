package dev.stoker.flight;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;
import org.apache.arrow.flight.CallHeaders;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightProducer.CallContext;
import org.apache.arrow.flight.FlightProducer.ServerStreamListener;
import org.apache.arrow.flight.FlightServer;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.LocationSchemes;
import org.apache.arrow.flight.NoOpFlightProducer;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.flight.auth2.Auth2Constants;
import org.apache.arrow.flight.auth2.CallHeaderAuthenticator;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.ForeignAllocation;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.BitVectorHelper;
import org.apache.arrow.vector.LargeVarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * Serves each rank's batches to trainers on other nodes over Arrow Flight: every DoGet streams the
 * rank's next batch as one Arrow record batch with one row per tensor (docs/protocol.md, section 3).
 *
 * <p>Delivery: a DoGet takes the rank's next batch from the node's {@link BatchProvider} (or, where
 * the ticket names an object {@code job/key}, that object from the {@link ObjectLender}), copies its
 * tensors into Arrow buffers (one bulk copy per tensor, into a pooled block whose pages are already touched), releases
 * the lease and sends the record batch; gRPC writes the Arrow buffers to the socket without a further
 * copy. At the end of the feed it sends a stream with the schema and no record batch. A DoGet the
 * client cancels before its batch was copied hands the batch on to the session's (without a
 * session: the rank's) next DoGet, so a client that times out while the pipeline is slow loses
 * nothing. A ticket without a session is at most once: a batch already sent when the connection
 * breaks is lost. The provider refuses it for a rank a trainer holds (a socket trainer or a
 * session); the server takes one such DoGet per rank at a time, which bounds what cancelled ones
 * can leave behind to one batch per rank. A session's DoGets are exactly once (the ledger).
 *
 * <p>Threading: DoGet never blocks (Flight allows asynchronous streams). A batch that is ready is
 * copied and sent on the gRPC thread that took the DoGet; otherwise on a virtual thread once the
 * source's future completes, so that the pipeline's thread completing it does no copying. The send
 * does not wait for back-pressure: a stream is one batch, buffered by gRPC at most once per open DoGet.
 *
 * <p>Access ({@link Security}): with a token, every Flight call (DoGet, and the calls this server
 * leaves unimplemented) must carry {@code authorization: Bearer <token>}; Flight's header
 * middleware checks it before the call reaches the producer, so a refused caller takes no batch.
 * With a certificate chain and key the server speaks TLS. Without a token it trusts whoever can
 * reach the port ({@link Security#NONE}: tests only); every endpoint Stoker itself opens has one
 * ({@code FlightAccess} in stoker-node: the service's per-user token even on loopback; the benchmarks'
 * a random one, {@link #newToken}).
 */
public final class FlightBatchServer implements AutoCloseable {
    /**
     * The largest message a caller may send (gRPC refuses a larger one with RESOURCE_EXHAUSTED before
     * buffering it): callers send only tickets and session actions, a few hundred bytes, and Arrow's
     * own default (2 GiB) would let any caller make the service hold that much.
     */
    public static final int MAX_INBOUND_MESSAGE_BYTES = 1 << 20;

    /** Bytes of data-column blocks kept for reuse ({@link BlockPool}). */
    static final long POOL_KEEP_BYTES = 512L << 20;
    /** Shortest token accepted: 16 characters (64 bits as hex), short enough to paste, too long to guess. */
    public static final int MIN_TOKEN_CHARS = 16;

    private final BufferAllocator ownedRoot;
    private final BufferAllocator allocator;
    private final BatchProvider ranks;
    private final ObjectLender objects;
    private final BlockPool blocks = new BlockPool(POOL_KEEP_BYTES);
    private final ExecutorService senders = Executors.newThreadPerTaskExecutor(Thread.ofVirtual().name("stoker-flight-send-", 0).factory());
    /** gRPC's callbacks; ours, so that it is shut down only after the server has terminated. */
    private final ExecutorService grpcExecutor = Executors.newCachedThreadPool(Thread.ofPlatform().daemon().name("stoker-flight-grpc-", 0).factory());
    private final Set<PendingGet> pending = ConcurrentHashMap.newKeySet();
    /** Batches of cancelled DoGets, oldest first, per session, object or rank (tickets without a session); guarded by itself. */
    private final Map<String, ArrayDeque<CompletableFuture<Lent>>> unclaimed = new HashMap<>();
    /** Ranks with a DoGet without a session open (sent, handed back or refused closes it); guarded by itself. */
    private final Set<Integer> plainOpen = new java.util.HashSet<>();
    /** Open sessions by id; guarded by itself. */
    private final Map<String, Session> sessions = new HashMap<>();
    private volatile long sessionIdleNanos = SESSION_IDLE_NANOS;
    /** Connection ids of sessions: far above a socket server's, since both may serve one ledger. */
    private final AtomicLong nextConnection = new AtomicLong(1L << 48);
    private final AtomicLong batchesSent = new AtomicLong();
    private final AtomicLong bytesSent = new AtomicLong();
    private final FlightServer server;
    private volatile boolean closed;

    /**
     * Who may call and how the connection is protected.
     *
     * @param token      the bearer token every call must carry; null admits any caller (loopback use)
     * @param certChain  PEM certificate chain to serve TLS with; null (with a null key) for plaintext
     * @param privateKey PEM private key (PKCS#8) of the chain's first certificate
     */
    public record Security(String token, Path certChain, Path privateKey) {
        /** No token, plaintext: anyone who can reach the port is served; for tests, never an endpoint Stoker opens. */
        public static final Security NONE = new Security(null, null, null);

        public Security {
            if (token != null) checkToken(token);
            if ((certChain == null) != (privateKey == null))
                throw new IllegalArgumentException("TLS needs both the certificate chain and the private key");
        }

        public boolean tls() { return certChain != null; }

        /** Never shows the token. */
        @Override
        public String toString() {
            return "Security[token=" + (token == null ? "none" : "****") + ", tls=" + (tls() ? certChain : "off") + "]";
        }
    }

    /** A new random token: 32 bytes from {@link java.security.SecureRandom}, as 64 hex characters. */
    public static String newToken() {
        byte[] b = new byte[32];
        new java.security.SecureRandom().nextBytes(b);
        return java.util.HexFormat.of().formatHex(b);
    }

    /**
     * Refuses a token that cannot be sent as an HTTP/2 header value (printable ASCII without spaces)
     * or is too short to resist guessing; the message never contains the token.
     */
    public static void checkToken(String token) {
        if (token.length() < MIN_TOKEN_CHARS)
            throw new IllegalArgumentException("the token has " + token.length() + " characters; use at least " + MIN_TOKEN_CHARS
                    + " (e.g. openssl rand -hex 32)");
        for (int i = 0; i < token.length(); i++) {
            char c = token.charAt(i);
            if (c <= ' ' || c > '~')
                throw new IllegalArgumentException("the token may hold only printable ASCII without spaces (character " + (i + 1) + " is not)");
        }
    }

    /**
     * Objects a Flight server lends by name, as a cluster node lends the batches it made: a DoGet
     * whose ticket's job is {@code job/key} gets that object; the server releases it once copied.
     */
    @FunctionalInterface
    public interface ObjectLender {
        /** A hold on object {@code name}; IllegalArgumentException when there is none. */
        BatchProvider.Stored lend(String name);

        /**
         * What the server sends for object {@code name}, held until sent: by default {@link #lend}'s object; a lender that
         * passes on a batch it fetched from elsewhere (a relay) gives its tensors and what ends its hold on them.
         */
        default Lent loan(String name) { return Lent.of(lend(name)); }
    }

    /**
     * Further DoAction types a server answers (a cluster node's cache entries for its peers). Called on the server's
     * threads, after the token check.
     */
    @FunctionalInterface
    public interface Actions {
        /**
         * Answers action {@code type} with body {@code body} by passing each result's bytes to {@code results} (none:
         * an empty answer); false when {@code type} is not one of these actions. IllegalArgumentException: a bad request.
         */
        boolean answer(String type, byte[] body, java.util.function.Consumer<byte[]> results);
    }

    /** The further actions answered; null: none. */
    private volatile Actions actions;

    /** Answers {@code a}'s actions from now on (null: none). */
    public void serveActions(Actions a) { actions = a; }

    /** A batch the server holds until it has copied the tensors out ({@code done} ends the hold, once). */
    public record Lent(BatchLayout.Meta meta, List<Tensor> tensors, Runnable done) {
        static Lent of(BatchProvider.Delivery d) {
            return switch (d) {
                case null -> null;
                case BatchProvider.Prepared p -> new Lent(p.meta(), p.tensors(), () -> {});
                case BatchProvider.Stored s -> {
                    try {
                        var b = BatchLayout.read(s.batch());
                        yield new Lent(b.meta(), b.tensors(), s.release());
                    } catch (RuntimeException e) {
                        s.release().run();
                        throw e;
                    }
                }
            };
        }
    }

    private FlightBatchServer(Location location, BatchProvider ranks, ObjectLender objects, BufferAllocator parent, Security security)
            throws IOException {
        boolean tlsScheme = LocationSchemes.GRPC_TLS.equals(location.getUri().getScheme());
        if (tlsScheme != security.tls())
            throw new IllegalArgumentException(security.tls() ? "TLS files given for a plaintext location " + location.getUri()
                    : "location " + location.getUri() + " needs a certificate chain and key");
        if (ranks == null && objects == null) throw new IllegalArgumentException("nothing to serve: no ranks and no objects");
        this.ranks = ranks;
        this.objects = objects;
        this.ownedRoot = parent == null ? new RootAllocator() : null;
        this.allocator = (parent == null ? ownedRoot : parent).newChildAllocator("stoker-flight-server", 0, Long.MAX_VALUE);
        try {
            var builder = FlightServer.builder(allocator, location, new Producer()).executor(grpcExecutor)
                    .maxInboundMessageSize(MAX_INBOUND_MESSAGE_BYTES);
            if (security.token() != null) builder.headerAuthenticator(new BearerToken(security.token()));
            if (security.tls()) builder.useTls(security.certChain().toFile(), security.privateKey().toFile());
            server = builder.build().start();
        } catch (IOException | RuntimeException e) {
            grpcExecutor.shutdown();
            senders.close();
            allocator.close();
            if (ownedRoot != null) ownedRoot.close();
            throw e;
        }
    }

    /**
     * Starts serving the ranks of {@code ranks} on {@code location} (e.g. {@code Location.forGrpcInsecure("127.0.0.1", 0)};
     * port 0 picks a free port), and the objects of {@code objects} by name (either may be null, not both), to the callers
     * {@code security} admits; a TLS {@code security} needs a {@code grpc+tls} location ({@link Location#forGrpcTls}) and a
     * plaintext one a {@code grpc+tcp} location. Buffers come from a child of {@code allocator}, or of a private root
     * allocator when it is null.
     */
    public static FlightBatchServer start(Location location, BatchProvider ranks, ObjectLender objects, BufferAllocator allocator,
                                          Security security) throws IOException {
        return new FlightBatchServer(location, ranks, objects, allocator, security);
    }

    public int port() { return server.getPort(); }

    /** Sets how long a session may go without a DoGet before its rank may be claimed by another client. */
    public void sessionIdle(java.time.Duration idle) { sessionIdleNanos = idle.toNanos(); }

    /** Batches streamed to clients (end-of-feed streams not counted). */
    public long batchesSent() { return batchesSent.get(); }

    /** Tensor payload bytes streamed to clients (the {@code data} column). */
    public long bytesSent() { return bytesSent.get(); }

    /** DoGets waiting for their batch. */
    public int waitingGets() { return pending.size(); }

    /** Data-column blocks reused from the pool, and allocated fresh (each fresh one first-touches its pages). */
    long blocksReused() { return blocks.blocksReused(); }

    long blocksAllocated() { return blocks.blocksAllocated(); }

    /**
     * How long a session may go without a DoGet before another client may claim its rank (its
     * client died without saying goodbye), by default: longer than any training step ({@link #sessionIdle}).
     */
    static final long SESSION_IDLE_NANOS = TimeUnit.MINUTES.toNanos(5);

    /** A client's session: its rank, its connection id in the ledger, and whether a DoGet of it is open. */
    private static final class Session {
        final String id;
        final int rank;
        final long connection;
        long lastActive = System.nanoTime();
        boolean open; // a DoGet in progress: one at a time, as on the socket

        Session(String id, int rank, long connection) {
            this.id = id;
            this.rank = rank;
            this.connection = connection;
        }
    }

    /** One DoGet waiting for, or sending, its batch. Whoever wins {@code claimed} decides its fate. */
    private record PendingGet(int rank, ServerStreamListener listener, CompletableFuture<Lent> batch, AtomicBoolean claimed) {}

    /**
     * Admits calls whose {@code authorization} header is {@code Bearer <token>}. The comparison takes
     * the same time wherever the first wrong byte is ({@link MessageDigest#isEqual}: its time depends
     * only on the length of what the caller sent). Refusals say what is expected, never the token.
     */
    static final class BearerToken implements CallHeaderAuthenticator {
        private final byte[] expected;

        BearerToken(String token) { this.expected = token.getBytes(StandardCharsets.US_ASCII); }

        @Override
        public AuthResult authenticate(CallHeaders headers) {
            String value = headers.get(Auth2Constants.AUTHORIZATION_HEADER);
            if (value == null)
                throw CallStatus.UNAUTHENTICATED.withDescription("this endpoint requires a token: send the header 'authorization: Bearer <token>'")
                        .toRuntimeException();
            String prefix = Auth2Constants.BEARER_PREFIX;
            if (!value.regionMatches(true, 0, prefix, 0, prefix.length()))
                throw CallStatus.UNAUTHENTICATED.withDescription("the authorization header must be 'Bearer <token>'").toRuntimeException();
            byte[] presented = value.substring(prefix.length()).strip().getBytes(StandardCharsets.US_ASCII);
            if (!MessageDigest.isEqual(presented, expected))
                throw CallStatus.UNAUTHENTICATED.withDescription("wrong token").toRuntimeException();
            return () -> "token";
        }
    }

    private final class Producer extends NoOpFlightProducer {
        @Override
        public void doAction(CallContext context, org.apache.arrow.flight.Action action, StreamListener<org.apache.arrow.flight.Result> listener) {
            try {
                switch (action.getType()) {
                    case FlightWire.ACTION_JOIN -> {
                        var joined = join(FlightWire.read(action.getBody(), FlightWire.Join.class, "join"));
                        listener.onNext(new org.apache.arrow.flight.Result(FlightWire.json(joined)));
                    }
                    case FlightWire.ACTION_LEAVE -> {
                        Session s;
                        synchronized (sessions) {
                            s = sessions.get(new String(action.getBody(), StandardCharsets.UTF_8));
                        }
                        if (s != null) leave(s);
                    }
                    default -> {
                        var more = actions;
                        if (more == null || !more.answer(action.getType(), action.getBody(),
                                r -> listener.onNext(new org.apache.arrow.flight.Result(r))))
                            throw new IllegalArgumentException("unknown action " + action.getType());
                    }
                }
                listener.onCompleted();
            } catch (IllegalArgumentException e) {
                listener.onError(CallStatus.INVALID_ARGUMENT.withDescription(e.getMessage()).toRuntimeException());
            } catch (RuntimeException e) {
                listener.onError(CallStatus.INTERNAL.withDescription(String.valueOf(e.getMessage())).withCause(e).toRuntimeException());
            }
        }

        @Override
        public void getStream(CallContext context, Ticket ticket, ServerStreamListener listener) {
            FlightWire.Request request;
            try {
                request = FlightWire.parseTicket(ticket.getBytes());
                if (!isObject(request)) {
                    if (ranks == null) throw new IllegalArgumentException("this endpoint serves objects by name: job/key");
                    ranks.validate(request.rank(), request.world());
                }
            } catch (IllegalArgumentException e) {
                listener.error(CallStatus.INVALID_ARGUMENT.withDescription(e.getMessage()).toRuntimeException());
                return;
            }
            if (closed) {
                listener.error(CallStatus.UNAVAILABLE.withDescription("server is closing").toRuntimeException());
                return;
            }
            int rank = request.rank();
            Session session = null;
            if (!request.session().isEmpty() && !isObject(request)) {
                synchronized (sessions) {
                    session = sessions.get(request.session());
                    String refused = session == null ? "no session " + request.session() + ": open it with the " + FlightWire.ACTION_JOIN
                            + " action" : session.rank != rank ? "session " + session.id + " is rank " + session.rank + "'s, not rank " + rank
                            : session.open ? "session " + session.id + " has a DoGet open already: one at a time" : null;
                    if (refused != null) {
                        listener.error(CallStatus.INVALID_ARGUMENT.withDescription(refused).toRuntimeException());
                        return;
                    }
                    session.open = true;
                }
            }
            // a ticket without a session: one DoGet open per rank, so that cancelled ones leave at most one batch behind (audit #18)
            Runnable closePlain = session == null && !isObject(request) ? openPlain(rank) : () -> {};
            if (closePlain == null) {
                listener.error(CallStatus.INVALID_ARGUMENT.withDescription("rank " + rank + " has a DoGet without a session open "
                        + "already: one at a time per rank").toRuntimeException());
                return;
            }
            long connection = session == null ? BatchProvider.NO_CONNECTION : session.connection;
            // what a cancelled DoGet left is kept for the same session, else the same object, else the same rank (whatever the
            // ticket's informational job string: a retry under another one takes it, audit #18)
            String key = session != null ? "session/" + session.id : isObject(request) ? "object/" + request.job() : "rank/" + rank;
            CompletableFuture<Lent> batch = adopt(key);
            if (batch == null) {
                try {
                    batch = isObject(request) ? CompletableFuture.completedFuture(objects.loan(request.job()))
                            : ranks.next(rank, connection).thenApply(Lent::of);
                } catch (IllegalArgumentException e) {
                    closeGet(session);
                    closePlain.run();
                    listener.error(CallStatus.INVALID_ARGUMENT.withDescription(e.getMessage()).toRuntimeException());
                    return;
                } catch (RuntimeException e) {
                    closeGet(session);
                    closePlain.run();
                    listener.error(CallStatus.INTERNAL.withDescription("batch source failed: " + e).withCause(e).toRuntimeException());
                    return;
                }
            }
            var opened = session;
            batch = batch.whenComplete((b, e) -> closeGet(opened));
            var call = new PendingGet(rank, listener, batch, new AtomicBoolean());
            pending.add(call);
            listener.setOnCancelHandler(() -> {
                if (call.claimed().compareAndSet(false, true)) {
                    handBack(key, call.batch());
                    pending.remove(call);
                    closePlain.run();
                }
            });
            BiConsumer<Lent, Throwable> deliver = (leased, failure) -> {
                if (!call.claimed().compareAndSet(false, true)) return;
                pending.remove(call);
                try {
                    if (listener.isCancelled()) handBack(key, call.batch());
                    else send(listener, leased, failure);
                } finally {
                    closePlain.run();
                }
            };
            // A batch already made is sent on this gRPC thread: a hand-off costs more than the copy of a small batch.
            if (batch.isDone()) batch.whenComplete(deliver);
            else batch.whenCompleteAsync(deliver, senders);
        }
    }

    /**
     * Marks a DoGet without a session open for {@code rank}: returns what closes it again (once,
     * however often it is run), or null when one is open already.
     */
    private Runnable openPlain(int rank) {
        synchronized (plainOpen) {
            if (!plainOpen.add(rank)) return null;
        }
        var closed = new AtomicBoolean();
        return () -> {
            if (closed.compareAndSet(false, true))
                synchronized (plainOpen) {
                    plainOpen.remove(rank);
                }
        };
    }

    /** A session's DoGet has its batch (or failed): the session may ask again. */
    private void closeGet(Session session) {
        if (session == null) return;
        synchronized (sessions) {
            session.open = false;
            session.lastActive = System.nanoTime();
        }
    }

    /**
     * Opens a session: its rank's other sessions that went idle past {@link #SESSION_IDLE_NANOS}
     * (their clients died without a goodbye: {@link #sessionIdle}) are closed first; then the ledger admits it, or refuses
     * (a live session holds the rank, a state it cannot resume from), as a socket's HELLO.
     */
    private FlightWire.Joined join(FlightWire.Join j) {
        if (ranks == null) throw new IllegalArgumentException("this endpoint serves objects by name: job/key");
        ranks.validate(j.rank(), j.world());
        var stale = new ArrayList<Session>();
        synchronized (sessions) {
            if (sessions.containsKey(j.session())) throw new IllegalArgumentException("session " + j.session() + " is open already");
            for (var s : sessions.values())
                if (s.rank == j.rank() && !s.open && System.nanoTime() - s.lastActive > sessionIdleNanos) stale.add(s);
        }
        stale.forEach(this::leave);
        var session = new Session(j.session(), j.rank(), nextConnection.getAndIncrement());
        var resume = j.epoch() == null ? null : new dev.stoker.core.ScheduleCursor(j.epoch(), j.position());
        var joined = ranks.join(j.rank(), session.connection, resume, j.nextStep() == null ? -1 : j.nextStep(), j.fingerprint());
        synchronized (sessions) {
            sessions.put(session.id, session);
        }
        return new FlightWire.Joined(joined.nextStep(), joined.fingerprint(), joined.stepsPerEpoch(), joined.cursor().epoch(),
                joined.cursor().position(), joined.datasetSize(), joined.positionsPerStep());
    }

    /** Ends a session: the rank may be claimed again; a batch its cancelled DoGet left goes back to the ledger's hold only. */
    private void leave(Session s) {
        synchronized (sessions) {
            if (sessions.remove(s.id) == null) return;
        }
        ArrayDeque<CompletableFuture<Lent>> left;
        synchronized (unclaimed) {
            left = unclaimed.remove("session/" + s.id);
        }
        if (left != null) left.forEach(FlightBatchServer::release);
        ranks.leave(s.rank, s.connection);
    }

    private boolean isObject(FlightWire.Request request) { return objects != null && request.job().indexOf('/') > 0; }

    private void send(ServerStreamListener listener, Lent leased, Throwable failure) {
        if (failure != null) {
            Throwable cause = failure instanceof CompletionException && failure.getCause() != null ? failure.getCause() : failure;
            fail(listener, CallStatus.INTERNAL.withDescription("batch source failed: " + cause).withCause(cause).toRuntimeException());
            return;
        }
        if (leased == null) {
            try (var root = VectorSchemaRoot.create(FlightWire.endSchema(), allocator)) {
                listener.start(root);
                listener.completed();
            } catch (RuntimeException e) {
                fail(listener, e);
            }
            return;
        }
        VectorSchemaRoot root;
        long payloadBytes;
        byte[] metaJson;
        try {
            String json = FlightWire.json(leased.meta());
            metaJson = json.getBytes(StandardCharsets.UTF_8);
            payloadBytes = 0;
            for (Tensor t : leased.tensors()) payloadBytes += t.data().byteSize();
            root = toArrow(leased.tensors(), payloadBytes, FlightWire.batchSchema(json));
        } catch (RuntimeException e) {
            fail(listener, CallStatus.INTERNAL.withDescription("cannot send batch: " + e.getMessage()).withCause(e).toRuntimeException());
            return;
        } finally {
            leased.done().run();
        }
        try (root) {
            listener.setUseZeroCopy(true); // gRPC sends the Arrow buffers themselves (freed when written)
            listener.start(root);
            ArrowBuf appMetadata = allocator.buffer(metaJson.length);
            appMetadata.setBytes(0, metaJson);
            appMetadata.writerIndex(metaJson.length); // Flight sends the readable bytes
            listener.putNext(appMetadata); // the listener owns the buffer now
            listener.completed();
            batchesSent.incrementAndGet();
            bytesSent.addAndGet(payloadBytes);
        } catch (RuntimeException e) {
            fail(listener, e); // the client went away mid-send; its batch is lost
        }
    }

    private static void fail(ServerStreamListener listener, Throwable e) {
        try {
            listener.error(e);
        } catch (RuntimeException alreadyClosed) {
            // the stream had ended already; nothing to tell
        }
    }

    /**
     * Copies the tensors into a record batch with one row per tensor. The data column's values live
     * in one pooled block, filled with one bulk copy per tensor; the block returns to the pool when
     * Arrow frees the buffer, i.e. once gRPC has written it (zero-copy send).
     */
    @SuppressWarnings("restricted") // a view of the Arrow buffer just allocated, of its exact size
    private VectorSchemaRoot toArrow(List<Tensor> tensors, long payloadBytes, Schema schema) {
        int n = tensors.size();
        var root = VectorSchemaRoot.create(schema, allocator);
        try {
            var names = (VarCharVector) root.getVector(FlightWire.NAME);
            var dtypes = (VarCharVector) root.getVector(FlightWire.DTYPE);
            var shapes = (ListVector) root.getVector(FlightWire.SHAPE);
            var data = (LargeVarBinaryVector) root.getVector(FlightWire.DATA);
            var metadata = (BitVector) root.getVector(FlightWire.METADATA);
            metadata.allocateNew(n);
            names.allocateNew((long) n * BatchLayout.NAME_BYTES, n);
            dtypes.allocateNew(n * 8L, n);
            shapes.setInitialCapacity(n);
            shapes.allocateNew();
            var dims = (BigIntVector) shapes.getDataVector();
            dims.allocateNew(n * BatchLayout.MAX_DIMS);
            try (ArrowBuf values = pooledBuffer(payloadBytes);
                 ArrowBuf offsets = allocator.buffer((long) (n + 1) * LargeVarBinaryVector.OFFSET_WIDTH);
                 ArrowBuf validity = allocator.buffer(BitVectorHelper.getValidityBufferSizeFromCount(n))) {
                MemorySegment dst = MemorySegment.ofAddress(values.memoryAddress()).reinterpret(payloadBytes);
                validity.setZero(0, validity.capacity());
                offsets.setLong(0, 0);
                long offset = 0;
                int dim = 0;
                for (int i = 0; i < n; i++) {
                    Tensor t = tensors.get(i);
                    names.setSafe(i, t.name().getBytes(StandardCharsets.US_ASCII));
                    dtypes.setSafe(i, t.dtype().name().toLowerCase(Locale.ROOT).getBytes(StandardCharsets.US_ASCII));
                    shapes.startNewValue(i);
                    long[] shape = t.shape();
                    for (long d : shape) dims.setSafe(dim++, d);
                    shapes.endValue(i, shape.length);
                    metadata.set(i, t.metadata() ? 1 : 0);
                    long length = t.data().byteSize();
                    MemorySegment.copy(t.data(), 0, dst, offset, length);
                    offset += length;
                    offsets.setLong((long) (i + 1) * LargeVarBinaryVector.OFFSET_WIDTH, offset);
                    BitVectorHelper.setBit(validity, i);
                }
                data.loadFieldBuffers(new ArrowFieldNode(n, 0), List.of(validity, offsets, values)); // the vector holds its own references
            }
            root.setRowCount(n);
            return root;
        } catch (RuntimeException e) {
            root.close();
            throw e;
        }
    }

    /** An Arrow buffer of {@code bytes} over a pooled block; freeing the buffer returns the block. */
    private ArrowBuf pooledBuffer(long bytes) {
        BlockPool.Block block = blocks.take(bytes);
        try {
            return allocator.wrapForeignAllocation(new ForeignAllocation(bytes, block.segment().address()) {
                @Override
                protected void release0() { blocks.give(block); }
            });
        } catch (RuntimeException e) {
            blocks.give(block);
            throw e;
        }
    }

    private CompletableFuture<Lent> adopt(String key) {
        synchronized (unclaimed) {
            var queue = unclaimed.get(key);
            return queue == null ? null : queue.poll();
        }
    }

    /** Keeps a cancelled DoGet's batch for the rank's next DoGet, or releases it once the server is closed. */
    private void handBack(String key, CompletableFuture<Lent> batch) {
        synchronized (unclaimed) {
            if (!closed) {
                unclaimed.computeIfAbsent(key, r -> new ArrayDeque<>()).add(batch);
                return;
            }
        }
        release(batch);
    }

    private static void release(CompletableFuture<Lent> batch) {
        batch.thenAccept(leased -> {
            if (leased != null) leased.done().run();
        });
    }

    /**
     * Stops serving: DoGets still waiting for a batch fail with UNAVAILABLE, batches kept for
     * cancelled DoGets are released, and the allocator is closed (a leak fails here).
     */
    @Override
    public void close() {
        synchronized (unclaimed) {
            closed = true;
            for (var queue : unclaimed.values()) queue.forEach(FlightBatchServer::release);
            unclaimed.clear();
        }
        for (PendingGet call : pending) {
            if (call.claimed().compareAndSet(false, true)) {
                pending.remove(call);
                release(call.batch());
                fail(call.listener(), CallStatus.UNAVAILABLE.withDescription("server is closing").toRuntimeException());
            }
        }
        try {
            server.close(); // waits for the calls to end (3 s, then cancels them)
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            grpcExecutor.shutdown();
            senders.close();
            allocator.close();
            if (ownedRoot != null) ownedRoot.close();
            blocks.close();
        }
    }
}
