package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The JVM's environment and heap options the launcher gives each command (issue 30's memory item), read from the lines
 * the source checkout's {@code ./stoker} shares with the release's {@code bin/stoker} (between its "shared with the
 * release" markers) and run in bash: serve and node get two malloc arenas (MALLOC_ARENA_MAX, which a user's value
 * overrides), launch does not (its trainers inherit the environment); the services keep the JVM's default heap (the
 * decode budget is half of it) and the benchmarks their fixed 3 GiB. The release's template calls the same function
 * before its exec. With {@code STOKER_AOT=on} a service's first run trains an ahead-of-time cache (JDK 25) and later runs
 * use it, one file per command, Java runtime and set of jars, never while another run is still training it.
 */
@Timeout(60)
class LauncherEnvTest {
    private static String shared;

    @BeforeAll
    static void readSharedLines() throws IOException {
        List<String> lines = Files.readAllLines(Path.of("..", "stoker"), StandardCharsets.UTF_8);
        int from = -1, to = -1;
        for (int i = 0; i < lines.size(); i++) {
            if (lines.get(i).startsWith("# >>> shared with the release")) from = i;
            if (lines.get(i).startsWith("# <<< shared with the release")) to = i;
        }
        assertTrue(from >= 0 && to > from, "the shared markers in ./stoker");
        shared = String.join("\n", lines.subList(from, to + 1));
    }

    private static String bash(String script, Map<String, String> env) throws Exception {
        var pb = new ProcessBuilder("bash", "-c", shared + "\n" + script).redirectErrorStream(true);
        pb.environment().remove("STOKER_HEAP_OPTS");
        pb.environment().remove("MALLOC_ARENA_MAX");
        pb.environment().remove("STOKER_AOT");
        pb.environment().remove("STOKER_AOT_DIR");
        pb.environment().putAll(env);
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        return out;
    }

    @Test
    void servicesKeepTheJvmsHeapDefaultAndTheBenchmarksTheirFixedHeap() throws Exception {
        for (String command : List.of("serve --data d", "node --config c", "launch --nproc-per-node", "encode --data d"))
            assertEquals("", bash("heap_opts " + command, Map.of()), command);
        assertEquals("-Xmx2g", bash("heap_opts serve --data", Map.of("STOKER_HEAP_OPTS", "-Xmx2g")));
        assertEquals("-Xms3g -Xmx3g -XX:+AlwaysPreTouch", bash("heap_opts bench ladder", Map.of()));
    }

    @Test
    void serveAndNodeGetTwoMallocArenasLaunchsTrainersDoNot() throws Exception {
        assertEquals("2", bash("service_env serve; echo \"$MALLOC_ARENA_MAX\"", Map.of()));
        assertEquals("2", bash("service_env node; echo \"$MALLOC_ARENA_MAX\"", Map.of()));
        assertEquals("unset", bash("service_env launch; echo \"${MALLOC_ARENA_MAX:-unset}\"", Map.of()));
        assertEquals("8", bash("service_env serve; echo \"$MALLOC_ARENA_MAX\"", Map.of("MALLOC_ARENA_MAX", "8")));
        String release = Files.readString(Path.of("..", "tools", "release", "launcher.in"));
        assertTrue(release.contains("@SHARED@") && release.indexOf("service_env \"${1:-}\"") < release.lastIndexOf("exec \"$JAVA\""),
                "the release's launcher sets the service environment before it runs the CLI");
    }

    @Test
    void aServicesFirstRunTrainsTheAheadOfTimeCacheAndLaterRunsUseIt(@org.junit.jupiter.api.io.TempDir Path dir) throws Exception {
        Path jar = Files.writeString(dir.resolve("a.jar"), "one build");
        Path aot = dir.resolve("aot");
        var on = Map.of("STOKER_AOT", "on", "STOKER_AOT_DIR", aot.toString());
        String call = "aot_opts serve " + jar;
        assertEquals("", bash(call, Map.of()), "off by default");
        assertEquals("", bash("aot_opts encode " + jar, on), "services only");

        String train = bash(call, on);
        assertTrue(train.startsWith("-XX:AOTCacheOutput=" + aot + "/serve-") && train.endsWith(".aot -Xlog:aot*=error,cds*=error"), train);
        Path file = Path.of(train.substring("-XX:AOTCacheOutput=".length(), train.indexOf(' ')));
        Path training = Path.of(file + ".training");
        assertTrue(Files.isDirectory(training), "the training run's lock");

        // a run while the trainer lives (its pid: this test's JVM) runs without; the trainer gone and no cache written, the
        // lock is cleared and the next run trains again
        Files.writeString(training.resolve("pid"), ProcessHandle.current().pid() + "\n");
        assertEquals("", bash(call, on));
        Files.writeString(training.resolve("pid"), deadPid() + "\n");
        assertEquals("", bash(call, on), "the trainer stopped before it wrote the cache");
        assertTrue(Files.notExists(training));
        assertEquals(train, bash(call, on), "trains again");

        // the trainer gone and its cache written: later runs use it
        Files.writeString(training.resolve("pid"), deadPid() + "\n");
        Files.writeString(file, "cache");
        assertEquals("-XX:AOTCache=" + file + " -Xlog:aot*=error,cds*=error", bash(call, on));
        assertTrue(Files.notExists(training));
        assertEquals("-XX:AOTCache=" + file + " -Xlog:aot*=error,cds*=error", bash(call, on));

        // another build (a jar changed) trains a cache of its own and deletes the older build's
        Files.writeString(jar, "another build, a longer jar");
        String again = bash(call, on);
        assertTrue(again.startsWith("-XX:AOTCacheOutput=") && !again.contains(file.toString()), again);
        assertTrue(Files.notExists(file), "the older build's cache is deleted");
        String release = Files.readString(Path.of("..", "tools", "release", "launcher.in"));
        assertTrue(release.contains("$(aot_opts \"${1:-}\""), "the release's launcher asks for the cache too");
    }

    /** The JVM takes the options: a run with the training option writes the cache, and a run with the cache opens it. */
    @Test
    void theJvmWritesTheCacheOnItsFirstRunAndOpensItOnTheNext(@org.junit.jupiter.api.io.TempDir Path dir) throws Exception {
        String java = ProcessHandle.current().info().command().orElseThrow();
        var env = Map.of("STOKER_AOT", "on", "STOKER_AOT_DIR", dir.resolve("aot").toString(), "JAVA", java);
        String run = "exec \"$JAVA\" $(aot_opts serve \"$JAVA\") -Xlog:aot=info -version";
        String first = bash(run, env);
        try (var files = Files.list(dir.resolve("aot"))) {
            assertTrue(files.anyMatch(f -> f.getFileName().toString().matches("serve-[0-9a-f]{16}\\.aot")), first);
        }
        assertTrue(bash(run, env).contains("Opened AOT cache"), "the second run maps the cache");
    }

    private static long deadPid() throws Exception {
        Process p = new ProcessBuilder("true").start();
        p.waitFor();
        return p.pid();
    }
}
