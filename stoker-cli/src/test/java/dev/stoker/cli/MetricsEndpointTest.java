package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code serve --metrics-port}: a Prometheus scrape over a real socket sees what the trainers received. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class MetricsEndpointTest {
    @TempDir Path tmp;

    @Test
    void aScrapeShowsDeliveredSamplesBuffersTheStoreAndTheVerdict() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < 12; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"b.png\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i));
        Files.writeString(ds.resolve("train.jsonl"), lines);
        var args = List.of("--data", ds.resolve("train.jsonl").toString(), "--ranks", "1", "--batch", "2", "--max-pixels", "50176",
                "--socket", tmp.resolve("s.sock").toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString(),
                "--shm-budget", "64M", "--threads", "1", "--metrics-port", "0");
        Path log = tmp.resolve("serve.log");
        Process p = ServeProcess.start(log, "512m", args);
        try {
            String text = ServeProcess.awaitListening(p, log);
            var m = Pattern.compile("metrics on (http://127\\.0\\.0\\.1:\\d+/metrics)").matcher(text);
            assertTrue(m.find(), text);
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                for (int s = 0; s < 3; s++) client.next().close();
            }
            var http = HttpClient.newHttpClient();
            var response = http.send(HttpRequest.newBuilder(URI.create(m.group(1))).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, response.statusCode());
            String body = response.body();
            var delivered = Pattern.compile("(?m)^stoker_samples_delivered_total(?:\\{[^}]*})? (\\S+)$").matcher(body);
            assertTrue(delivered.find(), body);
            assertTrue(Double.parseDouble(delivered.group(1)) >= 6, "3 batches of 2 delivered: " + delivered.group(0));
            assertTrue(body.contains("stoker_buffer_batches{rank=\"0\"}"), body);
            assertTrue(body.contains("stoker_store_bytes_in_use"), body);
            var kinds = Pattern.compile("(?m)^stoker_bottleneck\\{kind=\"(\\w+)\"} 1\\.0$").matcher(body);
            assertTrue(kinds.find(), "one current verdict: " + body);
        } finally {
            p.destroy();
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        }
        assertEquals(0, p.exitValue(), Files.readString(log));
    }
}
