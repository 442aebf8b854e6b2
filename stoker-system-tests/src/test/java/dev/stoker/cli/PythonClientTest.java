package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.Npy;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Python client ({@code clients/python}, Debian's python3-numpy and python3-torch) against real
 * {@code stoker serve} processes: it receives exactly the batches the Java pipeline produced (each
 * sample compared with {@code stoker encode} of the same manifest line), zero-copy (every array lies
 * in the mapped segment; nothing copied on either side), and the bad cases: a client that dies
 * holding leases, a rank outside the world, another protocol version, two services on one node,
 * and SIGTERM leaving no shared-memory files behind.
 *
 * <p>Two services share one {@code --shm-dir}: A (the exact-batches checks) and B (the bad cases).
 * The tests run in order; the last one stops both.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 240, unit = TimeUnit.SECONDS)
@Tag("slow")
class PythonClientTest {
    static final String PYTHON = "/usr/bin/python3";
    static final int RANKS = 2, BATCH = 3, STEPS_A = 4, STEPS_B = 5, SAMPLES = 16;
    static final long MAX_PIXELS = 50176;
    static final long PAD_ID = 151643;
    static final ObjectMapper JSON = new ObjectMapper();

    @TempDir static Path tmp;
    static Path ds, shm, script;
    static boolean torch;
    static Service a, b;
    static List<String> lines;
    static final Map<Long, CompletableFuture<Path>> encoded = new ConcurrentHashMap<>();
    static ExecutorService encodePool;

    /** A {@code stoker serve} child process; its stdout and stderr go to {@code log}. */
    record Service(String name, Process process, Path socket, Path metrics, Path log) {
        String logText() {
            try {
                return Files.readString(log);
            } catch (IOException e) {
                return "(" + e + ")";
            }
        }

        /** Waits for the "listening" line; returns the arena folder the service printed. */
        Path arenaDir() throws Exception {
            String text = ServeProcess.awaitListening(process, log);
            Matcher m = Pattern.compile("shared memory (\\S+) \\(budget").matcher(text);
            assertTrue(m.find(), "no arena in " + text);
            return Path.of(m.group(1));
        }
    }

