package dev.stoker.bench.flight;

import dev.stoker.bench.Stats;
import dev.stoker.bench.ReadyBatches;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import java.io.EOFException;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.RootAllocator;

/**
 * Loopback throughput of remote batch delivery: Arrow Flight DoGet ({@link FlightBatchServer} to
 * {@link FlightBatchClient}, the batch's tensors ending in client memory) against the baseline of a
 * plain TCP socket on 127.0.0.1 carrying the same {@code STKB} bytes (the server writes the segment
 * with a SocketChannel, the client reads it into a direct buffer it reuses). Both are pulled one
 * batch per request, as a trainer does. Rounds interleave the two; each figure is the median over
 * the rounds of (batch bytes × batches) / wall time, in MB/s (10^6 bytes).
 *
 * <p>{@code stoker bench flight} runs it; so does {@code java <stoker.jvm.flags> -cp ... dev.stoker.bench.flight.FlightThroughput
 * [--sizes-mb 8,64] [--rounds 5] [--mb-per-round 512]}. The last line printed is JSON.
 */
public final class FlightThroughput {
    private static final double BYTES_PER_MB = 1e6;

    /** @param sizesMb batch sizes in MB; @param rounds interleaved rounds, medians reported; @param mbPerRound MB moved per path and round */
    public record Settings(List<Integer> sizesMb, int rounds, long mbPerRound) {
        public static final Settings DEFAULTS = new Settings(List.of(8, 64), 5, 512);
    }

    private FlightThroughput() {}

