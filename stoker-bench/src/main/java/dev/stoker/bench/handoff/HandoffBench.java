package dev.stoker.bench.handoff;

import dev.stoker.bench.Stats;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ReadyBatches;
import dev.stoker.bench.trainer.SimulatedTrainer;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.store.StoredObject;
import dev.stoker.transport.FeedServer;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code stoker bench handoff}: how long a trainer waits for a batch that is already made, from
 * asking (NEXT) to holding a readable batch, by batch size: by reference to shared memory (REF)
 * and, for contrast, copied through the socket. The batches sit sealed in the object store before
 * timing starts, so the figure is the hand-off alone. The trainer is a separate process (the
 * {@link SimulatedTrainer}); each of its waits is one sample. The last line printed is JSON
 * {@code {"handoff": {SIZE: {"ref_p50_us", "ref_p99_us", "copy_p50_us", …}}}}.
 */
public final class HandoffBench {
    /**
     * @param sizes     batch sizes in bytes
     * @param requests  timed references per size
     * @param copyBytes bytes to copy per size in the socket-copy contrast (at least 20 batches)
     * @param warmup    untimed requests first, so that both JVMs run compiled code
     * @param shmDir    the object store's directory
     * @param workDir   sockets and trainer reports (null: a temp folder)
     */
    public record Settings(List<Long> sizes, int requests, long copyBytes, int warmup, Path shmDir, Path workDir) {}

    private record Result(double refP50, double refP99, double refMax, int refs, double copyP50, double copyMBps) {}

    private HandoffBench() {}

    public static Map<String, Object> run(Settings s, PrintWriter out) throws Exception {
        Path dir = s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-handoff");
        out.printf("%-8s %9s %9s %9s %9s %12s %12s%n", "batch", "ref p50", "ref p99", "ref max", "refs", "copy p50", "copy MB/s");
        var json = new LinkedHashMap<String, Object>();
        for (long size : s.sizes()) {
            var r = measure(s, size, dir);
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
        out.println(new ObjectMapper().writeValueAsString(Map.of("handoff", json)));
        out.flush();
        return json;
    }

    private static Result measure(Settings s, long size, Path dir) throws Exception {
        try (var store = ShmObjectStore.open(new StoreConfig(s.shmDir(), 2 * size + (16L << 20), StoreConfig.DEFAULT_INSTANCE_NAME))) {
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
            var provider = new ReadyBatches(() -> {
                StoredObject o = objects[(int) (handed.getAndIncrement() & 1)];
                var lease = o.lease();
                return new BatchProvider.Stored(o.file(), o.offset(), batchBytes, o.segment().asSlice(0, batchBytes), lease::close);
            }, true, batchBytes);
            double[] ref = trainerWaits(provider, dir, "ref-" + label(size), s.warmup() + s.requests(), false, s.warmup());
            int copies = (int) Math.max(20, Math.min(s.requests(), s.copyBytes() / batchBytes));
            double[] copy = trainerWaits(provider, dir, "copy-" + label(size), copies + 5, true, 5);
            for (var o : objects) o.release();
            Arrays.sort(ref);
            Arrays.sort(copy);
            double copyP50 = Stats.percentile(copy, 0.5);
            return new Result(Stats.percentile(ref, 0.5), Stats.percentile(ref, 0.99), ref[ref.length - 1], ref.length, copyP50,
                    batchBytes / (copyP50 / 1e6) / 1e6);
        }
    }

    /** Waits (µs) of one trainer process over {@code steps} requests, the first {@code skip} left out. */
    private static double[] trainerWaits(BatchProvider provider, Path dir, String name, int steps, boolean copy, int skip)
            throws IOException, InterruptedException {
        Path socket = dir.resolve(name + ".sock");
        Path report = dir.resolve(name + ".json");
        try (var server = new FeedServer(socket, provider, false)) {
            var jvm = List.of("-Xmx512m", "-XX:+UseSerialGC", "-Dstoker.client.spinNanos=" + Long.getLong("stoker.client.spinNanos", 100_000));
            var trainer = SimulatedTrainer.Settings.of(socket, 0, 1, steps, 0, report).withCopy(copy);
            Process p = new ProcessBuilder(TrainerProcesses.javaCommand(jvm, trainer)).redirectErrorStream(true)
                    .redirectOutput(dir.resolve(name + ".log").toFile()).start();
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

    private static String label(long size) { return size % (1L << 20) == 0 ? (size >> 20) + "MB" : size + "B"; }

    private static double round(double v) { return Math.round(v * 100) / 100.0; }
}
