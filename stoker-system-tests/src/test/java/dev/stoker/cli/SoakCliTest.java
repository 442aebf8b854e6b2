package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.soak.Series;
import dev.stoker.bench.soak.ServiceSample;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench soak} end to end, 15 s instead of 30 minutes: a real serve process, two trainer
 * processes, a data set with broken samples; the CSV, the JSON and the summary agree with what the
 * trainers received, and the service leaves nothing in shared memory.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class SoakCliTest {
    static final long BUDGET = 64L << 20;

    @TempDir Path tmp;

    /** 12 samples: a missing image, a JPEG cut short (fails when decoded), a line that is not JSON; the rest fine. */
    private Path dataset() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        byte[] photo = Files.readAllBytes(Vectors.get().inputImage("p01_photo_grace_hopper"));
        Files.write(ds.resolve("a.jpg"), photo);
        Files.write(ds.resolve("cut.jpg"), java.util.Arrays.copyOf(photo, photo.length * 6 / 10));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new ArrayList<String>();
        for (int i = 0; i < 11; i++) {
            String image = switch (i) {
                case 3 -> "missing.jpg";
                case 7 -> "cut.jpg";
                default -> i % 2 == 0 ? "a.jpg" : "b.png";
            };
            lines.add(String.format("{\"id\":\"s%d\",\"image\":\"%s\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}", i, image, i, i));
        }
        lines.add(5, "{\"id\": \"broken\", \"conversations\": [");
        Files.write(ds.resolve("train.jsonl"), lines);
        return ds.resolve("train.jsonl");
    }

    @Test
    @Tag("slow")
    void aShortSoakRecordsMemoryAndCountsAndStopsCleanly() throws Exception {
        Path shm = Files.createDirectories(tmp.resolve("shm"));
        Path work = tmp.resolve("work");
        Path data = dataset();
        var r = CliRunner.run("bench", "soak", "--data", data.toString(), "--seconds", "7", "--sample-every-s", "0.5",
                "--warm-up-s", "2", "--ranks", "2", "--batch", "2", "--step-ms", "20", "--work-dir", work.toString(),
                "--shm-dir", shm.toString(),
                // serve's options: passed on in serve.yaml
                "--max-pixels", "50176", "--max-images", "1", "--threads", "1", "--shm-budget", "64M", "--warm-up-ms", "100",
                // a quarter of the samples is broken by design, over the default 10% limit: the test is the soak's accounting
                "--max-error-rate", "1");
        assertEquals(0, r.status(), r.err() + r.out());
        JsonNode s = new ObjectMapper().readTree(r.lastStdoutLine());

        int samples = s.get("samples").asInt();
        assertTrue(samples >= 10, "a sample every half second for 7 s: " + s);
        for (String series : List.of("rss_bytes", "rss_anon_bytes", "shm_bytes", "store_in_use_bytes")) {
            JsonNode x = s.get(series);
            for (String f : List.of("start", "median", "max", "end")) assertTrue(x.get(f).asLong() >= 0, series + "." + f + ": " + s);
            assertTrue(x.get("max").asLong() >= x.get("median").asLong(), series);
            assertTrue(x.has("slope_per_10min") && x.has("flat"), series);
        }
        assertTrue(s.get("rss_bytes").get("max").asLong() > 50L << 20, "a JVM's RSS: " + s.get("rss_bytes"));
        assertTrue(s.get("shm_bytes").get("max").asLong() > 0, "the arena held segments: " + s.get("shm_bytes"));
        assertTrue(s.get("shm_bytes").get("max").asLong() <= BUDGET, "the arena stays within the budget");
        assertTrue(s.get("store_in_use_bytes").get("max").asLong() <= BUDGET);

        long delivered = s.get("delivered_samples").asLong(), skipped = s.get("skipped_samples").asLong();
        assertTrue(delivered > 0, s.toString());
        assertTrue(skipped > 0, "the broken samples are skipped: " + s);
        assertEquals(2 * s.get("delivered_batches").asLong(), delivered + skipped, "every batch: delivered + skipped = scheduled");
        assertEquals(delivered, s.get("trainer_samples").asLong(), "the service counts what the trainers received");
        assertEquals(List.of(0, 0), List.of(s.get("trainer_exits").get(0).asInt(), s.get("trainer_exits").get(1).asInt()));
        assertTrue(s.get("trainer_steps").get(0).asLong() > 0 && s.get("trainer_steps").get(1).asLong() > 0, s.toString());
        assertEquals(0, s.get("serve_exit").asInt());
        assertEquals(0, s.get("leftovers").size(), s.toString());
        assertEquals(0, s.get("server").get("leases_held").asLong(), "the trainers released every lease: " + s.get("server"));
        assertTrue(s.get("store").get("segmentsCreated").asLong() > 0, s.get("store").toString());
        try (var left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "no arena left in the shm dir");
        }

        List<String> csv = Files.readAllLines(work.resolve("soak.csv"));
        assertEquals(String.join(",", ServiceSample.COLUMNS), csv.getFirst());
        assertEquals(samples, csv.size() - 1);
        double last = -1;
        for (String row : csv.subList(1, csv.size())) {
            String[] cells = row.split(",");
            assertEquals(ServiceSample.COLUMNS.size(), cells.length, row);
            double t = Double.parseDouble(cells[0]);
            assertTrue(t > last, "time goes forward: " + row);
            last = t;
            assertTrue(Long.parseLong(cells[1]) > 0, "RSS read: " + row);
        }
        JsonNode json = new ObjectMapper().readTree(work.resolve("soak.json").toFile());
        assertEquals(samples, json.get("rows").size());
        assertEquals(delivered, json.get("summary").get("delivered_samples").asLong());
        assertEquals(List.of("--max-pixels", "50176", "--max-images", "1", "--threads", "1", "--warm-up-ms", "100", "--max-error-rate",
                        "1.0", "--shm-budget", Long.toString(BUDGET)),
                new ObjectMapper().convertValue(json.get("config").get("serve_options"), List.class));
        String serveYaml = Files.readString(work.resolve("serve.yaml"));
        for (String line : List.of("max-pixels: 50176", "ranks: 2", "shm-budget: " + BUDGET, "shm-dir: " + shm, "data: " + data))
            assertTrue(serveYaml.lines().anyMatch(line::equals), line + " in serve.yaml:\n" + serveYaml);
        assertTrue(Files.readString(work.resolve("serve.log")).contains("stoker serve: stopping"), "serve stopped on SIGTERM");
    }

    @Test
    void flatMeansNoGrowthAfterTheWarmUp() {
        var flat = new ArrayList<ServiceSample>();
        var growing = new ArrayList<ServiceSample>();
        for (int t = 0; t <= 1800; t += 10) {
            long warm = t < 300 ? t * (1L << 20) : 300L << 20; // grows 300 MiB in the warm-up, then stays
            flat.add(sample(t, (1L << 30) + warm + (t % 20 == 0 ? 1 << 20 : 0))); // ±1 MiB of noise
            growing.add(sample(t, (1L << 30) + warm + (t >= 300 ? (t - 300) * (40L << 10) : 0))); // then 40 KiB/s: 24 MiB per 10 min
        }
        var f = Series.of(flat, 300, ServiceSample::rss);
        assertTrue(f.flat(), f.toString());
        assertTrue(Math.abs(f.slopePer10Min()) < 1 << 20, f.toString());
        assertEquals((1L << 30) + (300L << 20) + (1 << 20), f.max());
        var g = Series.of(growing, 300, ServiceSample::rss);
        assertFalse(g.flat(), g.toString());
        assertEquals(600 * 40.0 * 1024, g.slopePer10Min(), 1.0);
        // with the warm-up included, the flat series would look like growth
        assertFalse(Series.of(flat, 0, ServiceSample::rss).flat());
    }

    @Test
    void optionsTheSoakSetsItselfAreRefused() {
        var r = CliRunner.run("bench", "soak", "--data", tmp.resolve("x.jsonl").toString(), "--seconds", "1", "--socket", "/tmp/x.sock");
        assertEquals(Main.EXIT_INVALID_INPUT, r.status(), r.err());
        assertTrue(r.err().contains("--socket is set by bench soak"), r.err());
    }

    private static ServiceSample sample(double t, long rss) {
        return new ServiceSample(t, rss, rss / 2, rss / 2, 0, 0, 0, 0, 0, 0, 0);
    }
}
