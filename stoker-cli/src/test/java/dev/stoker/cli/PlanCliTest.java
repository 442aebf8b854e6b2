package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.plan.schedule.SampleSchedule;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code stoker plan}: the schedule serve follows, printed without decoding; the same on every run, its tail by --start-step. */
@Timeout(120)
class PlanCliTest {
    @TempDir Path tmp;

    @Test
    void planPrintsTheScheduleTheSameEachRunAndItsTailFromAStartStep() throws Exception {
        var sb = new StringBuilder("[\n");
        for (int i = 0; i < 23; i++) sb.append(i == 0 ? "" : ",\n").append("{\"id\": \"s").append(i)
                .append("\", \"image\": \"none.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>?\"}, {\"from\": \"gpt\", \"value\": \"!\"}]}");
        Path data = Files.writeString(tmp.resolve("train.json"), sb.append("\n]\n")); // no image exists: nothing is decoded
        var full = plan(data, "--steps", "7");
        assertEquals(7 * 2 * 3, full.size());
        assertEquals(full, plan(data, "--steps", "7"), "identical across runs");
        assertEquals(full.subList(3 * 2 * 3, full.size()), plan(data, "--start-step", "3", "--steps", "4"), "the tail from step 3");
        var json = new ObjectMapper();
        var schedule = new SampleSchedule(99, 23, 2, 3);
        var epoch0 = new HashSet<Integer>();
        for (int i = 0; i < full.size(); i++) {
            var n = json.readTree(full.get(i));
            int step = n.get("step").asInt(), rank = n.get("rank").asInt();
            assertEquals(i / 6, step);
            assertEquals(i / 3 % 2, rank);
            assertEquals(0, n.get("source").asInt());
            assertEquals(schedule.batchAt(schedule.cursorAt(step), rank)[i % 3], n.get("sample").asInt(), "line " + i);
            if (step < schedule.stepsPerEpoch()) assertTrue(epoch0.add(n.get("sample").asInt()), "repeated within an epoch");
        }
        var bad = CliRunner.run("plan", "--data", data.toString(), "--ranks", "2", "--batch", "3");
        assertTrue(bad.status() != 0 && bad.err().contains("--steps N"), bad.err());
    }

    /** Two sources by weight on the command line and in a config file: the same plan, each source its share, the tail by --start-step. */
    @Test
    void aMixOfTwoSourcesIsPlannedByWeight() throws Exception {
        Path a = manifest("a.jsonl", 40), b = manifest("b.jsonl", 10);
        var cli = plan2("--data", a.toString(), "--data", b.toString(), "--weight", "3", "--steps", "14");
        Path config = Files.writeString(tmp.resolve("mix.yaml"), "sources:\n  - data: " + a + "\n  - {data: " + b + ", weight: 3}\n");
        assertEquals(cli, plan2("--config", config.toString(), "--steps", "14"), "the config file's sources are the command line's");
        assertEquals(cli, plan2("--data", a.toString(), "--data", b.toString(), "--weight", "3", "--steps", "14"), "identical across runs");
        assertEquals(cli.subList(5 * 6, cli.size()), plan2("--data", a.toString(), "--data", b.toString(), "--weight", "3",
                "--start-step", "5", "--steps", "9"), "the tail from step 5");
        // 40 + 30 places an epoch, 11 steps of 6: in the first 66 samples each of a's at most once, b's at most three times
        var json = new ObjectMapper();
        int[] perSource = new int[2];
        var seen = new java.util.HashMap<String, Integer>();
        for (int i = 0; i < 66; i++) {
            var n = json.readTree(cli.get(i));
            int source = n.get("source").asInt(), sample = n.get("sample").asInt();
            perSource[source]++;
            assertTrue(sample >= 0 && sample < (source == 0 ? 40 : 10), cli.get(i));
            int times = seen.merge(source + ":" + sample, 1, Integer::sum);
            assertTrue(times <= (source == 0 ? 1 : 3), "drawn too often in one epoch: " + cli.get(i));
        }
        assertEquals(66, perSource[0] + perSource[1]);
        assertTrue(perSource[1] > 15 && perSource[1] < 41, "b's share of 66 is ~28: " + perSource[1]);
        var bad = CliRunner.run("plan", "--weight", "2", "--data", a.toString(), "--data", b.toString(), "--ranks", "2", "--batch", "3", "--steps", "1");
        assertTrue(bad.status() != 0 && bad.err().contains("--weight 2 comes before any --data"), bad.err());
    }

    private Path manifest(String name, int n) throws Exception {
        var sb = new StringBuilder();
        for (int i = 0; i < n; i++) sb.append("{\"id\": \"").append(name).append(i)
                .append("\", \"conversations\": [{\"from\": \"human\", \"value\": \"?\"}, {\"from\": \"gpt\", \"value\": \"!\"}]}\n");
        return Files.writeString(tmp.resolve(name), sb);
    }

    private static List<String> plan2(String... more) {
        var args = new ArrayList<>(List.of("plan", "--ranks", "2", "--batch", "3", "--seed", "5"));
        args.addAll(Arrays.asList(more));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        return r.out().lines().toList();
    }

