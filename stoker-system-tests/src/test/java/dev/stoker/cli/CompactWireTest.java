package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The compact wire format end to end, against real {@code stoker serve} processes of one job in float32
 * and in uint8: the Python client's torch function (and its NumPy twin, and the Loader's
 * {@code to_pixel_values}) turns the uint8 batches it receives — by reference from shared memory and
 * by copy through the socket — into exactly the float32 pixel_values the float32 service sends, byte
 * for byte; a Java trainer on Arrow Flight gets the same from {@link CompactPixels}. Ranks: 0 and 1
 * Python on the socket, 2 Java on Flight.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class CompactWireTest {
    static final int RANKS = 3, BATCH = 3, STEPS = 3, SAMPLES = 16;

    @TempDir Path tmp;

    @Test
    void uint8BatchesBecomeTheFloat32PixelValuesOverSharedMemorySocketCopiesAndFlight() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(PythonClientTest.PYTHON)), PythonClientTest.PYTHON + " is missing");
        assumeTrue(PythonClientTest.python("-c", "import numpy, torch").waitFor() == 0, "needs python3-numpy and python3-torch");
        Path ds = dataset();
        Path shm = Files.createDirectories(tmp.resolve("shm"));
        var services = new ArrayList<Process>();
        try {
            Process f = serve(ds, shm, "f32", "float32", "zero-copy"), u = serve(ds, shm, "u8", "uint8", "zero-copy"),
                    c = serve(ds, shm, "u8copy", "uint8", "prefetch");
            services.addAll(List.of(f, u, c));
            String logF = ServeProcess.awaitListening(f, tmp.resolve("f32.log")), logU = ServeProcess.awaitListening(u, tmp.resolve("u8.log"));
            ServeProcess.awaitListening(c, tmp.resolve("u8copy.log"));
            assertTrue(logU.contains("pixels uint8") && logF.contains("pixels float32"), logU);

            // rank 0: the torch function and the NumPy one on the raw u8 batches; rank 1: the Loader's flag
            for (int rank : new int[] {0, 1}) {
                var args = new ArrayList<>(List.of("compact", "--socket", tmp.resolve("u8.sock").toString(),
                        "--copy-socket", tmp.resolve("u8copy.sock").toString(), "--float-socket", tmp.resolve("f32.sock").toString(),
                        "--world", "" + RANKS, "--rank", "" + rank, "--steps", "" + STEPS));
                if (rank == 1) args.add("--loader");
                JsonNode report = runScript(args);
                for (String delivery : List.of("shared_memory", "copy")) {
                    JsonNode r = report.get(delivery);
                    String what = delivery + " rank " + rank + ": " + r;
                    assertEquals(STEPS, r.get("steps").size(), what);
                    if (delivery.equals("copy")) assertTrue(r.get("bytes_received").asLong() > 0, what);
                    else assertEquals(0, r.get("bytes_received").asLong(), "shared memory: nothing through the socket; " + what);
                    boolean twoImages = false;
                    for (JsonNode s : r.get("steps")) {
                        assertEquals(rank == 0 ? List.of("numpy", "torch") : List.of("loader"), texts(s.get("checked")), what);
                        long u8Total = s.get("u8_total_bytes").asLong(), f32Total = s.get("float_total_bytes").asLong();
                        assertTrue(u8Total * 5 < f32Total, "a compact batch is several times smaller: " + s);
                        if (rank == 0) assertEquals(s.get("float_pixel_bytes").asLong(), 8 * s.get("u8_pixel_bytes").asLong(), s.toString());
                        twoImages |= s.get("images").asInt() > BATCH;
                    }
                    if (rank == 0) assertTrue(twoImages, "some batch held a two-image sample: " + what);
                }
            }

            // rank 2 over Arrow Flight, Java: CompactPixels from the batch alone gives the float32 service's pixel_values
            try (var ff = FlightBatchClient.connect("127.0.0.1", flightPort(logF), dev.stoker.node.FlightTokenFile.clientOptions(System.getenv()), null);
                 var uf = FlightBatchClient.connect("127.0.0.1", flightPort(logU), dev.stoker.node.FlightTokenFile.clientOptions(System.getenv()), null)) {
                for (int s = 0; s < STEPS; s++) {
                    BatchLayout.Batch fb = ff.next(2, RANKS, "test");
                    assertNotNull(fb, "step " + s);
                    float[] expected = fb.tensor("pixel_values").toFloats();
                    long[] grid = fb.tensor("image_grid_thw").toLongs();
                    long floatBytes = fb.totalBytes();
                    BatchLayout.Batch ub = uf.next(2, RANKS, "test");
                    assertNotNull(ub, "step " + s);
                    assertEquals(fb.meta(), ub.meta());
                    assertFalse(ub.tensors().stream().anyMatch(t -> t.name().equals("pixel_values")));
                    assertEquals(Tensor.DType.UINT8, ub.tensor("pixel_values_u8").dtype());
                    float[] decoded = dev.stoker.bench.trainer.SimulatedTrainer.toPixelValues(ub);
                    assertEquals(expected.length, decoded.length, "step " + s);
                    for (int k = 0; k < expected.length; k++)
                        if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(decoded[k]))
                            throw new AssertionError("flight step " + s + ": pixel_values differ at " + k);
                    assertEquals(java.util.Arrays.toString(grid), java.util.Arrays.toString(ub.tensor("image_grid_thw").toLongs()));
                    for (String name : List.of("input_ids", "labels", "attention_mask", "position_ids", "sample_index"))
                        assertEquals(java.util.Arrays.toString(fb.tensor(name).toLongs()), java.util.Arrays.toString(ub.tensor(name).toLongs()), name);
                    assertTrue(ub.totalBytes() * 5 < floatBytes, ub.totalBytes() + " vs " + floatBytes);
                }
                assertNull(uf.next(2, RANKS, "test"), "end of feed after --steps");
            }
        } finally {
            for (Process p : services) {
                p.destroy();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            }
        }
        try (var left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "arenas removed on SIGTERM");
        }
    }

    /** Runs fetch_batches.py with {@code args}; expects exit 0 and {"ok": true} as the last stdout line. */
    private JsonNode runScript(List<String> args) throws Exception {
        var cmd = new ArrayList<>(List.of(PythonClientTest.PYTHON,
                Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py").toString()));
        cmd.addAll(args);
        Path out = Files.createTempFile(tmp, "python", ".out");
        var pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile());
        pb.environment().put("PYTHONPATH", Vectors.projectDir().resolve("clients/python").toString());
        pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
        Process p = pb.start();
        p.getOutputStream().close();
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "python " + args + " did not finish");
        String text = Files.readString(out);
        assertEquals(0, p.exitValue(), "python " + args + ":\n" + text);
        JsonNode json = PythonClientTest.lastJson(text);
        assertTrue(json.get("ok").asBoolean(), json.toString());
        return json;
    }

    private static List<String> texts(JsonNode array) {
        var out = new ArrayList<String>();
        array.forEach(x -> out.add(x.asText()));
        return out;
    }

    private static int flightPort(String log) {
        var m = Pattern.compile("flight on grpc://127\\.0\\.0\\.1:(\\d+)").matcher(log);
        assertTrue(m.find(), log);
        return Integer.parseInt(m.group(1));
    }

    /** Images of four sizes and modes; every fourth sample has two; question lengths vary (padding). */
    private Path dataset() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        String[] images = {"a.jpg", "b.png", "c.png", "d.png"};
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), ds.resolve(images[0]));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve(images[1]));
        Files.copy(Vectors.get().inputImage("p05_gray_L_320x240"), ds.resolve(images[2]));
        Files.copy(Vectors.get().inputImage("p06_rgba_alpha_300x200"), ds.resolve(images[3]));
        var lines = new ArrayList<String>();
        for (int i = 0; i < SAMPLES; i++) {
            ObjectNode rec = PythonClientTest.JSON.createObjectNode().put("id", "s" + i);
            var conv = rec.putArray("conversations");
            String question = "What is in picture " + i + "? " + "Describe it. ".repeat(i % 4);
            if (i % 4 == 3) {
                rec.putArray("image").add(images[i % 4]).add(images[(i + 1) % 4]);
                conv.addObject().put("from", "human").put("value", "<image>\n<image>\n" + question);
            } else {
                rec.put("image", images[i % 4]);
                conv.addObject().put("from", "human").put("value", "<image>\n" + question);
            }
            conv.addObject().put("from", "gpt").put("value", "Answer " + i + ".");
            lines.add(PythonClientTest.JSON.writeValueAsString(rec));
        }
        return Files.write(ds.resolve("train.jsonl"), lines);
    }

    private Process serve(Path ds, Path shm, String name, String format, String mode) throws Exception {
        var args = new ArrayList<>(List.of("--data", ds.toString(), "--ranks", "" + RANKS, "--batch", "" + BATCH, "--max-pixels", "100352",
                "--socket", tmp.resolve(name + ".sock").toString(), "--shm-dir", shm.toString(), "--shm-budget", "256M", "--max-images", "2",
                "--steps", "" + STEPS, "--threads", "1", "--warm-up-ms", "0", "--mode", mode, "--pixel-format", format));
        if (mode.equals("zero-copy")) args.addAll(List.of("--flight", "127.0.0.1:0"));
        return ServeProcess.start(tmp.resolve(name + ".log"), "768m", args);
    }
}
