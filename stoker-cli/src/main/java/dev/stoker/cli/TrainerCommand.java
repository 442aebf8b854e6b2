package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code stoker trainer}: a simulated trainer rank, run as its own process by {@code bench ladder}
 * and {@code bench soak}. Each step asks for the next batch (wait: request until the batch's bytes
 * are in this process) and then "computes" by sleeping {@code --step-ms}, using no CPU, as a GPU
 * step would. It stops after {@code --steps} steps, at the end of the feed, or, with
 * {@code --duration-ms}, at the first step boundary after that long, and then writes its report.
 */
@Command(name = "trainer", hidden = true, mixinStandardHelpOptions = true,
        description = "Simulated trainer rank (started by bench ladder and bench soak).")
final class TrainerCommand implements Callable<Integer> {
    @Option(names = "--socket", required = true) Path socket;
    @Option(names = "--rank", required = true) int rank;
    @Option(names = "--world", required = true) int world;
    @Option(names = "--steps", required = true) int steps;
    @Option(names = "--step-ms", required = true) long stepMillis;
    @Option(names = "--report", required = true) Path report;
    @Option(names = "--job", defaultValue = "bench") String job;
    @Option(names = "--copy", description = "Ask for copies even when the service offers shared memory.") boolean copy;
    @Option(names = "--duration-ms", defaultValue = "0",
            description = "Stop at the first step boundary after this many ms from connecting (0: no limit).") long durationMillis;
    @Option(names = "--to-pixel-values",
            description = "A batch that carries pixel_values_u8 (--pixel-format uint8) is turned into float32 pixel_values "
                    + "(CompactPixels) before the step, inside the measured wait.") boolean toPixelValues;
    @Option(names = "--receive-buffer", defaultValue = "0",
            description = "Bytes of receive buffer to allocate and touch before connecting (copy delivery).") long receiveBuffer;

    /** The float32 pixel_values of a compact batch (none for a float32 one): what a Java trainer would feed its model. */
    static float[] toPixelValues(BatchLayout.Batch batch) {
        if (batch.tensors().stream().noneMatch(t -> t.name().equals("pixel_values_u8"))) return null;
        var cfg = dev.stoker.image.qwenvl.CompactPixels.config(batch.tensor("pixel_norm").toFloats(), batch.tensor("pixel_patch").toLongs());
        return dev.stoker.image.qwenvl.CompactPixels.toPixelValues(batch.tensor("pixel_values_u8").data(),
                batch.tensor("image_grid_thw").toLongs(), cfg);
    }

    /** What one step measured. */
    record Step(long waitNanos, long computeNanos, long bytes, int samples, long transferNanos, long convertNanos) {}

    @Override
    public Integer call() throws Exception {
        var stepsDone = new java.util.ArrayList<Step>(Math.clamp(steps, 0, 1 << 16)); // a soak passes a huge --steps
        long connectNanos = System.nanoTime();
        try (var client = TrainerClient.connect(socket, rank, world, job,
                (copy ? TrainerClient.Options.COPY : TrainerClient.Options.SHARED_MEMORY).withReceiveBuffer(receiveBuffer))) {
            long start = System.nanoTime();
            long startUnixMillis = System.currentTimeMillis(); // to line the steps up with other clocks (bench cluster's link samples)
            long deadline = connectNanos + durationMillis * 1_000_000;
            for (int s = 0; s < steps && (durationMillis <= 0 || System.nanoTime() - deadline < 0); s++) {
                long t0 = System.nanoTime();
                TrainerClient.Received received = client.next();
                long arrived = System.nanoTime();
                if (received == null) break;
                BatchLayout.Batch batch = received.batch();
                if (toPixelValues) toPixelValues(batch); // the trainer's own work before its step counts as waiting
                long t1 = System.nanoTime();
                long convertNanos = toPixelValues ? t1 - arrived : 0;
                Thread.sleep(stepMillis);
                received.close(); // the step is done with the batch: its shared memory may be reused
                long t2 = System.nanoTime();
                stepsDone.add(new Step(t1 - t0, t2 - t1, batch.totalBytes(), batch.meta().batchSize(), arrived - client.lastFrameHeaderNanos(),
                        convertNanos));
            }
            long end = System.nanoTime();
            var json = new LinkedHashMap<String, Object>();
            json.put("rank", rank);
            json.put("world", world);
            json.put("connect_wait_ms", (start - connectNanos) / 1e6);
            json.put("elapsed_ms", (end - start) / 1e6);
            json.put("start_unix_ms", startUnixMillis);
            json.put("bytes_received", client.bytesReceived());
            json.put("refs_received", client.refsReceived());
            json.put("shared_memory", client.sharedMemory());
            json.put("steps", stepsDone.stream().map(x -> List.of(x.waitNanos(), x.computeNanos(), x.bytes(), x.samples(), x.transferNanos(), x.convertNanos())).toList());
            new ObjectMapper().writeValue(report.toFile(), json);
        }
        return 0;
    }
}