    public static void main(String[] args) throws Exception {
        var s = Settings.DEFAULTS;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--sizes-mb" -> s = new Settings(Arrays.stream(args[++i].split(",")).map(x -> Integer.valueOf(x.trim())).toList(),
                        s.rounds(), s.mbPerRound());
                case "--rounds" -> s = new Settings(s.sizesMb(), Integer.parseInt(args[++i]), s.mbPerRound());
                case "--mb-per-round" -> s = new Settings(s.sizesMb(), s.rounds(), Long.parseLong(args[++i]));
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + "; options: --sizes-mb 8,64 --rounds 5 --mb-per-round 512");
            }
        }
        run(s, new PrintWriter(System.out, true));
    }

    /** Runs the benchmark, prints a table and the JSON line, and returns the JSON. */
    public static String run(Settings settings, PrintWriter out) throws Exception {
        int rounds = settings.rounds();
        long mbPerRound = settings.mbPerRound();
        var flight = new LinkedHashMap<String, Double>();
        var socket = new LinkedHashMap<String, Double>();
        out.printf(Locale.ROOT, "%-8s %12s %12s %8s   (loopback, %d rounds, medians; %d MB per measurement; %d cores)%n",
                "batch", "flight MB/s", "socket MB/s", "ratio", rounds, mbPerRound, Runtime.getRuntime().availableProcessors());
        try (Arena arena = Arena.ofShared()) {
            for (int mb : settings.sizesMb()) {
                MemorySegment batch = syntheticBatch((long) mb << 20, arena);
                int batches = (int) Math.max(2, mbPerRound * 1_000_000 / batch.byteSize());
                double[] f = new double[rounds], s = new double[rounds];
                try (var flightBench = new FlightBench(batch); var socketBench = new SocketBench(batch)) {
                    flightBench.pull(batches / 2 + 2); // warm-up: JIT, connection, buffers grown and touched
                    socketBench.pull(batches / 2 + 2);
                    for (int r = 0; r < rounds; r++) {
                        f[r] = flightBench.pull(batches);
                        s[r] = socketBench.pull(batches);
                    }
                }
                String key = mb + "MB";
                flight.put(key, Stats.median(f));
                socket.put(key, Stats.median(s));
                out.printf(Locale.ROOT, "%-8s %12.0f %12.0f %8.2f   rounds flight %s socket %s%n", key, flight.get(key), socket.get(key),
                        flight.get(key) / socket.get(key), fmt(f), fmt(s));
            }
        }
        var json = new StringBuilder("{\"flight_mb_s\":").append(obj(flight)).append(",\"socket_mb_s\":").append(obj(socket)).append(",\"ratio\":{");
        int i = 0;
        for (String k : flight.keySet()) json.append(i++ > 0 ? "," : "").append('"').append(k).append("\":")
                .append(String.format(Locale.ROOT, "%.3f", flight.get(k) / socket.get(k)));
        String line = json.append("}}").toString();
        out.println(line);
        out.flush();
        return line;
    }

    /** An STKB batch of about {@code bytes}: float32 pixel_values (N, 1176) and int64 input_ids (8, 512). */
    static MemorySegment syntheticBatch(long bytes, Arena arena) {
        long idsBytes = 8L * 512 * Long.BYTES;
        long rows = Math.max(1, (bytes - idsBytes - 4096) / (1176L * Float.BYTES));
        MemorySegment pixels = arena.allocate(rows * 1176 * Float.BYTES, 64);
        for (long k = 0; k < pixels.byteSize() / Float.BYTES; k++) pixels.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, k, (k % 1000) * 0.001f);
        MemorySegment ids = arena.allocate(idsBytes, 64);
        for (long k = 0; k < 8 * 512; k++) ids.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, k, 151643 + k);
        var tensors = List.of(new Tensor("input_ids", Tensor.DType.INT64, new long[] {8, 512}, ids),
                new Tensor("pixel_values", Tensor.DType.FLOAT32, new long[] {rows, 1176}, pixels));
        MemorySegment seg = arena.allocate(BatchLayout.sizeOf(tensors), 64);
        BatchLayout.write(new BatchLayout.Meta(0, 0, 0, 1, 8), tensors, seg);
        return seg;
    }

    /** Flight: an endless source lending the same segment; the client pulls one batch per DoGet. */
    private static final class FlightBench implements AutoCloseable {
        final long batchBytes;
        final RootAllocator allocator = new RootAllocator();
        final FlightBatchServer server;
        final FlightBatchClient client;

        FlightBench(MemorySegment batch) throws IOException {
            batchBytes = batch.byteSize();
            var source = new ReadyBatches(() -> new BatchProvider.Stored(null, 0, batch.byteSize(), batch, () -> {}), false, 0);
            String token = FlightBatchServer.newToken(); // no endpoint without a token, even a benchmark's on loopback
            server = FlightBatchServer.start(Location.forGrpcInsecure("127.0.0.1", 0), source, null, allocator,
                    new FlightBatchServer.Security(token, null, null));
            client = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(token, false, null), allocator);
        }

        double pull(int batches) {
            long sum = 0;
            long t0 = System.nanoTime();
            for (int i = 0; i < batches; i++) {
                BatchLayout.Batch b = client.next(0, 1, "bench");
                sum += b.tensors().get(1).data().get(ValueLayout.JAVA_BYTE, 4);
            }
            long ns = System.nanoTime() - t0;
            if (sum == 42) Thread.onSpinWait(); // keeps the reads
            return batchBytes * (double) batches / BYTES_PER_MB / (ns / 1e9);
        }

        @Override
        public void close() {
            client.close();
            server.close();
            allocator.close();
        }
    }

    /** The baseline: request byte, then length (u64) and the STKB bytes on a loopback TCP socket. */
    private static final class SocketBench implements AutoCloseable {
        final long batchBytes;
        final ServerSocketChannel listener;
        final Thread serverThread;
        final SocketChannel client;
        final ByteBuffer request = ByteBuffer.allocateDirect(1);
        final ByteBuffer length = ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN);
        final ByteBuffer into;

        SocketBench(MemorySegment batch) throws IOException {
            batchBytes = batch.byteSize();
            listener = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            serverThread = Thread.ofPlatform().daemon().name("socket-bench-server").start(() -> serve(batch));
            client = SocketChannel.open(listener.getLocalAddress());
            client.setOption(StandardSocketOptions.TCP_NODELAY, true);
            into = ByteBuffer.allocateDirect(Math.toIntExact(batchBytes));
            for (int p = 0; p < into.capacity(); p += 4096) into.put(p, (byte) 0); // touched once, reused
        }

        private void serve(MemorySegment batch) {
            ByteBuffer ask = ByteBuffer.allocateDirect(1);
            ByteBuffer header = ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN);
            try (SocketChannel ch = listener.accept()) {
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                while (true) {
                    ask.clear();
                    if (ch.read(ask) < 0) return;
                    header.clear().putLong(batch.byteSize()).flip();
                    ByteBuffer body = batch.asByteBuffer();
                    while (header.hasRemaining() || body.hasRemaining()) ch.write(new ByteBuffer[] {header, body});
                }
            } catch (IOException e) {
                // the client closed
            }
        }

        double pull(int batches) throws IOException {
            long t0 = System.nanoTime();
            for (int i = 0; i < batches; i++) {
                request.clear().put((byte) 1).flip();
                client.write(request);
                length.clear();
                readFully(length);
                long n = length.flip().getLong();
                into.clear().limit(Math.toIntExact(n));
                readFully(into);
            }
            long ns = System.nanoTime() - t0;
            return batchBytes * (double) batches / BYTES_PER_MB / (ns / 1e9);
        }

        private void readFully(ByteBuffer b) throws IOException {
            while (b.hasRemaining()) if (client.read(b) < 0) throw new EOFException("socket closed");
        }

        @Override
        public void close() throws IOException {
            client.close();
            listener.close();
            try {
                serverThread.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static String fmt(double[] v) {
        var parts = new ArrayList<String>();
        for (double d : v) parts.add(String.format(Locale.ROOT, "%.0f", d));
        return String.join("/", parts);
    }

    private static String obj(Map<String, Double> m) {
        var sb = new StringBuilder("{");
        int i = 0;
        for (var e : m.entrySet()) sb.append(i++ > 0 ? "," : "").append('"').append(e.getKey()).append("\":").append(String.format(Locale.ROOT, "%.1f", e.getValue()));
        return sb.append('}').toString();
    }
}
