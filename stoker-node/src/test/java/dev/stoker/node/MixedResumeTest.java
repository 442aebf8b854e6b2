package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.plan.schedule.SourceMix;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Two sources mixed by weight, resumed across a change of rank count (2 → 3), with Java and Python
 * trainers: the state each saves is the one the last batch's header carries (its per-source cursors
 * included), and the three ranks continue the mix's global order from it, nothing lost or repeated.
 *
 * <p>Data: a of 24 samples (weight 1), b of 8 (weight 2): 40 places an epoch, 2 ranks × 3 = 6 a step.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class MixedResumeTest {
    static final String PYTHON = "/usr/bin/python3";
    static final int BATCH = 3, A = 24, B = 8;
    static final long SEED = 77;
    @TempDir static Path tmp;
    static String sources;

    @BeforeAll
    static void data() throws Exception {
        var photos = Vectors.projectDir().resolve("assets/photos");
        Path a = new DemoDatasetBuilder().build(photos, tmp.resolve("a"), A, 3);
        Path b = new DemoDatasetBuilder().build(photos, tmp.resolve("b"), B, 5);
        var json = new ObjectMapper().createArrayNode();
        json.addObject().put("data", a.toString());
        json.addObject().put("data", b.toString()).put("weight", 2);
        sources = json.toString();
    }

    static NodeFeeds factory(int ranks) throws Exception {
        var config = NodeConfig.builder().set(NodeConfig.SOURCES, sources).ranks(ranks).batch(BATCH).seed(SEED).threads(2)
                .set(NodeConfig.FETCH_CONCURRENCY, 4).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20)
                .warmUpMillis(0).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176).build();
        return NodeFeeds.open(config);
    }

    static SampleSchedule schedule(int ranks) {
        return new SampleSchedule(SEED, new SourceMix(SEED, new int[] {A, B}, new double[] {1, 2}), ranks, BATCH);
    }

    /** The records the mix's order holds from {@code from} to its epoch's end, in whole steps of {@code ranks}. */
    static List<Long> orderFrom(ScheduleCursor from, int ranks) {
        var s = schedule(ranks);
        var out = new ArrayList<Long>();
        for (var c = from; c.epoch() == from.epoch(); c = s.next(c))
            for (int r = 0; r < ranks; r++) for (int i : s.batchAt(c, r)) out.add((long) i);
        return out;
    }

    static List<Long> indices(TrainerClient.Received got) {
        return Arrays.stream(got.batch().sampleIndex()).boxed().toList();
    }

    /** The per-source cursors agree with the global one: each source's draws before it add up to its position. */
    static void assertSourcesAddUp(long epoch, long position, long[] sourceEpochs, long[] sourcePositions) {
        long drawsA = sourceEpochs[0] * A + sourcePositions[0] - epoch * A;
        long drawsB = sourceEpochs[1] * B + sourcePositions[1] - epoch * 2L * B;
        assertEquals(position, drawsA + drawsB, "the sources' draws in this epoch make up its position");
    }

    @Test
    void javaTrainersResumeAMixOfTwoSourcesWithThreeRanks() throws Exception {
        int done = 4;
        TrainerClient.State saved = null;
        var before = new ArrayList<List<Long>>();
        try (var factory = factory(2); var service = factory.start(FeedMode.PREFETCH, null);
             var server = new FeedServer(tmp.resolve("j2.sock"), service, false)) {
            for (int r = 0; r < 2; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, 2, "t", TrainerClient.Options.SHARED_MEMORY)) {
                    var mine = new ArrayList<Long>();
                    for (int s = 0; s < done; s++) try (var got = c.next()) { mine.addAll(indices(got)); }
                    before.add(mine);
                    saved = c.state();
                }
        }
        assertNotNull(saved.sources(), "the state is the last batch's resume block");
        assertEquals(new ScheduleCursor(0, done * 6), saved.cursor());
        assertEquals(done, saved.nextStep());
        assertEquals(schedule(2).resumeAt(saved.cursor()), saved.sources(), "the service's schedule's state at that cursor");
        assertSourcesAddUp(0, done * 6, saved.sources().sourceEpochs(), saved.sources().sourcePositions());
        var two = schedule(2);
        var firstSteps = new ArrayList<Long>();
        for (int s = 0; s < done; s++) for (int r = 0; r < 2; r++) for (int i : two.batchAt(two.cursorAt(s), r)) firstSteps.add((long) i);
        assertEquals(List.of(12, 12), before.stream().map(List::size).toList(), "no sample skipped: " + before);
        var took = new ArrayList<Long>();
        for (int s = 0; s < done; s++) for (int r = 0; r < 2; r++) took.addAll(before.get(r).subList(s * BATCH, (s + 1) * BATCH));
        assertEquals(firstSteps, took, "two ranks took the mix's first steps");

        var after = new ArrayList<List<Long>>();
        try (var factory = factory(3); var service = factory.start(FeedMode.PREFETCH, null);
             var server = new FeedServer(tmp.resolve("j3.sock"), service, false)) {
            for (int r = 0; r < 3; r++)
                try (var c = TrainerClient.connect(server.socketPath(), r, 3, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved))) {
                    var mine = new ArrayList<Long>();
                    while (c.state().epoch() == 0) try (var got = c.next()) { mine.addAll(indices(got)); }
                    after.add(mine);
                    var s = c.state();
                    assertEquals(1, s.epoch());
                    assertEquals(0, s.position());
                    assertSourcesAddUp(1, 0, s.sources().sourceEpochs(), s.sources().sourcePositions());
                }
        }
        var continued = new ArrayList<Long>();
        for (int s = 0; s < after.get(0).size() / BATCH; s++) for (int r = 0; r < 3; r++) continued.addAll(after.get(r).subList(s * BATCH, (s + 1) * BATCH));
        assertEquals(orderFrom(saved.cursor(), 3), continued, "three ranks continue the mix's order from the saved cursor");
    }

    @Test
    void pythonTrainersResumeAMixOfTwoSourcesWithThreeRanks() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "no /usr/bin/python3");
        Path state = tmp.resolve("py-mix-state.json");
        int done = 5;
        try (var factory = factory(2); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve("p2.sock"), service, false)) {
            python(server, 0, 2, done, null, null);
            var last = python(server, 1, 2, done, null, state);
            var st = last.get("state");
            assertEquals(done * 6, st.get("position").asLong());
            assertEquals(done, st.get("next_step").asLong());
            var sources = st.get("sources");
            assertEquals(2, sources.size(), "the state carries each source's cursor: " + st);
            var expected = schedule(2).resumeAt(new ScheduleCursor(0, done * 6));
            for (int i = 0; i < 2; i++) {
                assertEquals(expected.sourceEpochs()[i], sources.get(i).get("epoch").asLong());
                assertEquals(expected.sourcePositions()[i], sources.get(i).get("position").asLong());
            }
        }
        var cursor = new ScheduleCursor(0, done * 6);
        int steps = orderFrom(cursor, 3).size() / (3 * BATCH);
        var after = new ArrayList<List<Long>>();
        try (var factory = factory(3); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = new FeedServer(tmp.resolve("p3.sock"), service, false)) {
            for (int r = 0; r < 3; r++) {
                var got = python(server, r, 3, steps, state, null);
                var mine = new ArrayList<Long>();
                got.get("digests").forEach(d -> {
                    String list = d.asText().substring(d.asText().indexOf('[') + 1, d.asText().length() - 1);
                    for (String x : list.split(",")) mine.add(Long.parseLong(x.strip()));
                });
                after.add(mine);
                assertEquals(1, got.get("state").get("epoch").asLong(), "the last batch's state opens the next epoch");
            }
        }
        var continued = new ArrayList<Long>();
        for (int s = 0; s < steps; s++) for (int r = 0; r < 3; r++) continued.addAll(after.get(r).subList(s * BATCH, (s + 1) * BATCH));
        assertEquals(orderFrom(cursor, 3), continued, "three Python ranks continue the mix's order from the saved state");
    }

    static JsonNode python(FeedServer server, int rank, int world, int steps, Path stateIn, Path stateOut) throws Exception {
        var cmd = new ArrayList<>(List.of(PYTHON, Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py")
                .toString(), "take", "--socket", server.socketPath().toString(), "--world", "" + world, "--rank", "" + rank, "--job", "t",
                "--steps", "" + steps));
        if (stateIn != null) cmd.addAll(List.of("--state-in", stateIn.toString()));
        if (stateOut != null) cmd.addAll(List.of("--state-out", stateOut.toString()));
        var p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        var lines = out.strip().split("\n");
        return new ObjectMapper().readTree(lines[lines.length - 1]);
    }
}
