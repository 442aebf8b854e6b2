package dev.stoker.flight;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.flatbuffers.FlatBufferBuilder;
import dev.stoker.core.batch.BatchLayout;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerServiceDefinition;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.MetadataVersion;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Audit #17: a rogue Flight server — a real gRPC server on 127.0.0.1 answering DoGet with FlightData
 * crafted byte by byte (IPC header flatbuffers, bodies, protobuf framing) — against the real
 * {@link FlightBatchClient}. Each lie (offsets past the body, negative lengths, huge counts, buffers
 * outside the body, a body length the message does not have, shapes that overflow, …) fails that
 * {@code next} with INTERNAL naming the server and the field, and nothing outside the received body is
 * read; then the same client reads a well-formed batch from the same server, bit-exact, and every
 * allocator closes without a leak. Before the checks these batches were returned with views over
 * whatever memory the offsets named.
 */
@Timeout(60)
class RogueFlightServerTest {
    /** One tensor row as the server would send it. */
    record Row(String name, String dtype, long[] shape, byte[] data, boolean metadata) {}

    static final List<Row> ROWS = List.of(
            new Row("input_ids", "int64", new long[] {2, 3}, bytes(48, 1), false),
            new Row("pixel_values", "float32", new long[] {4, 2}, bytes(32, 7), false),
            new Row("mask", "uint8", new long[] {2, 3}, bytes(6, 3), false),
            new Row("sample_index", "int64", new long[] {2}, bytes(16, 5), true));

