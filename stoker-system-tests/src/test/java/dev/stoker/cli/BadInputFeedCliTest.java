package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The bad-input options of the feeding commands ({@code --on-error}, {@code --max-error-rate},
 * {@code --errors-file}) end to end: {@code serve} as its own process with a trainer on the socket,
 * and {@code bench ladder} with its trainer processes.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class BadInputFeedCliTest {
    static final ObjectMapper JSON = new ObjectMapper();
    /** The CLI's default --seed. */
    static final long SEED = 1234;

    @TempDir Path tmp;

    /** {@code n} one-image samples {@code s<i>}; those in {@code missing} name an image that is not there. */
    private Path dataset(int n, Set<Integer> missing) throws IOException {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < n; i++)
            lines.append(String.format("{\"id\":\"s%d\",\"image\":\"%s\",\"conversations\":[{\"from\":\"human\",\"value\":\"<image>\\nWhat is %d?\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, missing.contains(i) ? "missing_" + i + ".png" : "b.png", i, i));
        return Files.writeString(ds.resolve("train.jsonl"), lines);
    }

    /** Bad samples among the first {@code steps} global steps of the CLI's schedule. */
    private static List<Integer> badScheduled(int n, int ranks, int batch, int steps, Set<Integer> bad) {
        var schedule = new SampleSchedule(SEED, n, ranks, batch);
        var out = new ArrayList<Integer>();
        for (int s = 0; s < steps; s++)
            for (int r = 0; r < ranks; r++)
                for (int idx : schedule.batchFor(s / schedule.stepsPerEpoch(), s % schedule.stepsPerEpoch(), r))
                    if (bad.contains(idx)) out.add(idx);
        return out;
    }

    private Process serve(Path manifest, Path log, String... extra) throws IOException {
        var args = new ArrayList<>(List.of("--data", manifest.toString(), "--ranks", "1", "--batch", "2", "--max-pixels", "50176",
                "--threads", "1", "--warm-up-ms", "0", "--socket", tmp.resolve("s.sock").toString(),
                "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString(), "--shm-budget", "64M", "--max-images", "1"));
        args.addAll(List.of(extra));
        return ServeProcess.start(log, "512m", args);
    }

    private static List<JsonNode> lines(Path file) throws IOException {
        var out = new ArrayList<JsonNode>();
        for (String line : Files.readAllLines(file)) out.add(JSON.readTree(line));
        return out;
    }

    @Test
    void serveWithOnErrorFailStopsAtTheFirstBadSampleTellsTheTrainerAndExitsWith2() throws Exception {
        int bad = new SampleSchedule(SEED, 24, 1, 2).batchFor(0, 4, 0)[1];
        Path manifest = dataset(24, Set.of(bad));
        Path log = tmp.resolve("serve.log"), errors = tmp.resolve("errors.jsonl");
        Process p = serve(manifest, log, "--mode", "prefetch", "--on-error", "fail", "--prefetch-batches", "1",
                "--fetch-concurrency", "2", "--errors-file", errors.toString());
        try {
            ServeProcess.awaitListening(p, log);
            int[] received = {0};
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.COPY)) {
                var e = assertThrows(IOException.class, () -> {
                    for (int s = 0; s < 6; s++) {
                        client.next().close();
                        received[0]++;
                    }
                });
                String message = e.getMessage();
                assertTrue(message.contains("bad input, stopped at the first bad sample (error policy FAIL): s" + bad + " (index " + bad
                        + ", epoch 0 step 4 rank 0): fetch: file not found: ") && message.contains("missing_" + bad + ".png"),
                        message + " after " + received[0] + " batches; serve said: " + Files.readString(log));
            }
            // the feed fails when the bad batch is made, which with one batch prefetched is a step or two before it is due
            assertTrue(received[0] >= 1 && received[0] <= 4, "good batches before the error: " + received[0]);
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "serve stops by itself: " + Files.readString(log));
            String text = Files.readString(log);
            assertEquals(2, p.exitValue(), text);
            var last = text.strip().lines().reduce((a, b) -> b).orElseThrow();
            assertTrue(last.startsWith("stoker: bad input, stopped at the first bad sample (error policy FAIL): s" + bad + " "), text);
            assertFalse(Files.exists(tmp.resolve("s.sock")), "socket removed");
        } finally {
            p.destroyForcibly();
        }
        var written = lines(errors);
        assertEquals(1, written.size(), written.toString());
        assertEquals("s" + bad, written.getFirst().get("id").asText());
        assertEquals("fetch", written.getFirst().get("stage").asText());
    }

    @Test
    void serveSkipsBadSamplesIntoTheErrorsFileTheMetricsFileAndPrometheus() throws Exception {
        var bad = Set.of(1, 4, 7, 10, 11);
        Path manifest = dataset(12, bad);
        Path log = tmp.resolve("serve.log"), errors = tmp.resolve("run/errors.jsonl"), metrics = tmp.resolve("metrics.json");
        Process p = serve(manifest, log, "--errors-file", errors.toString(), "--metrics-port", "0", "--metrics-file", metrics.toString());
        var expected = badScheduled(12, 1, 2, 4, bad);
        assertFalse(expected.isEmpty(), "the first 4 steps hold bad samples");
        try {
            String text = ServeProcess.awaitListening(p, log);
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                int samples = 0;
                for (int s = 0; s < 4; s++) {
                    try (var b = client.next()) {
                        samples += b.batch().meta().batchSize();
                        assertEquals(2, b.batch().meta().scheduled());
                    }
                }
                assertEquals(8 - expected.size(), samples, "the bad samples are left out of their batches");
            }
            var m = Pattern.compile("metrics on (http://127\\.0\\.0\\.1:\\d+/metrics)").matcher(text);
            assertTrue(m.find(), text);
            String body = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(m.group(1))).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            assertTrue(body.contains("stoker_samples_skipped_by_stage_total{stage=\"fetch\"} " + expected.size() + ".0"), body);
            assertTrue(body.contains("stoker_samples_skipped_by_stage_total{stage=\"decode\"} 0.0"), body);
            assertTrue(body.contains("stoker_samples_skipped_total " + expected.size() + ".0"), body);
        } finally {
            p.destroy(); // SIGTERM
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        }
        assertEquals(0, p.exitValue(), Files.readString(log));
        var written = lines(errors);
        assertEquals(expected.stream().map(i -> "s" + i).sorted().toList(), written.stream().map(l -> l.get("id").asText()).sorted().toList());
        for (var l : written) {
            assertEquals("fetch", l.get("stage").asText(), l.toString());
            assertTrue(l.get("cause").asText().contains("file not found"), l.toString());
            assertEquals(0, l.get("rank").asInt());
        }
        JsonNode pipeline = JSON.readTree(metrics.toFile()).get("pipeline");
        assertEquals(expected.size(), pipeline.get("skippedSamples").asInt(), pipeline.toString());
        assertEquals(expected.size(), pipeline.get("skippedByStage").get("fetch").asInt(), pipeline.toString());
    }

    @Test
    void benchLadderWritesEachModesErrorsFileIntoTheWorkDir() throws Exception {
        var bad = Set.of(0, 5, 9, 14, 22);
        Path manifest = dataset(24, bad);
        Path work = tmp.resolve("work");
        var r = CliRunner.run("bench", "ladder", "--data", manifest.toString(), "--ranks", "2", "--batch", "2", "--step-ms", "10",
                "--steps", "4", "--modes", "prefetch,zero-copy", "--max-pixels", "50176", "--threads", "2", "--warm-up-ms", "0",
                "--work-dir", work.toString(), "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(0, r.status(), r.err() + r.out());
        var expected = badScheduled(24, 2, 2, 4, bad).stream().map(i -> "s" + i).sorted().toList();
        assertFalse(expected.isEmpty());
        for (String mode : List.of("prefetch", "zero-copy")) {
            var written = lines(work.resolve(mode + "-errors.jsonl"));
            assertEquals(expected, written.stream().map(l -> l.get("id").asText()).sorted().toList(), mode);
            JsonNode pipeline = JSON.readTree(work.resolve(mode + "-pipeline.json").toFile()).get("pipeline");
            assertEquals(expected.size(), pipeline.get("skippedByStage").get("fetch").asInt(), mode + ": " + pipeline);
        }
    }

    @Test
    void benchLadderWithOnErrorFailOrOverTheErrorRateEndsWithTheCauseAndStatus2() throws Exception {
        var bad = Set.of(0, 4, 8, 12, 16, 20); // a quarter of the samples
        Path manifest = dataset(24, bad);
        var fail = CliRunner.run("bench", "ladder", "--data", manifest.toString(), "--ranks", "2", "--batch", "2", "--step-ms", "10",
                "--steps", "6", "--modes", "prefetch", "--max-pixels", "50176", "--threads", "2", "--warm-up-ms", "0", "--on-error", "fail",
                "--work-dir", tmp.resolve("work-fail").toString());
        assertEquals(2, fail.status(), fail.err() + fail.out());
        String err = fail.err().strip();
        assertEquals(1, err.lines().count(), "one line on stderr: " + err);
        var named = Pattern.compile("stoker: bad input, stopped at the first bad sample \\(error policy FAIL\\): (s\\d+) \\(index \\d+, epoch 0 step \\d+ "
                + "rank \\d\\): fetch: file not found: .*missing_\\d+\\.png( \\(and 1 more in the same batch\\))?").matcher(err);
        assertTrue(named.matches(), err);
        var written = lines(tmp.resolve("work-fail/prefetch-errors.jsonl"));
        assertEquals(named.group(2) == null ? 1 : 2, written.size(), written.toString());
        assertEquals(named.group(1), written.getFirst().get("id").asText());

        // 25% bad against a 10% limit: 26 steps × 2 ranks × 2 samples pass the 100 samples the rate waits for
        var rate = CliRunner.run("bench", "ladder", "--data", manifest.toString(), "--ranks", "2", "--batch", "2", "--step-ms", "5",
                "--steps", "26", "--modes", "zero-copy", "--max-pixels", "50176", "--threads", "2", "--warm-up-ms", "0",
                "--max-error-rate", "0.1", "--work-dir", tmp.resolve("work-rate").toString(),
                "--shm-dir", Files.createDirectories(tmp.resolve("shm")).toString());
        assertEquals(2, rate.status(), rate.err() + rate.out());
        assertTrue(rate.err().strip().matches("stoker: bad input: \\d+ of 1\\d\\d scheduled samples failed \\(2\\d\\.\\d\\d%\\), over the limit of 10\\.00% "
                + "\\(max error rate 0\\.1\\); most common cause: fetch: file not found, \\d+ of \\d+ \\(e\\.g\\. s\\d+\\); last: .*fetch: file not found: .*"),
                rate.err());
    }

    /**
     * Audit #2 through the command: {@code serve} on a manifest whose images are all missing, with the default policy, used to
     * hand out empty batches forever; it stops within seconds of listening, the trainer's request gets the error naming the
     * source and the cause, and it exits with status 2.
     */
    @Test
    void serveOnAManifestWhoseImagesAreAllMissingStopsWithinSecondsAndExitsWith2() throws Exception {
        var all = new java.util.HashSet<Integer>();
        for (int i = 0; i < 100; i++) all.add(i);
        Path manifest = dataset(100, all);
        Path log = tmp.resolve("serve.log");
        Process p = serve(manifest, log);
        try {
            ServeProcess.awaitListening(p, log);
            long t0 = System.nanoTime();
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                var e = assertThrows(IOException.class, client::next, "an error, not an empty batch");
                assertTrue(e.getMessage().contains("bad input: the first 32 samples of train.jsonl all failed, none delivered")
                        && e.getMessage().contains("most common cause: fetch: file not found, 32 of 32 (e.g. s"), e.getMessage());
            } catch (IOException refused) {
                // the service stopped before the trainer's request: it said why on its way out
            }
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "serve stops by itself: " + Files.readString(log));
            assertTrue((System.nanoTime() - t0) / 1e9 < 30, "within seconds");
            String text = Files.readString(log);
            assertEquals(2, p.exitValue(), text);
            var last = text.strip().lines().reduce((a, b) -> b).orElseThrow();
            assertTrue(last.matches("stoker: bad input: the first 32 samples of train\\.jsonl all failed, none delivered .*; most common cause: "
                    + "fetch: file not found, 32 of 32 \\(e\\.g\\. s\\d+ .*missing_\\d+\\.png\\)"), text);
        } finally {
            p.destroyForcibly();
        }
    }

    @Test
    void anErrorRateOutsideZeroToOneOrAnUnknownPolicyIsInvalidInput() {
        var r = CliRunner.run("bench", "ladder", "--data", tmp.resolve("none.jsonl").toString(), "--max-error-rate", "1.5");
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("--max-error-rate: must be between 0 and 1, got 1.5"), r.err());
        var p = CliRunner.run("serve", "--data", tmp.resolve("none.jsonl").toString(), "--on-error", "ignore");
        assertEquals(2, p.status(), p.err());
        assertTrue(p.err().contains("--on-error") && p.err().contains("ignore"), p.err());
    }
}
