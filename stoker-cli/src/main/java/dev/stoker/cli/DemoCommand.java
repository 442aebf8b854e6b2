package dev.stoker.cli;

import dev.stoker.bench.demo.Demo;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker demo}: the demo data set, preprocessed, then the ladder ({@link Demo}). */
@Command(name = "demo", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Build a small data set from real photos and preprocess it, printing throughput.")
final class DemoCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--dir", description = "Where the demo data set goes (default: <stoker home>/.stoker/demo).")
    Path dir;

    @Option(names = "--samples", defaultValue = "300", description = "Samples in the demo data set (default: ${DEFAULT-VALUE}).")
    int samples;

    @Option(names = "--processor", defaultValue = "qwen2.5-vl", description = "Model family (default: ${DEFAULT-VALUE}).")
    String processor;

    @Option(names = "--max-pixels", defaultValue = "451584",
            description = "Upper bound of the resized area, as the official SFT default 28²·576 (default: ${DEFAULT-VALUE}).")
    long maxPixels;

    @Option(names = "--ladder-steps", defaultValue = "20", description = "Steps per rank and mode in the ladder, 0 to skip it (default: ${DEFAULT-VALUE}).")
    int ladderSteps;

    @Override
    public Integer call() throws Exception {
        Path home = Path.of(System.getProperty("stoker.home", ".")).toAbsolutePath().normalize();
        Demo.run(new Demo.Settings(home, dir, samples, processor, maxPixels, ladderSteps), spec.commandLine().getOut());
        return 0;
    }
}
