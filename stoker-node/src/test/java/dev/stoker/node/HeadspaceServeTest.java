package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Headspace on a real node: a Java trainer whose compute is a known sleep replays copies of its first batches; the node
 * hands out one batch per step on the service's batches and none for a replayed one, records the trainer's floor (at
 * least the sleep) and shows it in the ledger's figures, the verdict, the metrics file and the Prometheus endpoint.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class HeadspaceServeTest {
    static final int STEPS = 7, KEPT = 2, REPLAYED = 4;
    static final long STEP_MILLIS = 20;
    @TempDir Path tmp;

    @Test
    void theNodeRecordsTheFloorAndHandsOutNoBatchForAReplayedStep() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < 24; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"b.png\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i));
        Files.writeString(ds.resolve("train.jsonl"), lines);
        var config = NodeConfig.builder().data(ds.resolve("train.jsonl").toString()).ranks(1).batch(2).set(NodeConfig.MAX_PIXELS, 50176L)
                .socket(tmp.resolve("s.sock")).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(64L << 20)
                .set(NodeConfig.MAX_IMAGES, 1).threads(1).set(NodeConfig.METRICS_PORT, 0)
                .set(NodeConfig.METRICS_FILE, tmp.resolve("metrics.json")).build();
        long floor;
        String scrape;
        try (var node = StokerNode.launch(config)) {
            try (var client = TrainerClient.connect(node.socket(), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY).headspace(KEPT, REPLAYED)) {
                int fromService = 0;
                while (fromService < STEPS) {
                    int before = client.replayed();
                    try (var got = client.next()) {
                        if (client.replayed() == before) fromService++;
                        Thread.sleep(STEP_MILLIS); // the trainer's compute: a known sleep
                    }
                }
                client.next().close(); // the request after the last step carries its timing
                floor = client.computeFloorNanos();
                assertEquals(REPLAYED, client.replayed());
                // the server counts a REF once written: the client may hold it a moment before the count moves
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (node.server().refsSent() + node.server().batchesSent() < STEPS + 1 && System.nanoTime() < until) Thread.sleep(5);
                assertEquals(STEPS + 1, node.server().refsSent() + node.server().batchesSent(),
                        "a batch per request: the " + STEPS + " steps and the one after, none for the " + REPLAYED + " replayed");
            }
            assertTrue(floor >= STEP_MILLIS * 1_000_000, "the floor holds the sleep: " + floor);
            var h = node.ledger().timings().headspace();
            assertEquals(floor, h.floorNanos(), "the trainer's own floor");
            assertEquals(REPLAYED, h.replayedSteps());
            assertEquals(STEPS - 3, h.steps(), "the " + STEPS + " steps reported, the first 3 left out");
            assertEquals(h.floorNanos() / 1e6, node.ledger().verdict().figures().get("compute_floor_ms"), 0.001);
            assertTrue(node.ledger().verdict().evidence().contains("the data side can win at most"), node.ledger().verdict().text());
            scrape = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(node.metricsUrl())).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            assertEquals(floor / 1e9, value(scrape, "stoker_trainer_compute_floor_seconds{rank=\"0\"}"), 1e-9, scrape);
            assertEquals(h.headroomNanos() / 1e9, value(scrape, "stoker_trainer_data_headroom_seconds{rank=\"0\"}"), 1e-6, scrape);
        }
        var trainers = new ObjectMapper().readTree(tmp.resolve("metrics.json").toFile()).path("trainers");
        assertEquals(floor, trainers.path("headspace").path("compute_floor_ns").asLong(), trainers.toString());
        assertEquals(floor, trainers.path("ranks").path(0).path("headspace").path("compute_floor_ns").asLong(), trainers.toString());
        assertEquals(STEPS, trainers.path("ranks").path(0).path("steps_reported").asLong(), "no replayed step among the steps");
    }

    private static double value(String body, String name) {
        var m = Pattern.compile("(?m)^" + Pattern.quote(name) + " (\\S+)$").matcher(body);
        assertTrue(m.find(), name + " in " + body);
        return Double.parseDouble(m.group(1));
    }
}
