package dev.stoker.flight;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.arrow.flight.CallOptions;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A real server on 127.0.0.1, port 0; every allocator is closed at the end, so a leak fails the test. */
@Timeout(60)
@SuppressWarnings("try") // Arrow's FlightClient and FlightStream declare close() throws InterruptedException / Exception
class FlightBatchServerTest {
    static final Location ANY_PORT = Location.forGrpcInsecure("127.0.0.1", 0);

    /** Serves {@code steps} deterministic STKB batches per rank from native memory, then ends; counts releases. */
    static final class Synthetic implements FlightTestSource, AutoCloseable {
        final int world;
        final int steps;
        final AtomicInteger[] served;
        final AtomicInteger[][] released;
        final Arena arena = Arena.ofShared();

        Synthetic(int world, int steps) {
            this.world = world;
            this.steps = steps;
            served = new AtomicInteger[world];
            released = new AtomicInteger[world][steps];
            for (int r = 0; r < world; r++) {
                served[r] = new AtomicInteger();
                for (int s = 0; s < steps; s++) released[r][s] = new AtomicInteger();
            }
        }

        @Override
        public void validate(int rank, int world) {
            if (world != this.world) throw new IllegalArgumentException("world size " + world + " differs from the job's " + this.world);
            if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
        }

        @Override
        public CompletableFuture<Stored> next(int rank) {
            int step = served[rank].getAndIncrement();
            if (step >= steps) return CompletableFuture.completedFuture(null);
            return CompletableFuture.completedFuture(FlightTestSource.lent(stkb(rank, step, world, arena), released[rank][step]::incrementAndGet));
        }

        @Override
        public void close() { arena.close(); }
    }

    /** float32 pixel_values of 2.8 to 5.6 MB (rows vary by step), int64 ids, a uint8 mask, a sample_index (metadata): what the batch holds. */
    static List<Tensor> tensors(int rank, int step) {
        int rows = 600 + 300 * step + 7 * rank;
        float[] pixels = new float[rows * 1176];
        for (int i = 0; i < pixels.length; i++) pixels[i] = rank * 1000 + step + i * 0.25f;
        long[] ids = new long[2 * 33];
        for (int i = 0; i < ids.length; i++) ids[i] = 151643L + i * (rank + 1) + step;
        byte[] mask = new byte[2 * 33];
        for (int i = 0; i < mask.length; i++) mask[i] = (byte) (i % 3 == 0 ? 1 : 0);
        return List.of(Tensor.of("input_ids", ids, 2, 33), Tensor.of("pixel_values", pixels, rows, 1176),
                new Tensor("mask", Tensor.DType.UINT8, new long[] {2, 33}, MemorySegment.ofArray(mask)),
                Tensor.of("sample_index", new long[] {step, 100L + rank}, 2).asMetadata());
    }

    static MemorySegment stkb(int rank, int step, int world, Arena arena) {
        var tensors = tensors(rank, step);
        MemorySegment seg = arena.allocate(BatchLayout.sizeOf(tensors), 64);
        BatchLayout.write(meta(3, step, rank, world, 2), tensors, seg);
        return seg;
    }

    /** Step within epoch 3 of 10 steps; 2 samples delivered of 3 scheduled (one skipped). */
    static BatchLayout.Meta meta(long epoch, long step, int rank, int world, int samples) {
        return new BatchLayout.Meta(epoch, step, rank, world, samples, samples + 1, epoch * 10 + step);
    }

    static void assertSameTensors(List<Tensor> expected, BatchLayout.Batch got) {
        assertEquals(expected.size(), got.tensors().size());
        for (int i = 0; i < expected.size(); i++) {
            Tensor want = expected.get(i), have = got.tensors().get(i);
            assertEquals(want.name(), have.name());
            assertEquals(want.dtype(), have.dtype(), want.name());
            assertEquals(want.metadata(), have.metadata(), want.name() + ": metadata, not a model input");
            assertArrayEquals(want.shape(), have.shape(), want.name());
            assertEquals(-1, want.data().mismatch(have.data()), want.name() + " bytes");
        }
    }

