package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code bench ladder} end to end: real trainer processes, the local socket, every mode. */
@Timeout(300)
class LadderCliTest {
    @TempDir Path tmp;

    private Path dataset() throws Exception { return smallDataset(tmp); }

    /** 24 one-image samples over two conformance images (a JPEG photo, a PNG) in {@code dir}/ds; returns that folder. */
    static Path smallDataset(Path dir) throws Exception {
        Path ds = Files.createDirectories(dir.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), ds.resolve("a.jpg"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < 24; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"%s\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i % 2 == 0 ? "a.jpg" : "b.png", i, i));
        Files.writeString(ds.resolve("train.jsonl"), lines);
        return ds;
    }

    @Test
    @Tag("slow")
    void everyModeFeedsEveryRankAndReportsTheContractJson() throws Exception {
        Path ds = dataset();
        var r = CliRunner.run("bench", "ladder", "--data", ds.resolve("train.jsonl").toString(), "--ranks", "2", "--batch", "2",
                "--step-ms", "20", "--steps", "4", "--fetch-latency-ms", "5", "--max-pixels", "50176", "--threads", "2",
                "--work-dir", tmp.resolve("work").toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        JsonNode modes = new ObjectMapper().readTree(r.lastStdoutLine()).get("modes");
        for (String mode : new String[] {"serial", "concurrent", "prefetch", "zero-copy"}) {
            JsonNode m = modes.get(mode);
            assertTrue(m != null, mode + " missing: " + r.out());
            double wait = m.get("wait_ratio").asDouble();
            assertTrue(wait > 0 && wait < 1, mode + " wait ratio " + wait);
            assertTrue(m.get("samples_per_s").asDouble() > 0, mode);
            assertTrue(m.get("ttfb_ms").asDouble() > 0, mode);
            assertTrue(m.has("steady_wait_ratio"), mode);
            // 2 ranks × 4 steps × 2 samples crossed the process boundary.
            JsonNode rep0 = new ObjectMapper().readTree(tmp.resolve("work/" + mode + "-rank0.json").toFile());
            assertEquals(4, rep0.get("steps").size(), mode);
            if (mode.equals("zero-copy")) {
                assertEquals(0, rep0.get("bytes_received").asLong(), "zero-copy: no batch byte crosses the socket");
                assertEquals(4, rep0.get("refs_received").asLong());
                JsonNode pipeline = new ObjectMapper().readTree(tmp.resolve("work/zero-copy-pipeline.json").toFile());
                assertEquals(0, pipeline.get("pipeline").get("copiedBytes").asLong(), "no copy after the transform");
                assertEquals(0, pipeline.get("server").get("leases_held").asLong(), "every lease released: " + pipeline);
                assertEquals(8, pipeline.get("server").get("refs_sent").asLong());
                // the store agrees; the service keeps each rank's last batch (its own lease) until a next request confirms it
                assertEquals(2, pipeline.get("kept_for_reconnect").asLong(), "one per rank: " + pipeline);
                assertEquals(2, pipeline.get("store").get("leases").asLong(), "the store agrees: " + pipeline.get("store"));
                // the run data of docs/run-data.md
                for (String stage : List.of("fetch", "encode", "decode", "transform", "tokenize", "pixel_write", "assemble", "deliver"))
                    assertTrue(pipeline.get("stages").get(stage).get("p99_ms").asDouble() >= 0, stage + ": " + pipeline.get("stages"));
                assertEquals(8, pipeline.get("stages").get("deliver").get("count").asLong());
                assertEquals("t_ms", pipeline.get("timeline").get("columns").get(0).asText());
                assertEquals(11, pipeline.get("timeline").get("columns").size());
                assertTrue(pipeline.get("verdict").get("kind").asText().matches("IO_BOUND|CPU_BOUND|TRANSPORT_BOUND|TRAINER_BOUND|BALANCED"),
                        "verdict: " + pipeline.get("verdict"));
            } else {
                assertTrue(rep0.get("bytes_received").asLong() > 4 * 2 * 1176 * 4, mode + " bytes");
            }
        }
        try (var left = Files.list(tmp.resolve("shm"))) {
            assertEquals(List.of(), left.toList(), "the store's arena is removed when the run ends");
        }
        assertTrue(Files.list(tmp.resolve("work")).noneMatch(p -> p.toString().endsWith(".sock")), "sockets removed");
    }

    /** {@code --trainer python}: the same ladder with the Python client's bench trainer as each rank. */
    @Test
    @Tag("slow")
    void pythonTrainersGetEveryStepByCopyAndByReference() throws Exception {
        Path python = Path.of(TrainerProcesses.PYTHON);
        assumeTrue(Files.isExecutable(python), python + " is missing");
        assumeTrue(new ProcessBuilder(python.toString(), "-c", "import numpy").redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor() == 0, python + " has no numpy");
        Path ds = dataset();
        var r = CliRunner.run("bench", "ladder", "--data", ds.resolve("train.jsonl").toString(), "--ranks", "2", "--batch", "2",
                "--step-ms", "20", "--steps", "4", "--modes", "prefetch,zero-copy", "--trainer", "python", "--max-pixels", "50176",
                "--threads", "2", "--work-dir", tmp.resolve("work").toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        assertTrue(r.out().contains("python trainers"), r.out());
        JsonNode modes = new ObjectMapper().readTree(r.lastStdoutLine()).get("modes");
        assertEquals(2, modes.size(), modes.toString());
        for (String mode : new String[] {"prefetch", "zero-copy"}) {
            JsonNode m = modes.get(mode);
            assertTrue(m != null, mode + " missing: " + r.out());
            double wait = m.get("wait_ratio").asDouble();
            assertTrue(wait > 0 && wait < 1, mode + " wait ratio " + wait);
            assertTrue(m.get("samples_per_s").asDouble() > 0, mode);
            for (int rank = 0; rank < 2; rank++) {
                JsonNode rep = new ObjectMapper().readTree(tmp.resolve("work/" + mode + "-rank" + rank + ".json").toFile());
                String what = mode + " rank " + rank + ": " + rep;
                assertEquals(rank, rep.get("rank").asInt(), what);
                assertEquals(2, rep.get("world").asInt(), what);
                assertTrue(rep.get("connect_wait_ms").asDouble() >= 0, what);
                assertTrue(rep.get("elapsed_ms").asDouble() > 0, what);
                JsonNode steps = rep.get("steps");
                assertEquals(4, steps.size(), what);
                for (JsonNode st : steps) {
                    assertEquals(6, st.size(), what);
                    assertEquals(0, st.get(5).asLong(), what + ": float32 batches, nothing to convert");
                    assertTrue(st.get(0).asLong() > 0, what + ": wait");
                    assertTrue(st.get(1).asLong() >= 20_000_000L, what + ": compute is the 20 ms sleep");
                    assertTrue(st.get(2).asLong() > 2 * 1176 * 4, what + ": batch bytes");
                    assertEquals(2, st.get(3).asInt(), what + ": samples");
                    assertTrue(st.get(4).asLong() >= 0, what + ": transfer");
                }
                if (mode.equals("zero-copy")) {
                    assertTrue(rep.get("shared_memory").asBoolean(), what);
                    assertEquals(0, rep.get("bytes_received").asLong(), "zero-copy: no batch byte crosses the socket: " + what);
                    assertEquals(4, rep.get("refs_received").asLong(), what);
                } else {
                    assertFalse(rep.get("shared_memory").asBoolean(), what);
                    assertEquals(0, rep.get("refs_received").asLong(), what);
                    long sum = 0;
                    for (JsonNode st : steps) sum += st.get(2).asLong();
                    assertEquals(sum, rep.get("bytes_received").asLong(), "prefetch: every batch byte came through the socket: " + what);
                }
            }
        }
        JsonNode pipeline = new ObjectMapper().readTree(tmp.resolve("work/zero-copy-pipeline.json").toFile());
        assertEquals(0, pipeline.get("pipeline").get("copiedBytes").asLong(), "no copy after the transform");
        assertEquals(0, pipeline.get("server").get("leases_held").asLong(), "the Python trainers released every lease: " + pipeline);
        assertEquals(8, pipeline.get("server").get("refs_sent").asLong());
        try (var left = Files.list(tmp.resolve("shm"))) {
            assertEquals(List.of(), left.toList(), "the store's arena is removed when the run ends");
        }
    }

    /** {@code --pixel-format uint8}: the batches are an eighth of the pixel bytes and each trainer converts them inside its wait. */
    @Test
    @Tag("slow")
    void compactBatchesAreConvertedByTheTrainersInsideTheirWait() throws Exception {
        Path python = Path.of(TrainerProcesses.PYTHON);
        assumeTrue(Files.isExecutable(python), python + " is missing");
        assumeTrue(new ProcessBuilder(python.toString(), "-c", "import numpy, torch").redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor() == 0, python + " has no numpy or torch");
        Path ds = dataset();
        var r = CliRunner.run("bench", "ladder", "--data", ds.resolve("train.jsonl").toString(), "--ranks", "1", "--batch", "2",
                "--step-ms", "20", "--steps", "3", "--modes", "prefetch,zero-copy", "--trainer", "python", "--max-pixels", "50176",
                "--pixel-format", "uint8", "--threads", "2", "--work-dir", tmp.resolve("work").toString(),
                "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        assertTrue(r.out().contains("pixels uint8 (converted by the trainers)"), r.out());
        for (String mode : new String[] {"prefetch", "zero-copy"}) {
            JsonNode rep = new ObjectMapper().readTree(tmp.resolve("work/" + mode + "-rank0.json").toFile());
            for (JsonNode st : rep.get("steps")) {
                assertTrue(st.get(5).asLong() > 0, mode + ": the trainer converted the batch: " + rep);
                assertTrue(st.get(0).asLong() >= st.get(5).asLong(), mode + ": the conversion is part of the wait: " + rep);
                assertTrue(st.get(2).asLong() < 4 * 50176 * 3 + 64 * 1024, mode + ": u8 pixels (at most 4 images at the cap), not float32: " + rep);
            }
        }
    }

    /** {@code bench wire}: both formats on every path, the uint8 batches smaller and converted by the Python trainers. */
    @Test
    @Tag("slow")
    void wireBenchComparesBothFormatsOnEveryPath() throws Exception {
        Path python = Path.of(TrainerProcesses.PYTHON);
        assumeTrue(Files.isExecutable(python), python + " is missing");
        assumeTrue(new ProcessBuilder(python.toString(), "-c", "import numpy, torch").redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor() == 0, python + " has no numpy or torch");
        Path ds = dataset();
        var r = CliRunner.run("bench", "wire", "--data", ds.resolve("train.jsonl").toString(), "--batch", "2", "--batches", "2",
                "--steps", "6", "--rounds", "1", "--max-pixels", "50176", "--threads", "2", "--work-dir", tmp.resolve("wire").toString(),
                "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        assertTrue(r.out().contains("decodes to the float32 pixel_values bit for bit: yes"), r.out());
        JsonNode json = new ObjectMapper().readTree(r.lastStdoutLine());
        double f32 = json.get("bytes_per_batch").get("float32").asDouble(), u8 = json.get("bytes_per_batch").get("uint8").asDouble();
        assertTrue(u8 * 5 < f32, json.toString());
        for (String path : new String[] {"socket", "shm", "flight"}) {
            JsonNode p = json.get("wire").get(path);
            assertTrue(p.get("float32").get("in_hand_ms").asDouble() > 0, path + ": " + p);
            assertEquals(0, p.get("float32").get("convert_ms").asDouble(), path + ": " + p);
            assertTrue(p.get("uint8").get("convert_ms").asDouble() > 0, path + ": the uint8 batches were converted: " + p);
            assertTrue(p.get("uint8").get("mb_per_batch").asDouble() * 5 < p.get("float32").get("mb_per_batch").asDouble(), path + ": " + p);
        }
        try (var left = Files.list(tmp.resolve("shm"))) {
            assertEquals(List.of(), left.toList(), "the store's arena is removed when the bench ends");
        }
    }

    @Test
    void anUnknownTrainerIsInvalidInput() throws Exception {
        var r = CliRunner.run("bench", "ladder", "--data", tmp.resolve("none.jsonl").toString(), "--trainer", "ruby");
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("--trainer must be java or python"), r.err());
    }
}
