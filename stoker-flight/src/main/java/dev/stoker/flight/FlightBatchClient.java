package dev.stoker.flight;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import io.grpc.CallOptions;
import io.grpc.Context;
import io.grpc.HasByteBuffer;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.netty.buffer.ByteBufAllocator;
import io.netty.channel.ChannelOption;
import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.auth2.Auth2Constants;
import org.apache.arrow.flight.grpc.StatusUtils;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * Pulls a rank's batches from a {@link FlightBatchServer} on another node, one Flight DoGet per
 * batch, as {@link BatchLayout.Batch}es like the local trainer client's ({@code totalBytes} is the
 * size the batch has in the {@code STKB} layout). Tensors are views of one receive buffer that the
 * client reuses; they stay valid until the next {@link #next} or {@link #close}, and reading them
 * later throws IllegalStateException. The stream's {@code metadata} column marks the batch's metadata
 * ({@code sample_index}, …): a batch's {@code inputs()} are the model inputs, as over the socket.
 *
 * <p>Receive path: Arrow Java's own Flight client (19.0) reads every message body through a new
 * heap array of the body's size before copying it into an Arrow buffer: two copies and a fresh
 * allocation per batch, the slowest part of a transfer. This client speaks DoGet on gRPC directly
 * and copies the body once, from gRPC's network buffers into its receive buffer, whose pages stay
 * touched; the record batch's buffers are then read in place, once checked, without copying. The
 * wire is unchanged (docs/protocol.md, section 3), so any Flight client can read the same server.
 *
 * <p>Access ({@link Options}): a token, sent as {@code authorization: Bearer <token>} on every call,
 * and TLS, trusting given certificates or the JDK's default ones.
 *
 * <p>A peer is not trusted (audit #17): every length, count and offset the server sends — protobuf
 * field lengths, the record batch's row and value counts, its buffer descriptors, and the offsets
 * inside the name, dtype, shape and data columns — is checked against what was actually received
 * before anything is read or a view is made, and tensor views are slices of the receive buffer
 * (bounds-checked), never raw addresses. A batch that breaks a rule fails that {@link #next} with
 * INTERNAL, naming the server and the field ({@code bad Flight batch from grpc://host:port: field
 * 'data': …}); the client stays usable. The format asks for no alignment: the server packs tensors
 * back to back, and tensor readers use unaligned access.
 *
 * <p>Threading: one caller at a time. gRPC decodes on its event-loop thread (direct executor: no
 * hand-off per message) while {@code next} waits. The views may be read from any thread while they
 * are valid.
 */
public final class FlightBatchClient implements AutoCloseable {
    /**
     * Initial HTTP/2 receive window (gRPC's auto-tuning may grow it). gRPC starts at 1 MiB, which
     * makes the server wait for a window update every MiB until auto-tuning catches up.
     */
    static final int FLOW_CONTROL_WINDOW_BYTES = 16 << 20;
    private static final String DO_GET = "arrow.flight.protocol.FlightService/DoGet";
    /** FlightData fields (Flight.proto): data_header = 2, app_metadata = 3, data_body = 1000. */
    private static final int DATA_HEADER = 2, APP_METADATA = 3, DATA_BODY = 1000;
    private static final int MIN_BODY_BYTES = 1 << 20;
    /** Most tensors (rows) a batch may have: far above any model's inputs, low enough that the per-row work is trivial. */
    static final int MAX_TENSORS = 4096;
    /** Longest dtype name ({@code float32}, {@code bfloat16}, …). */
    static final int MAX_DTYPE_BYTES = 16;
    /** Longest IPC header or app_metadata a message may have (the batch's bytes travel in the body). */
    static final int MAX_HEADER_BYTES = 16 << 20;
    /** The stream's field nodes in IPC order (the shape list's child has its own node). */
    private static final String[] NODES = {FlightWire.NAME, FlightWire.DTYPE, FlightWire.SHAPE, FlightWire.SHAPE + ".item", FlightWire.DATA,
            FlightWire.METADATA};
    /** Buffers of those nodes: utf8 and large binary 3 each (validity, offsets, values), list 2, int64 2, bool 2. */
    private static final int BUFFERS = 15;

    /** The server, as errors name it. */
    private final String peer;

    private final BufferAllocator ownedRoot;
    private final BufferAllocator allocator;
    private final ManagedChannel channel;
    private final MethodDescriptor<byte[], Frame> doGet;
    private final byte[] chunk = new byte[64 << 10];
    /** The receive buffer, reused for every batch and grown to the largest. */
    private Arena bodyArena;
    private MemorySegment body = MemorySegment.NULL;
    /** Scope of the last batch's views. */
    private Arena views;

    /**
     * How the client reaches a server that asks for a token or speaks TLS.
     *
     * @param token               sent as {@code authorization: Bearer <token>} on every call; null sends none
     * @param tls                 connect with TLS ({@code grpc+tls}) instead of plaintext
     * @param trustedCertificates PEM certificates to trust (e.g. a self-signed server's own); null trusts the JDK's defaults
     * @param serverName          the name the server's certificate must carry, instead of the host connected to (a cluster's
     *                            nodes all present one certificate, named for the cluster); null: the host
     */
    public record Options(String token, boolean tls, Path trustedCertificates, String serverName) {
        /** No token, plaintext: a server on this host. */
        public static final Options PLAINTEXT = new Options(null, false, null);

        public Options {
            if (trustedCertificates != null && !tls) throw new IllegalArgumentException("trusted certificates are for TLS connections");
            if (serverName != null && !tls) throw new IllegalArgumentException("a server name is checked on TLS connections only");
        }

        /** The server's certificate carries the host connected to. */
        public Options(String token, boolean tls, Path trustedCertificates) { this(token, tls, trustedCertificates, null); }

        /** Never shows the token. */
        @Override
        public String toString() {
            return "Options[token=" + (token == null ? "none" : "****") + ", tls=" + tls
                    + (trustedCertificates == null ? "" : ", trusted=" + trustedCertificates)
                    + (serverName == null ? "" : ", server name " + serverName) + "]";
        }
    }

    private FlightBatchClient(String host, int port, Options options, BufferAllocator parent) {
        NettyChannelBuilder builder = channelBuilder(host, port, options); // before anything needs closing
        peer = (options.tls() ? "grpc+tls://" : "grpc://") + (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
        ownedRoot = parent == null ? new RootAllocator() : null;
        allocator = (parent == null ? ownedRoot : parent).newChildAllocator("stoker-flight-client", 0, Long.MAX_VALUE);
        try {
            channel = builder
                    .maxInboundMessageSize(Integer.MAX_VALUE)
                    .initialFlowControlWindow(FLOW_CONTROL_WINDOW_BYTES)
                    .directExecutor()
                    // Netty's default (adaptive) allocator reuses its chunks; the pooled one gRPC picks for
                    // itself frees a chunk when it empties, so every batch received lands in fresh pages.
                    .withOption(ChannelOption.ALLOCATOR, ByteBufAllocator.DEFAULT)
                    .build();
        } catch (RuntimeException e) {
            allocator.close();
            if (ownedRoot != null) ownedRoot.close();
            throw e;
        }
        doGet = MethodDescriptor.<byte[], Frame>newBuilder()
                .setType(MethodDescriptor.MethodType.SERVER_STREAMING)
                .setFullMethodName(DO_GET)
                .setRequestMarshaller(new TicketMarshaller())
                .setResponseMarshaller(new FrameMarshaller())
                .build();
    }

    /** The channel's transport (plaintext or TLS) and, with a token, the interceptor that sends it on every call. */
    private static NettyChannelBuilder channelBuilder(String host, int port, Options options) {
        var builder = NettyChannelBuilder.forAddress(host, port);
        if (!options.tls()) {
            builder.usePlaintext();
        } else {
            var ssl = GrpcSslContexts.forClient();
            if (options.trustedCertificates() != null) ssl.trustManager(options.trustedCertificates().toFile());
            if (options.serverName() != null) builder.overrideAuthority(options.serverName()); // the name TLS checks
            try {
                builder.useTransportSecurity().sslContext(ssl.build());
            } catch (javax.net.ssl.SSLException e) {
                throw new IllegalArgumentException("cannot set up TLS: " + e.getMessage(), e);
            }
        }
        if (options.token() != null) {
            var headers = new Metadata();
            headers.put(Metadata.Key.of(Auth2Constants.AUTHORIZATION_HEADER, Metadata.ASCII_STRING_MARSHALLER),
                    Auth2Constants.BEARER_PREFIX + options.token());
            builder.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
        }
        return builder;
    }

    /** Connects (lazily: the first {@link #next} opens the connection) with a private allocator. */
    public static FlightBatchClient connect(String host, int port) {
        return new FlightBatchClient(host, port, Options.PLAINTEXT, null);
    }

    /** Connects with Arrow bookkeeping in a child of {@code allocator} (closing the client checks it for leaks). */
    public static FlightBatchClient connect(String host, int port, BufferAllocator allocator) {
        return new FlightBatchClient(host, port, Options.PLAINTEXT, allocator);
    }

    /**
     * {@link #connect(String, int, BufferAllocator)} with a token and/or TLS ({@code allocator} may be null).
     *
     * @throws IllegalArgumentException when the trusted certificates cannot be read
     */
    public static FlightBatchClient connect(String host, int port, Options options, BufferAllocator allocator) {
        return new FlightBatchClient(host, port, options, allocator);
    }

    /**
     * The rank's next batch, or null when the rank's feed has ended. Invalidates the previous
     * batch's tensors.
     *
     * @throws FlightRuntimeException with status INVALID_ARGUMENT when the server refuses rank or
     *     world (the description says why), UNAUTHENTICATED when it wants a token this client lacks
     *     or does not accept its token, UNAVAILABLE when it cannot be reached or is closing,
     *     INTERNAL when the server or the stream failed
     */
    public BatchLayout.Batch next(int rank, int world, String job) { return next(FlightWire.ticket(rank, world, job).getBytes()); }

    /**
     * Opens a session with the server's ledger: the rank's batches then come exactly once across
     * reconnects and restarts, as on the local socket. {@code resume} (null: a fresh start) and
     * {@code fingerprint} come from a state saved earlier ({@link Session#cursor()},
     * {@link Session#fingerprint()}).
     *
     * @throws FlightRuntimeException INVALID_ARGUMENT when the server refuses (another live client
     *     holds the rank, a state it cannot resume from), with the reason
     */
    public Session open(int rank, int world, String job, dev.stoker.core.ScheduleCursor resume, long fingerprint) {
        return open(rank, world, job, resume, -1, fingerprint);
    }

    /**
     * {@link #open(int, int, String, dev.stoker.core.ScheduleCursor, long)} with the step label saved with the cursor
     * ({@link Session#nextStep()}; −1: none), which a server started there counts on from.
     */
    public Session open(int rank, int world, String job, dev.stoker.core.ScheduleCursor resume, long resumeStep, long fingerprint) {
        String id = java.util.UUID.randomUUID().toString();
        var join = new FlightWire.Join(id, rank, world, resume == null ? null : resume.epoch(), resume == null ? null : resume.position(),
                resume == null || resumeStep < 0 ? null : resumeStep, fingerprint);
        byte[] answer = action(FlightWire.ACTION_JOIN, FlightWire.json(join));
        return new Session(id, rank, world, job, FlightWire.read(answer, FlightWire.Joined.class, "join answer"));
    }

    /**
     * One action call whose results' bodies, in order, are copied into {@code dst} from its start: the bytes received (0:
     * no result). Bounded: the call ends after {@code timeoutMillis}, and an answer longer than {@code dst} is refused
     * (the call cancelled) before a byte past it is kept.
     *
     * @throws FlightRuntimeException when the server refuses or fails the call, or the deadline passes (DEADLINE_EXCEEDED)
     * @throws IllegalStateException  when the answer is longer than {@code dst}
     */
    public long action(String type, byte[] body, long timeoutMillis, MemorySegment dst) {
        var request = org.apache.arrow.flight.impl.Flight.Action.newBuilder().setType(type)
                .setBody(com.google.protobuf.ByteString.copyFrom(body)).build();
        var context = io.grpc.Context.current().withCancellation();
        var previous = context.attach();
        try {
            var results = ClientCalls.blockingServerStreamingCall(channel, org.apache.arrow.flight.impl.FlightServiceGrpc.getDoActionMethod(),
                    CallOptions.DEFAULT.withDeadlineAfter(timeoutMillis, java.util.concurrent.TimeUnit.MILLISECONDS), request);
            long n = 0;
            while (results.hasNext()) {
                var chunk = results.next().getBody();
                if (chunk.size() > dst.byteSize() - n)
                    throw new IllegalStateException(peer + " answered " + type + " with more than the " + dst.byteSize() + " bytes expected");
                MemorySegment.copy(MemorySegment.ofBuffer(chunk.asReadOnlyByteBuffer()), 0, dst, n, chunk.size());
                n += chunk.size();
            }
            return n;
        } catch (StatusRuntimeException e) {
            throw StatusUtils.fromGrpcRuntimeException(e);
        } finally {
            context.detach(previous);
            context.cancel(null); // ends the call if it was left early
        }
    }

    /** One action call; its first result's body (empty when none). */
    private byte[] action(String type, byte[] body) {
        var request = org.apache.arrow.flight.impl.Flight.Action.newBuilder().setType(type)
                .setBody(com.google.protobuf.ByteString.copyFrom(body)).build();
        try {
            var results = ClientCalls.blockingServerStreamingCall(channel, org.apache.arrow.flight.impl.FlightServiceGrpc.getDoActionMethod(),
                    CallOptions.DEFAULT, request);
            byte[] first = new byte[0];
            while (results.hasNext()) {
                var r = results.next();
                if (first.length == 0) first = r.getBody().toByteArray();
            }
            return first;
        } catch (StatusRuntimeException e) {
            throw StatusUtils.fromGrpcRuntimeException(e);
        }
    }

    /**
     * A client's session with the server's ledger (opened by {@link #open}): its rank's batches in
     * order, each once; its state ({@link #cursor()}, {@link #fingerprint()}) resumes a later
     * session where this one was. Closing says goodbye, so that another client may take the rank at
     * once (a client that dies without it is given up on after the server's idle limit).
     */
    public final class Session implements AutoCloseable {
        private final String id;
        private final int rank, world;
        private final String job;
        private final FlightWire.Joined joined;
        private dev.stoker.core.ScheduleCursor next;
        private long taken;
        /** The next step's label from the last batch's resume block; −1: count from the join. */
        private long nextStepAfter = -1;

        private Session(String id, int rank, int world, String job, FlightWire.Joined joined) {
            this.id = id;
            this.rank = rank;
            this.world = world;
            this.job = job;
            this.joined = joined;
            this.next = new dev.stoker.core.ScheduleCursor(joined.epoch(), joined.position());
        }

        /** The next batch, or null at the end of the rank's feed; invalidates the previous batch's tensors. */
        public BatchLayout.Batch next() {
            var batch = FlightBatchClient.this.next(FlightWire.ticket(rank, world, job, id).getBytes());
            if (batch != null && batch.meta().resume() != null) { // the server's word on where the job resumes after it
                var r = batch.meta().resume();
                next = new dev.stoker.core.ScheduleCursor(r.epoch(), r.position());
                nextStepAfter = r.step();
                taken++;
            } else if (batch != null) { // the cursor after it: one step on, or the next epoch when less than a step is left (drop_last)
                var m = batch.meta();
                long pps = joined.positionsPerStep();
                long after = (m.epoch() == next.epoch() ? next.position() : 0) + pps;
                next = after + pps > joined.datasetSize() ? new dev.stoker.core.ScheduleCursor(m.epoch() + 1, 0)
                        : new dev.stoker.core.ScheduleCursor(m.epoch(), after);
                taken++;
            }
            return batch;
        }

        /** The cursor of the batch this session gets next: where a state saved now resumes. */
        public dev.stoker.core.ScheduleCursor cursor() { return next; }

        /** The job's fingerprint, which a resume presents. */
        public long fingerprint() { return joined.fingerprint(); }

        /** The session's id, as its tickets carry it. */
        String id() { return id; }

        /** The step label of the session's first batch, as the server said. */
        public long firstStep() { return joined.nextStep(); }

        /** The step label of the batch this session gets next: saved with {@link #cursor()}, it keeps labels across a resize. */
        public long nextStep() { return nextStepAfter >= 0 ? nextStepAfter : joined.nextStep() + taken; }

        @Override
        public void close() {
            try {
                action(FlightWire.ACTION_LEAVE, id.getBytes(StandardCharsets.UTF_8));
            } catch (RuntimeException e) {
                // the server is gone or closing: its idle limit frees the rank
            }
        }
    }

    private BatchLayout.Batch next(byte[] ticket) {
        releaseViews();
        Context.CancellableContext call = Context.current().withCancellation();
        Context previous = call.attach();
        try {
            Iterator<Frame> frames = ClientCalls.blockingServerStreamingCall(channel, doGet, CallOptions.DEFAULT, ticket);
            Schema schema = null;
            BatchLayout.Batch batch = null;
            while (frames.hasNext()) {
                Frame frame = frames.next();
                if (frame.header() == null) continue; // metadata-only message
                Message message = Message.getRootAsMessage(ByteBuffer.wrap(frame.header()));
                switch (message.headerType()) {
                    case MessageHeader.Schema -> schema = checked(MessageSerializer.deserializeSchema(message));
                    case MessageHeader.RecordBatch -> {
                        if (schema == null) throw protocolError("record batch before the schema");
                        if (batch != null) throw protocolError("more than one record batch in a DoGet");
                        batch = decode(schema, message, frame);
                    }
                    default -> throw protocolError("unexpected message type " + MessageHeader.name(message.headerType()));
                }
            }
            if (batch == null) {
                if (schema == null || !"true".equals(schema.getCustomMetadata().get(FlightWire.META_END)))
                    throw protocolError("stream without a batch and without the end-of-feed mark");
                return null;
            }
            return batch;
        } catch (StatusRuntimeException e) {
            releaseViews();
            for (Throwable c = e.getCause(); c != null; c = c.getCause())
                if (c instanceof BadStream bad) throw bad(bad.getMessage()); // the frame parser refused what the peer sent
            throw StatusUtils.fromGrpcRuntimeException(e);
        } catch (IllegalArgumentException | IndexOutOfBoundsException | IllegalStateException e) {
            releaseViews(); // the peer's metadata or a tensor it describes is malformed
            throw bad(String.valueOf(e.getMessage()));
        } catch (RuntimeException e) {
            releaseViews();
            throw e;
        } finally {
            call.detach(previous);
            call.cancel(null); // no-op when the stream completed; stops it otherwise
        }
    }

    /** {@code schema} if it is this client's; a stream of another layout version or shape is refused, saying which. */
    static Schema checked(Schema schema) {
        if (schema.getFields().stream().noneMatch(f -> f.getName().equals(FlightWire.METADATA))
                && schema.getFields().stream().anyMatch(f -> f.getName().equals(FlightWire.DATA)))
            throw protocolError("the server sends batch layout version 1 (no '" + FlightWire.METADATA + "' column: sample_index among the "
                    + "model inputs); this client reads version " + BatchLayout.VERSION + ": use a client of the server's release");
        if (!schema.getFields().equals(FlightWire.schema(null).getFields())) throw protocolError("unexpected schema " + schema);
        return schema;
    }

    private static FlightRuntimeException protocolError(String what) {
        return CallStatus.INTERNAL.withDescription("bad Flight batch stream: " + what).toRuntimeException();
    }

    /** What the peer sent breaks the format: INTERNAL, naming the peer. */
    private FlightRuntimeException bad(String what) {
        return CallStatus.INTERNAL.withDescription("bad Flight batch from " + peer + ": " + what).toRuntimeException();
    }

    private FlightRuntimeException bad(String field, String what) { return bad("field '" + field + "': " + what); }

    /** Thrown by the frame parser on gRPC's thread; {@link #next} finds it as the failed call's cause. */
    private static final class BadStream extends RuntimeException {
        BadStream(String message) { super(message, null, false, false); }
    }

    /**
     * Checks the record batch's counts and buffer descriptors before Arrow lays vectors over the body:
     * 0 to {@link #MAX_TENSORS} rows, the field nodes of this schema with those counts and no nulls,
     * and every buffer inside the {@code bodyBytes} received (no overflow: lengths are compared with what is left).
     * Returns the buffers as slices of the receive buffer, in IPC order.
     */
    private MemorySegment[] checkLayout(RecordBatch batch, long bodyBytes) {
        long n = batch.length();
        if (n < 0 || n > MAX_TENSORS) throw bad("the record batch has " + n + " rows; a batch has 0 to " + MAX_TENSORS + " tensors");
        if (batch.nodesLength() != NODES.length)
            throw bad("the record batch has " + batch.nodesLength() + " field nodes; this schema has " + NODES.length);
        var node = new org.apache.arrow.flatbuf.FieldNode();
        for (int i = 0; i < NODES.length; i++) {
            batch.nodes(node, i);
            boolean dims = i == 3;
            long length = node.length(), most = dims ? n * BatchLayout.MAX_DIMS : n;
            if (dims ? length < 0 || length > most : length != n)
                throw bad(NODES[i], length + " values; expected " + (dims ? "0 to " + most + " dimensions in all" : n + ", one per row"));
            if (node.nullCount() != 0) throw bad(NODES[i], node.nullCount() + " nulls in a column without nulls");
        }
        if (batch.buffersLength() != BUFFERS) throw bad("the record batch has " + batch.buffersLength() + " buffers; this schema has " + BUFFERS);
        var buffer = new org.apache.arrow.flatbuf.Buffer();
        var slices = new MemorySegment[BUFFERS];
        for (int i = 0; i < BUFFERS; i++) {
            batch.buffers(buffer, i);
            long offset = buffer.offset(), length = buffer.length();
            if (offset < 0 || length < 0 || offset > bodyBytes || length > bodyBytes - offset)
                throw bad("buffer " + i + " of the record batch (offset " + offset + ", " + length + " bytes) lies outside the " + bodyBytes
                        + "-byte body received");
            slices[i] = body.asSlice(offset, length);
        }
        return slices;
    }

    /** Lays the record batch over the receive buffer (no copy) and takes views of its tensors. */
    private BatchLayout.Batch decode(Schema schema, Message message, Frame frame) {
        var recordBatch = (RecordBatch) message.header(new RecordBatch());
        if (recordBatch.compression() != null) throw protocolError("compressed record batches are not supported");
        String json = frame.appMetadata() != null ? new String(frame.appMetadata(), StandardCharsets.UTF_8) : schema.getCustomMetadata().get(FlightWire.META_BATCH);
        if (json == null) throw protocolError("batch without " + FlightWire.META_BATCH + " metadata");
        BatchLayout.Meta meta = FlightWire.parseMeta(json);
        MemorySegment[] buffers = checkLayout(recordBatch, frame.bodyBytes());
        Arena arena = Arena.ofShared();
        boolean lent = false;
        try {
            List<Tensor> tensors = tensors((int) recordBatch.length(), recordBatch.length() == 0 ? 0 : nodeLength(recordBatch, 3), buffers, arena);
            var batch = new BatchLayout.Batch(meta, tensors, BatchLayout.sizeOf(tensors));
            views = arena;
            lent = true;
            return batch;
        } finally {
            if (!lent) arena.close();
        }
    }

    private static long nodeLength(RecordBatch batch, int i) { return batch.nodes(new org.apache.arrow.flatbuf.FieldNode(), i).length(); }

    /**
     * The batch's tensors, read from the record batch's buffers in the receive buffer (Arrow's vectors
     * are not used: their loaders and getters trust the offsets they are given). Every offset is checked
     * against the buffer it indexes first ({@link #checkOffsets}), each shape against its bytes; the views
     * are slices of the checked buffers, scoped to this batch.
     */
    @SuppressWarnings("restricted") // scopes a bounds-checked slice of the receive buffer to this batch's arena (no size change)
    private List<Tensor> tensors(int n, long dimCount, MemorySegment[] buffers, Arena arena) {
        if (n == 0) return List.of();
        MemorySegment dimValues = buffers[9], values = buffers[12], flags = buffers[14];
        if (dimValues.byteSize() < dimCount * Long.BYTES)
            throw bad(NODES[3], dimCount + " dimensions in a buffer of " + dimValues.byteSize() + " bytes");
        if (flags.byteSize() < (n + 7) / 8) throw bad(FlightWire.METADATA, n + " rows in a buffer of " + flags.byteSize() + " bytes");
        long[] nameAt = checkOffsets(buffers[1], Integer.BYTES, n, buffers[2].byteSize(), BatchLayout.NAME_BYTES - 1, FlightWire.NAME);
        long[] dtypeAt = checkOffsets(buffers[4], Integer.BYTES, n, buffers[5].byteSize(), MAX_DTYPE_BYTES, FlightWire.DTYPE);
        long[] shapeAt = checkOffsets(buffers[7], Integer.BYTES, n, dimCount, BatchLayout.MAX_DIMS, FlightWire.SHAPE);
        long[] dataAt = checkOffsets(buffers[11], Long.BYTES, n, values.byteSize(), Long.MAX_VALUE, FlightWire.DATA);
        var tensors = new ArrayList<Tensor>(n);
        for (int i = 0; i < n; i++) {
            String name = string(buffers[2], nameAt[i], nameAt[i + 1]);
            String dtypeName = string(buffers[5], dtypeAt[i], dtypeAt[i + 1]);
            Tensor.DType dtype;
            try {
                dtype = Tensor.DType.valueOf(dtypeName.toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw bad(FlightWire.DTYPE, "row " + i + " (" + name + "): unknown dtype '" + dtypeName + "'");
            }
            long[] shape = new long[(int) (shapeAt[i + 1] - shapeAt[i])];
            long bytes = dtype.byteSize();
            for (int k = 0; k < shape.length; k++) {
                shape[k] = dimValues.get(BatchLayout.LONG_LE, (shapeAt[i] + k) * Long.BYTES);
                if (shape[k] < 0) throw bad(FlightWire.SHAPE, "row " + i + " (" + name + "): negative dimension " + shape[k]);
                try {
                    bytes = Math.multiplyExact(bytes, shape[k]);
                } catch (ArithmeticException e) {
                    throw bad(FlightWire.SHAPE, "row " + i + " (" + name + "): shape " + java.util.Arrays.toString(shape) + " overflows");
                }
            }
            long length = dataAt[i + 1] - dataAt[i];
            if (bytes != length)
                throw bad(FlightWire.DATA, "row " + i + " (" + name + ") has " + length + " bytes; its shape and dtype need " + bytes);
            boolean isMetadata = (flags.get(ValueLayout.JAVA_BYTE, i >> 3) >> (i & 7) & 1) != 0;
            tensors.add(new Tensor(name, dtype, shape, values.asSlice(dataAt[i], length).reinterpret(arena, null), isMetadata));
        }
        return List.copyOf(tensors);
    }

    /**
     * Reads and checks the {@code n + 1} offsets of a variable-width column: the buffer holds them, the
     * first is at least 0, none is below the one before (no negative length), no row is longer than
     * {@code mostPerRow}, and the last is at most {@code end} (the size of what they index). Returns them.
     */
    private long[] checkOffsets(MemorySegment offsets, int width, int n, long end, long mostPerRow, String field) {
        if (offsets.byteSize() < (long) (n + 1) * width)
            throw bad(field, n + " rows need " + (long) (n + 1) * width + " bytes of offsets; the buffer has " + offsets.byteSize());
        var at = new long[n + 1];
        for (int i = 0; i <= n; i++) {
            at[i] = width == Integer.BYTES ? offsets.get(BatchLayout.INT_LE, (long) i * width) : offsets.get(BatchLayout.LONG_LE, (long) i * width);
            if (i == 0 ? at[0] < 0 : at[i] < at[i - 1])
                throw bad(field, i == 0 ? "first offset " + at[0] + " is negative" : "row " + (i - 1) + " has a negative length (offsets "
                        + at[i - 1] + " to " + at[i] + ")");
            if (i > 0 && at[i] - at[i - 1] > mostPerRow)
                throw bad(field, "row " + (i - 1) + " has " + (at[i] - at[i - 1]) + " values; at most " + mostPerRow + " are allowed");
            if (at[i] > end) throw bad(field, "row " + Math.max(0, i - 1) + " ends at " + at[i] + ", past the " + end + " values of the column");
        }
        return at;
    }

    private static String string(MemorySegment buffer, long from, long to) {
        return new String(buffer.asSlice(from, to - from).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
    }

    /** The receive buffer, grown (to twice the old size at least) when a body does not fit. */
    private MemorySegment body(long bytes) {
        if (body.byteSize() < bytes) {
            if (views != null) throw new IllegalStateException("receive buffer still lent out");
            if (bodyArena != null) bodyArena.close();
            bodyArena = Arena.ofShared();
            body = bodyArena.allocate(Math.max(Math.max(bytes, MIN_BODY_BYTES), body.byteSize() * 2), 64); // zeroed: touched once, here
        }
        return body;
    }

    private void releaseViews() {
        if (views != null) {
            views.close();
            views = null;
        }
    }

    /** Invalidates the last batch and closes the connection; a leak in the allocator fails here. */
    @Override
    public void close() {
        releaseViews();
        try {
            channel.shutdownNow();
            channel.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            if (bodyArena != null) bodyArena.close();
            allocator.close();
            if (ownedRoot != null) ownedRoot.close();
        }
    }

    /** One FlightData message; its data_body ({@code bodyBytes}) lies in the receive buffer. */
    record Frame(byte[] header, byte[] appMetadata, long bodyBytes) {}

    /** Flight.proto {@code Ticket}: field 1, bytes. */
    private static final class TicketMarshaller implements MethodDescriptor.Marshaller<byte[]> {
        @Override
        public InputStream stream(byte[] ticket) {
            var out = new java.io.ByteArrayOutputStream(ticket.length + 6);
            out.write(0x0A);
            writeVarint(out, ticket.length);
            out.writeBytes(ticket);
            return new ByteArrayInputStream(out.toByteArray());
        }

        @Override
        public byte[] parse(InputStream stream) { throw new UnsupportedOperationException("client side only"); }
    }

    /**
     * Reads Flight.proto {@code FlightData} by hand, so that data_body goes straight from gRPC's
     * buffers into the receive buffer.
     */
    private final class FrameMarshaller implements MethodDescriptor.Marshaller<Frame> {
        @Override
        public InputStream stream(Frame frame) { throw new UnsupportedOperationException("client side only"); }

        @Override
        public Frame parse(InputStream in) {
            try (in) {
                byte[] header = null, appMetadata = null;
                long bodyBytes = 0;
                long tag;
                while ((tag = readVarint(in, true)) >= 0) {
                    int field = (int) (tag >>> 3), wireType = (int) (tag & 7);
                    switch (wireType) {
                        case 0 -> readVarint(in, false);
                        case 1 -> in.skipNBytes(8);
                        case 5 -> in.skipNBytes(4);
                        case 2 -> {
                            long length = readVarint(in, false);
                            int left = in.available(); // gRPC hands over a whole message: what is left of it
                            if (length < 0 || length > left)
                                throw new BadStream("FlightData field " + field + " claims " + length + " bytes; the message has " + left + " left");
                            if ((field == DATA_HEADER || field == APP_METADATA) && length > MAX_HEADER_BYTES)
                                throw new BadStream("FlightData field " + field + " of " + length + " bytes; at most " + MAX_HEADER_BYTES);
                            switch (field) {
                                case DATA_HEADER -> header = in.readNBytes((int) length);
                                case APP_METADATA -> appMetadata = in.readNBytes((int) length);
                                case DATA_BODY -> {
                                    readInto(in, body(length), length);
                                    bodyBytes = length;
                                }
                                default -> in.skipNBytes(length);
                            }
                        }
                        default -> throw new BadStream("bad protobuf wire type " + wireType + " in FlightData");
                    }
                }
                return new Frame(header, appMetadata, bodyBytes);
            } catch (IOException e) {
                throw new BadStream("cannot read FlightData: " + e.getMessage());
            }
        }

        /** Copies {@code length} bytes: from gRPC's direct buffers when it exposes them, else through a small array. */
        private void readInto(InputStream in, MemorySegment dst, long length) throws IOException {
            long done = 0;
            if (in instanceof HasByteBuffer direct && direct.byteBufferSupported()) {
                while (done < length) {
                    ByteBuffer next = direct.getByteBuffer();
                    if (next == null || !next.hasRemaining()) break;
                    int n = (int) Math.min(next.remaining(), length - done);
                    MemorySegment.copy(MemorySegment.ofBuffer(next), 0, dst, done, n);
                    in.skipNBytes(n);
                    done += n;
                }
            }
            while (done < length) {
                int n = in.read(chunk, 0, (int) Math.min(chunk.length, length - done));
                if (n < 0) throw new EOFException("FlightData body cut short");
                MemorySegment.copy(MemorySegment.ofArray(chunk), 0, dst, done, n);
                done += n;
            }
        }
    }

    private static long readVarint(InputStream in, boolean eofAllowed) throws IOException {
        long value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            int b = in.read();
            if (b < 0) {
                if (eofAllowed && shift == 0) return -1;
                throw new EOFException("FlightData cut short");
            }
            value |= (long) (b & 0x7F) << shift;
            if ((b & 0x80) == 0) return value;
        }
        throw new IOException("bad varint");
    }

    private static void writeVarint(java.io.ByteArrayOutputStream out, long value) {
        while ((value & ~0x7FL) != 0) {
            out.write((int) (value & 0x7F) | 0x80);
            value >>>= 7;
        }
        out.write((int) value);
    }
}
