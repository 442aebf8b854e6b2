package dev.stoker.bench.trainer;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;

/**
 * A simulated trainer rank, run as its own process ({@code stoker trainer}) by the ladder, the
 * hand-off, soak and cluster benchmarks. Each step asks for the next batch (wait: request until the
 * batch's bytes are in this process) and then "computes" by sleeping {@code stepMillis}, using no
 * CPU, as a GPU step would. It stops after {@code steps} steps, at the end of the feed, or, with
 * {@code durationMillis}, at the first step boundary after that long, and then writes its report
 * (docs/run-data.md: per step wait, compute, bytes, samples, transfer and conversion, in ns). With headspace
 * ({@code --headspace N,M}) it also replays copies of its first N batches for M steps without asking the service
 * ({@link TrainerClient#headspace}): those steps are not in {@code steps} but in {@code replayed_steps_ns}, and their
 * median is {@code compute_floor_ns}.
 */
public final class SimulatedTrainer {
    private SimulatedTrainer() {}

    /**
     * One trainer's run.
     *
     * @param socket         the service's Unix socket
     * @param steps          steps to take at most
     * @param stepMillis     the simulated GPU step
     * @param report         where the report goes
     * @param job            the job name the trainer says hello with
     * @param copy           ask for copies even when the service offers shared memory
     * @param durationMillis stop at the first step boundary after this many ms from connecting (0: no limit)
     * @param toPixelValues  turn a batch's pixel_values_u8 into float32 pixel_values before the step, inside the measured wait
     * @param receiveBuffer  bytes of receive buffer to allocate and touch before connecting (copy delivery)
     * @param cacheBatches   headspace ({@link TrainerClient#headspace}): batches to keep copies of (0: no headspace)
     * @param replaySteps    headspace: steps replayed on those copies, on top of {@code steps} steps on the service's batches
     */
    public record Settings(Path socket, int rank, int world, int steps, long stepMillis, Path report, String job, boolean copy,
                           long durationMillis, boolean toPixelValues, long receiveBuffer, int cacheBatches, int replaySteps) {
        public static final String DEFAULT_JOB = "bench";

        /** {@code steps} steps of {@code stepMillis} for {@code rank} of {@code world}, the rest at their defaults. */
        public static Settings of(Path socket, int rank, int world, int steps, long stepMillis, Path report) {
            return new Settings(socket, rank, world, steps, stepMillis, report, DEFAULT_JOB, false, 0, false, 0, 0, 0);
        }

        public Settings withJob(String j) { return new Settings(socket, rank, world, steps, stepMillis, report, j, copy, durationMillis, toPixelValues, receiveBuffer, cacheBatches, replaySteps); }

        public Settings withCopy(boolean c) { return new Settings(socket, rank, world, steps, stepMillis, report, job, c, durationMillis, toPixelValues, receiveBuffer, cacheBatches, replaySteps); }

        public Settings withDuration(long ms) { return new Settings(socket, rank, world, steps, stepMillis, report, job, copy, ms, toPixelValues, receiveBuffer, cacheBatches, replaySteps); }

        public Settings withPixelValues(boolean on) { return new Settings(socket, rank, world, steps, stepMillis, report, job, copy, durationMillis, on, receiveBuffer, cacheBatches, replaySteps); }

        public Settings withReceiveBuffer(long bytes) { return new Settings(socket, rank, world, steps, stepMillis, report, job, copy, durationMillis, toPixelValues, bytes, cacheBatches, replaySteps); }

        /** With headspace: copies of {@code batches} batches replayed for {@code replay} steps (0, 0: none). */
        public Settings withHeadspace(int batches, int replay) { return new Settings(socket, rank, world, steps, stepMillis, report, job, copy, durationMillis, toPixelValues, receiveBuffer, batches, replay); }

        /** The arguments of {@code stoker trainer} (and, but for --receive-buffer and --duration-ms, of the Python bench trainer). */
        public List<String> args(boolean python) {
            var a = new ArrayList<>(List.of("--socket", socket.toString(), "--rank", Integer.toString(rank), "--world", Integer.toString(world),
                    "--steps", Integer.toString(steps), "--step-ms", Long.toString(stepMillis), "--report", report.toString()));
            if (!job.equals(DEFAULT_JOB)) a.addAll(List.of("--job", job));
            if (copy) a.add("--copy");
            if (toPixelValues) a.add("--to-pixel-values");
            if (!python && durationMillis > 0) a.addAll(List.of("--duration-ms", Long.toString(durationMillis)));
            if (!python && receiveBuffer > 0) a.addAll(List.of("--receive-buffer", Long.toString(receiveBuffer)));
            if (cacheBatches > 0) a.addAll(List.of("--headspace", cacheBatches + "," + replaySteps));
            return a;
        }
    }

