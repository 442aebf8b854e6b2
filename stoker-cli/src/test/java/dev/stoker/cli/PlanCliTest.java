package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.pipeline.schedule.SampleSchedule;
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

    private static List<String> plan(Path data, String... more) {
        var args = new ArrayList<>(List.of("plan", "--data", data.toString(), "--ranks", "2", "--batch", "3", "--seed", "99"));
        args.addAll(Arrays.asList(more));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        return r.out().lines().toList();
    }
}
