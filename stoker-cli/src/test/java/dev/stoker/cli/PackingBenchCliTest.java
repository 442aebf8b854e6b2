package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.SmallJpegDataset;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code stoker bench packing} on a tiny data set: the last line's keys and their ranges (no timings asserted but their sign). */
@Timeout(180)
class PackingBenchCliTest {
    @TempDir Path tmp;

    @Test
    void benchPackingPrintsItsFiguresAndTheJsonLast() throws Exception {
        Path data = SmallJpegDataset.write(tmp.resolve("ds"), 80, 5);
        var r = CliRunner.run("bench", "packing", "--data", data.toString(), "--ranks", "2", "--pack-tokens", "2048", "--max-pixels", "50176",
                "--threads", "1", "--rounds", "1", "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, r.status(), r.err());
        var json = new ObjectMapper().readTree(r.lastStdoutLine());
        var keys = new java.util.ArrayList<String>();
        json.fieldNames().forEachRemaining(keys::add);
        assertEquals(List.of("padding_fraction", "padded_padding_fraction", "imbalance", "planner_us_per_sample", "samples", "packs"), keys);
        var imbalanceKeys = new java.util.ArrayList<String>();
        json.get("imbalance").fieldNames().forEachRemaining(imbalanceKeys::add);
        assertEquals(List.of("count", "cost"), imbalanceKeys);
        double padding = json.get("padding_fraction").asDouble(), padded = json.get("padded_padding_fraction").asDouble();
        assertTrue(padding >= 0 && padding < 1, "padding " + padding);
        assertTrue(padded >= 0 && padded < 1, "padded " + padded);
        assertTrue(json.get("imbalance").get("count").asDouble() >= 1 && json.get("imbalance").get("cost").asDouble() >= 1, json.toString());
        assertTrue(json.get("planner_us_per_sample").asDouble() > 0, json.toString());
        int samples = json.get("samples").asInt(), packs = json.get("packs").asInt();
        // the steps that start in epoch 0: every sample of it packed (a few may be over a budget), the last step running into
        // epoch 1's head (at most one step's worth more)
        assertTrue(samples > 60 && samples < 160, "every sample of the epoch packed, and some of epoch 1's head: " + samples);
        assertTrue(r.out().contains("runs across the end of epoch 0"), r.out());
        assertTrue(packs > 0 && packs % 2 == 0 && packs <= samples, "whole steps of 2 packs: " + packs);
        assertTrue(r.out().contains("measured from image headers"), r.out());
        assertTrue(r.out().contains("imbalance") && r.out().contains("µs per sample"), r.out());

        var missing = CliRunner.run("bench", "packing", "--data", data.toString(), "--ranks", "2");
        assertTrue(missing.status() != 0 && missing.err().contains("--pack-tokens N is required"), missing.err());
    }
}
