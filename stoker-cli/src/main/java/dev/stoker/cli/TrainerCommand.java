package dev.stoker.cli;

import dev.stoker.bench.trainer.SimulatedTrainer;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code stoker trainer}: a {@link SimulatedTrainer} rank, run as its own process by the benchmarks. */
@Command(name = "trainer", hidden = true, mixinStandardHelpOptions = true, sortOptions = false,
        description = "Simulated trainer rank (started by bench ladder, handoff, soak and cluster).")
final class TrainerCommand implements Callable<Integer> {
    @Option(names = "--socket", required = true) Path socket;
    @Option(names = "--rank", required = true) int rank;
    @Option(names = "--world", required = true) int world;
    @Option(names = "--steps", required = true) int steps;
    @Option(names = "--step-ms", required = true) long stepMillis;
    @Option(names = "--report", required = true) Path report;
    @Option(names = "--job", defaultValue = SimulatedTrainer.Settings.DEFAULT_JOB) String job;
    @Option(names = "--copy", description = "Ask for copies even when the service offers shared memory.") boolean copy;
    @Option(names = "--duration-ms", defaultValue = "0",
            description = "Stop at the first step boundary after this many ms from connecting (0: no limit).") long durationMillis;
    @Option(names = "--to-pixel-values",
            description = "A batch that carries pixel_values_u8 (--pixel-format uint8) is turned into float32 pixel_values "
                    + "(CompactPixels) before the step, inside the measured wait.") boolean toPixelValues;
    @Option(names = "--receive-buffer", defaultValue = "0",
            description = "Bytes of receive buffer to allocate and touch before connecting (copy delivery).") long receiveBuffer;
    @Option(names = "--headspace", split = ",", paramLabel = "N,M",
            description = "Keep copies of the first N batches and replay them for M steps without asking the service (its compute "
                    + "floor, reported to the service; the replayed steps are on top of --steps).") int[] headspace;

    @Override
    public Integer call() throws Exception {
        if (headspace != null && headspace.length != 2)
            throw new picocli.CommandLine.ParameterException(new picocli.CommandLine(this), "--headspace takes N,M (batches kept, steps replayed)");
        SimulatedTrainer.run(new SimulatedTrainer.Settings(socket, rank, world, steps, stepMillis, report, job, copy, durationMillis,
                toPixelValues, receiveBuffer, headspace == null ? 0 : headspace[0], headspace == null ? 0 : headspace[1]));
        return 0;
    }
}
