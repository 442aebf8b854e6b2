package dev.stoker.cli;

import dev.stoker.bench.wire.WireBench;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench wire}: the compact wire format against float32 on every path ({@link WireBench}). */
@Command(name = "wire", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Compact wire format vs float32: bytes per batch and hand-over time of the same ready batches through the "
                + "Unix socket (copies), shared memory (references) and Arrow Flight (loopback), with the client's conversion.",
                "The last stdout line is JSON {\"wire\": {PATH: {FORMAT: {…}}}, \"bytes_per_batch\": {…}}."})
final class WireCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Option(names = "--batches", defaultValue = "4", description = "Distinct batches per format, handed out in turn (default: ${DEFAULT-VALUE}).")
    int batches;

    @Option(names = "--steps", defaultValue = "24", description = "Batches a trainer takes per measurement; the first " + WireBench.SKIP
            + " (warm-up) are not counted (default: ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--rounds", defaultValue = "3", description = "Interleaved rounds of every path and format (default: ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--paths", defaultValue = "socket,shm,flight", split = ",",
            description = "socket (copies through the Unix socket), shm (references to shared memory), flight (Arrow Flight on loopback) "
                    + "(default: ${DEFAULT-VALUE}).")
    List<String> paths;

    @Option(names = "--work-dir", description = "Sockets, trainer reports and logs (default: a temp folder).")
    Path workDir;

    @Override
    public List<ConfigKey<?>> settings() {
        var keys = new ArrayList<ConfigKey<?>>(List.of(NodeConfig.DATA_KEY, NodeConfig.BATCH, NodeConfig.SEED, NodeConfig.THREADS));
        keys.addAll(EncodeCommand.SAMPLE_SETTINGS);
        keys.add(NodeConfig.TEXT_ONLY); // what its batches carry of text-only steps
        keys.add(NodeConfig.TRANSFORMERS); // and which model inputs
        keys.add(NodeConfig.SHM_DIR);
        return keys;
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        var out = spec.commandLine().getOut();
        WireBench.run(new WireBench.Settings(config, batches, steps, rounds, paths, workDir), out);
        return 0;
    }
}
