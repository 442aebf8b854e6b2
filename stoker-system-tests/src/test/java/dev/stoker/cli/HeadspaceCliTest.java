package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench headspace} end to end through the CLI with the Java trainer process ({@code stoker trainer --headspace N,M},
 * TrainerClient.headspace): the trainer's replayed steps ask the service nothing, and the floor, at least its sleep,
 * reaches the service and the last line's JSON.
 */
@Timeout(120)
@Tag("slow")
class HeadspaceCliTest {
    @TempDir Path tmp;

    @Test
    void theJavaTrainersFloorReachesTheServiceAndTheJsonLine() throws Exception {
        Path ds = LadderCliTest.smallDataset(tmp);
        var r = CliRunner.run("bench", "headspace", "--data", ds.resolve("train.jsonl").toString(), "--ranks", "1", "--batch", "2",
                "--step-ms", "30", "--steps", "6", "--cache-batches", "2", "--replay-steps", "4", "--max-pixels", "50176", "--threads", "2",
                "--work-dir", tmp.resolve("work").toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        JsonNode json = new ObjectMapper().readTree(r.lastStdoutLine());
        assertTrue(json.path("compute_floor_ms").asDouble() >= 30, r.out());
        assertEquals(4, json.path("replayed_steps").asLong(), r.out());
        assertEquals(json.path("compute_floor_ms").asDouble(), json.path("ranks").path(0).path("trainer_compute_floor_ms").asDouble(), r.out());
        JsonNode pipeline = new ObjectMapper().readTree(tmp.resolve("work/headspace-pipeline.json").toFile());
        assertEquals(6, pipeline.path("server").path("refs_sent").asLong(), "a batch per step, none for a replayed one: " + pipeline.path("server"));
        JsonNode trainer = new ObjectMapper().readTree(tmp.resolve("work/headspace-rank0.json").toFile());
        assertEquals(6, trainer.path("steps").size());
        assertEquals(4, trainer.path("replayed_steps_ns").size());
        assertTrue(r.out().contains("the data side can win at most"), r.out());
    }
}
