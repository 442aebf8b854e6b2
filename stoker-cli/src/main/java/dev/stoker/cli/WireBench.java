package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.flight.BatchSource;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.pipeline.EncodeOptions;
import dev.stoker.pipeline.EncodeOptions.PixelFormat;
import dev.stoker.pipeline.feed.FeedConfig;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.source.DatasetLocation;
import dev.stoker.source.SourceConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.store.StoredObject;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.BatchProvider;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.Tensor;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.RootAllocator;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

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
 * batches are ready before timing starts, so the figure is the hand-over alone.
 */
@Command(name = "wire", mixinStandardHelpOptions = true,
        description = {"Compact wire format vs float32: bytes per batch and hand-over time of the same ready batches through the "
                + "Unix socket (copies), shared memory (references) and Arrow Flight (loopback), with the client's conversion.",
                "The last stdout line is JSON {\"wire\": {PATH: {FORMAT: {…}}}, \"bytes_per_batch\": {…}}."})
final class WireBench implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ProcessorOptions processor;

    @Option(names = "--data", required = true, description = "The manifest (train.jsonl) the batches are encoded from.")
    String data;

    @Option(names = "--batch", defaultValue = "8", description = "Samples per batch (default: ${DEFAULT-VALUE}).")
    int batch;

    @Option(names = "--batches", defaultValue = "4", description = "Distinct batches per format, handed out in turn (default: ${DEFAULT-VALUE}).")
    int batches;

    @Option(names = "--steps", defaultValue = "24", description = "Batches a trainer takes per measurement; the first " + SKIP + " (warm-up) are not counted (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--rounds", defaultValue = "3", description = "Interleaved rounds of every path and format (default: ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--paths", defaultValue = "socket,shm,flight", split = ",",
            description = "socket (copies through the Unix socket), shm (references to shared memory), flight (Arrow Flight on loopback) "
                    + "(default: ${DEFAULT-VALUE}).")
    List<String> paths;

    @Option(names = "--seed", defaultValue = "1234", description = "Shuffle seed: which samples make the batches (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--threads", description = "CPU threads encoding the batches (default: the number of cores).")
    Integer threads;

    @Option(names = "--shm-dir", defaultValue = "/dev/shm", description = "Object store directory (default: ${DEFAULT-VALUE}).")
    Path shmDir;

    @Option(names = "--work-dir", description = "Sockets, trainer reports and logs (default: a temp folder).")
    Path workDir;

    @Option(names = "--tokenizer", description = "tokenizer.json (or .json.gz); default: the bundled Qwen2 tokenizer.")
    Path tokenizer;

    static final int SKIP = 4;
    /** torch.get_num_threads() in the converting trainers (reported by them; 0: unknown). */
    private int torchThreads;
    static final List<String> PATHS = List.of("socket", "shm", "flight");

    /** Medians of one path and format over a measurement: per batch, in ms, and bytes. */
    record Run(double waitMs, double transferMs, double convertMs, double batchesPerSecond, double bytes) {}

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        for (String p : paths) if (!PATHS.contains(p)) throw new Main.InvalidInputException("--paths: unknown path '" + p + "'; expected " + PATHS);
        if (batches < 1 || steps <= SKIP || rounds < 1 || batch < 1)
            throw new Main.InvalidInputException("--batches, --batch and --rounds must be at least 1 and --steps more than " + SKIP);
        Path dir = workDir != null ? Files.createDirectories(workDir) : Files.createTempDirectory("stoker-wire");
        var encode = processor.toEncodeOptions();
        Path client = LadderRun.findPythonClient();

        var made = new EnumMap<PixelFormat, List<BatchProvider.Prepared>>(PixelFormat.class);
        for (var format : PixelFormat.values()) made.put(format, encodeBatches(encode.withPixelFormat(format)));
        boolean exact = decodesExactly(made.get(PixelFormat.FLOAT32), made.get(PixelFormat.UINT8), encode);
        var bytes = new EnumMap<PixelFormat, double[]>(PixelFormat.class);
        for (var e : made.entrySet()) bytes.put(e.getKey(), e.getValue().stream().mapToDouble(p -> BatchLayout.sizeOf(p.tensors())).toArray());
        out.printf(Locale.ROOT, "wire: %s, batch %d, max pixels %d, %d batches per format, %d rounds × %d steps, %d cores, work dir %s%n",
                data, batch, encode.vision().maxPixels(), batches, rounds, steps, Runtime.getRuntime().availableProcessors(), dir);
        out.printf(Locale.ROOT, "bytes per batch (median): float32 %.1f MB, uint8 %.1f MB (%.2fx fewer); uint8 decodes to the float32 pixel_values bit for bit: %s%n",
                median(bytes.get(PixelFormat.FLOAT32)) / 1e6, median(bytes.get(PixelFormat.UINT8)) / 1e6,
                median(bytes.get(PixelFormat.FLOAT32)) / median(bytes.get(PixelFormat.UINT8)), exact ? "yes" : "NO");
        out.flush();
        if (!exact) throw new IllegalStateException("the uint8 batches do not decode to the float32 pixel_values");

        var runs = new LinkedHashMap<String, EnumMap<PixelFormat, List<Run>>>();
        for (String p : paths) runs.put(p, new EnumMap<>(PixelFormat.class));
        try (var arena = Arena.ofShared();
             var store = paths.contains("shm") ? ShmObjectStore.open(new StoreConfig(shmDir, storeBudget(made), StoreConfig.DEFAULT_INSTANCE_NAME)) : null) {
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
            for (int round = 0; round < rounds; round++)
                for (String path : paths)
                    for (var format : PixelFormat.values()) {
                        String name = path + "-" + format.name().toLowerCase(Locale.ROOT) + "-r" + round;
                        Run r = switch (path) {
                            case "socket" -> trainer(copyProvider(made.get(format)), false, format == PixelFormat.UINT8, client, dir, name);
                            case "shm" -> trainer(refProvider(stored.get(format)), true, format == PixelFormat.UINT8, client, dir, name);
                            default -> flight(laidOut.get(format));
                        };
                        runs.get(path).computeIfAbsent(format, f -> new ArrayList<>()).add(r);
                        out.printf(Locale.ROOT, "  round %d %-6s %-7s wait %7.2f ms (transfer %7.2f, convert %6.2f)  %6.1f batches/s%n", round, path,
                                format.name().toLowerCase(Locale.ROOT), r.waitMs(), r.transferMs(), r.convertMs(), r.batchesPerSecond());
                        out.flush();
                    }
            if (store != null) stored.values().forEach(l -> l.forEach(StoredObject::release));
        }
        return report(out, runs, bytes);
    }

    private int report(PrintWriter out, Map<String, EnumMap<PixelFormat, List<Run>>> runs, Map<PixelFormat, double[]> bytes) throws IOException {
        // the Python conversion of the same uint8 batches, for the Flight client that does not convert
        double convert = median(runs.values().stream().flatMap(m -> m.getOrDefault(PixelFormat.UINT8, List.of()).stream())
                .mapToDouble(Run::convertMs).filter(c -> c > 0).toArray());
        out.printf(Locale.ROOT, "%n%-7s %-8s %10s %11s %11s %11s %12s %12s%n", "path", "format", "MB/batch", "transfer ms", "convert ms",
                "in hand ms", "batches/s", "u8 ÷ f32");
        var json = new LinkedHashMap<String, Object>();
        for (var e : runs.entrySet()) {
            var perFormat = new LinkedHashMap<String, Object>();
            double f32InHand = 0;
            for (var format : PixelFormat.values()) {
                var list = e.getValue().get(format);
                double transfer = median(list.stream().mapToDouble(Run::transferMs).toArray());
                double conv = median(list.stream().mapToDouble(Run::convertMs).toArray());
                double inHand = median(list.stream().mapToDouble(Run::waitMs).toArray());
                boolean added = e.getKey().equals("flight") && format == PixelFormat.UINT8;
                if (added) { // the Java Flight client does not convert: add the trainers' conversion of the same batches
                    conv = convert;
                    inHand += convert;
                }
                if (format == PixelFormat.FLOAT32) f32InHand = inHand;
                double perSecond = 1000 / inHand;
                double mb = median(bytes.get(format)) / 1e6;
                String ratio = format == PixelFormat.UINT8 ? String.format(Locale.ROOT, "%.2f", inHand / f32InHand) : "";
                out.printf(Locale.ROOT, "%-7s %-8s %10.1f %11.2f %11s %11.2f %12.1f %12s%n", e.getKey(), format.name().toLowerCase(Locale.ROOT),
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
                perFormat.put(format.name().toLowerCase(Locale.ROOT), m);
            }
            json.put(e.getKey(), perFormat);
        }
        out.printf(Locale.ROOT, "conversion: the Python client's torch function on the CPU, %d torch thread(s)%n", torchThreads);
        if (runs.containsKey("flight"))
            out.println("(* the Java Flight client does not convert; its uint8 row adds the Python trainers' median conversion of the same batches)");
        var sizes = new LinkedHashMap<String, Object>();
        for (var e : bytes.entrySet()) sizes.put(e.getKey().name().toLowerCase(Locale.ROOT), round(median(e.getValue())));
        out.println(new ObjectMapper().writeValueAsString(Map.of("wire", json, "bytes_per_batch", sizes, "torch_threads", torchThreads)));
        return 0;
    }

    /** Rank 0's first {@code batches} batches of a one-rank feed over the data set, encoded in {@code encode}'s format. */
    private List<BatchProvider.Prepared> encodeBatches(EncodeOptions encode) throws Exception {
        int cpu = threads == null ? Runtime.getRuntime().availableProcessors() : threads;
        var config = FeedConfig.of(FeedMode.CONCURRENT, encode, 1, batch).withSeed(seed).withCpuThreads(cpu);
        DatasetLocation location;
        try {
            location = DatasetLocation.parse(data);
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--data: " + e.getMessage());
        }
        var out = new ArrayList<BatchProvider.Prepared>();
        try (var tok = Tokenizers.open(tokenizer);
             var feeder = Feeder.open(location, SourceConfig.builder().build(), config, tok)) {
            for (int i = 0; i < batches; i++)
                out.add(FeedService.toTensors(feeder.rank(0).next().get(600, TimeUnit.SECONDS), 1, encode.vision()));
        }
        return out;
    }

    /** Whether every uint8 batch's pixels turn into its float32 twin's pixel_values, bit for bit (CompactPixels). */
    private static boolean decodesExactly(List<BatchProvider.Prepared> f32, List<BatchProvider.Prepared> u8, EncodeOptions encode) {
        for (int i = 0; i < f32.size(); i++) {
            float[] expected = tensor(f32.get(i), "pixel_values").toFloats();
            float[] got = CompactPixels.toPixelValues(tensor(u8.get(i), "pixel_values_u8").data(),
                    tensor(u8.get(i), "image_grid_thw").toLongs(), encode.vision());
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
    private static BatchProvider copyProvider(List<BatchProvider.Prepared> list) {
        var handed = new AtomicLong();
        long expected = list.stream().mapToLong(p -> BatchLayout.sizeOf(p.tensors())).max().orElse(0);
        return new BatchProvider() {
            @Override public void validate(int rank, int world) {}

            @Override public long expectedBatchBytes() { return expected; }

            @Override
            public CompletableFuture<Prepared> next(int rank) {
                return CompletableFuture.completedFuture(list.get((int) (handed.getAndIncrement() % list.size())));
            }
        };
    }

    /** References to the stored batches in turn, each hand-out with a lease of its own (what zero-copy does). */
    private static BatchProvider refProvider(List<StoredObject> objects) {
        var handed = new AtomicLong();
        return new BatchProvider() {
            @Override public void validate(int rank, int world) {}

            @Override public boolean sharedMemory() { return true; }

            @Override
            public CompletableFuture<Stored> next(int rank) {
                StoredObject o = objects.get((int) (handed.getAndIncrement() % objects.size()));
                long length = BatchLayout.read(o.segment()).totalBytes();
                var lease = o.lease();
                return CompletableFuture.completedFuture(new Stored(o.file(), o.offset(), length, o.segment().asSlice(0, length), lease::close));
            }
        };
    }

    /** One Python trainer process ({@code stoker.bench_trainer}, no compute) taking {@code steps} batches; its medians. */
    private Run trainer(BatchProvider provider, boolean sharedMemory, boolean convert, Path client, Path dir, String name)
            throws IOException, InterruptedException {
        Path socket = dir.resolve(name + ".sock"), report = dir.resolve(name + ".json");
        Files.deleteIfExists(report);
        try (var server = new FeedServer(socket, provider, false)) {
            var cmd = new ArrayList<>(List.of(LadderRun.PYTHON, "-m", "stoker.bench_trainer", "--socket", socket.toString(), "--rank", "0",
                    "--world", "1", "--steps", Integer.toString(steps), "--step-ms", "0", "--report", report.toString()));
            if (!sharedMemory) cmd.add("--copy");
            if (convert) cmd.add("--to-pixel-values");
            var pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile());
            pb.environment().put("PYTHONPATH", client.toString());
            pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
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
            JsonNode s = st.get(i + SKIP);
            wait[i] = s.get(0).asLong() / 1e6;
            bytes[i] = s.get(2).asDouble();
            transfer[i] = s.get(4).asLong() / 1e6;
            conv[i] = s.size() > 5 ? s.get(5).asLong() / 1e6 : 0;
            total += wait[i] + s.get(1).asLong() / 1e6;
        }
        return new Run(median(wait), median(transfer), median(conv), n / (total / 1000), median(bytes));
    }

    /** A Java Flight client on loopback taking {@code steps} batches back to back (DoGet per batch); its medians. */
    private Run flight(List<MemorySegment> list) throws IOException {
        var handed = new AtomicLong();
        BatchSource source = new BatchSource() {
            @Override public void validate(int rank, int world) {}

            @Override
            public CompletableFuture<Leased> next(int rank) {
                return CompletableFuture.completedFuture(new Leased(list.get((int) (handed.getAndIncrement() % list.size())), () -> {}));
            }
        };
        try (var allocator = new RootAllocator();
             var server = FlightBatchServer.start(Location.forGrpcInsecure("127.0.0.1", 0), source, allocator);
             var client = FlightBatchClient.connect("127.0.0.1", server.port(), allocator)) {
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
            return new Run(median(wait), median(wait), 0, (steps - SKIP) / seconds, median(bytes));
        }
    }

    static double median(double[] v) {
        if (v.length == 0) return 0;
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    private static double round(double v) { return Math.round(v * 1000) / 1000.0; }
}
