package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code stoker bench ladder}: the wait-time ladder. For each mode, the pipeline feeds one
 * trainer process per rank; each trainer measures, per step, how long it waited for its batch
 * (transfer included) and how long it computed (a sleep, like a GPU step).
 */
@Command(name = "ladder", mixinStandardHelpOptions = true,
        description = {"Run the wait-time ladder: serial → concurrent → prefetch → zero-copy, with one trainer process per rank.",
                "The last stdout line is JSON {\"modes\": {MODE: {\"wait_ratio\":…, \"samples_per_s\":…, \"ttfb_ms\":…, \"steady_wait_ratio\":…}}}."})
final class LadderCommand implements Callable<Integer> {
    @Spec CommandSpec spec;
    @Mixin ProcessorOptions processor;
    @Mixin FeedOptions feed;

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
    public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        var options = feed.withPixelFormat(processor.toEncodeOptions());
        // a compact batch is converted by the trainer, as a real one would before its step, inside the measured wait
        var trainers = LadderRun.Trainer.of(trainer).withPixelValues(options.pixelFormat() == dev.stoker.pipeline.EncodeOptions.PixelFormat.UINT8);
        Path dir = workDir != null ? workDir : Files.createTempDirectory("stoker-ladder");
        out.printf("ladder: %s, ranks %d, batch %d, step %d ms, %d steps, fetch latency %d ms, max pixels %d, %d CPU threads, %s trainers, pixels %s%n",
                feed.data, feed.ranks, feed.batch, stepMillis, steps, feed.fetchLatencyMillis, options.vision().maxPixels(), feed.cpuThreads(),
                trainers.name(), options.pixelFormat().name().toLowerCase(java.util.Locale.ROOT)
                        + (trainers.toPixelValues() ? " (converted by the trainers)" : ""));
        out.printf("%-11s %10s %12s %10s %10s %12s %12s%n", "mode", "wait ratio", "steady ratio", "samples/s", "ttfb ms", "mean wait ms", "MB to trainers");
        var json = new LinkedHashMap<String, Object>();
        try (var factory = FeedFactory.open(feed, options)) {
            for (String mode : modes) {
                long expected = expectedBatchBytes(options);
                Path errors = dir.resolve(mode + "-errors.jsonl"); // docs/run-data.md; this run's bad samples only
                Files.createDirectories(dir);
                Files.deleteIfExists(errors);
                var r = LadderRun.run(mode, () -> factory.start(mode, expected, 0, 0, errors), feed.ranks, steps, stepMillis, expected, dir, trainers);
                out.printf("%-11s %10.3f %12.3f %10.1f %10.0f %12.1f %12.1f%n", mode, r.waitRatio(), r.steadyWaitRatio(),
                        r.samplesPerSecond(), r.firstBatchMillis(), r.meanWaitMillis(), r.bytesReceived() / 1e6);
                out.flush();
                var m = new LinkedHashMap<String, Object>();
                m.put("wait_ratio", round(r.waitRatio()));
                m.put("samples_per_s", round(r.samplesPerSecond()));
                m.put("ttfb_ms", round(r.firstBatchMillis()));
                m.put("steady_wait_ratio", round(r.steadyWaitRatio()));
                m.put("mean_wait_ms", round(r.meanWaitMillis()));
                m.put("bytes_to_trainers", r.bytesReceived());
                json.put(mode, m);
            }
        }
        for (String mode : modes) {
            var verdict = new ObjectMapper().readTree(dir.resolve(mode + "-pipeline.json").toFile()).path("verdict").path("text");
            if (!verdict.isMissingNode()) out.printf("verdict %-11s %s%n", mode, verdict.asText());
        }
        out.println("report: " + dev.stoker.report.RunReport.write(dir) + " (raw per-step and per-stage data beside it)");
        out.println(new ObjectMapper().writeValueAsString(java.util.Map.of("modes", json)));
        return 0;
    }

    /**
     * Twice a batch of B single-image samples at the pixel cap (multi-image samples need headroom):
     * pixel_values take max_pixels·3·temporal·4 bytes per image, pixel_values_u8 max_pixels·3 (the
     * tokens are small beside them).
     */
    private long expectedBatchBytes(dev.stoker.pipeline.EncodeOptions options) {
        return Math.min(feed.prefetchBytes, 2L * feed.batch * options.maxPixelBytesPerImage());
    }

    private static double round(double v) { return Math.round(v * 10000) / 10000.0; }
}
