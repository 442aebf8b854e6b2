package dev.stoker.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.store.StoredObject;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.BatchProvider;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.Tensor;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker bench handoff}: how long a trainer waits for a batch that is already made, from
 * asking (NEXT) to holding a readable batch, by batch size: by reference to shared memory (REF)
 * and, for contrast, copied through the socket. The batches sit sealed in the object store before
 * timing starts, so the figure is the hand-off alone. The trainer is a separate process (the Java
 * trainer of {@code bench ladder}); each of its waits is one sample.
 */
@Command(name = "handoff", mixinStandardHelpOptions = true,
        description = {"Hand-off latency of ready batches to a trainer process: shared-memory reference vs socket copy.",
                "The last stdout line is JSON {\"handoff\": {SIZE: {\"ref_p50_us\", \"ref_p99_us\", \"copy_p50_us\", …}}}."})
final class HandoffBench implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--sizes", defaultValue = "1M,8M,64M,200M", split = ",", converter = ByteSizeConverter.class,
            description = "Batch sizes (default: ${DEFAULT-VALUE}).")
    List<Long> sizes;

    @Option(names = "--requests", defaultValue = "20000", description = "Timed references per size (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--copy-bytes", defaultValue = "4G", converter = ByteSizeConverter.class,
            description = "Bytes to copy per size in the socket-copy contrast (at least 20 batches) (default: ${DEFAULT-VALUE}).")
    long copyBytes;

    @Option(names = "--warmup", defaultValue = "10000",
            description = "Untimed requests first, so that both JVMs run compiled code (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--shm-dir", defaultValue = "/dev/shm", description = "Object store directory (default: ${DEFAULT-VALUE}).")
    Path shmDir;

    @Option(names = "--work-dir", description = "Sockets and trainer reports (default: a temp folder).")
    Path workDir;

    @Override
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        Path dir = workDir != null ? Files.createDirectories(workDir) : Files.createTempDirectory("stoker-handoff");
        out.printf("%-8s %9s %9s %9s %9s %12s %12s%n", "batch", "ref p50", "ref p99", "ref max", "refs", "copy p50", "copy MB/s");
        var json = new LinkedHashMap<String, Object>();
        for (long size : sizes) {
            var r = measure(size, dir);
            out.printf("%-8s %7.1f µs %7.1f µs %7.0f µs %9d %9.0f µs %12.0f%n", label(size), r.refP50, r.refP99, r.refMax, r.refs,
                    r.copyP50, r.copyMBps);
            out.flush();
            var m = new LinkedHashMap<String, Object>();
            m.put("ref_p50_us", round(r.refP50));
            m.put("ref_p99_us", round(r.refP99));
            m.put("ref_max_us", round(r.refMax));
            m.put("refs", r.refs);
            m.put("copy_p50_us", round(r.copyP50));
            m.put("copy_mb_s", round(r.copyMBps));
            json.put(label(size), m);
        }
        out.println(new ObjectMapper().writeValueAsString(java.util.Map.of("handoff", json)));
        return 0;
    }

    private record Result(double refP50, double refP99, double refMax, int refs, double copyP50, double copyMBps) {}

    private Result measure(long size, Path dir) throws Exception {
        try (var store = ShmObjectStore.open(new StoreConfig(shmDir, 2 * size + (16L << 20), StoreConfig.DEFAULT_INSTANCE_NAME))) {
            var objects = new StoredObject[2];
            long total = 0;
            for (int i = 0; i < objects.length; i++) {
                var plan = planOf(size);
                var a = store.allocate(plan.totalBytes()).get(60, TimeUnit.SECONDS);
                BatchLayout.writeHeader(new BatchLayout.Meta(0, i, 0, 1, 1), plan, a.segment());
                a.segment().asSlice(plan.headerBytes()).fill((byte) i);
                objects[i] = a.seal();
                total = plan.totalBytes();
            }
            long batchBytes = total;
            var handed = new AtomicLong();
            BatchProvider provider = new BatchProvider() {
                @Override public void validate(int rank, int world) { }

                @Override public boolean sharedMemory() { return true; }

                @Override public long expectedBatchBytes() { return batchBytes; }

                @Override
                public CompletableFuture<Stored> next(int rank) {
                    StoredObject o = objects[(int) (handed.getAndIncrement() & 1)];
                    var lease = o.lease();
                    return CompletableFuture.completedFuture(new Stored(o.file(), o.offset(), batchBytes,
                            o.segment().asSlice(0, batchBytes), lease::close));
                }
            };
            double[] ref = trainerWaits(provider, dir, "ref-" + label(size), warmup + requests, false, warmup);
            int copies = (int) Math.max(20, Math.min(requests, copyBytes / batchBytes));
            double[] copy = trainerWaits(provider, dir, "copy-" + label(size), copies + 5, true, 5);
            for (var o : objects) o.release();
            Arrays.sort(ref);
            Arrays.sort(copy);
            double copyP50 = percentile(copy, 0.5);
            return new Result(percentile(ref, 0.5), percentile(ref, 0.99), ref[ref.length - 1], ref.length, copyP50,
                    batchBytes / (copyP50 / 1e6) / 1e6);
        }
    }

    /** Waits (µs) of one trainer process over {@code steps} requests, the first {@code skip} left out. */
    private static double[] trainerWaits(BatchProvider provider, Path dir, String name, int steps, boolean copy, int skip)
            throws IOException, InterruptedException {
        Path socket = dir.resolve(name + ".sock");
        Path report = dir.resolve(name + ".json");
        try (var server = new FeedServer(socket, provider, false)) {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            var cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-Xmx512m", "-XX:+UseSerialGC",
                    "-Dstoker.client.spinNanos=" + Long.getLong("stoker.client.spinNanos", 100_000),
                    "-Djava.awt.headless=true", "-cp", System.getProperty("java.class.path"), "dev.stoker.cli.Main", "trainer",
                    "--socket", socket.toString(), "--rank", "0", "--world", "1", "--steps", Integer.toString(steps),
                    "--step-ms", "0", "--report", report.toString()));
            if (copy) cmd.add("--copy");
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile()).start();
            try {
                if (!p.waitFor(600, TimeUnit.SECONDS) || p.exitValue() != 0)
                    throw new IOException("trainer failed or timed out; see " + dir.resolve(name + ".log"));
            } finally {
                p.destroyForcibly();
            }
        }
        JsonNode st = new ObjectMapper().readTree(report.toFile()).get("steps");
        double[] waits = new double[Math.max(0, st.size() - skip)];
        for (int i = skip; i < st.size(); i++) waits[i - skip] = st.get(i).get(0).asLong() / 1e3;
        return waits;
    }

    /** One float32 tensor filling the batch to {@code size} bytes in all. */
    private static BatchLayout.Plan planOf(long size) {
        long header = BatchLayout.plan(List.of(new BatchLayout.Spec("pixel_values", Tensor.DType.FLOAT32, new long[] {0, 1176}))).headerBytes();
        long rows = Math.max(1, (size - header) / (1176L * 4));
        return BatchLayout.plan(List.of(new BatchLayout.Spec("pixel_values", Tensor.DType.FLOAT32, new long[] {rows, 1176})));
    }

    static double percentile(double[] sorted, double q) {
        if (sorted.length == 0) return Double.NaN;
        return sorted[Math.min(sorted.length - 1, (int) Math.floor(q * (sorted.length - 1) + 0.5))];
    }

    private static String label(long size) {
        return size % (1L << 20) == 0 ? (size >> 20) + "MB" : size + "B";
    }

    private static double round(double v) { return Math.round(v * 100) / 100.0; }
}