    /** What one step measured. */
    record Step(long waitNanos, long computeNanos, long bytes, int samples, long transferNanos, long convertNanos) {}

    /** The float32 pixel_values of a compact batch (null for a float32 one): what a Java trainer would feed its model. */
    public static float[] toPixelValues(BatchLayout.Batch batch) {
        if (batch.tensors().stream().noneMatch(t -> t.name().equals(BatchSchema.PIXEL_VALUES_U8))) return null;
        var cfg = CompactPixels.config(batch.pixelNorm(), batch.pixelPatch()); // the batch's metadata
        return CompactPixels.toPixelValues(batch.tensor(BatchSchema.PIXEL_VALUES_U8).data(), batch.tensor(BatchSchema.IMAGE_GRID_THW).toLongs(), cfg);
    }

    /** Runs the trainer and writes its report. */
    public static void run(Settings s) throws IOException, InterruptedException {
        var stepsDone = new ArrayList<Step>(Math.clamp(s.steps(), 0, 1 << 16)); // a soak passes a huge step count
        long connectNanos = System.nanoTime();
        var options = (s.copy() ? TrainerClient.Options.COPY : TrainerClient.Options.SHARED_MEMORY).withReceiveBuffer(s.receiveBuffer());
        try (var client = TrainerClient.connect(s.socket(), s.rank(), s.world(), s.job(), options)) {
            long start = System.nanoTime();
            long startUnixMillis = System.currentTimeMillis(); // to line the steps up with other clocks (bench cluster's link samples)
            long deadline = connectNanos + s.durationMillis() * 1_000_000;
            if (s.cacheBatches() > 0) client.headspace(s.cacheBatches(), s.replaySteps());
            for (int i = 0; i < s.steps() && (s.durationMillis() <= 0 || System.nanoTime() - deadline < 0); i++) {
                long t0 = System.nanoTime();
                int replayedBefore = client.replayed();
                TrainerClient.Received received = client.next();
                long arrived = System.nanoTime();
                if (received == null) break;
                if (client.replayed() > replayedBefore) { // a replayed copy: a step of the compute floor, not a step on the service's batch
                    Thread.sleep(s.stepMillis());
                    i--;
                    continue;
                }
                BatchLayout.Batch batch = received.batch();
                if (s.toPixelValues()) toPixelValues(batch); // the trainer's own work before its step counts as waiting
                long t1 = System.nanoTime();
                long convertNanos = s.toPixelValues() ? t1 - arrived : 0;
                Thread.sleep(s.stepMillis());
                received.close(); // the step is done with the batch: its shared memory may be reused
                long t2 = System.nanoTime();
                stepsDone.add(new Step(t1 - t0, t2 - t1, batch.totalBytes(), batch.meta().batchSize(), arrived - client.lastFrameHeaderNanos(),
                        convertNanos));
            }
            long end = System.nanoTime();
            var json = new LinkedHashMap<String, Object>();
            json.put("rank", s.rank());
            json.put("world", s.world());
            json.put("connect_wait_ms", (start - connectNanos) / 1e6);
            json.put("elapsed_ms", (end - start) / 1e6);
            json.put("start_unix_ms", startUnixMillis);
            json.put("bytes_received", client.bytesReceived());
            json.put("refs_received", client.refsReceived());
            json.put("shared_memory", client.sharedMemory());
            if (s.cacheBatches() > 0) {
                json.put("replayed_steps_ns", client.replayStepNanos());
                json.put("compute_floor_ns", client.computeFloorNanos() < 0 ? null : client.computeFloorNanos());
            }
            json.put("steps", stepsDone.stream()
                    .map(x -> List.of(x.waitNanos(), x.computeNanos(), x.bytes(), x.samples(), x.transferNanos(), x.convertNanos())).toList());
            new ObjectMapper().writeValue(s.report().toFile(), json);
        }
    }
}
