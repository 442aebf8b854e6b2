package dev.stoker.bench.headspace;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.trainer.TrainerProcesses;
import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.testkit.SmallJpegDataset;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench headspace} end to end: a real feed, a Python trainer process whose compute is a known sleep, with the
 * Loader's headspace option. The service hands out only the steps' batches (the replayed ones were asked of nobody), and
 * the floor it records, the trainer's own, is at least the sleep.
 */
@Timeout(120)
class HeadspaceBenchTest {
    static final long STEP_MS = 30;

    @TempDir Path tmp;

    @Test
    @Tag("slow") // a trainer process
    void theReplayedStepsAskTheServiceNothingAndTheFloorHoldsTheTrainersSleep() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(TrainerProcesses.PYTHON)), TrainerProcesses.PYTHON + " is needed for the Python trainer");
        Path data = SmallJpegDataset.write(tmp.resolve("ds"), 40, 3);
        var config = NodeConfig.builder().data(data.toString()).threads(2).pixels(3136, 12544).build();
        Path work = tmp.resolve("work");
        var text = new StringWriter();
        int steps = 8, cache = 2, replay = 5;
        var json = HeadspaceBench.run(new HeadspaceBench.Settings(config, "zero-copy", STEP_MS, steps, cache, replay, "python", work),
                new PrintWriter(text));
        String out = text.toString();
        double floorMs = (double) json.get("compute_floor_ms");
        assertTrue(floorMs >= STEP_MS, out);
        assertEquals(5L, json.get("replayed_steps"), out);
        @SuppressWarnings("unchecked") var rank = (Map<String, Object>) ((List<?>) json.get("ranks")).getFirst();
        assertEquals(floorMs, rank.get("trainer_compute_floor_ms"), "the service records the trainer's own floor: " + out);
        double headroom = (double) json.get("data_headroom_ms"), mean = (double) json.get("mean_step_ms");
        assertEquals(Math.max(0, mean - floorMs), headroom, 0.002, out);

        var pipeline = new ObjectMapper().readTree(work.resolve("headspace-pipeline.json").toFile());
        var server = pipeline.path("server");
        assertEquals(steps, server.path("refs_sent").asLong() + server.path("batches_sent").asLong(),
                "one batch per step from the service, none for the " + replay + " replayed: " + server);
        var trainer = new ObjectMapper().readTree(work.resolve("headspace-rank0.json").toFile());
        assertEquals(steps, trainer.path("steps").size(), "the report's steps are the service's batches");
        assertEquals(replay, trainer.path("replayed_steps_ns").size());
        for (var step : trainer.path("replayed_steps_ns")) assertTrue(step.asLong() >= STEP_MS * 1_000_000, out);
        assertTrue(pipeline.path("verdict").path("data_headroom_ms").isNumber(), "the verdict's figures: " + pipeline.path("verdict"));
        assertTrue(pipeline.path("verdict").path("evidence").asText().contains("the data side can win at most"), out);
        assertTrue(Files.readString(work.resolve("report.html")).contains("Headspace"), "the report's verdict section");
        String last = out.strip().substring(out.strip().lastIndexOf('\n') + 1);
        assertEquals(new ObjectMapper().writeValueAsString(json), last, "the last line is the JSON");
    }

    @Test
    void aReplayThatCannotEndInsideTheRunIsRefused() {
        var config = NodeConfig.builder().data("x.jsonl").build();
        var e = assertThrows(ConfigException.class, () -> new HeadspaceBench.Settings(config, "zero-copy", 10, 4, 4, 10, "java", null));
        assertTrue(e.getMessage().startsWith("--steps (4) must be more than --cache-batches (4)"), e.getMessage());
        assertThrows(ConfigException.class, () -> new HeadspaceBench.Settings(config, "zero-copy", 10, 4, 1, 0, "java", null));
    }
}
