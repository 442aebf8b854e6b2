package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.report.RunData;
import dev.stoker.report.RunReport;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The trainers' timings (docs/protocol.md, NEXT) on the service's side: a real node, real Java trainer clients over its
 * socket with simulated steps; the ledger records each rank's steps, and the metrics file, the Prometheus endpoint,
 * {@code --report-dir} (read back by {@code RunData} and rendered by {@code RunReport}) show them.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TrainerReportsTest {
    static final int RANKS = 2, STEPS = 6;
    static final long STEP_MILLIS = 40;
    @TempDir Path tmp;

    private NodeConfig config(boolean zeroCopy) throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < 48; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"b.png\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, i, i));
        Files.writeString(ds.resolve("train.jsonl"), lines);
        var b = NodeConfig.builder().data(ds.resolve("train.jsonl").toString()).ranks(RANKS).batch(2).set(NodeConfig.MAX_PIXELS, 50176L)
                .socket(tmp.resolve("s.sock")).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(64L << 20)
                .set(NodeConfig.MAX_IMAGES, 1).threads(1).set(NodeConfig.METRICS_PORT, 0)
                .set(NodeConfig.METRICS_FILE, tmp.resolve("metrics.json")).set(NodeConfig.REPORT_DIR, tmp.resolve("run"));
        if (!zeroCopy) b.set(NodeConfig.MODE, dev.stoker.pipeline.feed.FeedMode.PREFETCH);
        return b.build();
    }

    /** What each rank's client measured itself: wait per step, and the bytes and samples of each batch. */
    record Measured(List<Long> waits, List<Long> bytes, List<Long> samples) {}

    private static Measured train(Path socket, int rank, boolean shared) throws Exception {
        var m = new Measured(new ArrayList<>(), new ArrayList<>(), new ArrayList<>());
        try (var client = TrainerClient.connect(socket, rank, RANKS, "test", shared ? TrainerClient.Options.SHARED_MEMORY : TrainerClient.Options.COPY)) {
            for (int s = 0; s < STEPS; s++) {
                try (var got = client.next()) {
                    m.waits().add(client.lastWaitNanos());
                    m.bytes().add(got.batch().totalBytes());
                    m.samples().add((long) got.batch().meta().batchSize());
                    Thread.sleep(STEP_MILLIS); // the simulated step
                }
            }
            client.next().close(); // the request after the last step carries its timing
        }
        return m;
    }

    @Test
    void theServiceRecordsEachRanksStepsAndWritesARunDirectoryTheReportRenders() throws Exception {
        var config = config(true);
        var measured = new Measured[RANKS];
        String scrape;
        try (var node = StokerNode.launch(config)) {
            var threads = new ArrayList<Thread>();
            var failures = new java.util.concurrent.ConcurrentLinkedQueue<Throwable>();
            for (int r = 0; r < RANKS; r++) {
                int rank = r;
                threads.add(Thread.ofPlatform().start(() -> {
                    try {
                        measured[rank] = train(node.socket(), rank, true);
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                }));
            }
            for (var t : threads) t.join();
            assertTrue(failures.isEmpty(), failures.toString());
            assertEquals(RANKS * STEPS, node.server().timingsReceived());

            var figures = node.ledger().timings().ranks();
            assertEquals(RANKS, figures.size());
            for (var f : figures) {
                assertEquals(STEPS, f.steps(), "rank " + f.rank());
                assertEquals(measured[f.rank()].waits().stream().mapToLong(Long::longValue).sum(), f.waitNanos(), "rank " + f.rank());
                assertTrue(f.stepNanos() >= STEPS * STEP_MILLIS * 1_000_000, "compute of " + f.stepNanos() + " ns");
            }
            assertTrue(node.ledger().verdict().toJson().toString().contains("trainer_wait_ratio"), "the verdict uses the reported wait");
            // the status line's wait: the recent steps of every rank, as reported
            long w = 0, st = 0;
            for (var f : figures) {
                w += f.waitNanos();
                st += f.stepNanos();
            }
            var status = StatusLine.Sample.of(node.ledger());
            assertEquals((double) w / (w + st), status.waitRatio().orElseThrow(), 1e-12, "all " + STEPS + " steps are recent");
            assertTrue(StatusLine.format(null, status).contains(String.format(java.util.Locale.ROOT, "| wait %.0f%%", 100.0 * w / (w + st))),
                    StatusLine.format(null, status));

            scrape = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(node.metricsUrl())).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            for (int r = 0; r < RANKS; r++) {
                var f = figures.get(r);
                assertEquals(STEPS, value(scrape, "stoker_trainer_steps_reported_total{rank=\"" + r + "\"}"), scrape);
                assertEquals(f.waitRatio(), value(scrape, "stoker_trainer_wait_ratio{rank=\"" + r + "\"}"), 1e-9, scrape);
                assertEquals(f.waitNanos() / 1e9, value(scrape, "stoker_trainer_wait_seconds_total{rank=\"" + r + "\"}"), 1e-6, scrape);
                assertEquals(f.stepNanos() / 1e9, value(scrape, "stoker_trainer_step_seconds_total{rank=\"" + r + "\"}"), 1e-6, scrape);
            }
        }

        // --metrics-file: per rank, the same figures
        JsonNode trainers = new ObjectMapper().readTree(tmp.resolve("metrics.json").toFile()).path("trainers");
        assertEquals(RANKS, trainers.path("ranks").size(), trainers.toString());
        for (JsonNode r : trainers.path("ranks")) {
            int rank = r.path("rank").asInt();
            long wait = measured[rank].waits().stream().mapToLong(Long::longValue).sum();
            assertEquals(STEPS, r.path("steps_reported").asLong());
            assertEquals(wait, r.path("wait_ns").asLong());
            assertEquals((double) wait / (wait + r.path("step_ns").asLong()), r.path("wait_ratio").asDouble(), 1e-12);
        }

        // --report-dir: the ladder's format, mode "job"
        Path run = tmp.resolve("run");
        assertTrue(Files.exists(run.resolve("job-pipeline.json")));
        var data = RunData.load(run);
        assertEquals(1, data.modes().size());
        var mode = data.modes().getFirst();
        assertEquals(ReportDir.MODE, mode.name());
        assertNotNull(mode.pipeline());
        assertTrue(mode.pipeline().path("verdict").path("kind").isTextual(), mode.pipeline().toString());
        assertEquals(RANKS, mode.ranks().size());
        for (var rank : mode.ranks()) {
            var mine = measured[rank.rank()];
            assertEquals(STEPS, rank.steps().size());
            assertTrue(rank.sharedMemory());
            assertTrue(rank.elapsedMillis() >= STEPS * STEP_MILLIS, "elapsed " + rank.elapsedMillis());
            for (int s = 0; s < STEPS; s++) {
                var step = rank.steps().get(s);
                assertEquals(mine.waits().get(s), step.waitNanos(), "rank " + rank.rank() + " step " + s);
                assertTrue(step.computeNanos() >= STEP_MILLIS * 1_000_000 && step.computeNanos() < 10_000_000_000L, "step " + step);
                assertEquals(mine.bytes().get(s), step.batchBytes(), "the bytes of the batch handed out for that step");
                assertEquals(mine.samples().get(s), step.samples());
            }
        }
        var summary = RunData.summarize(mode);
        assertTrue(summary.waitRatio() > 0 && summary.waitRatio() < 1, "wait ratio " + summary.waitRatio());
        String html = RunReport.render(data);
        assertTrue(html.contains("data-plot=\"timeline\"") && html.contains(">job<"), "the report shows the job");
    }

    @Test
    void copyDeliveryRecordsTheBytesCopiedAndTheRunDirectoryIsWrittenWhileTheJobRuns() throws Exception {
        var config = config(false);
        try (var node = StokerNode.launch(config)) {
            var measured = new Measured[1];
            Thread.ofPlatform().start(() -> {
                try (var client = TrainerClient.connect(node.socket(), 1, RANKS, "test")) {
                    var m = new Measured(new ArrayList<>(), new ArrayList<>(), new ArrayList<>());
                    for (int s = 0; s < 3; s++) {
                        var got = client.next();
                        m.waits().add(client.lastWaitNanos());
                        m.bytes().add(got.batch().totalBytes());
                        Thread.sleep(STEP_MILLIS);
                    }
                    client.next();
                    measured[0] = m;
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }).join();
            assertNotNull(measured[0]);
            node.reportDir().write(); // what the periodic write does every 5 s
            var rank = RunData.load(tmp.resolve("run")).modes().getFirst().ranks();
            assertEquals(1, rank.size(), "only the rank that asked has a file");
            assertEquals(1, rank.getFirst().rank());
            assertEquals(measured[0].bytes().stream().mapToLong(Long::longValue).sum(), rank.getFirst().bytesReceived());
            assertEquals(measured[0].waits(), rank.getFirst().steps().stream().map(RunData.Step::waitNanos).toList());
        }
    }

    private static double value(String body, String name) {
        var m = Pattern.compile("(?m)^" + Pattern.quote(name) + " (\\S+)$").matcher(body);
        assertTrue(m.find(), name + " in " + body);
        return Double.parseDouble(m.group(1));
    }
}
