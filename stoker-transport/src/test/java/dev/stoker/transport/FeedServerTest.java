package dev.stoker.transport;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(30)
class FeedServerTest {
    @TempDir Path tmp;

    /** A provider of fresh starts only, whose batches do not depend on the connection that asks. */
    interface Simple extends BatchProvider {
        CompletableFuture<? extends Delivery> next(int rank);

        @Override
        default CompletableFuture<? extends Delivery> next(int rank, long connection) { return next(rank); }

        @Override
        default Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) {
            if (resume != null) throw new IllegalArgumentException("this provider cannot resume a trainer (asked for " + resume + ")");
            return new Joined(0, 0, 0, ScheduleCursor.START, 0, 0);
        }
    }

    /** Serves {@code steps} deterministic batches per rank, then ends. */
    static class Synthetic implements Simple {
        final int world;
        final int steps;
        final AtomicInteger[] served;

        Synthetic(int world, int steps) {
            this.world = world;
            this.steps = steps;
            served = new AtomicInteger[world];
            for (int i = 0; i < world; i++) served[i] = new AtomicInteger();
        }

        @Override
        public void validate(int rank, int world) {
            if (world != this.world) throw new IllegalArgumentException("world size " + world + " differs from the job's " + this.world);
            if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
        }

        @Override
        public CompletableFuture<Prepared> next(int rank) {
            int step = served[rank].getAndIncrement();
            if (step >= steps) return CompletableFuture.completedFuture(null);
            return CompletableFuture.completedFuture(batch(rank, step));
        }

        static Prepared batch(int rank, int step) {
            float[] pixels = new float[1176 * (3 + step)];
            for (int i = 0; i < pixels.length; i++) pixels[i] = rank * 1000 + step + i * 0.5f;
            long[] ids = {151644, 8948, rank, step, 151643};
            return new Prepared(new BatchLayout.Meta(0, step, rank, 2, 1),
                    List.of(Tensor.of("input_ids", ids, 1, 5), Tensor.of("pixel_values", pixels, 3 + step, 1176),
                            Tensor.of("sample_index", new long[] {10L * rank + step}, 1).asMetadata()));
        }
    }

    @Test
    void layoutRoundTripsAndAlignsTensors() {
        var prepared = Synthetic.batch(1, 4);
        try (Arena arena = Arena.ofConfined()) {
            var seg = arena.allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
            BatchLayout.write(prepared.meta(), prepared.tensors(), seg);
            var batch = BatchLayout.read(seg);
            assertEquals(prepared.meta(), batch.meta());
            assertArrayEquals(prepared.tensors().get(1).toFloats(), batch.tensor("pixel_values").toFloats());
            assertArrayEquals(new long[] {7, 1176}, batch.tensor("pixel_values").shape());
            for (Tensor t : batch.tensors()) assertEquals(0, (t.data().address() - seg.address()) % 64, t.name() + " aligned");
            assertEquals(List.of("input_ids", "pixel_values"), batch.inputs().stream().map(Tensor::name).toList(), "the model inputs");
            assertEquals(List.of("sample_index"), batch.metadata().stream().map(Tensor::name).toList(), "flagged metadata");
            assertArrayEquals(new long[] {14}, batch.sampleIndex());
            assertNull(batch.pixelNorm(), "no compact format");
            // version 1 (the release before): no flags, sample_index among the inputs; refused, saying why
            seg.set(BatchLayout.INT_LE, 4, 1);
            var e = assertThrows(IllegalArgumentException.class, () -> BatchLayout.read(seg));
            assertTrue(e.getMessage().startsWith("batch layout version 1 is not supported: this reader knows version 2"), e.getMessage());
            assertTrue(e.getMessage().contains("sample_index"), e.getMessage());
            seg.set(BatchLayout.INT_LE, 4, 2);
            seg.set(BatchLayout.INT_LE, 64 + 104, 2); // descriptor 0's flags: a bit this reader does not know
            e = assertThrows(IllegalArgumentException.class, () -> BatchLayout.read(seg));
            assertEquals("input_ids: unknown descriptor flags 0x2", e.getMessage());
        }
    }

    @Test
    void trainersReceiveTheirBatchesThenEnd() throws Exception {
        var provider = new Synthetic(2, 3);
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false)) {
            for (int rank = 0; rank < 2; rank++) {
                try (var client = TrainerClient.connect(sock, rank, 2, "test")) {
                    for (int step = 0; step < 3; step++) {
                        var b = client.next().batch();
                        assertEquals(step, b.meta().step());
                        assertArrayEquals(Synthetic.batch(rank, step).tensors().get(1).toFloats(), b.tensor("pixel_values").toFloats());
                        assertArrayEquals(new long[] {151644, 8948, rank, step, 151643}, b.tensor("input_ids").toLongs());
                        assertEquals(List.of("input_ids", "pixel_values"), b.inputs().stream().map(Tensor::name).toList());
                        assertArrayEquals(new long[] {10L * rank + step}, b.sampleIndex());
                    }
                    assertNull(client.next());
                }
            }
            assertEquals(6, server.batchesSent());
        }
        assertTrue(Files.notExists(sock), "socket file removed on close");
    }

    @Test
    void aFailedBatchReachesTheTrainerAsAnErrorWithItsMessage() throws Exception {
        var good = new Synthetic(1, 2);
        var provider = new Simple() {
            @Override
            public void validate(int rank, int world) { good.validate(rank, world); }

            @Override
            public CompletableFuture<Prepared> next(int rank) {
                if (good.served[rank].get() < 2) return good.next(rank);
                return CompletableFuture.failedFuture(new IllegalStateException("bad input: s7: decode: truncated"));
            }
        };
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 0, 1, "test")) {
            client.next();
            client.next();
            var e = assertThrows(IOException.class, client::next);
            assertEquals("service error: bad input: s7: decode: truncated", e.getMessage());
        }
    }

    @Test
    void rankOutsideTheWorldIsRefusedClearly() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, new Synthetic(2, 1), false)) {
            var e = assertThrows(IOException.class, () -> TrainerClient.connect(sock, 2, 2, "test"));
            assertTrue(e.getMessage().contains("rank 2 is outside the world size 2"), e.getMessage());
            var e2 = assertThrows(IOException.class, () -> TrainerClient.connect(sock, 0, 4, "test"));
            assertTrue(e2.getMessage().contains("world size 4"), e2.getMessage());
        }
    }

    @Test
    void anotherProtocolVersionIsRefusedClearly() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, new Synthetic(1, 1), false);
             var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(sock));
            var in = new FeedProtocol.FrameReader(ch);
            var hello = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(FeedProtocol.VERSION + 1).putInt(0).putInt(1).flip();
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, hello);
            var f = in.next();
            assertEquals(FeedProtocol.ERROR, f.type());
            assertTrue(FeedProtocol.utf8(in.small(f)).contains("protocol version 6 is not supported; this service speaks version 5"));
        }
    }

    @Test
    void gatedServerHoldsTrainersUntilOpened() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, new Synthetic(1, 1), true)) {
            var connected = CompletableFuture.supplyAsync(() -> {
                try {
                    return TrainerClient.connect(sock, 0, 1, "test");
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(server.awaitHellos(1, 5000));
            Thread.sleep(100);
            assertTrue(!connected.isDone(), "held before open()");
            server.open();
            try (var client = connected.get()) {
                assertEquals(0, client.next().batch().meta().step());
            }
        }
    }

    /** Serves each rank's batches from segment files in {@code dir}, counting releases. */
    static final class StoredSynthetic implements Simple {
        final Synthetic values;
        final Path dir;
        final Arena arena = Arena.ofShared();
        final AtomicInteger released = new AtomicInteger();
        final AtomicInteger handedOut = new AtomicInteger();

        StoredSynthetic(int world, int steps, Path dir) {
            values = new Synthetic(world, steps);
            this.dir = dir;
        }

        @Override public void validate(int rank, int world) { values.validate(rank, world); }

        @Override public boolean sharedMemory() { return true; }

        @Override
        public CompletableFuture<Delivery> next(int rank) {
            var p = values.next(rank).join();
            if (p == null) return CompletableFuture.completedFuture(null);
            try {
                Path file = dir.resolve("seg-" + rank + "-" + p.meta().step());
                long size = BatchLayout.sizeOf(p.tensors());
                long offset = 128;
                try (var fc = java.nio.channels.FileChannel.open(file, java.nio.file.StandardOpenOption.CREATE_NEW,
                        java.nio.file.StandardOpenOption.READ, java.nio.file.StandardOpenOption.WRITE)) {
                    var seg = fc.map(java.nio.channels.FileChannel.MapMode.READ_WRITE, 0, offset + size, arena);
                    BatchLayout.write(p.meta(), p.tensors(), seg.asSlice(offset, size));
                    handedOut.incrementAndGet();
                    return CompletableFuture.completedFuture(new Stored(file, offset, size, seg.asSlice(offset, size), released::incrementAndGet));
                }
            } catch (IOException e) {
                return CompletableFuture.failedFuture(e);
            }
        }
    }

    @Test
    void sharedMemoryTrainersGetReferencesAndReleaseThem() throws Exception {
        var provider = new StoredSynthetic(1, 3, Files.createDirectory(tmp.resolve("shm")));
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false)) {
            try (var client = TrainerClient.connect(sock, 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                assertTrue(client.sharedMemory());
                var first = client.next();
                assertTrue(first.byReference());
                var second = client.next();
                assertArrayEquals(Synthetic.batch(0, 0).tensors().get(1).toFloats(), first.batch().tensor("pixel_values").toFloats());
                assertArrayEquals(Synthetic.batch(0, 1).tensors().get(1).toFloats(), second.batch().tensor("pixel_values").toFloats());
                assertEquals(0, client.bytesReceived(), "nothing copied through the socket");
                assertEquals(0, provider.released.get(), "both leases held");
                first.close();
                try (var third = client.next()) {
                    assertEquals(2, third.batch().meta().step());
                    assertEquals(1, provider.released.get(), "released with the next request");
                }
                second.close();
                assertNull(client.next());
                assertEquals(3, provider.released.get());
            }
            assertEquals(3, server.refsSent());
            assertEquals(0, server.batchesSent());
        }
    }

    @Test
    void leasesOfATrainerThatGoesAwayAreReleased() throws Exception {
        var provider = new StoredSynthetic(1, 5, Files.createDirectory(tmp.resolve("shm")));
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false)) {
            var ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(sock));
            var in = new FeedProtocol.FrameReader(ch);
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO,
                    new FeedProtocol.Hello(FeedProtocol.VERSION, 0, 1, FeedProtocol.FLAG_SHARED_MEMORY, null, 0, "t").encode());
            var welcome = in.next();
            assertEquals(FeedProtocol.WELCOME, welcome.type());
            in.small(welcome);
            for (int i = 0; i < 2; i++) {
                FeedProtocol.writeFrame(ch, FeedProtocol.NEXT, null);
                var f = in.next();
                assertEquals(FeedProtocol.REF, f.type());
                in.small(f);
            }
            ch.close(); // dies holding two leases
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (provider.released.get() < 2 && System.nanoTime() < deadline) Thread.sleep(5);
            assertEquals(2, provider.released.get());
            assertEquals(2, server.leasesReleasedOnDisconnect());
        }
    }

    @Test
    void aCopyTrainerOfASharedMemoryServiceGetsBytesAndTheLeaseIsReleasedAtOnce() throws Exception {
        var provider = new StoredSynthetic(1, 2, Files.createDirectory(tmp.resolve("shm")));
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 0, 1, "test")) {
            assertTrue(!client.sharedMemory());
            var b = client.next();
            assertTrue(!b.byReference());
            assertArrayEquals(Synthetic.batch(0, 0).tensors().get(1).toFloats(), b.batch().tensor("pixel_values").toFloats());
            long deadline = System.nanoTime() + 5_000_000_000L; // released by the server right after its write returns
            while (provider.released.get() < 1 && System.nanoTime() < deadline) Thread.sleep(2);
            assertEquals(1, provider.released.get());
            assertTrue(client.bytesReceived() > 0);
        }
    }

    @Test
    void releasingALeaseNotHeldIsAnError() throws Exception {
        var provider = new StoredSynthetic(1, 2, Files.createDirectory(tmp.resolve("shm")));
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false);
             var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(sock));
            var in = new FeedProtocol.FrameReader(ch);
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO,
                    new FeedProtocol.Hello(FeedProtocol.VERSION, 0, 1, FeedProtocol.FLAG_SHARED_MEMORY, null, 0, "t").encode());
            in.small(in.next());
            FeedProtocol.writeFrame(ch, FeedProtocol.RELEASE, ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, 42));
            var f = in.next();
            assertEquals(FeedProtocol.ERROR, f.type());
            assertTrue(FeedProtocol.utf8(in.small(f)).contains("lease 42"));
        }
    }

    @Test
    void eachRequestAfterABatchCarriesTheTrainersTimingOfItToItsRank() throws Exception {
        var reports = new java.util.concurrent.ConcurrentLinkedQueue<long[]>();
        var provider = new Synthetic(2, 3) {
            @Override
            public void report(int rank, long connection, long waitNanos, long stepNanos) {
                reports.add(new long[] {rank, waitNanos, stepNanos});
            }
        };
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 1, 2, "t")) {
            var waits = new java.util.ArrayList<Long>();
            for (int step = 0; step < 3; step++) {
                var got = client.next();
                assertEquals(step, got.batch().meta().step());
                waits.add(client.lastWaitNanos());
                Thread.sleep(20); // the simulated step
            }
            assertNull(client.next()); // this request reports the third batch
            assertEquals(3, server.timingsReceived());
            assertEquals(3, reports.size());
            int i = 0;
            for (long[] r : reports) {
                assertEquals(1, r[0], "a report belongs to the connection's rank");
                assertEquals(waits.get(i++), r[1], "the wait the client measured");
                assertTrue(r[2] >= 20_000_000L && r[2] < 5_000_000_000L, "step of " + r[2] + " ns around a 20 ms sleep");
            }
        }
    }

    @Test
    void aNextWithAPayloadOfAnotherLengthIsRefused() throws Exception {
        for (int length : new int[] {8, 17, 24, 33, 1 << 21}) {
            Path sock = tmp.resolve("feed-" + length + ".sock");
            var reports = new AtomicInteger();
            var provider = new Synthetic(1, 5) {
                @Override
                public void report(int rank, long connection, long waitNanos, long stepNanos) { reports.incrementAndGet(); }
            };
            try (var server = new FeedServer(sock, provider, false);
                 var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
                ch.connect(UnixDomainSocketAddress.of(sock));
                var in = new FeedProtocol.FrameReader(ch);
                FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, new FeedProtocol.Hello(FeedProtocol.VERSION, 0, 1, 0, null, 0, "t").encode());
                var welcome = in.next();
                assertEquals(FeedProtocol.WELCOME, welcome.type());
                in.small(welcome);
                // only the header: the server must refuse on the length, before reading (or waiting for) the payload
                var header = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(FeedProtocol.NEXT).putLong(length).flip();
                FeedProtocol.writeFully(ch, header);
                var f = in.next();
                assertEquals(FeedProtocol.ERROR, f.type());
                assertEquals("NEXT payload of " + length + " bytes; protocol version " + FeedProtocol.VERSION
                        + " sends 0, 16 (wait_ns u64, step_ns u64) or 32 (wait_ns, step_ns, floor_ns, floor_steps u64)",
                        FeedProtocol.utf8(in.small(f)));
                assertEquals(0, provider.served[0].get(), "no batch handed out for a refused request");
                assertEquals(0, reports.get());
            }
        }
    }

    @Test
    void aTimingOverTheSignedRangeIsRefused() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, new Synthetic(1, 5), false);
             var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(sock));
            var in = new FeedProtocol.FrameReader(ch);
            FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, new FeedProtocol.Hello(FeedProtocol.VERSION, 0, 1, 0, null, 0, "t").encode());
            in.small(in.next());
            FeedProtocol.writeFrame(ch, FeedProtocol.NEXT, new FeedProtocol.Timing(-1, 5).encode()); // 2^64 - 1 unsigned
            var f = in.next();
            assertEquals(FeedProtocol.ERROR, f.type());
            assertTrue(FeedProtocol.utf8(in.small(f)).contains("wait_ns 18446744073709551615"));
        }
    }

    @Test
    void metadataRoundTripsThroughTheHeader() {
        var meta = new BatchLayout.Meta(3, 17, 1, 2, 6, 8, 3 * 100 + 17);
        var t = List.of(Tensor.of("input_ids", new long[] {1, 2, 3}, 1, 3));
        try (Arena arena = Arena.ofConfined()) {
            var seg = arena.allocate(BatchLayout.sizeOf(t), 64);
            BatchLayout.write(meta, t, seg);
            assertEquals(meta, BatchLayout.read(seg).meta());
        }
    }

    /** A second service on a live service's socket path is refused; the first goes on serving (audit #5). */
    @Test
    void aLiveServicesSocketIsNotTakenOver() throws Exception {
        Path sock = tmp.resolve("taken.sock");
        try (var first = new FeedServer(sock, new Synthetic(1, 2), false)) {
            var e = assertThrows(IOException.class, () -> new FeedServer(sock, new Synthetic(1, 2), false));
            assertTrue(e.getMessage().contains("a live service is already listening on " + sock), e.getMessage());
            try (var client = TrainerClient.connect(sock, 0, 1, "test")) {
                assertEquals(0, client.next().batch().meta().step());
            }
        }
    }

    /** A socket file left by a service that died is replaced; a server deletes only the socket it made itself. */
    @Test
    void aStaleSocketIsReplacedAndAServerDeletesOnlyItsOwnSocket() throws Exception {
        Path sock = tmp.resolve("stale.sock");
        var dead = java.nio.channels.ServerSocketChannel.open(java.net.StandardProtocolFamily.UNIX);
        dead.bind(java.net.UnixDomainSocketAddress.of(sock));
        dead.close(); // its file stays, with nobody listening: what kill -9 leaves
        assertTrue(Files.exists(sock));
        var old = new FeedServer(sock, new Synthetic(1, 2), false);
        Files.delete(sock); // someone removed the old one's socket, and a new service started on the path
        try (var current = new FeedServer(sock, new Synthetic(1, 2), false)) {
            old.close();
            assertTrue(Files.exists(sock), "closing the old server left the new one's socket alone");
            try (var client = TrainerClient.connect(sock, 0, 1, "test")) {
                assertEquals(0, client.next().batch().meta().step());
            }
        }
        assertTrue(Files.notExists(sock));
    }

    /**
     * The acceptor survives any error (audit #11): connection threads that cannot be made (an
     * OutOfMemoryError, as when a host runs out of threads) lose those connections only; the
     * service goes on accepting, and a trainer after them is served.
     */
    @Test
    void theAcceptorSurvivesAThreadThatCannotBeMade() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        var failures = new AtomicInteger(3);
        java.util.concurrent.ThreadFactory flaky = r -> {
            if (failures.getAndDecrement() > 0) throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
            return Thread.ofPlatform().daemon().unstarted(r);
        };
        var provider = new Synthetic(1, 3);
        try (var server = new FeedServer(sock, provider, false, FeedServer.Limits.DEFAULT, flaky)) {
            for (int i = 0; i < 3; i++) {
                try (var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
                    ch.connect(UnixDomainSocketAddress.of(sock));
                    assertEquals(-1, ch.read(ByteBuffer.allocate(16)), "a connection without a thread is closed");
                }
            }
            var served = CompletableFuture.supplyAsync(() -> {
                try (var client = TrainerClient.connect(sock, 0, 1, "test")) {
                    for (int step = 0; step < 3; step++) assertEquals(step, client.next().batch().meta().step());
                    assertNull(client.next());
                    return true;
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            assertTrue(served.get(20, java.util.concurrent.TimeUnit.SECONDS), "a trainer after the failures is served");
            assertEquals(3, provider.served[0].get() - 1, "every batch went to it, then END");
            assertEquals(0, server.connectionsRefused());
        }
    }

    /** An ERROR with an empty message still sends its header (audit #24): the trainer sees frame type 14, not a bare end of stream. */
    @Test
    void anEmptyFrameStillSendsItsHeader() throws Exception {
        Path sock = tmp.resolve("pair.sock");
        try (var listener = java.nio.channels.ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            listener.bind(UnixDomainSocketAddress.of(sock));
            try (var a = SocketChannel.open(UnixDomainSocketAddress.of(sock)); var b = listener.accept()) {
                FeedProtocol.writeFrame(b, FeedProtocol.ERROR, FeedProtocol.utf8("")); // a gathering channel, an empty payload
                b.close();
                var in = new FeedProtocol.FrameReader(a);
                var f = in.next();
                assertEquals(FeedProtocol.ERROR, f.type());
                assertEquals(0, f.length());
            }
        }
    }

    /** A provider that fails with an empty message: the trainer gets an ERROR (empty), not an end of stream. */
    @Test
    void aFailureWithoutAMessageReachesTheTrainerAsAnError() throws Exception {
        var provider = new Simple() {
            @Override public void validate(int rank, int world) {}

            @Override
            public CompletableFuture<Prepared> next(int rank) { return CompletableFuture.failedFuture(new IllegalStateException("")); }
        };
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, provider, false); var client = TrainerClient.connect(sock, 0, 1, "test")) {
            var e = assertThrows(IOException.class, client::next);
            assertEquals("service error: ", e.getMessage());
        }
    }
}