    private static List<String> plan(Path data, String... more) {
        var args = new ArrayList<>(List.of("plan", "--data", data.toString(), "--ranks", "2", "--batch", "3", "--seed", "99"));
        args.addAll(Arrays.asList(more));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        return r.out().lines().toList();
    }

    /**
     * {@code plan --pack-tokens N}: each sample's pack. Over the first epoch every sample the feed keeps is in exactly one
     * pack, no pack exceeds N tokens (the dummy image's included), a segment's tokens are the sample's input_ids length
     * (the validator's, which equals the encoder's), a step's line sums its ranks' segments; the plan is the same with
     * the shapes measured in-process and with validate's length index, and its tail by --start-step.
     */
    @Test
    void aPackedPlanShowsEachSamplesPack() throws Exception {
        Path data = dev.stoker.testkit.SmallJpegDataset.write(tmp.resolve("ds"), 60, 11);
        Path lengths = tmp.resolve("lengths");
        String[] job = {"plan", "--data", data.toString(), "--ranks", "3", "--pack-tokens", "1024", "--max-pixels", "50176", "--seed", "7",
                "--threads", "1", "--lengths-dir", lengths.toString()};
        var measured = CliRunner.run(concat(job, "--steps", "6"));
        assertEquals(0, measured.status(), measured.err());
        assertTrue(measured.err().contains("measured from image headers"), measured.err());
        var validate = CliRunner.run("validate", "--data", data.toString(), "--max-pixels", "50176", "--threads", "1", "--lengths-dir",
                lengths.toString());
        assertEquals(0, validate.status(), validate.err());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(new ObjectMapper().readTree(validate.lastStdoutLine())
                .get("length_index").asText()));
        var loaded = CliRunner.run(concat(job, "--steps", "6"));
        assertEquals(0, loaded.status(), loaded.err());
        assertTrue(loaded.err().contains("from stoker validate's length index"), loaded.err());
        assertEquals(measured.out(), loaded.out(), "the same plan from the length index as from the headers");
        var tail = CliRunner.run(concat(job, "--steps", "2", "--start-step", "4"));
        var lines = loaded.out().lines().toList();
        int fourth = 0;
        while (!lines.get(fourth).startsWith("{\"step\":4,")) fourth++;
        assertEquals(lines.subList(fourth, lines.size()), tail.out().lines().toList(), "the tail from step 4");

        var json = new ObjectMapper();
        var perStep = new ArrayList<List<Integer>>();
        var current = new ArrayList<Integer>();
        int[] rankTokens = new int[3];
        for (String line : lines) {
            var n = json.readTree(line);
            if (n.has("segment")) {
                int sample = n.get("sample").asInt();
                if (sample >= 0) {
                    current.add(sample);
                    assertEquals(index.lengths()[sample], n.get("tokens").asInt(), line);
                    assertEquals(index.patches(sample), n.get("patches").asLong(), line);
                }
                rankTokens[n.get("rank").asInt()] += n.get("tokens").asInt();
                assertTrue(n.get("cost").asDouble() > 0, line);
            } else {
                assertTrue(n.has("costs") && n.has("imbalance") && n.has("filtered"), line);
                for (int r = 0; r < 3; r++) {
                    assertEquals(rankTokens[r], n.get("tokens").get(r).asInt(), "step " + perStep.size() + " rank " + r + ": " + line);
                    assertTrue(rankTokens[r] > 0 && rankTokens[r] <= 1024, "within --pack-tokens: " + line);
                }
                assertTrue(n.get("imbalance").asDouble() >= 1, line);
                java.util.Arrays.fill(rankTokens, 0);
                perStep.add(List.copyOf(current));
                current.clear();
            }
        }
        assertEquals(6, perStep.size());
        // the first epoch: the steps before the first that repeats a sample, then that one's new samples — it runs across the
        // epoch's end, holding the epoch's tail and epoch 1's head (samples seen before, none twice in it): every kept sample once
        var epoch0 = new HashSet<Integer>();
        int step = 0;
        for (; step < perStep.size() && perStep.get(step).stream().noneMatch(epoch0::contains); step++) {
            assertEquals(perStep.get(step).size(), new HashSet<>(perStep.get(step)).size(), "a sample twice in step " + step);
            epoch0.addAll(perStep.get(step));
        }
        assertTrue(step < perStep.size(), "6 steps of ~3000 tokens go past an epoch of 60 short samples");
        var across = perStep.get(step);
        assertEquals(across.size(), new HashSet<>(across).size(), "a sample twice in the step across the epoch's end");
        epoch0.addAll(across);
        long kept = java.util.stream.IntStream.range(0, 60).filter(i -> index.lengths()[i] > 0).count();
        assertEquals(kept, epoch0.size(), "the kept samples of the first epoch, nothing dropped at its end");
        for (int i : epoch0) assertTrue(index.lengths()[i] > 0, "sample " + i + " is one the feed keeps");
        var batch = CliRunner.run(concat(job, "--steps", "1", "--batch", "4"));
        assertTrue(batch.status() != 0 && batch.err().contains("--batch does not apply with --pack-tokens"), batch.err());
    }

    private static String[] concat(String[] a, String... b) {
        var all = new ArrayList<>(Arrays.asList(a));
        all.addAll(Arrays.asList(b));
        return all.toArray(String[]::new);
    }
}
