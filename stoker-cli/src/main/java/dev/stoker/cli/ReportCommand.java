package dev.stoker.cli;

import dev.stoker.report.RunReport;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/** {@code stoker report RUN_DIR}: the self-contained HTML report of a run directory. */
@Command(name = "report", mixinStandardHelpOptions = true,
        description = {"Writes RUN_DIR/report.html from a run directory (bench ladder --work-dir, the demo): wait-time ratio per mode,",
                "per-step wait/compute timeline per rank, per-stage latencies, queue depth over time, the verdict.",
                "Self-contained: inline CSS and SVG, nothing fetched when viewed. Prints the report's path."})
final class ReportCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(paramLabel = "RUN_DIR", description = "The run directory (holds MODE-rankR.json and MODE-pipeline.json).")
    Path runDir;

    @Override
    public Integer call() throws Exception {
        if (!Files.isDirectory(runDir)) throw new Main.InvalidInputException("not a directory: " + runDir);
        Path html = RunReport.write(runDir);
        spec.commandLine().getOut().println(html.toAbsolutePath());
        return 0;
    }
}
