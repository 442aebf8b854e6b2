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
 * before its exec.
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
}
