package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.ShmBudget;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The README's Python training loop with the smallest budget the service accepts (audit #1: "the
 * README loop with a minimal budget either runs or is refused at start"). {@code for batch in loader:}
 * holds the previous batch while it asks for the next, so each rank's share of {@code --shm-budget}
 * must hold the batches its trainer keeps and the one being filled, each the largest the
 * configuration can make ({@link ShmBudget#rankNeedBytes()}). One byte less is refused at start with
 * the numbers; exactly that much runs the loop ({@code clients/python/tests/integration/readme_loop.py},
 * no {@code del}, a tensor touched each step) to the end of the feed.
 *
 * <p>The data set is the demo one (crops of the bundled photos, most samples one image that resizes
 * to nearly {@code --max-pixels}), so that nearly every real batch takes the largest batch's segment
 * size (checked): the share holds no spare segment, and a share of one segment leaves the loop
 * waiting on the batch it holds.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
@Tag("slow")
class ReadmeLoopTest {
    static final String PYTHON = PythonClientTest.PYTHON;
    static final int RANKS = 1, BATCH = 2, STEPS = 8, SAMPLES = 24;
    /**
     * 28²·80: the largest batch (2 samples at 320 pixel rows and 1024 tokens) is just under 3 MiB, and two of the demo's
     * photos (4:3 and 16:9, 264–280 rows each) make a batch over 2 MiB, so that a real batch takes the largest one's segment.
     */
    static final long MAX_PIXELS = 62720;
    /** The whole trainer process, torch import included; each socket read of its loader gives up after READ_SECONDS. */
    static final long LOOP_SECONDS = 60, READ_SECONDS = 30;
    static final ObjectMapper JSON = new ObjectMapper();

    @TempDir static Path tmp;
    static Path manifest, script;
    Process serve;

    @BeforeAll
    static void prepare() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(PYTHON)), PYTHON + " is missing");
        assumeTrue(python("-c", "import numpy, torch").waitFor() == 0,
                PYTHON + " has no numpy or torch (apt-get install python3-numpy python3-torch)");
        script = Vectors.projectDir().resolve("clients/python/tests/integration/readme_loop.py");
        assertTrue(Files.isRegularFile(script), script.toString());
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 11);
    }

    @AfterEach
    void stopService() {
        if (serve != null && serve.isAlive()) serve.destroyForcibly();
    }

    /** The serve options of both runs but the budget, as {@code --name value} pairs. */
    static List<String> options(String name) {
        return List.of("--data", manifest.toString(), "--ranks", "" + RANKS, "--batch", "" + BATCH, "--max-images", "1",
                "--max-pixels", "" + MAX_PIXELS, "--max-seq-len", "1024", "--steps", "" + STEPS, "--threads", "2",
                "--socket", tmp.resolve(name + ".sock").toString(), "--shm-dir", shm(name).toString());
    }

    static Path shm(String name) {
        try {
            return Files.createDirectories(tmp.resolve("shm-" + name));
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** The NodeConfig the same command line gives (every option read as serve reads it). */
    static NodeConfig config() {
        var b = NodeConfig.builder();
        List<String> o = options("config");
        for (int i = 0; i < o.size(); i += 2) b.set(o.get(i).substring(2), o.get(i + 1));
        return b.build();
    }

    static long largest() { return config().shm().largestBatchBytes(); }

    /** What one rank needs ({@link ShmBudget#rankNeedBytes()}). */
    static long need() {
        NodeConfig config = config();
        assertEquals(RANKS, config.ranks());
        assertEquals(BATCH, config.batch());
        long largest = config.shm().largestBatchBytes(), need = config.shm().rankNeedBytes();
        assertTrue(largest > 0, "bounded by --max-seq-len and --max-images: " + largest);
        assertEquals(ShmObjectStore.sizeClass(largest) * (ShmBudget.LEASES_PER_TRAINER + 1), need,
                "the batches a trainer keeps and the one being filled, each in the largest batch's segment size");
        return need;
    }

    @Test
    void aBudgetOneByteBelowWhatTheRankNeedsIsRefusedAtStart() throws Exception {
        long need = need(), budget = need - 1;
        var args = new ArrayList<>(options("low"));
        args.addAll(List.of("--shm-budget", "" + budget));
        Path log = tmp.resolve("low-serve.log");
        serve = ServeProcess.start(log, "512m", args);
        assertTrue(serve.waitFor(60, TimeUnit.SECONDS), "a refused budget ends serve at once: " + read(log));
        String text = read(log);
        assertNotEquals(0, serve.exitValue(), text);
        assertEquals(2, serve.exitValue(), "invalid input: " + text);
        String expected = String.format(Locale.ROOT, "--shm-budget %d gives each of the %d ranks %d bytes, and a rank needs %d",
                budget, RANKS, budget, need);
        assertTrue(text.contains(expected), "expected '" + expected + "' in: " + text);
        assertTrue(text.contains("Raise --shm-budget to " + need), text);
        assertFalse(text.contains("listening on"), text);
        assertTrue(Files.notExists(tmp.resolve("low.sock")), "no socket: nothing started");
        try (Stream<Path> left = Files.list(shm("low"))) {
            assertEquals(List.of(), left.toList(), "no arena made");
        }
    }

    @Test
    void theReadmeLoopRunsWithExactlyWhatTheRankNeeds() throws Exception {
        long need = need();
        var args = new ArrayList<>(options("exact"));
        args.addAll(List.of("--shm-budget", "" + need));
        Path log = tmp.resolve("exact-serve.log");
        serve = ServeProcess.start(log, "1g", args);
        String started = ServeProcess.awaitListening(serve, log);
        assertTrue(started.contains("(budget " + need + " bytes)"), started);

        Path stateDir = Files.createDirectories(tmp.resolve("state"));
        var py = PythonClientTest.startPython(script, List.of("--socket", tmp.resolve("exact.sock").toString(), "--world", "" + RANKS,
                "--rank", "0", "--state-dir", stateDir.toString(), "--timeout", "" + READ_SECONDS), tmp);
        Process p = py.process();
        var stdout = py.stdout();
        Path err = py.stderr();
        boolean finished = p.waitFor(LOOP_SECONDS, TimeUnit.SECONDS);
        if (!finished) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        String out = stdout.get(10, TimeUnit.SECONDS);
        String diagnosis = "\nstdout: " + out + "\nstderr: " + read(err) + "\nserve: " + read(log);
        assertTrue(finished, "the README loop did not end within " + LOOP_SECONDS + " s: it waits on a batch it holds?" + diagnosis);
        assertEquals(0, p.exitValue(), diagnosis);
        String[] lines = out.strip().split("\n");
        JsonNode report = JSON.readTree(lines[lines.length - 1]);
        assertTrue(report.get("ok").asBoolean(), report + diagnosis);
        assertEquals("shared_memory", report.get("delivery").asText(), report.toString());
        int steps = report.get("steps").asInt();
        assertTrue(steps >= 6, "at least 6 steps: " + report + diagnosis);
        assertEquals(STEPS, steps, "every step of the feed, then END: " + report);
        var global = new ArrayList<Long>();
        report.get("global_steps").forEach(x -> global.add(x.asLong()));
        var expected = new ArrayList<Long>();
        for (long s = 0; s < STEPS; s++) expected.add(s);
        assertEquals(expected, global, report.toString());
        // The hold is exercised only if real batches take the largest batch's segment size: then the share holds no spare one.
        long largestClass = ShmObjectStore.sizeClass(largest());
        int full = 0;
        for (JsonNode bytes : report.get("batch_bytes")) if (ShmObjectStore.sizeClass(bytes.asLong()) == largestClass) full++;
        assertTrue(full >= STEPS - 2, "most batches fill a segment of the largest batch's size " + largestClass + ": " + report);
        assertTrue(report.get("distinct_consecutive").asBoolean(), "a held batch's memory is never the next batch's: " + report);
        assertTrue(Files.size(stateDir.resolve("loader.pt")) > 0, "the loop saved the loader's state");

        serve.destroy(); // SIGTERM
        assertTrue(serve.waitFor(30, TimeUnit.SECONDS), read(log));
        assertEquals(0, serve.exitValue(), read(log));
    }

    static String read(Path file) {
        try {
            return Files.exists(file) ? Files.readString(file) : "(no " + file + ")";
        } catch (IOException e) {
            return "(" + e + ")";
        }
    }

    static Process python(String... args) throws Exception {
        var cmd = new ArrayList<String>();
        cmd.add(PYTHON);
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    }
}