    @BeforeAll
    static void startServices() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(PYTHON)), PYTHON + " is missing");
        assumeTrue(python("-c", "import numpy").waitFor() == 0, PYTHON + " has no numpy (apt-get install python3-numpy)");
        Process torchCheck = python("-c", "import torch"); // takes seconds: runs while the services start
        script = Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py");
        assertTrue(Files.isRegularFile(script), script.toString());

        ds = Files.createDirectories(tmp.resolve("ds"));
        shm = Files.createDirectories(tmp.resolve("shm"));
        String[] images = {"a.jpg", "b.png", "c.png", "d.png"};
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), ds.resolve(images[0]));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve(images[1]));
        Files.copy(Vectors.get().inputImage("p05_gray_L_320x240"), ds.resolve(images[2]));
        Files.copy(Vectors.get().inputImage("p06_rgba_alpha_300x200"), ds.resolve(images[3]));
        lines = new ArrayList<>();
        for (int i = 0; i < SAMPLES; i++) {
            String question = "What is in picture " + i + "? " + "Describe it carefully. ".repeat(i % 5); // lengths vary: padding
            ObjectNode rec = JSON.createObjectNode().put("id", "s" + i);
            var conv = rec.putArray("conversations");
            if (i % 4 == 3) { // two images
                rec.putArray("image").add(images[i % 4]).add(images[(i + 1) % 4]);
                conv.addObject().put("from", "human").put("value", "<image>\n<image>\n" + question);
                conv.addObject().put("from", "gpt").put("value", "Two pictures, number " + i + ".");
            } else {
                rec.put("image", images[i % 4]);
                conv.addObject().put("from", "human").put("value", "<image>\n" + question);
                conv.addObject().put("from", "gpt").put("value", "Answer " + i + ".");
            }
            lines.add(JSON.writeValueAsString(rec));
        }
        Files.write(ds.resolve("train.jsonl"), lines);

        // Both on one node, one --shm-dir: each must get an arena of its own.
        a = serve("a", STEPS_A, "256M");
        b = serve("b", STEPS_B, "64M");
        // The reference: `stoker encode` of every sample, in the background while the services start.
        encodePool = Executors.newFixedThreadPool(4);
        for (int i = 0; i < SAMPLES; i++) {
            long index = i;
            encoded.put(index, CompletableFuture.supplyAsync(() -> encode(index), encodePool));
        }
        assertTrue(torchCheck.waitFor(60, TimeUnit.SECONDS));
        torch = torchCheck.exitValue() == 0;
        for (Service s : List.of(a, b)) s.arenaDir();
    }

    @AfterAll
    static void stopServices() {
        if (encodePool != null) encodePool.shutdownNow();
        for (Service s : new Service[] {a, b})
            if (s != null && s.process().isAlive()) s.process().destroyForcibly();
    }

    @Test
    @Order(1)
    void pythonReceivesExactlyTheBatchesOfTheJavaPipelineWithoutACopy() throws Exception {
        Path out = tmp.resolve("out-a");
        var args = new ArrayList<>(List.of("fetch", "--socket", a.socket().toString(), "--world", "" + RANKS, "--out", out.toString()));
        if (torch) args.addAll(List.of("--numpy-steps", "2", "--torch")); // numpy for two steps, torch (DataLoader) for the rest
        JsonNode report = runScript(args);
        int padded = 0, twoImageSamples = 0;
        for (int rank = 0; rank < RANKS; rank++) {
            JsonNode r = report.get("ranks").get("" + rank);
            var steps = new ArrayList<Long>();
            r.get("numpy_steps").forEach(x -> steps.add(x.asLong()));
            if (torch) r.get("torch_steps").forEach(x -> steps.add(x.asLong()));
            assertEquals(List.of(0L, 1L, 2L, 3L), steps, "rank " + rank + ": every step, in order, then END: " + r);
            assertEquals(0, r.get("bytes_received").asLong(), "no batch byte crossed the socket");
            assertEquals(0, r.get("bytes_copied").asLong(), "the client copied nothing");
            if (torch) {
                assertEquals(0, r.get("torch_bytes_received").asLong());
                assertEquals(0, r.get("torch_bytes_copied").asLong());
                assertEquals(2, r.get("torch_refs").asLong());
            }
            for (JsonNode seg : r.get("segments"))
                assertTrue(Path.of(seg.asText()).startsWith(a.arenaDir()), seg + " lies in service A's arena " + a.arenaDir());

            for (long step : steps) {
                Path dir = out.resolve("rank" + rank).resolve("step" + step);
                JsonNode meta = JSON.readTree(dir.resolve("meta.json").toFile());
                String what = "rank " + rank + " step " + step + " (" + meta.get("api").asText() + ")";
                assertEquals("shared_memory", meta.get("delivery").asText(), what);
                assertEquals(rank, meta.get("rank").asInt(), what);
                assertEquals(RANKS, meta.get("world").asInt(), what);
                assertEquals(step, meta.get("global_step").asLong(), what);
                assertFalse(meta.get("lease").isNull(), what);
                assertEquals(0, meta.get("bytes_copied").asLong(), what + ": copied bytes per batch");
                meta.get("views_segment").fields().forEachRemaining(e -> assertTrue(e.getValue().asBoolean(), what + " " + e.getKey() + " is a view of the segment"));

                long[] index = longs(dir, "sample_index");
                Npy.Array ids = Npy.read(dir.resolve("input_ids.npy"));
                int bs = (int) ids.shape()[0], len = (int) ids.shape()[1];
                assertEquals(BATCH, bs, what);
                assertEquals(BATCH, meta.get("samples").asInt(), what);
                assertEquals(bs, index.length, what);
                long[] inputIds = ids.asLongs(), labels = longs(dir, "labels"), mask = longs(dir, "attention_mask"), pos = longs(dir, "position_ids");
                assertArrayEquals(new long[] {3, bs, len}, Npy.read(dir.resolve("position_ids.npy")).shape(), what);
                Npy.Array pixels = Npy.read(dir.resolve("pixel_values.npy"));
                assertEquals("<f4", pixels.dtype(), what);
                Npy.Array grid = Npy.read(dir.resolve("image_grid_thw.npy"));
                long[] grids = grid.asLongs();
                long pixelRow = 0, image = 0;
                int longest = 0;
                for (int i = 0; i < bs; i++) {
                    long idx = index[i];
                    assertTrue(idx >= 0 && idx < SAMPLES, what + ": sample index " + idx);
                    Path enc = encoded.get(idx).get(120, TimeUnit.SECONDS);
                    String sw = what + " row " + i + " (sample " + idx + ")";
                    long[] eIds = longs(enc, "input_ids"), eLabels = longs(enc, "labels"), eMask = longs(enc, "attention_mask"), ePos = longs(enc, "position_ids");
                    int n = eIds.length;
                    longest = Math.max(longest, n);
                    assertTrue(n <= len, sw + ": " + n + " tokens in a row of " + len);
                    if (n < len) padded++;
                    assertArrayEquals(eIds, Arrays.copyOfRange(inputIds, i * len, i * len + n), sw + " input_ids");
                    assertArrayEquals(eLabels, Arrays.copyOfRange(labels, i * len, i * len + n), sw + " labels");
                    assertArrayEquals(eMask, Arrays.copyOfRange(mask, i * len, i * len + n), sw + " attention_mask");
                    for (int k = n; k < len; k++) {
                        assertEquals(PAD_ID, inputIds[i * len + k], sw + " input_ids padding at " + k);
                        assertEquals(-100, labels[i * len + k], sw + " labels padding at " + k);
                        assertEquals(0, mask[i * len + k], sw + " attention_mask padding at " + k);
                    }
                    for (int d = 0; d < 3; d++) {
                        int base = (d * bs + i) * len;
                        assertArrayEquals(Arrays.copyOfRange(ePos, d * n, d * n + n), Arrays.copyOfRange(pos, base, base + n), sw + " position_ids[" + d + "]");
                        for (int k = n; k < len; k++) assertEquals(1, pos[base + k], sw + " position_ids[" + d + "] padding at " + k);
                    }
                    Npy.Array ePixels = Npy.read(enc.resolve("pixel_values.npy"));
                    long rows = ePixels.shape()[0], rowBytes = ePixels.shape()[1] * 4L;
                    assertEquals(pixels.shape()[1], ePixels.shape()[1], sw + " pixel row length");
                    assertTrue(pixelRow + rows <= pixels.shape()[0], sw + ": pixel rows run past the batch's " + pixels.shape()[0]);
                    assertArrayEquals(ePixels.data(), Arrays.copyOfRange(pixels.data(), (int) (pixelRow * rowBytes), (int) ((pixelRow + rows) * rowBytes)),
                            sw + " pixel_values rows [" + pixelRow + ", " + (pixelRow + rows) + ") bit for bit");
                    pixelRow += rows;
                    long[] eGrid = longs(enc, "image_grid_thw");
                    if (eGrid.length / 3 == 2) twoImageSamples++;
                    assertArrayEquals(eGrid, Arrays.copyOfRange(grids, (int) image * 3, (int) (image * 3 + eGrid.length)), sw + " image_grid_thw");
                    image += eGrid.length / 3;
                }
                assertEquals(pixels.shape()[0], pixelRow, what + ": every pixel row belongs to a sample, in batch order");
                assertEquals(grid.shape()[0], image, what + ": every grid row belongs to a sample");
                assertEquals(longest, len, what + ": padded to the longest sample");
            }
        }
        assertTrue(padded > 0, "some rows were padded");
        assertTrue(twoImageSamples > 0, "some batches held two-image samples");
    }

    @Test
    @Order(2)
    void aRankOutsideTheWorldOrAnotherProtocolVersionGetsAClearError() throws Exception {
        JsonNode rank = runScript(List.of("expect-error", "--socket", b.socket().toString(), "--world", "" + RANKS, "--rank", "2"));
        assertEquals("StokerError", rank.get("error_type").asText());
        assertEquals("rank 2 is outside the world size 2", rank.get("message").asText());
        JsonNode world = runScript(List.of("expect-error", "--socket", b.socket().toString(), "--world", "3", "--rank", "0"));
        assertEquals("world size 3 differs from the job's 2", world.get("message").asText());
        for (int version : new int[] {4, 6}) {
            JsonNode v = runScript(List.of("expect-error", "--socket", b.socket().toString(), "--world", "" + RANKS, "--rank", "0",
                    "--version", "" + version));
            assertEquals("StokerError", v.get("error_type").asText());
            assertEquals("protocol version " + version + " is not supported; this service speaks version 5", v.get("message").asText());
        }
        try (var live = dev.stoker.transport.TrainerClient.connect(b.socket(), 1, RANKS, "t")) { // rank 1 has a live trainer
            assertSameBatch(live, 0);
            JsonNode twice = runScript(List.of("expect-error", "--socket", b.socket().toString(), "--world", "" + RANKS, "--rank", "1"));
            assertEquals("StokerError", twice.get("error_type").asText());
            assertTrue(twice.get("message").asText().startsWith("rank 1 is already being fed to a trainer on another, open connection"),
                    twice.toString());
            for (int step = 1; step <= LIVE_STEPS; step++) assertSameBatch(live, step); // it goes on, nothing taken from it
        }
    }

    /** Steps of rank 1 on B that the live trainer of the second-claim check reads after the claim; the rest goes to a later test. */
    static final int LIVE_STEPS = 2;

    /**
     * The live trainer's next batch is step {@code step} of rank 1 of the uninterrupted run: as service A (the same job)
     * gave it to the Python client in the first test, tensor for tensor, bit for bit.
     */
    static void assertSameBatch(dev.stoker.transport.TrainerClient live, int step) throws Exception {
        Path dir = tmp.resolve("out-a/rank1/step" + step);
        try (var got = live.next()) {
            var batch = got.batch();
            assertEquals(step, batch.meta().globalStep(), "rank 1's live trainer");
            var names = new HashSet<String>();
            for (var t : batch.tensors()) {
                names.add(t.name() + ".npy");
                Npy.Array want = Npy.read(dir.resolve(t.name() + ".npy"));
                assertArrayEquals(want.shape(), t.shape(), "step " + step + " " + t.name());
                assertArrayEquals(want.data(), t.data().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE), "step " + step + " " + t.name());
            }
            try (Stream<Path> saved = Files.list(dir)) {
                assertEquals(names, new HashSet<>(saved.map(f -> f.getFileName().toString()).filter(f -> f.endsWith(".npy")).toList()));
            }
        }
    }

    @Test
    @Order(3)
    void aClientThatDiesHoldingLeasesLosesThemAndTheRankGoesOn() throws Exception {
        // SIGKILL: no RELEASE, no BYE. The service must release the 3 leases when the connection drops
        // (checked in the last test through its counters: released on disconnect, none held, store leases 0).
        var p = startPython(List.of("hold-and-die", "--socket", b.socket().toString(), "--world", "" + RANKS, "--rank", "0", "--hold", "3"));
        assertTrue(p.process().waitFor(60, TimeUnit.SECONDS), "the holding client did not finish");
        assertEquals(137, p.process().exitValue(), "killed by SIGKILL: " + p.stdout().get() + p.stderrText());
        JsonNode died = lastJson(p.stdout().get());
        assertEquals(3, died.get("held_leases").size(), died.toString());
        assertEquals(List.of(0L, 1L, 2L), longList(died.get("steps")));

        // Rank 0 continues where the dead client left it, to END; rank 1 where its Java trainer (the second-claim check) left it, by copy.
        JsonNode next = runScript(List.of("fetch", "--socket", b.socket().toString(), "--world", "" + RANKS, "--ranks", "0",
                "--out", tmp.resolve("out-b0").toString()));
        assertEquals(List.of(3L, 4L), longList(next.get("ranks").get("0").get("numpy_steps")), next.toString());
        JsonNode copy = runScript(List.of("fetch", "--socket", b.socket().toString(), "--world", "" + RANKS, "--ranks", "1", "--copy",
                "--out", tmp.resolve("out-b1").toString()));
        JsonNode r1 = copy.get("ranks").get("1");
        var rest = new ArrayList<Long>();
        for (long step = LIVE_STEPS + 1; step < STEPS_B; step++) rest.add(step);
        assertEquals(rest, longList(r1.get("numpy_steps")), copy.toString());
        assertTrue(r1.get("bytes_received").asLong() > rest.size() * BATCH * 1176 * 4, "copies crossed the socket: " + r1);
        assertEquals(0, r1.get("refs").asLong());
    }

    @Test
    @Order(4)
    void twoServicesOnOneNodeKeepSeparateArenas() throws Exception {
        assertNotEquals(a.arenaDir(), b.arenaDir());
        for (Service s : List.of(a, b)) {
            assertTrue(s.process().isAlive(), s.name() + " still serves: " + s.logText());
            assertTrue(Files.isDirectory(s.arenaDir()), s.arenaDir().toString());
            assertEquals(shm, s.arenaDir().getParent());
        }
        try (Stream<Path> arenas = Files.list(shm)) {
            assertEquals(Set.of(a.arenaDir(), b.arenaDir()), new HashSet<>(arenas.toList()));
        }
        JsonNode meta = JSON.readTree(tmp.resolve("out-b0/rank0/step3/meta.json").toFile());
        for (JsonNode seg : meta.get("segments")) assertTrue(Path.of(seg.asText()).startsWith(b.arenaDir()), seg.toString());
    }

    @Test
    @Order(5)
    void sigtermStopsEachServiceAndLeavesNoSharedMemoryFiles() throws Exception {
        stop(a);
        assertFalse(Files.exists(a.arenaDir()), "A's arena is removed");
        assertTrue(Files.isDirectory(b.arenaDir()), "B's arena is not A's business");
        stop(b);
        try (Stream<Path> left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "no shared-memory file is left");
        }

        JsonNode ma = JSON.readTree(a.metrics().toFile());
        assertEquals(0, ma.get("pipeline").get("copiedBytes").asLong(), "no byte copied after the transform: " + ma.get("pipeline"));
        assertEquals(RANKS * STEPS_A, ma.get("server").get("refs_sent").asLong(), ma.toString());
        assertEquals(0, ma.get("server").get("bytes_sent").asLong(), ma.toString());
        assertEquals(0, ma.get("server").get("leases_held").asLong(), ma.toString());
        // the store agrees; the service's own leases are each rank's last batch, kept until a next request confirms it
        assertTrue(ma.get("kept_for_reconnect").asLong() <= RANKS, ma.toString());
        assertEquals(ma.get("kept_for_reconnect").asLong(), ma.get("store").get("leases").asLong(), "the store agrees: " + ma.get("store"));

        JsonNode mb = JSON.readTree(b.metrics().toFile());
        assertEquals(0, mb.get("pipeline").get("copiedBytes").asLong(), mb.get("pipeline").toString());
        assertEquals(3, mb.get("server").get("leases_released_on_disconnect").asLong(), "the dead client's leases: " + mb.get("server"));
        assertEquals(0, mb.get("server").get("leases_held").asLong(), mb.toString());
        assertTrue(mb.get("kept_for_reconnect").asLong() <= RANKS, mb.toString());
        assertEquals(mb.get("kept_for_reconnect").asLong(), mb.get("store").get("leases").asLong(), mb.get("store").toString());
    }

    /**
     * The wait measurement end to end: Python trainers ({@code Loader.from_env}) that sleep through each step send their
     * timings with their requests, and the service's metrics file and {@code --report-dir} hold, per rank, exactly what
     * each client measured itself: its waits and steps, and so its wait ratio.
     */
    @Test
    @Order(6)
    void theServiceShowsTheWaitRatioEachPythonTrainerMeasured() throws Exception {
        int steps = 6;
        long stepMillis = 50;
        Path run = tmp.resolve("c-run");
        Service c = serve("c", steps, "64M", List.of("--report-dir", run.toString()));
        c.arenaDir();
        var ranks = new ArrayList<Py>();
        for (int r = 0; r < RANKS; r++)
            ranks.add(startPython(List.of("timed", "--socket", c.socket().toString(), "--world", "" + RANKS, "--rank", "" + r,
                    "--step-ms", "" + stepMillis)));
        var measured = new ArrayList<JsonNode>();
        for (Py p : ranks) {
            assertTrue(p.process().waitFor(120, TimeUnit.SECONDS), "a timed trainer did not finish");
            String out = p.stdout().get(10, TimeUnit.SECONDS);
            assertEquals(0, p.process().exitValue(), out + p.stderrText());
            measured.add(lastJson(out));
        }
        stop(c);

        JsonNode trainers = JSON.readTree(c.metrics().toFile()).path("trainers");
        assertEquals(RANKS, trainers.path("ranks").size(), trainers.toString());
        long allWait = 0, allStep = 0;
        for (JsonNode r : trainers.path("ranks")) {
            JsonNode mine = measured.get(r.path("rank").asInt());
            assertEquals(steps, mine.path("batches").asInt(), mine.toString());
            long wait = 0, step = 0;
            for (JsonNode t : mine.path("timings")) {
                wait += t.get(0).asLong();
                step += t.get(1).asLong();
                assertTrue(t.get(1).asLong() >= stepMillis * 1_000_000, "a step sleeps " + stepMillis + " ms: " + t);
            }
            assertEquals(steps, r.path("steps_reported").asLong(), r.toString());
            assertEquals(wait, r.path("wait_ns").asLong(), "the waits the client measured: " + r);
            assertEquals(step, r.path("step_ns").asLong(), "the steps the client measured: " + r);
            assertEquals(mine.path("wait_ratio").asDouble(), r.path("wait_ratio").asDouble(), 1e-9, r + " vs " + mine);
            allWait += wait;
            allStep += step;
        }
        assertEquals((double) allWait / (allWait + allStep), trainers.path("wait_ratio").asDouble(), 1e-9, trainers.toString());

        var data = dev.stoker.report.RunData.load(run); // what `stoker report DIR` renders
        assertEquals(List.of("job"), data.modes().stream().map(dev.stoker.report.RunData.Mode::name).toList());
        for (var rank : data.modes().getFirst().ranks()) {
            JsonNode mine = measured.get(rank.rank());
            assertEquals(steps, rank.steps().size());
            for (int s = 0; s < steps; s++)
                assertEquals(mine.path("timings").get(s).get(0).asLong(), rank.steps().get(s).waitNanos(), "rank " + rank.rank() + " step " + s);
        }
    }

    // ------------------------------------------------------------------ helpers

    static Service serve(String name, int steps, String budget) throws IOException { return serve(name, steps, budget, List.of()); }

    static Service serve(String name, int steps, String budget, List<String> more) throws IOException {
        Path socket = tmp.resolve(name + ".sock"), metrics = tmp.resolve(name + "-metrics.json");
        var args = new ArrayList<>(List.of("--data", ds.resolve("train.jsonl").toString(), "--ranks", "" + RANKS, "--batch", "" + BATCH,
                "--max-pixels", "" + MAX_PIXELS, "--socket", socket.toString(), "--shm-dir", shm.toString(),
                "--shm-budget", budget, "--max-images", "2", "--steps", "" + steps, "--threads", "2", "--metrics-file", metrics.toString()));
        args.addAll(more);
        Path log = tmp.resolve(name + "-serve.log");
        Process p = ServeProcess.start(log, "1g", args);
        return new Service(name, p, socket, metrics, log);
    }

    static void stop(Service s) throws Exception {
        s.process().destroy(); // SIGTERM
        assertTrue(s.process().waitFor(30, TimeUnit.SECONDS), s.name() + " did not stop within 30 s: " + s.logText());
        assertEquals(0, s.process().exitValue(), s.name() + ": " + s.logText());
        assertTrue(s.logText().toString().contains("stoker serve: stopping"), s.logText().toString());
        assertFalse(Files.exists(s.socket()), "socket removed: " + s.socket());
    }

    /** {@code stoker encode} of dataset line {@code index}, into its own folder (once per sample). */
    static Path encode(long index) {
        try {
            Path sample = ds.resolve("sample-" + index + ".json");
            Files.writeString(sample, lines.get((int) index));
            Path out = tmp.resolve("encoded/" + index);
            var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", sample.toString(), "--out", out.toString(),
                    "--max-pixels", "" + MAX_PIXELS);
            assertEquals(0, r.status(), "encode " + index + ": " + r.err());
            return out;
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    static long[] longs(Path dir, String name) throws IOException {
        return Npy.read(dir.resolve(name + ".npy")).asLongs();
    }

    static List<Long> longList(JsonNode array) {
        var out = new ArrayList<Long>();
        array.forEach(x -> out.add(x.asLong()));
        return out;
    }

    record Py(Process process, CompletableFuture<String> stdout, Path stderr) {
        String stderrText() throws IOException { return Files.readString(stderr); }
    }

    static Py startPython(List<String> args) throws IOException { return startPython(script, args, tmp); }

    /** Debian's python3 running {@code pyScript} with the client on its path; stderr to a file in {@code dir}. */
    static Py startPython(Path pyScript, List<String> args, Path dir) throws IOException {
        var cmd = new ArrayList<String>();
        cmd.add(PYTHON);
        cmd.add(pyScript.toString());
        cmd.addAll(args);
        Path err = Files.createTempFile(dir, "python", ".err");
        var pb = new ProcessBuilder(cmd).redirectError(err.toFile());
        pb.environment().put("PYTHONPATH", Vectors.projectDir().resolve("clients/python").toString());
        pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
        Process p = pb.start();
        p.getOutputStream().close();
        var stdout = CompletableFuture.supplyAsync(() -> {
            try {
                return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "";
            }
        });
        return new Py(p, stdout, err);
    }

    /** Runs the script, expects exit 0 and returns its last stdout line as JSON. */
    static JsonNode runScript(List<String> args) throws Exception {
        Py p = startPython(args);
        assertTrue(p.process().waitFor(120, TimeUnit.SECONDS), "python " + args + " did not finish");
        String out = p.stdout().get(10, TimeUnit.SECONDS);
        assertEquals(0, p.process().exitValue(), "python " + args + ":\n" + out + p.stderrText());
        JsonNode json = lastJson(out);
        assertTrue(json.get("ok").asBoolean(), json.toString());
        return json;
    }

    static JsonNode lastJson(String stdout) throws IOException {
        String[] ls = stdout.strip().split("\n");
        return JSON.readTree(ls[ls.length - 1]);
    }

    static Process python(String... args) throws Exception {
        var cmd = new ArrayList<String>();
        cmd.add(PYTHON);
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    }
}
