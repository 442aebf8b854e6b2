package dev.stoker.bench.wire;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ReadyBatches;
import dev.stoker.bench.Stats;
import dev.stoker.bench.trainer.SimulatedTrainer;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.store.StoredObject;
import dev.stoker.transport.FeedServer;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.RootAllocator;

/**
 * {@code stoker bench wire}: when the compact wire format ({@code --pixel-format uint8}) pays off. The same
 * real batches (encoded once from the data set in both formats, checked to decode to the same pixel_values)
 * are handed over again and again, float32 and uint8 interleaved, by each path: (a) copied through the Unix
 * socket (prefetch's delivery) to a Python trainer, (b) by reference to shared memory (zero-copy) to a Python
 * trainer, (c) over Arrow Flight on loopback to a Java client. The Python trainers turn uint8 batches into
 * pixel_values with the client's torch function inside their wait, as a training loop would, and time it
 * apart; the Flight client does not convert (there is no pyarrow here), so its uint8 figure adds the Python
 * conversion time measured on the same batches.
 *
 * <p>Per path and format: bytes per batch, the time from asking to holding the batch (transfer), the
 * conversion, and batches per second back to back. The pipeline's own cost is left out on purpose: the
 * batches are ready before timing starts, so the figure is the hand-over alone. The last line printed is
 * JSON {@code {"wire": {PATH: {FORMAT: {…}}}, "bytes_per_batch": {…}, "torch_threads": …}}.
 */
public final class WireBench {
    /** Batches of each measurement left out as warm-up. */
    public static final int SKIP = 4;
    public static final List<String> PATHS = List.of("socket", "shm", "flight");

    /**
     * @param config  the batches: data, batch, seed, threads, processor, tokenizer; the store's directory
     * @param batches distinct batches per format, handed out in turn
     * @param steps   batches a trainer takes per measurement (the first {@link #SKIP} not counted)
     * @param rounds  interleaved rounds of every path and format
     * @param paths   of {@link #PATHS}
     * @param workDir sockets, trainer reports and logs (null: a temp folder)
     */
    public record Settings(NodeConfig config, int batches, int steps, int rounds, List<String> paths, Path workDir) {}

    /** Medians of one path and format over a measurement: per batch, in ms, and bytes. */
    record Run(double waitMs, double transferMs, double convertMs, double batchesPerSecond, double bytes) {}

    private final Settings s;
    /** torch.get_num_threads() in the converting trainers (reported by them; 0: unknown). */
    private int torchThreads;

    private WireBench(Settings s) { this.s = s; }

    public static Map<String, Object> run(Settings s, PrintWriter out) throws Exception {
        for (String p : s.paths()) if (!PATHS.contains(p)) throw new ConfigException("--paths: unknown path '" + p + "'; expected " + PATHS);
        if (s.batches() < 1 || s.steps() <= SKIP || s.rounds() < 1)
            throw new ConfigException("--batches, --batch and --rounds must be at least 1 and --steps more than " + SKIP);
        if (s.config().data() == null) throw new ConfigException("--data is required: the manifest the batches are encoded from");
        return new WireBench(s).measure(out);
    }

