package dev.stoker.cli;

import dev.stoker.bench.index.IndexBench;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench index}: the cost of indexing a manifest ({@link IndexBench}). */
@Command(name = "index", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"What indexing a manifest costs: MB/s of JSON Lines (and of a JSON array), heap per indexed sample, the cached start.",
                "The last stdout line is JSON {\"index\": {SAMPLES: {\"mb_per_s\", \"samples_per_s\", \"heap_bytes_per_sample\", \"cached_load_s\", …}}}."})
final class IndexCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--samples", defaultValue = "300000,1200000,10000000", split = ",",
            description = "Manifest sizes in samples (default: ${DEFAULT-VALUE}).")
    List<Integer> samples;

    @Option(names = "--json-array", defaultValue = "true", negatable = true, fallbackValue = "true",
            description = "Also index the same records as a JSON array (default: ${DEFAULT-VALUE}).")
    boolean json;

    @Option(names = "--work-dir", description = "Where the manifests are written and kept for later runs (default: a temp folder).")
    Path workDir;

    @Override
    public Integer call() throws Exception {
        for (int n : samples) if (n <= 0) throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--samples must be positive, got " + n);
        IndexBench.run(new IndexBench.Settings(samples, workDir, json), spec.commandLine().getOut());
        return 0;
    }
}
