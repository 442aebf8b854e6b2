package dev.stoker.cli;

import dev.stoker.bench.soak.SoakBench;
import dev.stoker.node.ConfigException;
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
import picocli.CommandLine.Unmatched;

/** {@code stoker bench soak}: a long run of {@code stoker serve} with trainer processes ({@link SoakBench}). */
@Command(name = "soak", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Run `stoker serve` (zero-copy) with one trainer process per rank for a long time and record, every "
                + "--sample-every-s, the service's RSS, the store's shared memory and the samples delivered and skipped.",
                "Writes soak.csv and soak.json into --work-dir. serve's options (e.g. --max-pixels, --threads, --shm-budget, "
                        + "--fetch-latency-ms, --s3-endpoint) go to serve in the config file <work-dir>/serve.yaml; --socket, --mode, "
                        + "--metrics-port, --metrics-file, --job and --steps are the soak's own.",
                "The last stdout line is JSON {\"seconds\":…, \"rss_bytes\":{\"start\",\"median\",\"max\",\"end\",\"slope_per_10min\",\"flat\"}, "
                        + "\"shm_bytes\":{…}, \"delivered_samples\":…, \"skipped_samples\":…, \"leftovers\":[…], …}."})
final class SoakCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Option(names = "--minutes", defaultValue = "30", description = "How long the trainers read (default: ${DEFAULT-VALUE}).")
    double minutes;

    @Option(names = "--seconds", description = "The run's length in seconds instead of --minutes (short runs, tests).")
    Double seconds;

    @Option(names = "--step-ms", defaultValue = "100", description = "Each trainer's simulated GPU step, in ms (default: ${DEFAULT-VALUE}).")
    long stepMillis;

    @Option(names = "--sample-every-s", defaultValue = "10", description = "Seconds between samples (default: ${DEFAULT-VALUE}).")
    double sampleEverySeconds;

    @Option(names = "--warm-up-s",
            description = "Samples before this many seconds are left out of the slopes (default: a fifth of the run, at most 300).")
    Double warmUpSeconds;

    @Option(names = "--work-dir", description = "Where soak.csv, soak.json, serve.yaml, the logs and the socket go (default: a temp folder).")
    Path workDir;

    @Unmatched
    List<String> unmatched = new ArrayList<>();

    @Override
    public List<ConfigKey<?>> settings() { return SoakBench.SERVE_KEYS; }

    @Override
    public Integer call() throws Exception {
        for (String reserved : SoakBench.RESERVED)
            if (unmatched.stream().anyMatch(o -> o.equals(reserved) || o.startsWith(reserved + "=")))
                throw new ConfigException(reserved + " is set by bench soak");
        if (!unmatched.isEmpty()) throw new ConfigException("Unknown option: '" + unmatched.getFirst() + "'");
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        var out = spec.commandLine().getOut();
        var settings = new SoakBench.Settings(config, seconds != null ? seconds : minutes * 60, sampleEverySeconds, warmUpSeconds, stepMillis, workDir);
        return SoakBench.run(settings, out, spec.commandLine().getErr());
    }
}