    private Map<String, Object> measure(PrintWriter out) throws Exception {
        Path dir = s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-wire");
        var encode = s.config().encodeOptions();
        Path client = TrainerProcesses.findPythonClient();

        var made = new EnumMap<PixelFormat, List<BatchProvider.Prepared>>(PixelFormat.class);
        for (var format : PixelFormat.values()) made.put(format, encodeBatches(format));
        boolean exact = decodesExactly(made.get(PixelFormat.FLOAT32), made.get(PixelFormat.UINT8), encode);
        var bytes = new EnumMap<PixelFormat, double[]>(PixelFormat.class);
        for (var e : made.entrySet()) bytes.put(e.getKey(), e.getValue().stream().mapToDouble(p -> BatchLayout.sizeOf(p.tensors())).toArray());
        out.printf(Locale.ROOT, "wire: %s, batch %d, max pixels %d, %d batches per format, %d rounds × %d steps, %d cores, work dir %s%n",
                s.config().data(), s.config().batch(), encode.vision().maxPixels(), s.batches(), s.rounds(), s.steps(),
                Runtime.getRuntime().availableProcessors(), dir);
        out.printf(Locale.ROOT, "bytes per batch (median): float32 %.1f MB, uint8 %.1f MB (%.2fx fewer); uint8 decodes to the float32 pixel_values bit for bit: %s%n",
                Stats.median(bytes.get(PixelFormat.FLOAT32)) / 1e6, Stats.median(bytes.get(PixelFormat.UINT8)) / 1e6,
                Stats.median(bytes.get(PixelFormat.FLOAT32)) / Stats.median(bytes.get(PixelFormat.UINT8)), exact ? "yes" : "NO");
        out.flush();
        if (!exact) throw new IllegalStateException("the uint8 batches do not decode to the float32 pixel_values");

        var runs = new LinkedHashMap<String, EnumMap<PixelFormat, List<Run>>>();
        for (String p : s.paths()) runs.put(p, new EnumMap<>(PixelFormat.class));
        var storeConfig = new StoreConfig(s.config().get(NodeConfig.SHM_DIR), storeBudget(made), StoreConfig.DEFAULT_INSTANCE_NAME);
        try (var arena = Arena.ofShared(); var store = s.paths().contains("shm") ? ShmObjectStore.open(storeConfig) : null) {
            var laidOut = new EnumMap<PixelFormat, List<MemorySegment>>(PixelFormat.class);
            var stored = new EnumMap<PixelFormat, List<StoredObject>>(PixelFormat.class);
            for (var e : made.entrySet()) {
                var segs = new ArrayList<MemorySegment>();
                for (var p : e.getValue()) {
                    MemorySegment seg = arena.allocate(BatchLayout.sizeOf(p.tensors()), 64);
                    BatchLayout.write(p.meta(), p.tensors(), seg);
                    segs.add(seg);
                }
                laidOut.put(e.getKey(), segs);
                if (store != null) stored.put(e.getKey(), storeAll(store, segs));
            }
            for (int round = 0; round < s.rounds(); round++)
                for (String path : s.paths())
                    for (var format : PixelFormat.values()) {
                        String name = path + "-" + ConfigKey.cliName(format) + "-r" + round;
                        boolean u8 = format == PixelFormat.UINT8;
                        Run r = switch (path) {
                            case "socket" -> trainer(copies(made.get(format)), false, u8, client, dir, name);
                            case "shm" -> trainer(references(stored.get(format)), true, u8, client, dir, name);
                            default -> flight(laidOut.get(format));
                        };
                        runs.get(path).computeIfAbsent(format, f -> new ArrayList<>()).add(r);
                        out.printf(Locale.ROOT, "  round %d %-6s %-7s wait %7.2f ms (transfer %7.2f, convert %6.2f)  %6.1f batches/s%n", round, path,
                                ConfigKey.cliName(format), r.waitMs(), r.transferMs(), r.convertMs(), r.batchesPerSecond());
                        out.flush();
                    }
            if (store != null) stored.values().forEach(l -> l.forEach(StoredObject::release));
        }
        return report(out, runs, bytes);
    }

