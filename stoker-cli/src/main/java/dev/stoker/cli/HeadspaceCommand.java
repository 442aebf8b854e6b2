package dev.stoker.cli;

import dev.stoker.bench.headspace.HeadspaceBench;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench headspace}: the trainers' compute floor and what the data side can still win ({@link HeadspaceBench}). */
@Command(name = "headspace", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Headspace analysis (SPDL's CacheDataLoader): one feed and one trainer process per rank; each trainer replays copies "
                + "of its first --cache-batches batches for --replay-steps steps without asking the service, which measures its compute "
                + "floor; prints the floor, the mean step, the wait ratio and how much per step the data side can win at most.",
                "The last stdout line is JSON {\"compute_floor_ms\":…, \"mean_step_ms\":…, \"wait_ratio\":…, \"data_headroom_ms\":…, "
                        + "\"data_headroom_fraction\":…, \"ranks\": […], …}."})
final class HeadspaceCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Option(names = "--cache-batches", defaultValue = "10",
            description = "Batches each trainer keeps copies of, after taking them from the service (default: ${DEFAULT-VALUE}).")
    int cacheBatches;

    @Option(names = "--replay-steps", defaultValue = "50",
            description = "Steps each trainer replays those copies for, round robin, without a request (default: ${DEFAULT-VALUE}).")
    int replaySteps;

    @Option(names = "--step-ms", defaultValue = "100", description = "Simulated compute per step, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--steps", defaultValue = "100",
            description = "Steps per rank on the service's batches, the replayed ones not counted (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--mode", defaultValue = "zero-copy",
            description = "Feed mode: serial, concurrent, prefetch or zero-copy (default: ${DEFAULT-VALUE}).")
    String mode;

    @Option(names = "--trainer", defaultValue = "java",
            description = "Trainer processes: java (stoker trainer, TrainerClient.headspace) or python (python3 -m stoker.bench_trainer, "
                    + "Loader(headspace=…)) (default: ${DEFAULT-VALUE}).")
    String trainer;

    @Option(names = "--work-dir", description = "Where sockets, trainer logs and per-step reports go (default: a temp folder).")
    Path workDir;

    @Override
    public List<ConfigKey<?>> settings() { return BenchCommand.FEED_SETTINGS; }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        HeadspaceBench.run(new HeadspaceBench.Settings(config, mode, stepMillis, steps, cacheBatches, replaySteps, trainer, workDir),
                spec.commandLine().getOut());
        return 0;
    }
}