    static byte[] bytes(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte) (seed * 31 + i * 7);
        return b;
    }

    /**
     * A record batch laid out by hand, as Arrow IPC defines it, with every count, descriptor and body
     * byte open to change: node lengths and null counts (name, dtype, shape, shape.item, data,
     * metadata), the 15 buffer descriptors [offset, length], and the body.
     */
    static final class Crafted {
        long rows;
        final long[] nodeLengths = new long[6], nullCounts = new long[6];
        final long[][] buffers = new long[15][];
        ByteBuffer body;
        /** The body length the FlightData's data_body field claims; -1: the real one. */
        long claimedBody = -1;

        static Crafted of(List<Row> rows) {
            var c = new Crafted();
            int n = rows.size();
            c.rows = n;
            int dims = rows.stream().mapToInt(r -> r.shape().length).sum();
            java.util.Arrays.fill(c.nodeLengths, n);
            c.nodeLengths[3] = dims;
            var out = new ByteArrayOutputStream();
            var bufs = new ArrayList<byte[]>();
            // name, dtype: validity (none: no nulls), int32 offsets, utf8 values
            for (var column : List.<java.util.function.Function<Row, String>>of(Row::name, Row::dtype)) {
                bufs.add(new byte[0]);
                var offsets = le(4 * (n + 1)).putInt(0);
                var values = new ByteArrayOutputStream();
                for (Row r : rows) {
                    values.writeBytes(column.apply(r).getBytes(StandardCharsets.UTF_8));
                    offsets.putInt(values.size());
                }
                bufs.add(offsets.array());
                bufs.add(values.toByteArray());
            }
            // shape: validity, int32 offsets; its item: validity, int64 values
            var shapeOffsets = le(4 * (n + 1)).putInt(0);
            var dimValues = le(8 * dims);
            int at = 0;
            for (Row r : rows) {
                for (long d : r.shape()) dimValues.putLong(d);
                at += r.shape().length;
                shapeOffsets.putInt(at);
            }
            bufs.addAll(List.of(new byte[0], shapeOffsets.array(), new byte[0], dimValues.array()));
            // data: validity, int64 offsets, values
            var dataOffsets = le(8 * (n + 1)).putLong(0);
            var values = new ByteArrayOutputStream();
            for (Row r : rows) {
                values.writeBytes(r.data());
                dataOffsets.putLong(values.size());
            }
            bufs.addAll(List.of(new byte[0], dataOffsets.array(), values.toByteArray()));
            // metadata: validity, bits
            byte[] flags = new byte[(n + 7) / 8];
            for (int i = 0; i < n; i++) if (rows.get(i).metadata()) flags[i >> 3] |= (byte) (1 << (i & 7));
            bufs.addAll(List.of(new byte[0], flags));
            for (int i = 0; i < bufs.size(); i++) {
                byte[] b = bufs.get(i);
                c.buffers[i] = new long[] {out.size(), b.length};
                out.writeBytes(b);
                while (out.size() % 8 != 0) out.write(0);
            }
            c.body = ByteBuffer.wrap(out.toByteArray()).order(ByteOrder.LITTLE_ENDIAN);
            return c;
        }

        private static ByteBuffer le(int bytes) { return ByteBuffer.allocate(bytes).order(ByteOrder.LITTLE_ENDIAN); }

        /** Where buffer {@code i} starts in the body. */
        int at(int buffer) { return (int) buffers[buffer][0]; }

        /** The IPC Message flatbuffer of this record batch. */
        byte[] header() {
            var b = new FlatBufferBuilder();
            RecordBatch.startNodesVector(b, 6);
            for (int i = 5; i >= 0; i--) FieldNode.createFieldNode(b, nodeLengths[i], nullCounts[i]);
            int nodes = b.endVector();
            RecordBatch.startBuffersVector(b, buffers.length);
            for (int i = buffers.length - 1; i >= 0; i--) Buffer.createBuffer(b, buffers[i][0], buffers[i][1]);
            int bufs = b.endVector();
            RecordBatch.startRecordBatch(b);
            RecordBatch.addLength(b, rows);
            RecordBatch.addNodes(b, nodes);
            RecordBatch.addBuffers(b, bufs);
            int batch = RecordBatch.endRecordBatch(b);
            Message.startMessage(b);
            Message.addVersion(b, MetadataVersion.V5);
            Message.addHeaderType(b, MessageHeader.RecordBatch);
            Message.addHeader(b, batch);
            Message.addBodyLength(b, body.capacity());
            b.finish(Message.endMessage(b));
            return b.sizedByteArray();
        }

        /** The DoGet's stream: the schema message, then this record batch with its metadata JSON and body. */
        List<byte[]> stream() {
            return List.of(flightData(schemaHeader(), null, null, -1), flightData(header(), META, body.array(), claimedBody));
        }
    }

    static final byte[] META = FlightWire.json(new BatchLayout.Meta(1, 2, 0, 1, 2, 2, 12)).getBytes(StandardCharsets.UTF_8);

    static byte[] schemaHeader() {
        ByteBuffer b = MessageSerializer.serializeMetadata(FlightWire.schema(Map.of()), IpcOption.DEFAULT);
        byte[] a = new byte[b.remaining()];
        b.get(a);
        return a;
    }

    /** Flight.proto FlightData: data_header = 2, app_metadata = 3, data_body = 1000 (its length as {@code claimedBody} says, when ≥ 0). */
    static byte[] flightData(byte[] header, byte[] appMetadata, byte[] body, long claimedBody) {
        var out = new ByteArrayOutputStream();
        if (header != null) field(out, 2, header.length, header);
        if (appMetadata != null) field(out, 3, appMetadata.length, appMetadata);
        if (body != null) field(out, 1000, claimedBody >= 0 ? claimedBody : body.length, body);
        return out.toByteArray();
    }

    private static void field(ByteArrayOutputStream out, int number, long length, byte[] bytes) {
        varint(out, ((long) number << 3) | 2);
        varint(out, length);
        out.writeBytes(bytes);
    }

    static void varint(ByteArrayOutputStream out, long v) {
        while ((v & ~0x7FL) != 0) {
            out.write((int) (v & 0x7F) | 0x80);
            v >>>= 7;
        }
        out.write((int) v);
    }

    /** A gRPC server speaking Flight's DoGet with whatever messages the test queues, one stream per call. */
    static final class Rogue implements AutoCloseable {
        final ConcurrentLinkedQueue<List<byte[]>> streams = new ConcurrentLinkedQueue<>();
        final Server server;

        Rogue() throws IOException {
            var raw = new MethodDescriptor.Marshaller<byte[]>() {
                @Override public InputStream stream(byte[] value) { return new ByteArrayInputStream(value); }

                @Override
                public byte[] parse(InputStream in) {
                    try {
                        return in.readAllBytes();
                    } catch (IOException e) {
                        throw new UncheckedIOException(e);
                    }
                }
            };
            var doGet = MethodDescriptor.<byte[], byte[]>newBuilder().setType(MethodDescriptor.MethodType.SERVER_STREAMING)
                    .setFullMethodName("arrow.flight.protocol.FlightService/DoGet").setRequestMarshaller(raw).setResponseMarshaller(raw).build();
            var service = ServerServiceDefinition.builder("arrow.flight.protocol.FlightService")
                    .addMethod(doGet, ServerCalls.asyncServerStreamingCall((ticket, out) -> {
                        var messages = streams.poll();
                        if (messages != null) messages.forEach(out::onNext);
                        out.onCompleted();
                    })).build();
            server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(service).build().start();
        }

        int port() { return server.getPort(); }

        @Override
        public void close() throws InterruptedException {
            server.shutdownNow();
            server.awaitTermination(5, TimeUnit.SECONDS);
        }
    }

    /** A well-formed batch, changed by {@code lie}. */
    static List<byte[]> lie(Consumer<Crafted> lie) {
        var c = Crafted.of(ROWS);
        lie.accept(c);
        return c.stream();
    }

    @Test
    void everyLieIsRefusedNamingThePeerAndTheFieldThenAGoodBatchIsRead() throws Exception {
        var lies = new java.util.LinkedHashMap<String, List<byte[]>>();
        // the data column's offsets (audit #17's example: [0, 2^40])
        // the data column's offsets (audit #17's example: [0, 2^40]), with a shape to match, so that nothing but the
        // offsets' bounds can catch it: before the checks this came back as a 1 TiB view starting in the receive buffer
        lies.put("field 'data': row 0 ends at 1099511627776", lie(c -> {
            for (int i = 1; i <= ROWS.size(); i++) c.body.putLong(c.at(11) + 8 * i, c.body.getLong(c.at(11) + 8 * i) - 48 + (1L << 40));
            c.body.putLong(c.at(9), 1L << 36).putLong(c.at(9) + 8, 2); // input_ids: int64 [2^36, 2] = 2^40 bytes
        }));
        lies.put("field 'data': row 0 has a negative length", lie(c -> c.body.putLong(c.at(11) + 8, -16)));
        lies.put("field 'data': first offset -8 is negative", lie(c -> c.body.putLong(c.at(11), -8)));
        lies.put("field 'data': row 3 ends at 1000", lie(c -> c.body.putLong(c.at(11) + 32, 1000)));
        lies.put("field 'data': row 1 (pixel_values) has 24 bytes", lie(c -> c.body.putLong(c.at(11) + 16, 72)));
        // counts
        lies.put("the record batch has 2147483648 rows", lie(c -> {
            c.rows = 1L << 31;
            java.util.Arrays.fill(c.nodeLengths, 1L << 31);
        }));
        lies.put("the record batch has 5000 rows", lie(c -> {
            c.rows = 5000;
            java.util.Arrays.fill(c.nodeLengths, 5000);
        }));
        lies.put("the record batch has -1 rows", lie(c -> c.rows = -1));
        lies.put("field 'name': 5 values; expected 4", lie(c -> c.nodeLengths[0] = 5));
        lies.put("field 'shape.item': 1000000 values", lie(c -> c.nodeLengths[3] = 1_000_000));
        lies.put("field 'metadata': 1 nulls", lie(c -> c.nullCounts[5] = 1));
        // buffer descriptors outside the body, including one whose end overflows a long
        lies.put("buffer 12 of the record batch (offset 1099511627776", lie(c -> c.buffers[12][0] = 1L << 40));
        lies.put("buffer 11 of the record batch (offset 8, 9223372036854775807 bytes)", lie(c -> c.buffers[11] = new long[] {8, Long.MAX_VALUE}));
        lies.put("buffer 2 of the record batch (offset -8", lie(c -> c.buffers[2][0] = -8));
        // a data_body longer than the message
        lies.put("FlightData field 1000 claims 1099511627776 bytes", lie(c -> c.claimedBody = 1L << 40));
        // the other columns' offsets and values
        lies.put("field 'name': row 3 ends at 50", lie(c -> c.body.putInt(c.at(1) + 16, 50)));
        lies.put("field 'name': row 1 has 50 values; at most 31", lie(c -> {
            for (int i = 2; i <= 4; i++) c.body.putInt(c.at(1) + 4 * i, c.body.getInt(c.at(1) + 4 * i) + 38);
            c.buffers[2][1] = c.body.capacity() - c.buffers[2][0]; // values "long enough"
        }));
        lies.put("field 'dtype': row 0 has a negative length", lie(c -> c.body.putInt(c.at(4) + 4, -1)));
        lies.put("field 'shape': row 3 ends at 9", lie(c -> c.body.putInt(c.at(7) + 16, 9)));
        lies.put("field 'shape': row 0 has 7 values; at most 6", lie(c -> c.body.putInt(c.at(7) + 4, 7)));
        lies.put("field 'shape': row 0 (input_ids): negative dimension -2", lie(c -> c.body.putLong(c.at(9), -2)));
        lies.put("field 'shape': row 0 (input_ids): shape", lie(c -> {
            c.body.putLong(c.at(9), 1L << 40);
            c.body.putLong(c.at(9) + 8, 1L << 40);
        }));
        lies.put("field 'dtype': row 0 (input_ids): unknown dtype 'int6", lie(c -> c.body.put(c.at(5) + 4, (byte) '6')));
        // not protobuf at all: a field of wire type 7
        lies.put("bad protobuf wire type 7", List.of(new byte[] {(byte) 0x17, 1, 2, 3}));

        try (var alloc = new RootAllocator(); var rogue = new Rogue();
             var client = FlightBatchClient.connect("127.0.0.1", rogue.port(), alloc)) {
            String peer = "bad Flight batch from grpc://127.0.0.1:" + rogue.port() + ": ";
            for (var lie : lies.entrySet()) {
                rogue.streams.add(lie.getValue());
                var e = assertThrows(FlightRuntimeException.class, () -> client.next(0, 1, "rogue"), lie.getKey());
                assertEquals(FlightStatusCode.INTERNAL, e.status().code(), lie.getKey() + ": " + e);
                String said = e.status().description();
                assertTrue(said.startsWith(peer), lie.getKey() + ": " + said);
                assertTrue(said.contains(lie.getKey()), "expected '" + lie.getKey() + "' in: " + said);
            }
            // the same client, the same server, a batch that keeps the rules: read whole and bit-exact
            rogue.streams.add(Crafted.of(ROWS).stream());
            BatchLayout.Batch batch = client.next(0, 1, "rogue");
            assertEquals(2, batch.meta().step());
            assertEquals(ROWS.size(), batch.tensors().size());
            for (int i = 0; i < ROWS.size(); i++) {
                var want = ROWS.get(i);
                var got = batch.tensors().get(i);
                assertEquals(want.name(), got.name());
                assertEquals(want.dtype(), got.dtype().name().toLowerCase(java.util.Locale.ROOT));
                assertArrayEquals(want.shape(), got.shape());
                assertEquals(want.metadata(), got.metadata(), want.name());
                assertArrayEquals(want.data(), got.data().toArray(ValueLayout.JAVA_BYTE), want.name());
            }
            assertFalse(rogue.streams.iterator().hasNext(), "every scripted stream was asked for");
        }
    }
}