    /** The table of medians per path and format, and the JSON line; returns the JSON's content. */
    private Map<String, Object> report(PrintWriter out, Map<String, EnumMap<PixelFormat, List<Run>>> runs, Map<PixelFormat, double[]> bytes)
            throws IOException {
        // the Python conversion of the same uint8 batches, for the Flight client that does not convert
        double convert = Stats.median(runs.values().stream().flatMap(m -> m.getOrDefault(PixelFormat.UINT8, List.of()).stream())
                .mapToDouble(Run::convertMs).filter(c -> c > 0).toArray());
        out.printf(Locale.ROOT, "%n%-7s %-8s %10s %11s %11s %11s %12s %12s%n", "path", "format", "MB/batch", "transfer ms", "convert ms",
                "in hand ms", "batches/s", "u8 ÷ f32");
        var json = new LinkedHashMap<String, Object>();
        for (var e : runs.entrySet()) {
            var perFormat = new LinkedHashMap<String, Object>();
            double f32InHand = 0;
            for (var format : PixelFormat.values()) {
                var list = e.getValue().get(format);
                double transfer = Stats.median(list.stream().mapToDouble(Run::transferMs).toArray());
                double conv = Stats.median(list.stream().mapToDouble(Run::convertMs).toArray());
                double inHand = Stats.median(list.stream().mapToDouble(Run::waitMs).toArray());
                boolean added = e.getKey().equals("flight") && format == PixelFormat.UINT8;
                if (added) { // the Java Flight client does not convert: add the trainers' conversion of the same batches
                    conv = convert;
                    inHand += convert;
                }
                if (format == PixelFormat.FLOAT32) f32InHand = inHand;
                double perSecond = 1000 / inHand;
                double mb = Stats.median(bytes.get(format)) / 1e6;
                String ratio = format == PixelFormat.UINT8 ? String.format(Locale.ROOT, "%.2f", inHand / f32InHand) : "";
                out.printf(Locale.ROOT, "%-7s %-8s %10.1f %11.2f %11s %11.2f %12.1f %12s%n", e.getKey(), ConfigKey.cliName(format),
                        mb, transfer, format == PixelFormat.UINT8 ? String.format(Locale.ROOT, "%.2f%s", conv, added ? "*" : "") : "-",
                        inHand, perSecond, ratio);
                var m = new LinkedHashMap<String, Object>();
                m.put("mb_per_batch", round(mb));
                m.put("transfer_ms", round(transfer));
                m.put("convert_ms", round(format == PixelFormat.UINT8 ? conv : 0));
                m.put("in_hand_ms", round(inHand));
                m.put("batches_per_s", round(perSecond));
                m.put("rounds_in_hand_ms", list.stream().map(r -> round(r.waitMs() + (added ? convert : 0))).toList());
                if (format == PixelFormat.UINT8) m.put("in_hand_vs_float32", round(inHand / f32InHand));
                perFormat.put(ConfigKey.cliName(format), m);
            }
            json.put(e.getKey(), perFormat);
        }
        out.printf(Locale.ROOT, "conversion: the Python client's torch function on the CPU, %d torch thread(s)%n", torchThreads);
        if (runs.containsKey("flight"))
            out.println("(* the Java Flight client does not convert; its uint8 row adds the Python trainers' median conversion of the same batches)");
        var sizes = new LinkedHashMap<String, Object>();
        for (var e : bytes.entrySet()) sizes.put(ConfigKey.cliName(e.getKey()), round(Stats.median(e.getValue())));
        var result = Map.<String, Object>of("wire", json, "bytes_per_batch", sizes, "torch_threads", torchThreads);
        out.println(new ObjectMapper().writeValueAsString(result));
        out.flush();
        return result;
    }

    /** Rank 0's first {@code batches} batches of a one-rank feed over the data set, encoded in {@code format}. */
    private List<BatchProvider.Prepared> encodeBatches(PixelFormat format) throws Exception {
        // the batches are made before timing starts: no JIT warm-up of the feed's own
        var config = s.config().toBuilder().ranks(1).pixelFormat(format).warmUpMillis(0).build();
        var out = new ArrayList<BatchProvider.Prepared>();
        try (var feeds = NodeFeeds.open(config); var ledger = feeds.start(FeedMode.CONCURRENT, null)) {
            for (int i = 0; i < s.batches(); i++)
                out.add((BatchProvider.Prepared) ledger.next(0, BatchProvider.NO_CONNECTION).get(600, TimeUnit.SECONDS));
        }
        return out;
    }

