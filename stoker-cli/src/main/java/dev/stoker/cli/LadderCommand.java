package dev.stoker.cli;

import dev.stoker.bench.ladder.LadderBench;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench ladder}: the wait-time ladder ({@link LadderBench}). */
@Command(name = "ladder", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Run the wait-time ladder: serial → concurrent → prefetch → zero-copy, with one trainer process per rank.",
                "The last stdout line is JSON {\"modes\": {MODE: {\"wait_ratio\":…, \"samples_per_s\":…, \"ttfb_ms\":…, \"steady_wait_ratio\":…}}}."})
final class LadderCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Option(names = "--step-ms", defaultValue = "250", description = "Simulated GPU step per batch, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--steps", defaultValue = "100", description = "Steps per rank and mode (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--modes", defaultValue = "serial,concurrent,prefetch,zero-copy", split = ",",
            description = "Modes to run, in order (default: ${DEFAULT-VALUE}).")
    List<String> modes;

    @Option(names = "--trainer", defaultValue = "java",
            description = "Trainer processes: java (stoker trainer) or python (python3 -m stoker.bench_trainer, the Python client "
                    + "of clients/python on Debian's /usr/bin/python3) (default: ${DEFAULT-VALUE}).")
    String trainer;

    @Option(names = "--work-dir", description = "Where sockets, trainer logs and per-step reports go (default: a temp folder).")
    Path workDir;

    @Override
    public List<ConfigKey<?>> settings() { return BenchCommand.FEED_SETTINGS; }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        var out = spec.commandLine().getOut();
        LadderBench.run(new LadderBench.Settings(config, stepMillis, steps, modes, trainer, workDir), out);
        return 0;
    }
}