    @Test
    void ranksReceiveExactlyTheirBatchesInOrderThenTheEnd() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(2, 3);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE)) {
            assertTrue(server.port() > 0);
            var failures = new ConcurrentLinkedQueue<Throwable>();
            var threads = new ArrayList<Thread>();
            for (int r = 0; r < 2; r++) {
                int rank = r;
                threads.add(Thread.ofPlatform().start(() -> {
                    try (var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
                        for (int step = 0; step < 3; step++) {
                            BatchLayout.Batch b = client.next(rank, 2, "test");
                            assertNotNull(b, "rank " + rank + " step " + step);
                            assertEquals(meta(3, step, rank, 2, 2), b.meta());
                            assertEquals(BatchLayout.sizeOf(tensors(rank, step)), b.totalBytes());
                            assertSameTensors(tensors(rank, step), b);
                            assertArrayEquals(tensors(rank, step).get(0).toLongs(), b.tensor("input_ids").toLongs());
                            assertArrayEquals(new long[] {step, 100L + rank}, b.sampleIndex());
                            assertEquals(List.of("input_ids", "pixel_values", "mask"), b.inputs().stream().map(Tensor::name).toList());
                        }
                        assertNull(client.next(rank, 2, "test"));
                        assertNull(client.next(rank, 2, "test"), "the end stays the end");
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                }));
            }
            for (Thread t : threads) t.join();
            if (!failures.isEmpty()) throw new AssertionError(failures.peek());
            long payload = 0;
            for (int r = 0; r < 2; r++) {
                for (int s = 0; s < 3; s++) {
                    assertEquals(1, source.released[r][s].get(), "lease of rank " + r + " step " + s + " released once");
                    for (Tensor t : tensors(r, s)) payload += t.data().byteSize();
                }
            }
            assertEquals(6, server.batchesSent());
            assertEquals(payload, server.bytesSent());
        }
    }

    @Test
    void aStreamOfTheLayoutBeforeIsRefusedSayingSo() {
        var v1 = new org.apache.arrow.vector.types.pojo.Schema(FlightWire.schema(null).getFields().subList(0, 4));
        var e = assertThrows(org.apache.arrow.flight.FlightRuntimeException.class, () -> FlightBatchClient.checked(v1));
        assertTrue(e.getMessage().contains("the server sends batch layout version 1 (no 'metadata' column"), e.getMessage());
        assertTrue(e.getMessage().contains("this client reads version 2"), e.getMessage());
        assertEquals(FlightWire.schema(null), FlightBatchClient.checked(FlightWire.schema(null)));
    }

    @Test
    void theWireCarriesSchemaAndMetadataAsDocumented() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(1, 1);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build()) {
            var ticket = new Ticket("{\"rank\":0,\"world\":1,\"job\":\"wire\"}".getBytes(StandardCharsets.UTF_8));
            try (FlightStream stream = client.getStream(ticket)) {
                String json = "{\"epoch\":3,\"step\":0,\"global_step\":30,\"rank\":0,\"world\":1,\"samples\":2,\"scheduled\":3}";
                assertEquals("Schema<name: Utf8 not null, dtype: Utf8 not null, shape: List<item: Int(64, true) not null> not null, "
                        + "data: LargeBinary not null, metadata: Bool not null>(metadata: {stoker.batch=" + json + "})",
                        stream.getSchema().toString());
                assertTrue(stream.next());
                assertEquals(4, stream.getRoot().getRowCount());
                assertEquals("[input_ids, pixel_values, mask, sample_index]", stream.getRoot().getVector("name").toString());
                assertEquals("[int64, float32, uint8, int64]", stream.getRoot().getVector("dtype").toString());
                assertEquals("[[2,33], [600,1176], [2,33], [2]]", stream.getRoot().getVector("shape").toString());
                assertEquals("[false, false, false, true]", stream.getRoot().getVector("metadata").toString());
                byte[] app = new byte[(int) stream.getLatestMetadata().readableBytes()];
                stream.getLatestMetadata().getBytes(0, app);
                assertEquals(json, new String(app, StandardCharsets.UTF_8));
                assertTrue(!stream.next(), "one record batch per DoGet");
            }
            try (FlightStream end = client.getStream(ticket)) {
                assertTrue(!end.next(), "end of feed: no record batch");
                assertEquals("true", end.getSchema().getCustomMetadata().get("stoker.end"));
            }
        }
    }

    @Test
    void rankOrWorldOutsideTheJobIsRefusedClearly() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(2, 1);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            var e = assertThrows(FlightRuntimeException.class, () -> client.next(2, 2, "test"));
            assertEquals(FlightStatusCode.INVALID_ARGUMENT, e.status().code());
            assertEquals("rank 2 is outside the world size 2", e.status().description());
            var e2 = assertThrows(FlightRuntimeException.class, () -> client.next(0, 4, "test"));
            assertEquals(FlightStatusCode.INVALID_ARGUMENT, e2.status().code());
            assertTrue(e2.getMessage().contains("world size 4 differs"), e2.getMessage());
            try (var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build();
                 var stream = raw.getStream(new Ticket("rank 0".getBytes(StandardCharsets.UTF_8)))) {
                var e3 = assertThrows(FlightRuntimeException.class, stream::next);
                assertEquals(FlightStatusCode.INVALID_ARGUMENT, e3.status().code());
                assertTrue(e3.status().description().startsWith("ticket is not JSON"), e3.status().description());
            }
            assertEquals(0, source.served[0].get(), "a refused trainer takes no batch");
            assertNotNull(client.next(0, 2, "test"), "the client still works after a refusal");
        }
    }

    @Test
    void tensorsAreValidUntilTheNextCall() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(1, 2);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            Tensor ids = client.next(0, 1, "test").tensor("input_ids");
            assertEquals(151643L, ids.data().get(ValueLayout.JAVA_LONG_UNALIGNED, 0));
            client.next(0, 1, "test");
            assertThrows(IllegalStateException.class, () -> ids.data().get(ValueLayout.JAVA_LONG_UNALIGNED, 0));
        }
    }

    /** A source whose batches arrive when the test says so. */
    static class Manual implements FlightTestSource {
        final ConcurrentLinkedQueue<CompletableFuture<Stored>> asked = new ConcurrentLinkedQueue<>();

        @Override
        public void validate(int rank, int world) {}

        @Override
        public CompletableFuture<Stored> next(int rank) {
            var f = new CompletableFuture<Stored>();
            asked.add(f);
            return f;
        }
    }

    @Test
    void aDoGetCancelledWhileWaitingHandsItsBatchToTheNext() throws Exception {
        var source = new Manual();
        var released = new AtomicInteger();
        try (var alloc = new RootAllocator();
             var arena = Arena.ofShared();
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build();
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            var e = assertThrows(FlightRuntimeException.class, () -> {
                try (var s = raw.getStream(FlightWire.ticket(0, 1, "test"), CallOptions.timeout(300, TimeUnit.MILLISECONDS))) {
                    s.next();
                }
            });
            assertEquals(FlightStatusCode.TIMED_OUT, e.status().code());
            while (server.waitingGets() > 0) Thread.sleep(5);
            assertEquals(1, source.asked.size());
            source.asked.poll().complete(FlightTestSource.lent(stkb(0, 0, 1, arena), released::incrementAndGet));
            BatchLayout.Batch b = client.next(0, 1, "test");
            assertEquals(0, b.meta().step(), "the cancelled DoGet's batch comes first");
            assertSameTensors(tensors(0, 0), b);
            assertEquals(0, source.asked.size(), "the source was not asked again");
            assertEquals(1, released.get());
        }
    }

    /**
     * A session's cancelled DoGet leaves its batch for that session only (audit #18: it was kept
     * under rank and job string, so a retry under another string never took it and it stayed
     * leased for ever): a bare ticket does not take it, and the session's goodbye releases it. (A
     * node's ledger refuses a bare ticket for a rank a session holds, ResumeTest; this source admits
     * it, so that the server's own keeping is tested.)
     */
    @Test
    void aSessionsCancelledDoGetIsKeptForItsSessionAndReleasedWhenItLeaves() throws Exception {
        var left = new ConcurrentLinkedQueue<Long>();
        var source = new Manual() {
            @Override
            public Joined join(int rank, long connection, dev.stoker.core.ScheduleCursor resume, long fingerprint) {
                return new Joined(0, 7, 10, dev.stoker.core.ScheduleCursor.START, 10, 1);
            }

            @Override public void leave(int rank, long connection) { left.add(connection); }
        };
        var released = new AtomicInteger();
        try (var alloc = new RootAllocator();
             var arena = Arena.ofShared();
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build();
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            var session = client.open(0, 1, "test", null, 0);
            assertEquals(7, session.fingerprint());
            assertThrows(FlightRuntimeException.class, () -> {
                try (var s = raw.getStream(FlightWire.ticket(0, 1, "test", session.id()), CallOptions.timeout(300, TimeUnit.MILLISECONDS))) {
                    s.next();
                }
            });
            while (server.waitingGets() > 0) Thread.sleep(5);
            source.asked.poll().complete(FlightTestSource.lent(stkb(0, 0, 1, arena), released::incrementAndGet));
            var bare = CompletableFuture.supplyAsync(() -> client.next(0, 1, "test").meta().step());
            while (source.asked.isEmpty()) Thread.sleep(5); // the bare ticket asked the source: it did not take the session's batch
            source.asked.poll().complete(FlightTestSource.lent(stkb(0, 1, 1, arena), released::incrementAndGet));
            assertEquals(1, bare.get(10, TimeUnit.SECONDS));
            assertEquals(1, released.get(), "the bare DoGet's batch was sent and released; the session's is still kept");
            session.close();
            assertEquals(2, released.get(), "the session's goodbye released the batch its cancelled DoGet left");
            assertEquals(1, left.size(), "and freed its rank in the ledger");
        }
    }

    /**
     * Tickets without a session (audit #18): one DoGet open per rank, so that DoGets cancelled one
     * after another cannot drain a rank into batches nobody takes; a cancelled one's batch goes to
     * the rank's next DoGet whatever job string its ticket says (it was kept under rank and job, and
     * a retry under another string never took it).
     */
    @Test
    void oneDoGetWithoutASessionIsOpenPerRankAndACancelledOnesBatchGoesToTheNextWhateverItsJob() throws Exception {
        var source = new Manual();
        var released = new AtomicInteger();
        try (var alloc = new RootAllocator();
             var arena = Arena.ofShared();
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var raw = FlightClient.builder(alloc, Location.forGrpcInsecure("127.0.0.1", server.port())).build();
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            var first = CompletableFuture.supplyAsync(() -> {
                try (var s = raw.getStream(FlightWire.ticket(0, 2, "a"), CallOptions.timeout(2, TimeUnit.SECONDS))) {
                    return s.next();
                } catch (Exception e) {
                    return e;
                }
            });
            while (server.waitingGets() == 0) Thread.sleep(5);
            var e = assertThrows(FlightRuntimeException.class, () -> client.next(0, 2, "b"));
            assertEquals(FlightStatusCode.INVALID_ARGUMENT, e.status().code());
            assertTrue(e.getMessage().contains("rank 0 has a DoGet without a session open already"), e.getMessage());
            assertTrue(first.get(10, TimeUnit.SECONDS) instanceof FlightRuntimeException, "the first DoGet timed out");
            while (server.waitingGets() > 0) Thread.sleep(5);
            assertEquals(1, source.asked.size(), "the refused DoGet asked the source nothing");
            source.asked.poll().complete(FlightTestSource.lent(stkb(0, 0, 2, arena), released::incrementAndGet));
            BatchLayout.Batch b = client.next(0, 2, "another job string");
            assertEquals(0, b.meta().step(), "the cancelled DoGet's batch, under another job string");
            assertEquals(0, source.asked.size(), "the source was not asked again");
            var other = CompletableFuture.supplyAsync(() -> client.next(1, 2, "a").meta().rank()); // other ranks are not held up
            while (source.asked.isEmpty()) Thread.sleep(5);
            source.asked.poll().complete(FlightTestSource.lent(stkb(1, 0, 2, arena), released::incrementAndGet));
            assertEquals(1, other.get(10, TimeUnit.SECONDS));
            assertEquals(2, released.get());
        }
    }

    @Test
    void closingFailsWaitingDoGetsAndReleasesTheirBatchesLater() throws Exception {
        var source = new Manual();
        var released = new AtomicInteger();
        try (var alloc = new RootAllocator(); var arena = Arena.ofShared()) {
            var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
            try (var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
                var call = CompletableFuture.supplyAsync(() -> client.next(0, 1, "test"));
                while (server.waitingGets() == 0) Thread.sleep(5);
                server.close();
                var e = assertThrows(Exception.class, call::join);
                assertTrue(e.getCause() instanceof FlightRuntimeException, String.valueOf(e.getCause()));
                assertEquals(FlightStatusCode.UNAVAILABLE, ((FlightRuntimeException) e.getCause()).status().code());
                source.asked.poll().complete(FlightTestSource.lent(stkb(0, 0, 1, arena), released::incrementAndGet));
                assertEquals(1, released.get(), "a batch that arrives after close is released at once");
            }
        }
    }

    @Test
    void aFailingSourceIsReportedAsInternal() throws Exception {
        FlightTestSource broken = new FlightTestSource() {
            @Override public void validate(int rank, int world) {}

            @Override public CompletableFuture<Stored> next(int rank) {
                return CompletableFuture.failedFuture(new IllegalStateException("decoder died"));
            }
        };
        try (var alloc = new RootAllocator();
             var server = FlightBatchServer.start(ANY_PORT, broken, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            var e = assertThrows(FlightRuntimeException.class, () -> client.next(0, 1, "test"));
            assertEquals(FlightStatusCode.INTERNAL, e.status().code());
            assertTrue(e.getMessage().contains("decoder died"), e.getMessage());
        }
    }

    @Test
    void emptyTensorsAndEmptyBatchesCrossIntact() throws Exception {
        var emptyPixels = new Tensor("pixel_values", Tensor.DType.FLOAT32, new long[] {0, 1176}, MemorySegment.ofArray(new float[0]));
        var ids = Tensor.of("input_ids", new long[] {1, 2, 3}, 1, 3);
        var batches = List.of(List.of(emptyPixels, ids), List.<Tensor>of());
        try (var alloc = new RootAllocator(); var arena = Arena.ofShared()) {
            var step = new AtomicInteger();
            FlightTestSource source = new FlightTestSource() {
                @Override public void validate(int rank, int world) {}

                @Override public CompletableFuture<Stored> next(int rank) {
                    int s = step.getAndIncrement();
                    if (s >= batches.size()) return CompletableFuture.completedFuture(null);
                    MemorySegment seg = arena.allocate(BatchLayout.sizeOf(batches.get(s)), 64);
                    BatchLayout.write(meta(0, s, 0, 1, 0), batches.get(s), seg);
                    return CompletableFuture.completedFuture(FlightTestSource.lent(seg, () -> {}));
                }
            };
            try (var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
                 var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
                assertSameTensors(batches.get(0), client.next(0, 1, "test"));
                BatchLayout.Batch none = client.next(0, 1, "test");
                assertEquals(1, none.meta().step());
                assertTrue(none.tensors().isEmpty());
                assertNull(client.next(0, 1, "test"));
            }
        }
    }

    @Test
    void dataBlocksAreReusedAcrossDoGets() throws Exception {
        try (var alloc = new RootAllocator();
             var source = new Synthetic(2, 3);
             var server = FlightBatchServer.start(ANY_PORT, source, null, alloc, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), alloc)) {
            // Rank 1's batches are 0.6 to 1.1% larger than rank 0's of the same step: the same blocks serve them.
            for (int r = 0; r < 2; r++) for (int s = 0; s < 3; s++) assertSameTensors(tensors(r, s), client.next(r, 2, "test"));
            assertTrue(server.blocksAllocated() <= 4, "allocated " + server.blocksAllocated());
            assertTrue(server.blocksReused() >= 2, "reused " + server.blocksReused());
        }
    }

    @Test
    void aServerWithoutAnAllocatorOwnsOne() throws Exception {
        try (var source = new Synthetic(1, 1);
             var server = FlightBatchServer.start(ANY_PORT, source, null, null, FlightBatchServer.Security.NONE);
             var client = FlightBatchClient.connect("127.0.0.1", server.port())) {
            assertSameTensors(tensors(0, 0), client.next(0, 1, "test"));
            assertNull(client.next(0, 1, "test"));
        }
    }
}