    /** Whether every uint8 batch's pixels turn into its float32 twin's pixel_values, bit for bit (CompactPixels). */
    private static boolean decodesExactly(List<BatchProvider.Prepared> f32, List<BatchProvider.Prepared> u8, EncodeOptions encode) {
        for (int i = 0; i < f32.size(); i++) {
            float[] expected = tensor(f32.get(i), BatchSchema.PIXEL_VALUES).toFloats();
            float[] got = CompactPixels.toPixelValues(tensor(u8.get(i), BatchSchema.PIXEL_VALUES_U8).data(),
                    tensor(u8.get(i), BatchSchema.IMAGE_GRID_THW).toLongs(), encode.vision());
            if (expected.length != got.length) return false;
            for (int k = 0; k < got.length; k++) if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(got[k])) return false;
        }
        return true;
    }

    private static Tensor tensor(BatchProvider.Prepared p, String name) {
        return p.tensors().stream().filter(t -> t.name().equals(name)).findFirst().orElseThrow();
    }

    private static long storeBudget(Map<PixelFormat, List<BatchProvider.Prepared>> made) {
        long sum = 0;
        for (var l : made.values()) for (var p : l) sum += BatchLayout.sizeOf(p.tensors());
        return sum + sum / 4 + (64L << 20);
    }

    private static List<StoredObject> storeAll(ShmObjectStore store, List<MemorySegment> segs) throws Exception {
        var out = new ArrayList<StoredObject>();
        for (var seg : segs) {
            var a = store.allocate(seg.byteSize()).get(60, TimeUnit.SECONDS);
            MemorySegment.copy(seg, 0, a.segment(), 0, seg.byteSize());
            out.add(a.seal());
        }
        return out;
    }

    /** Copies of the batches in turn, through the socket (what prefetch does with a ready batch). */
    private static BatchProvider copies(List<BatchProvider.Prepared> list) {
        var handed = new AtomicLong();
        long expected = list.stream().mapToLong(p -> BatchLayout.sizeOf(p.tensors())).max().orElse(0);
        return new ReadyBatches(() -> list.get((int) (handed.getAndIncrement() % list.size())), false, expected);
    }

    /** References to the stored batches in turn, each hand-out with a lease of its own (what zero-copy does). */
    private static BatchProvider references(List<StoredObject> objects) {
        var handed = new AtomicLong();
        return new ReadyBatches(() -> {
            StoredObject o = objects.get((int) (handed.getAndIncrement() % objects.size()));
            long length = BatchLayout.read(o.segment()).totalBytes();
            var lease = o.lease();
            return new BatchProvider.Stored(o.file(), o.offset(), length, o.segment().asSlice(0, length), lease::close);
        }, true, 0);
    }

    /** One Python trainer process ({@code stoker.bench_trainer}, no compute) taking {@code steps} batches; its medians. */
    private Run trainer(BatchProvider provider, boolean sharedMemory, boolean convert, Path client, Path dir, String name)
            throws IOException, InterruptedException {
        Path socket = dir.resolve(name + ".sock"), report = dir.resolve(name + ".json");
        Files.deleteIfExists(report);
        try (var server = new FeedServer(socket, provider, false)) {
            var trainer = SimulatedTrainer.Settings.of(socket, 0, 1, s.steps(), 0, report).withCopy(!sharedMemory).withPixelValues(convert);
            var pb = TrainerProcesses.python(client, trainer).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile());
            pb.environment().put("PYTHONWARNINGS", "ignore"); // torch: "The given NumPy array is not writable" (read-only shared memory)
            Process p = pb.start();
            try {
                if (!p.waitFor(600, TimeUnit.SECONDS) || p.exitValue() != 0)
                    throw new IOException("trainer failed or timed out; see " + dir.resolve(name + ".log"));
            } finally {
                p.destroyForcibly();
            }
        }
        JsonNode rep = new ObjectMapper().readTree(report.toFile());
        if (rep.has("torch_threads")) torchThreads = rep.get("torch_threads").asInt();
        JsonNode st = rep.get("steps");
        int n = st.size() - SKIP;
        double[] wait = new double[n], transfer = new double[n], conv = new double[n], bytes = new double[n];
        double total = 0;
        for (int i = 0; i < n; i++) {
            JsonNode step = st.get(i + SKIP);
            wait[i] = step.get(0).asLong() / 1e6;
            bytes[i] = step.get(2).asDouble();
            transfer[i] = step.get(4).asLong() / 1e6;
            conv[i] = step.size() > 5 ? step.get(5).asLong() / 1e6 : 0;
            total += wait[i] + step.get(1).asLong() / 1e6;
        }
        return new Run(Stats.median(wait), Stats.median(transfer), Stats.median(conv), n / (total / 1000), Stats.median(bytes));
    }

    /** A Java Flight client on loopback taking {@code steps} batches back to back (DoGet per batch); its medians. */
    private Run flight(List<MemorySegment> list) throws IOException {
        var handed = new AtomicLong();
        var source = new ReadyBatches(() -> {
            var seg = list.get((int) (handed.getAndIncrement() % list.size()));
            return new BatchProvider.Stored(null, 0, seg.byteSize(), seg, () -> {});
        }, false, 0);
        int steps = s.steps();
        String token = FlightBatchServer.newToken();
        try (var allocator = new RootAllocator();
             // no endpoint without a token, even a benchmark's on loopback
             var server = FlightBatchServer.start(Location.forGrpcInsecure("127.0.0.1", 0), source, null, allocator,
                     new FlightBatchServer.Security(token, null, null));
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), new FlightBatchClient.Options(token, false, null), allocator)) {
            double[] wait = new double[steps - SKIP], bytes = new double[steps - SKIP];
            long t0 = 0;
            for (int i = 0; i < steps; i++) {
                if (i == SKIP) t0 = System.nanoTime();
                long a = System.nanoTime();
                BatchLayout.Batch b = client.next(0, 1, "wire");
                long took = System.nanoTime() - a;
                if (i >= SKIP) {
                    wait[i - SKIP] = took / 1e6;
                    bytes[i - SKIP] = b.totalBytes();
                }
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            return new Run(Stats.median(wait), Stats.median(wait), 0, (steps - SKIP) / seconds, Stats.median(bytes));
        }
    }

    private static double round(double v) { return Math.round(v * 1000) / 1000.0; }
}
