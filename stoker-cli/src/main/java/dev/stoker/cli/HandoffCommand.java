package dev.stoker.cli;

import dev.stoker.bench.handoff.HandoffBench;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench handoff}: hand-off latency of ready batches ({@link HandoffBench}). */
@Command(name = "handoff", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Hand-off latency of ready batches to a trainer process: shared-memory reference vs socket copy.",
                "The last stdout line is JSON {\"handoff\": {SIZE: {\"ref_p50_us\", \"ref_p99_us\", \"copy_p50_us\", …}}}."})
final class HandoffCommand implements Callable<Integer>, NodeOptions.Configured {
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

    @Option(names = "--work-dir", description = "Sockets and trainer reports (default: a temp folder).")
    Path workDir;

    @Override
    public List<ConfigKey<?>> settings() { return List.of(NodeConfig.SHM_DIR); }

    @Override
    public boolean configFile() { return false; }

    @Override
    public Integer call() throws Exception {
        var config = NodeOptions.config(spec, settings());
        HandoffBench.run(new HandoffBench.Settings(sizes, requests, copyBytes, warmup, config.get(NodeConfig.SHM_DIR), workDir),
                spec.commandLine().getOut());
        return 0;
    }
}
