package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.List;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code --metrics-port}: a Prometheus scrape over a real socket sees what the trainers received, of a node embedded here. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PrometheusEndpointTest {
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
        var config = NodeConfig.builder().data(ds.resolve("train.jsonl").toString()).ranks(1).batch(2).set(NodeConfig.MAX_PIXELS, 50176L)
                .socket(tmp.resolve("s.sock")).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(64L << 20).set(NodeConfig.MAX_IMAGES, 1).threads(1)
                .set(NodeConfig.METRICS_PORT, 0).build();
        try (var node = StokerNode.launch(config)) {
            assertTrue(node.metricsUrl().matches("http://127\\.0\\.0\\.1:\\d+/metrics"), node.metricsUrl());
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                for (int s = 0; s < 3; s++) client.next().close();
            }
            var http = HttpClient.newHttpClient();
            var response = http.send(HttpRequest.newBuilder(URI.create(node.metricsUrl())).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, response.statusCode());
            String body = response.body();
            var delivered = Pattern.compile("(?m)^stoker_samples_delivered_total(?:\\{[^}]*})? (\\S+)$").matcher(body);
            assertTrue(delivered.find(), body);
            assertTrue(Double.parseDouble(delivered.group(1)) >= 6, "3 batches of 2 delivered: " + delivered.group(0));
            assertTrue(body.contains("stoker_buffer_batches{rank=\"0\"}"), body);
            assertTrue(body.contains("stoker_store_bytes_in_use"), body);
            var kinds = Pattern.compile("(?m)^stoker_bottleneck\\{kind=\"(\\w+)\"} 1\\.0$").matcher(body);
            assertTrue(kinds.find(), "one current verdict: " + body);
            assertFalse(body.contains("stoker_pack_"), "an unpacked job has no pack series: " + body);
            // autotune is on by default: each knob's value and decision counts have series (values depend on the run's pace)
            for (String knob : List.of("threads", "fetch-concurrency", "prefetch-batches")) {
                assertTrue(Pattern.compile("(?m)^stoker_autotune_knob\\{knob=\"" + knob + "\"} \\d+\\.0$").matcher(body).find(), body);
                assertTrue(body.contains("stoker_autotune_decisions_total{knob=\"" + knob + "\",outcome=\"kept\"}"), body);
                assertTrue(body.contains("stoker_autotune_last_after_samples_per_second{knob=\"" + knob + "\"}"), body);
            }
        }
    }

    /**
     * Skipped samples by kind and cause: errors (missing images) and filtered samples (over --max-images) each get a series
     * {@code stoker_samples_skipped_by_cause_total{kind, reason, stage}} when their cause first appears, equal to the totals.
     */
    @Test
    void aScrapeShowsErrorsAndFilteredSamplesByCause() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        var lines = new StringBuilder();
        for (int i = 0; i < 12; i++) {
            String images = switch (i) {
                case 1, 7 -> "\"image\":\"missing_" + i + ".png\"";
                case 4 -> "\"image\":[\"b.png\",\"b.png\"]";
                default -> "\"image\":\"b.png\"";
            };
            String ask = i == 4 ? "<image>\\n<image>\\nWhat is " + i + "?" : "<image>\\nWhat is " + i + "?";
            lines.append(String.format("{\"id\":\"s%d\",%s,\"conversations\":[{\"from\":\"human\",\"value\":\"%s\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, images, ask, i));
        }
        Files.writeString(ds.resolve("train.jsonl"), lines);
        var config = NodeConfig.builder().data(ds.resolve("train.jsonl").toString()).ranks(1).batch(2).set(NodeConfig.MAX_PIXELS, 50176L)
                .socket(tmp.resolve("s.sock")).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(64L << 20).set(NodeConfig.MAX_IMAGES, 1).threads(1)
                .warmUpMillis(0).set(NodeConfig.METRICS_PORT, 0).build();
        try (var node = StokerNode.launch(config)) {
            try (var client = TrainerClient.connect(tmp.resolve("s.sock"), 0, 1, "test", TrainerClient.Options.SHARED_MEMORY)) {
                for (int s = 0; s < 6; s++) client.next().close(); // one epoch: both missing images and the two-image sample
            }
            String body = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(node.metricsUrl())).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            double errors = value(body, "stoker_samples_errors_total"), filtered = value(body, "stoker_samples_filtered_total");
            assertTrue(errors >= 2 && filtered >= 1, "an epoch's 2 errors and 1 filtered sample: " + body);
            assertEquals(errors + filtered, value(body, "stoker_samples_skipped_total"), body);
            assertEquals(errors, value(body, "stoker_samples_skipped_by_cause_total{kind=\"error\",reason=\"file not found\",stage=\"fetch\"}"), body);
            assertEquals(filtered, value(body, "stoker_samples_skipped_by_cause_total{kind=\"filtered\",reason=\"over --max-images\",stage=\"manifest\"}"), body);
            assertEquals(2, Pattern.compile("(?m)^stoker_samples_skipped_by_cause_total\\{").matcher(body).results().count(), "one series per cause: " + body);
        }
    }

    /**
     * A packed job's meters, on a registry of their own fed by a pack record: the last step's imbalance, padding and cost per
     * rank, and the counts; before the first step the gauges read NaN.
     */
    @Test
    void packMetersShowTheLastPackedStep() {
        var stats = new dev.stoker.observe.PackStats();
        var registry = new io.micrometer.prometheusmetrics.PrometheusMeterRegistry(io.micrometer.prometheusmetrics.PrometheusConfig.DEFAULT);
        try {
            PrometheusEndpoint.packMeters(registry, stats, dev.stoker.observe.PackStats::summary, 3);
            assertEquals("NaN", raw(registry.scrape(), "stoker_pack_imbalance"), "no step yet");
            stats.record(packedStep(0, new double[] {1, 1, 1}, new int[] {100, 100, 100}, 2), 128);
            // the last step: costs 6, 3, 3 (mean 4: imbalance 1.5), 300 of 3·128 tokens, 3 samples a pack
            stats.record(packedStep(1, new double[] {6e12, 3e12, 3e12}, new int[] {128, 100, 72}, 3), 128);
            String body = registry.scrape();
            assertEquals(1.5, value(body, "stoker_pack_imbalance"), 1e-9, body);
            assertEquals(1 - 300.0 / 384, value(body, "stoker_pack_padding_fraction"), 1e-9, body);
            assertEquals(6e12, value(body, "stoker_pack_step_cost{rank=\"0\"}"), 1, body);
            assertEquals(3e12, value(body, "stoker_pack_step_cost{rank=\"2\"}"), 1, body);
            assertEquals(2, value(body, "stoker_pack_steps_total"), body);
            assertEquals(6 + 9, value(body, "stoker_pack_samples_total"), body);
        } finally {
            registry.close();
        }
    }

    /** An audio job's meters, on a registry of their own fed by the feed's audio figures: zeros before any clip, then those figures. */
    @Test
    void audioMetersShowTheFeedsClips() {
        var figures = new java.util.concurrent.atomic.AtomicReference<dev.stoker.pipeline.feed.FeedMetrics.Audio>();
        var registry = new io.micrometer.prometheusmetrics.PrometheusMeterRegistry(io.micrometer.prometheusmetrics.PrometheusConfig.DEFAULT);
        try {
            PrometheusEndpoint.audioMeters(registry, figures, java.util.concurrent.atomic.AtomicReference::get);
            assertEquals(0, value(registry.scrape(), "stoker_audio_clips_total"), "no clip yet");
            figures.set(new dev.stoker.pipeline.feed.FeedMetrics.Audio(6, 14.5, 1_492_992));
            String body = registry.scrape();
            assertEquals(6, value(body, "stoker_audio_clips_total"), body);
            assertEquals(14.5, value(body, "stoker_audio_seconds_total"), 1e-9, body);
            assertEquals(1_492_992, value(body, "stoker_audio_feature_bytes_total"), body);
        } finally {
            registry.close();
        }
    }

    static dev.stoker.plan.pack.PackedStep packedStep(long label, double[] costs, int[] tokens, int perPack) {
        int r = costs.length;
        var records = new int[r][perPack];
        return new dev.stoker.plan.pack.PackedStep(new dev.stoker.core.ScheduleCursor(0, label * 10), new dev.stoker.core.ScheduleCursor(0, label * 10 + 10),
                label, records, costs, tokens, new int[r], new boolean[r], new int[0], new int[0]);
    }

    private static String raw(String body, String name) {
        var m = Pattern.compile("(?m)^" + Pattern.quote(name) + " (\\S+)$").matcher(body);
        assertTrue(m.find(), name + " in " + body);
        return m.group(1);
    }

    /** The value of the series {@code name} (with its labels, if any) in a scrape. */
    private static double value(String body, String name) {
        var m = Pattern.compile("(?m)^" + Pattern.quote(name) + " (\\S+)$").matcher(body);
        assertTrue(m.find(), name + " in " + body);
        return Double.parseDouble(m.group(1));
    }
}
