package dev.stoker.bench.trainer;

import dev.stoker.bench.ChildJvm;
import dev.stoker.node.ConfigException;
import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

/**
 * Trainer processes of the benchmarks: the Java {@link SimulatedTrainer} ({@code stoker trainer} in a
 * child JVM) or the Python client's {@code python3 -m stoker.bench_trainer}; both write the same report.
 */
public final class TrainerProcesses {
    /** The Python the Python trainer runs on: Debian's, with its python3-numpy (and python3-torch for conversions). */
    public static final String PYTHON = "/usr/bin/python3";
    /** A trainer's JVM: a small heap, the service's figures are what a run measures. */
    public static final List<String> SMALL_JVM = List.of("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1");

    private TrainerProcesses() {}

    /** Which trainer process runs per rank: java, or python with {@code pythonPath} (clients/python) on its PYTHONPATH. */
    public record Kind(String name, Path pythonPath) {
        public static final Kind JAVA = new Kind("java", null);

        /** {@code java} or {@code python}; the latter needs the repository's clients/python (see {@link #findPythonClient}). */
        public static Kind of(String name) {
            return switch (name.trim().toLowerCase(Locale.ROOT)) {
                case "java" -> JAVA;
                case "python" -> {
                    if (!Files.isExecutable(Path.of(PYTHON)))
                        throw new ConfigException("--trainer python: " + PYTHON + " not found (apt-get install python3 python3-numpy)");
                    yield new Kind("python", findPythonClient());
                }
                default -> throw new ConfigException("--trainer must be java or python, got '" + name + "'");
            };
        }

        public boolean python() { return pythonPath != null; }
    }

    /**
     * The folder holding the Python client's package ({@code clients/python}, which contains {@code stoker/}):
     * searched above the working directory, then above this code's jar or classes folder.
     */
    public static Path findPythonClient() {
        var starts = new ArrayList<Path>();
        starts.add(Path.of("").toAbsolutePath());
        try {
            var source = TrainerProcesses.class.getProtectionDomain().getCodeSource();
            if (source != null) starts.add(Path.of(source.getLocation().toURI()).toAbsolutePath());
        } catch (URISyntaxException | SecurityException | IllegalArgumentException e) {
            // no usable code location: the working directory only
        }
        for (Path start : starts)
            for (Path p = start; p != null; p = p.getParent()) {
                Path client = p.resolve("clients/python");
                if (Files.isRegularFile(client.resolve("stoker/__init__.py"))) return client;
            }
        throw new ConfigException("--trainer python: cannot find the Python client (clients/python/stoker) above "
                + starts.stream().map(Path::toString).collect(Collectors.joining(" or ")) + "; run from within the Stoker repository");
    }

    /** {@code stoker trainer …} in a child JVM with {@code jvmArgs}. */
    public static List<String> javaCommand(List<String> jvmArgs, SimulatedTrainer.Settings s) {
        var args = new ArrayList<String>();
        args.add("trainer");
        args.addAll(s.args(false));
        return ChildJvm.stoker(jvmArgs, args);
    }

    /** {@code python3 -m stoker.bench_trainer …} with the client of {@code pythonPath} on its PYTHONPATH. */
    public static ProcessBuilder python(Path pythonPath, SimulatedTrainer.Settings s) {
        var cmd = new ArrayList<>(List.of(PYTHON, "-m", "stoker.bench_trainer"));
        cmd.addAll(s.args(true));
        var pb = new ProcessBuilder(cmd);
        String old = pb.environment().get("PYTHONPATH");
        pb.environment().put("PYTHONPATH", pythonPath + (old == null || old.isEmpty() ? "" : File.pathSeparator + old));
        pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
        return pb;
    }

    /** Starts one trainer of {@code kind} (a Java one with {@link #SMALL_JVM}), its output to {@code log}; its old report removed. */
    public static Process start(Kind kind, SimulatedTrainer.Settings s, Path log) throws IOException {
        Files.deleteIfExists(s.report());
        var pb = kind.python() ? python(kind.pythonPath(), s) : new ProcessBuilder(javaCommand(SMALL_JVM, s));
        return pb.redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }
}
