package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.bench.ChildJvm;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real torch DDP training job ({@code examples/torch_ddp/train.py}: gloo on the CPU, under Debian's
 * torchrun) started as a user starts it, {@code stoker launch [serve options] -- torchrun … train.py}, and
 * its exact resume: a run SIGKILLed (launch, its service, torchrun and the trainers) after its checkpoint
 * and relaunched logs, for every step after the checkpoint, bit for bit the losses and samples of the run
 * never interrupted; relaunched with three processes instead of two, it trains on exactly the rest of the
 * job's global sample order; run as two "nodes" on loopback (two launches, each service serving its own
 * node's rank only, one torchrun per node), it is the one-node run line for line; a packed job trains on
 * the planned packs, and a feed that ends before the job stops every rank at its end with a checkpoint that
 * a longer feed resumes bit for bit. A quarter of the samples hold a video instead of their image (issue 29:
 * {@link #withVideos}), so every one of these facts holds for a job that trains on video.
 *
 * <p>Seven jobs make every fact: the runs are made once (on first use) and shared by the tests, so that each
 * test runs alone too. The uninterrupted run is the two-node one, so that the one-node runs compared with it
 * (killed, then resumed) also show that two nodes train as one; the resumed run writes the report; the packed
 * job's first half is the feed that ends early. The one place that starts a job is {@link #startNodes}.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class TorchTrainingTest {
    static final String PYTHON = PythonClientTest.PYTHON;
    static final String JOB = "torch-ddp";
    /**
     * 40 samples at 2 ranks × 2 per step: epoch 0 is steps 0–9, so that the 12 steps cross an epoch end; at 3 ranks
     * (6 positions per step) epoch 0 ends with 4 positions left over, which drop_last skips.
     */
    static final int SAMPLES = 40, BATCH = 2, RANKS = 2, RESIZED_RANKS = 3;
    /** The job's steps, the checkpoint interval (the kill comes after the checkpoint at K and before STEPS), the resized run's end. */
    static final int STEPS = 12, K = 6, RESIZED_STEPS = 9;
    /** The killed run sleeps this long after each step, so that the test can stop it between its checkpoint at K and the end. */
    static final int PAUSE_MS = 400;
    static final long MAX_PIXELS = 12544, TORCHRUN_SECONDS = 150;
    /** The packed job's budget: a handful of this data set's samples per pack. */
    static final int PACK_TOKENS = 1024;
    static final ObjectMapper JSON = new ObjectMapper();

    @TempDir static Path tmp;
    static Path manifest, trainScript;
    static final List<Process> started = new CopyOnWriteArrayList<>();
    private static Run uninterrupted;
    private static Killed killed;
    private static Run resumed;

    @BeforeAll
    static void prepare() throws Exception {
        assumeTrue(Files.isExecutable(Path.of(PYTHON)), PYTHON + " is missing");
        Process check = new ProcessBuilder(PYTHON, "-c", "import numpy, torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available()")
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        assertTrue(check.waitFor(60, TimeUnit.SECONDS), "importing torch took over 60 s");
        assumeTrue(check.exitValue() == 0, PYTHON + " has no numpy or torch with gloo (apt-get install python3-numpy python3-torch)");
        trainScript = Vectors.projectDir().resolve("examples/torch_ddp/train.py");
        assertTrue(Files.isRegularFile(trainScript), trainScript.toString());
        manifest = withVideos(SmallJpegDataset.write(tmp.resolve("ds"), SAMPLES, 5));
    }

    /** Every VIDEO_EVERY-th sample that had one image gets a short H.264 clip in its place (issue 29: the job trains on video). */
    static final int VIDEO_EVERY = 4;

    /**
     * The data set with videos: samples 3, 7, 11, … that have one image name a clip instead ({@code "video"} and
     * {@code <video>} in LLaVA's layout), 1.2 to 2 s of 160x120 test pattern at 10 to 25 fps (4 to 8 sampled frames).
     */
    static Path withVideos(Path manifest) throws Exception {
        dev.stoker.testkit.FfmpegClips.require();
        Path dir = manifest.getParent(), clips = Files.createDirectories(dir.resolve("videos"));
        String[][] kinds = {{"160x120", "25", "2"}, {"160x120", "10", "1.2"}, {"176x144", "359/24", "1.5"}};
        for (int k = 0; k < kinds.length; k++)
            dev.stoker.testkit.FfmpegClips.h264(clips.resolve("clip" + k + ".mp4"), kinds[k][0], kinds[k][1], Double.parseDouble(kinds[k][2]));
        var lines = Files.readAllLines(manifest);
        int videos = 0;
        for (int i = VIDEO_EVERY - 1; i < lines.size(); i += VIDEO_EVERY) {
            var node = (com.fasterxml.jackson.databind.node.ObjectNode) JSON.readTree(lines.get(i));
            if (!node.has("image") || !node.get("image").isTextual()) continue;
            node.remove("image");
            node.put("video", "videos/clip" + (videos++ % kinds.length) + ".mp4");
            var turn = (com.fasterxml.jackson.databind.node.ObjectNode) node.get("conversations").get(0);
            turn.put("value", turn.get("value").asText().replace("<image>", "<video>"));
            lines.set(i, JSON.writeValueAsString(node));
        }
        assertTrue(videos >= 5, videos + " video samples");
        return Files.writeString(manifest, String.join("\n", lines) + "\n");
    }

    @AfterAll
    static void stopEverything() {
        for (Process p : started) killTree(p);
    }

    @Test
    @Order(1)
    void anUninterruptedRunTrainsOnTheScheduledSamplesAndLearns() throws Exception {
        Logs run = uninterrupted().logs();
        for (int rank = 0; rank < RANKS; rank++) {
            assertEquals(STEPS, run.ranks().get(rank).size(), "rank " + rank + " logged every step");
            for (int step = 0; step < STEPS; step++) assertEquals(step, run.at(rank, step).get("step").asInt(), "rank " + rank + " in order");
        }
        for (int step = 0; step < STEPS; step++) {
            float l0 = (float) run.at(0, step).get("loss").asDouble(), l1 = (float) run.at(1, step).get("loss").asDouble();
            float global = (float) run.at(0, step).get("global_loss").asDouble();
            assertEquals(global, (float) run.at(1, step).get("global_loss").asDouble(), "step " + step + ": one global loss on every rank");
            assertEquals((l0 + l1) / 2f, global, "step " + step + ": the all-reduced mean of the ranks' float32 losses");
            assertTrue(Float.isFinite(l0) && l0 > 0 && Float.isFinite(l1) && l1 > 0, "step " + step + ": " + l0 + ", " + l1);
            for (int rank = 0; rank < RANKS; rank++) assertEquals(BATCH, run.at(rank, step).get("sample_index").size());
        }
        double first = 0, last = 0;
        for (int s = 0; s < 3; s++) {
            first += run.at(0, s).get("global_loss").asDouble();
            last += run.at(0, STEPS - 1 - s).get("global_loss").asDouble();
        }
        assertTrue(last < first - 0.3, "the model learns: the last 3 steps' loss " + last / 3 + " is under the first 3's " + first / 3);

        List<Long> order = run.samples();
        assertEquals(plan(RANKS, 0, STEPS), order, "the trainers trained on what `stoker plan` says the job's schedule is, step by step, rank by rank");
        assertEquals(SAMPLES, new HashSet<>(order.subList(0, SAMPLES)).size(), "epoch 0 (steps 0-9) is a permutation: " + order);
        assertEquals(order.size() - SAMPLES, new HashSet<>(order.subList(SAMPLES, order.size())).size(), "epoch 1 repeats nothing");
        for (long sample : order) assertTrue(sample >= 0 && sample < SAMPLES, "sample " + sample);
        assertTrue(Files.size(tmp.resolve("ckpt-uninterrupted/checkpoint.pt")) > 0, "the last checkpoint");
    }

    /**
     * The real job's report (the resumed run's): the service's {@code --report-dir} holds each rank's steps as its trainer
     * measured them (the wait in {@code next()} and the step's compute, sent with the next request), and the HTML report
     * of it renders in headless Chromium with no script error and every plot drawn. The screenshot is kept as
     * {@code target/real-job-report.png} (docs/real-job-report.png is one).
     */
    @Test
    @Order(2)
    void theRealJobsReportShowsEachRanksMeasuredWaitInChromium() throws Exception {
        resumed();
        Path dir = tmp.resolve("report-resumed");
        int steps = STEPS - K;
        var data = dev.stoker.report.RunData.load(dir);
        assertEquals(1, data.modes().size(), "one served job: " + data.modes());
        var mode = data.modes().get(0);
        assertEquals(RANKS, mode.ranks().size(), "a report per rank");
        for (var rank : mode.ranks()) {
            // the last step's timing would come with a request after it; every earlier one is reported
            assertTrue(rank.steps().size() >= steps - 1 && rank.steps().size() <= steps, "rank " + rank.rank() + ": " + rank.steps().size() + " steps");
            long wait = 0, compute = 0;
            for (var step : rank.steps()) {
                assertTrue(step.waitNanos() >= 0 && step.computeNanos() > 0, "rank " + rank.rank() + ": " + step);
                assertEquals(BATCH, step.samples(), "rank " + rank.rank() + ": the samples of the batch handed out");
                wait += step.waitNanos();
                compute += step.computeNanos();
            }
            assertTrue(wait > 0 && compute > 0, "rank " + rank.rank() + " measured its wait (" + wait + " ns) and its steps (" + compute + " ns)");
        }
        assertTrue(mode.pipeline() != null && mode.pipeline().has("verdict"), "the pipeline's file with its verdict");
        Path html = dev.stoker.report.RunReport.write(dir);
        Path chromium = Path.of("/usr/bin/chromium");
        assumeTrue(Files.isExecutable(chromium), "chromium not installed (Debian package chromium)");
        String dom = chromium(chromium, "--dump-dom", html);
        var body = java.util.regex.Pattern.compile("<body([^>]*)>").matcher(dom);
        assertTrue(body.find(), "no <body> in the dumped DOM");
        String attrs = body.group(1);
        assertTrue(attrs.contains("data-errors=\"false\""), "script errors: " + attrs);
        var drawn = java.util.regex.Pattern.compile("data-plots=\"(\\d+)\"").matcher(attrs);
        var total = java.util.regex.Pattern.compile("data-plots-total=\"(\\d+)\"").matcher(attrs);
        assertTrue(drawn.find() && total.find() && drawn.group(1).equals(total.group(1)) && !drawn.group(1).equals("0"), "every plot drawn: " + attrs);
        Path png = tmp.resolve("real-job-report.png");
        chromium(chromium, "--screenshot=" + png, html);
        assertTrue(Files.size(png) > 10_000, "screenshot written");
        Path target = Files.createDirectories(Path.of(System.getProperty("basedir", "."), "target"));
        Files.copy(png, target.resolve("real-job-report.png"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    }

    private static String chromium(Path chromium, String action, Path html) throws Exception {
        Path profile = Files.createTempDirectory(tmp, "profile"), out = Files.createTempFile(tmp, "chromium", ".out");
        var cmd = List.of(chromium.toString(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
                "--window-size=1400,3000", action, html.toUri().toString());
        Process p = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
            killTree(p);
            throw new AssertionError("chromium did not finish in 30 s: " + cmd);
        }
        assertEquals(0, p.exitValue(), "chromium exit status");
        return Files.readString(out);
    }

    @Test
    @Order(2)
    void aRunKilledAfterItsCheckpointResumesOnAFreshServiceBitForBit() throws Exception {
        Logs reference = uninterrupted().logs();
        Killed k = killed();
        // Up to the kill, the interrupted run is the uninterrupted one (the runs are reproducible).
        for (int rank = 0; rank < RANKS; rank++)
            for (int i = 0; i < k.logs().ranks().get(rank).size(); i++)
                assertEquals(reference.line(rank, i), k.logs().lines().get(rank).get(i), "the killed run's rank " + rank + " step " + i);

        Run run = resumed();
        assertTrue(run.job().output().contains("resuming at step " + K), run.job().output());
        Logs resumed = run.logs();
        for (int rank = 0; rank < RANKS; rank++) {
            List<String> lines = resumed.lines().get(rank);
            assertEquals(STEPS - K, lines.size(), "rank " + rank + " trained steps " + K + ".." + (STEPS - 1) + ": " + lines);
            for (int i = 0; i < lines.size(); i++) {
                int step = K + i;
                JsonNode got = resumed.at(rank, i), want = reference.at(rank, step);
                String what = "rank " + rank + " step " + step;
                assertEquals(step, got.get("step").asInt(), what);
                assertEquals(want.get("sample_index"), got.get("sample_index"), what + ": the same samples");
                assertEquals(want.get("loss").asDouble(), got.get("loss").asDouble(), 0.0, what + ": the same local loss, bit for bit");
                assertEquals(want.get("global_loss").asDouble(), got.get("global_loss").asDouble(), 0.0, what + ": the same global loss");
                assertEquals(reference.line(rank, step), lines.get(i), what + ": the same log line");
            }
        }
    }

    /**
     * What must hold after a resize: the job's order is one permutation per epoch, independent of the rank count, and a
     * step takes the next ranks × batch positions of it. From the checkpoint's cursor (epoch 0, position K·2·B) three
     * ranks take 6 positions a step while 6 are left in epoch 0; the epoch's last (40 − 36 = 4) positions are too few for
     * a step and are skipped (drop_last), and epoch 1 starts over at its position 0. The 2-rank run's samples, flattened
     * step by step and rank by rank, are that order (epoch 0, then epoch 1's first 8), so the resized run's must be its
     * positions [24, 36) and then [40, 46) — nothing of epoch 0 trained twice, nothing skipped but the drop_last rest.
     */
    @Test
    @Order(3)
    void aRunResumedWithThreeProcessesTrainsOnExactlyTheRestOfTheGlobalOrder() throws Exception {
        List<Long> order = uninterrupted().logs().samples();
        Path checkpoint = killed().checkpointAtK();
        Path logDir = tmp.resolve("log-resized");
        Job job = startJob("resized", RESIZED_RANKS, checkpoint, logDir, RESIZED_STEPS, List.of());
        finish(job);
        assertTrue(job.output().contains("resuming at step " + K), job.output());
        Logs resized = Logs.read(logDir, RESIZED_RANKS);
        for (int rank = 0; rank < RESIZED_RANKS; rank++) {
            assertEquals(RESIZED_STEPS - K, resized.ranks().get(rank).size(), "rank " + rank + ": " + resized.lines().get(rank));
            for (int i = 0; i < RESIZED_STEPS - K; i++) {
                assertEquals(K + i, resized.at(rank, i).get("step").asInt());
                assertEquals(resized.at(0, i).get("global_loss").asDouble(), resized.at(rank, i).get("global_loss").asDouble(), 0.0);
            }
        }

        int perStep = RESIZED_RANKS * BATCH, cursor = K * RANKS * BATCH;
        var expected = new ArrayList<Long>();
        int position = cursor;
        List<Long> epoch = order.subList(0, SAMPLES);
        boolean epoch0 = true;
        for (int step = K; step < RESIZED_STEPS; step++) {
            if (epoch0 && position + perStep > SAMPLES) { // drop_last: the rest of epoch 0 is skipped, epoch 1 starts
                epoch = order.subList(SAMPLES, order.size());
                position = 0;
                epoch0 = false;
            }
            assertTrue(position + perStep <= epoch.size(), "the 2-rank run covers the resized run's steps");
            expected.addAll(epoch.subList(position, position + perStep));
            position += perStep;
        }
        List<Long> got = resized.samples();
        assertEquals(expected, got, "after the resize: the rest of the global order in blocks of " + perStep);
        assertEquals(plan(RESIZED_RANKS, cursor / perStep, RESIZED_STEPS - K), got, "what `stoker plan` schedules at 3 ranks from that cursor");

        // Epoch 0 over both runs: the samples before the checkpoint (2 ranks) and after it (3 ranks) are each trained once,
        // and only the drop_last rest is left out.
        var trained0 = new LinkedHashSet<>(order.subList(0, cursor));
        int epoch0After = (SAMPLES - cursor) / perStep * perStep;
        for (long s : got.subList(0, epoch0After)) assertTrue(trained0.add(s), "sample " + s + " trained twice in epoch 0");
        Set<Long> untrained = new HashSet<>(order.subList(0, SAMPLES));
        untrained.removeAll(trained0);
        assertEquals(new HashSet<>(order.subList(cursor + epoch0After, SAMPLES)), untrained, "only epoch 0's drop_last rest is not trained");
        assertEquals(SAMPLES - cursor - epoch0After, untrained.size());
        assertTrue(untrained.size() > 0 && untrained.size() < perStep, "the resize made a rest: " + untrained);

        // The first step after the resize starts from the checkpoint's exact weights: rank 0's batch is the 2-rank run's
        // rank 0 batch of step K (positions [24, 26) either way), so its loss is the same bit for bit.
        assertEquals(uninterrupted().logs().at(0, K).get("sample_index"), resized.at(0, 0).get("sample_index"));
        assertEquals(uninterrupted().logs().at(0, K).get("loss").asDouble(), resized.at(0, 0).get("loss").asDouble(), 0.0);
    }

    /**
     * The job on two "nodes" on loopback ({@link #uninterrupted}): {@code stoker launch --nnodes 2 --node-rank I
     * --nproc-per-node 1} twice, each with its own socket and shared memory, its service serving rank I only, each running
     * {@code torchrun --nnodes 2 --node_rank I} (one DDP world of two ranks over 127.0.0.1). The same job on one node,
     * killed after its checkpoint and resumed, logs every step as the two-node run does, line for line.
     */
    @Test
    @Order(3)
    void theJobAsTwoNodesOnLoopbackEachServingItsOwnRankTrainsAsTheOneNodeRun() throws Exception {
        Run two = uninterrupted();
        for (int node = 0; node < 2; node++) {
            String log = read(two.job().nodes().get(node).log());
            assertTrue(log.contains("stoker launch: world 2 ranks (--nnodes 2, --node-rank " + node + ", --nproc-per-node 1); this node serves ranks "
                    + node), log);
        }
        Logs before = killed().logs(), after = resumed().logs();
        for (int rank = 0; rank < RANKS; rank++) {
            assertEquals(STEPS, two.logs().lines().get(rank).size(), "rank " + rank + two.job().output());
            for (int step = 0; step < STEPS; step++) {
                String oneNode = step < K ? before.line(rank, step) : after.line(rank, step - K);
                assertEquals(oneNode, two.logs().line(rank, step), "rank " + rank + " step " + step + ": the one-node run's line");
            }
        }
    }

    /**
     * A packed job ({@code --pack-tokens}): each rank trains on one row of whole samples per step (the model isolates them
     * with the pack's seg_ids), exactly the packs {@code stoker plan --pack-tokens} gives. Its first half is a service
     * started with {@code --steps}, which ends every rank's feed (END) before the trainers' {@code --steps}: the ranks stop
     * together at that step (no rank left waiting in DDP's all-reduce), exit 0, and save a checkpoint there; relaunched
     * on a longer feed, the job continues with the uninterrupted packed run's losses and samples, bit for bit.
     */
    @Test
    @Order(4)
    void aPackedJobTrainsOnThePlannedPacksAndAFeedThatEndsEarlyStopsItWhereItResumesBitForBit() throws Exception {
        int steps = 6, half = 3;
        var packing = List.of("--pack-tokens", "" + PACK_TOKENS, "--shm-budget", "512M");
        Path fullLog = tmp.resolve("log-packed"), shortLog = tmp.resolve("log-packed-short"), resumedLog = tmp.resolve("log-packed-resumed");
        finish(startJob("packed", RANKS, packing, tmp.resolve("ckpt-packed"), fullLog, steps, List.of()));
        Path ckpt = tmp.resolve("ckpt-packed-short");
        var feedEnds = new ArrayList<>(packing);
        feedEnds.addAll(List.of("--steps", "" + half));
        Job shortJob = startJob("packed-short", RANKS, feedEnds, ckpt, shortLog, steps, List.of());
        finish(shortJob);
        assertTrue(shortJob.output().contains("the service's feed ended at step " + half + ", before --steps " + steps), shortJob.output());
        Job resumed = startJob("packed-resumed", RANKS, packing, ckpt, resumedLog, steps, List.of());
        finish(resumed);
        assertTrue(resumed.output().contains("resuming at step " + half), resumed.output());
        Logs full = Logs.read(fullLog, RANKS), first = Logs.read(shortLog, RANKS), rest = Logs.read(resumedLog, RANKS);
        var planned = packedPlan(RANKS, steps);
        for (int rank = 0; rank < RANKS; rank++) {
            assertEquals(steps, full.lines().get(rank).size(), "rank " + rank);
            assertEquals(half, first.lines().get(rank).size(), "rank " + rank + " stopped with the feed" + shortJob.output());
            assertEquals(steps - half, rest.lines().get(rank).size(), "rank " + rank + resumed.output());
            for (int step = 0; step < steps; step++) {
                var got = new ArrayList<Long>();
                full.at(rank, step).get("sample_index").forEach(x -> got.add(x.asLong()));
                assertEquals(planned.get(step + "/" + rank), got, "step " + step + " rank " + rank + ": the planned pack");
                assertTrue(Float.isFinite((float) full.at(rank, step).get("loss").asDouble()));
                JsonNode want = full.at(rank, step);
                if (step < half) assertEquals(full.line(rank, step), first.line(rank, step), "the first half, bit for bit");
                else assertEquals(full.line(rank, step), rest.line(rank, step - half), "rank " + rank + " step " + step
                        + " after the resume: " + want);
            }
        }
    }

    /** {@code stoker plan --pack-tokens}'s packs: "step/rank" → the samples in segment order (−1: the dummy image's segment). */
    static java.util.Map<String, List<Long>> packedPlan(int ranks, int steps) throws IOException {
        var r = CliRunner.run("plan", "--data", manifest.toString(), "--ranks", "" + ranks, "--pack-tokens", "" + PACK_TOKENS,
                "--max-pixels", "" + MAX_PIXELS, "--max-images", "2", "--steps", "" + steps);
        assertEquals(0, r.status(), r.err());
        var out = new java.util.HashMap<String, List<Long>>();
        for (String line : r.out().strip().split("\n")) {
            JsonNode n = JSON.readTree(line);
            if (n.has("segment"))
                out.computeIfAbsent(n.get("step").asInt() + "/" + n.get("rank").asInt(), k -> new ArrayList<>()).add(n.get("sample").asLong());
        }
        return out;
    }

    // ------------------------------------------------------------------ the runs

    /** A finished job and its workers' step logs. */
    record Run(Job job, Logs logs) {}

    /**
     * The 2-rank run of STEPS steps, never interrupted, as two nodes of one rank each (made once): the reference every
     * one-node run is compared with, line for line.
     */
    static synchronized Run uninterrupted() throws Exception {
        if (uninterrupted == null) {
            Path logDir = tmp.resolve("log-uninterrupted");
            Job job = startNodes("uninterrupted", 2, 1, List.of(), tmp.resolve("ckpt-uninterrupted"), logDir, STEPS, List.of());
            finish(job);
            uninterrupted = new Run(job, Logs.read(logDir, RANKS));
        }
        return uninterrupted;
    }

    /** The killed run relaunched from its checkpoint on a fresh service, to the job's end, with a report (made once). */
    static synchronized Run resumed() throws Exception {
        if (resumed == null) {
            Path logDir = tmp.resolve("log-resumed");
            Job job = startJob("resumed", RANKS, List.of("--report-dir", tmp.resolve("report-resumed").toString()), killed().checkpoint(),
                    logDir, STEPS, List.of());
            finish(job);
            resumed = new Run(job, Logs.read(logDir, RANKS));
        }
        return resumed;
    }

    /** The killed run: its logs up to the kill, its checkpoint folder, and a copy of its checkpoint at step K. */
    record Killed(Logs logs, Path checkpoint, Path checkpointAtK) {}

    /**
     * The same job with a pause after each step, SIGKILLed (torchrun, its workers and the service) once a rank has logged a
     * step after K, i.e. after the checkpoint at K was written (a rank logs step K only after the all-reduce in which rank 0
     * joins once it has written it) and before the job's end (made once).
     */
    static synchronized Killed killed() throws Exception {
        if (killed == null) {
            Path logDir = tmp.resolve("log-killed"), ckpt = tmp.resolve("ckpt-killed");
            Job job = startJob("killed", RANKS, ckpt, logDir, STEPS, List.of("--pause-ms", "" + PAUSE_MS));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TORCHRUN_SECONDS);
            while (Logs.read(logDir, RANKS).lastStep() <= K) {
                assertTrue(job.launch().isAlive(), "the job ended before step " + (K + 1) + ": " + job.output());
                assertTrue(System.nanoTime() < deadline, "no step " + (K + 1) + " within " + TORCHRUN_SECONDS + " s: " + job.output());
                Thread.sleep(20);
            }
            job.killHard();
            Logs logs = Logs.read(logDir, RANKS);
            assertTrue(logs.lastStep() > K && logs.lastStep() < STEPS - 1, "killed between step " + K + " and the end: " + logs.lastStep());
            Path atK = Files.createDirectories(tmp.resolve("ckpt-at-k")).resolve("checkpoint.pt");
            Files.copy(ckpt.resolve("checkpoint.pt"), atK);
            killed = new Killed(logs, ckpt, atK.getParent());
        }
        return killed;
    }

    /**
     * One node of a running job: its {@code stoker launch} (the service and torchrun are its children), launch's output,
     * and its service's socket and shared-memory folder.
     */
    record Node(Process launch, Path log, Path socket, Path shm) {}

    /** A running job: its nodes, and the folder of the workers' own logs (one subfolder per node). */
    record Job(String name, List<Node> nodes, Path workerLogs) {
        /** The one node of a one-node job. */
        Process launch() { return nodes.getFirst().launch(); }

        /**
         * What each launch printed (its service's lines and torchrun's, which runs on launch's stdout) and every worker's
         * stderr (torchrun --redirects 2 keeps it in files).
         */
        String output() {
            var out = new StringBuilder();
            for (int i = 0; i < nodes.size(); i++) out.append("\n--- launch ").append(name).append(" node ").append(i).append(":\n").append(read(nodes.get(i).log()));
            if (Files.isDirectory(workerLogs)) {
                try (var files = Files.walk(workerLogs)) {
                    for (Path f : files.filter(f -> f.getFileName().toString().equals("stderr.log")).sorted().toList())
                        out.append("\n--- ").append(workerLogs.relativize(f)).append(":\n").append(read(f));
                } catch (IOException e) {
                    out.append("\n(").append(e).append(")");
                }
            }
            return out.toString();
        }

        /**
         * A job that did not end: SIGABRT to the Python processes under each launch first (torchrun and its workers), so that
         * Python's fault handler (on through PYTHONFAULTHANDLER) writes where every thread waits into the logs {@link #output}
         * shows, then SIGKILL to everything.
         */
        void abortAndKill() throws Exception {
            for (Node node : nodes)
                for (ProcessHandle h : node.launch().descendants().toList())
                    if (h.info().command().orElse("").contains("python"))
                        new ProcessBuilder("kill", "-ABRT", "" + h.pid()).start().waitFor(5, TimeUnit.SECONDS);
            Thread.sleep(2000);
            killHard();
        }

        /** SIGKILL to every launch, its service, torchrun and the workers, all at once, as a node failure would. */
        void killHard() throws InterruptedException {
            var trees = new ArrayList<List<ProcessHandle>>();
            for (Node node : nodes) {
                var tree = new ArrayList<>(node.launch().descendants().toList());
                tree.addFirst(node.launch().toHandle());
                trees.add(tree);
            }
            for (var tree : trees) tree.forEach(ProcessHandle::destroyForcibly);
            for (var tree : trees)
                for (ProcessHandle h : tree) {
                    try {
                        h.onExit().get(30, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        throw new AssertionError("pid " + h.pid() + " did not die of SIGKILL in 30 s", e);
                    }
                }
        }
    }

    /**
     * {@code stoker launch [serve options] --nproc-per-node RANKS -- torchrun --nproc_per_node RANKS train.py …}: the job as
     * a user starts it on one node. Launch starts the service, waits until it listens, runs torchrun with
     * {@code STOKER_SOCKET}/{@code STOKER_JOB} in its environment (train.py's {@code Loader.from_env} reads them) and stops
     * the service when torchrun ends. The one place that starts a training job ({@link #startNodes} for several nodes).
     */
    static Job startJob(String name, int ranks, Path checkpoint, Path logDir, int steps, List<String> trainArgs) throws Exception {
        return startJob(name, ranks, List.of(), checkpoint, logDir, steps, trainArgs);
    }

    /** {@link #startJob(String, int, Path, Path, int, List)} with more {@code serve} options. */
    static Job startJob(String name, int ranks, List<String> serveArgs, Path checkpoint, Path logDir, int steps, List<String> trainArgs)
            throws Exception {
        return startNodes(name, 1, ranks, serveArgs, checkpoint, logDir, steps, trainArgs);
    }

    /**
     * The job on {@code nnodes} "nodes" of {@code perNode} ranks on this host: per node I, {@code stoker launch --nnodes N
     * --node-rank I --nproc-per-node P} with its own socket and shared-memory folder (so its service serves ranks
     * I·P … I·P+P−1 only) running {@code torchrun --nnodes N --node_rank I} with the static rendezvous on 127.0.0.1.
     */
    static Job startNodes(String name, int nnodes, int perNode, List<String> serveArgs, Path checkpoint, Path logDir, int steps,
            List<String> trainArgs) throws Exception {
        int masterPort = freePort();
        Path workerLogs = tmp.resolve(name + "-workers");
        var nodes = new ArrayList<Node>();
        for (int node = 0; node < nnodes; node++) {
            String id = nnodes == 1 ? name : name + "-node" + node;
            Path socket = tmp.resolve(id + ".sock"), log = tmp.resolve(id + "-launch.log");
            Path shm = Files.createDirectories(tmp.resolve("shm-" + id));
            var args = new ArrayList<>(List.of("launch", "--nnodes", "" + nnodes, "--node-rank", "" + node, "--nproc-per-node", "" + perNode,
                    "--data", manifest.toString(), "--job", JOB, "--max-pixels", "" + MAX_PIXELS, "--max-images", "2",
                    "--threads", "2", "--warm-up-ms", "200", "--socket", socket.toString(), "--shm-dir", shm.toString()));
            if (!serveArgs.contains("--pack-tokens")) args.addAll(List.of("--batch", "" + BATCH)); // a packed job has no batch size
            // a job with videos is sized by its tokens (--max-images does not bound a video's frames): 1024 tokens a sample
            if (!serveArgs.contains("--shm-budget")) args.addAll(List.of("--shm-budget", "512M", "--max-seq-len", "1024"));
            // decoded in the service's threads: what this test shows is training and resume, and the worker processes'
            // start per service would cost its runs seconds (FlightServeTest serves video through the default workers)
            args.addAll(List.of("--video-decode", "in-process"));
            args.addAll(serveArgs);
            args.addAll(List.of("--", PYTHON, "-m", "torch.distributed.run", "--nnodes", "" + nnodes, "--node_rank", "" + node,
                    "--nproc_per_node", "" + perNode, "--master_addr", "127.0.0.1", "--master_port", "" + masterPort, "--redirects", "2",
                    "--tee", "1", "--log_dir", workerLogs.resolve("node" + node).toString(), trainScript.toString(), "--steps", "" + steps,
                    "--ckpt", checkpoint.toString(), "--ckpt-every", "" + K, "--log", logDir.toString()));
            args.addAll(trainArgs);
            var pb = new ProcessBuilder(ChildJvm.stoker(ServeProcess.jvmFlags(log, "512m"), args)).redirectErrorStream(true)
                    .redirectOutput(log.toFile());
            pb.environment().keySet().removeIf(k -> k.startsWith("SLURM_") || k.startsWith("STOKER_"));
            pb.environment().put("PYTHONPATH", Vectors.projectDir().resolve("clients/python").toString());
            pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
            pb.environment().put("PYTHONFAULTHANDLER", "1");
            Process launch = pb.start();
            started.add(launch);
            launch.getOutputStream().close();
            nodes.add(new Node(launch, log, socket, shm));
        }
        return new Job(name, nodes, workerLogs);
    }

    /**
     * Waits for every launch to end with status 0: torchrun's status, after launch stopped its service cleanly, which
     * removed its socket and its shared memory.
     */
    static void finish(Job job) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TORCHRUN_SECONDS);
        boolean ended = true;
        for (Node node : job.nodes()) ended &= node.launch().waitFor(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        if (!ended) job.abortAndKill();
        assertTrue(ended, "job " + job.name() + " did not end within " + TORCHRUN_SECONDS + " s" + job.output());
        for (Node node : job.nodes()) {
            assertEquals(0, node.launch().exitValue(), job.output());
            String log = read(node.log());
            assertTrue(log.contains("stoker launch: COMMAND exited with status 0; stopping the service") && log.contains("stoker serve: stopping"),
                    "launch stopped its service once torchrun ended: " + job.output());
            assertFalse(Files.exists(node.socket()), "the socket is removed: " + node.socket());
            try (var left = Files.list(node.shm())) {
                assertEquals(List.of(), left.toList(), "no shared memory left");
            }
        }
    }

    /** SIGKILL to a process and every descendant it has now (torchrun's workers are its children). */
    static void killTree(Process p) {
        List<ProcessHandle> tree = new ArrayList<>(p.descendants().toList());
        tree.addFirst(p.toHandle());
        for (ProcessHandle h : tree) h.destroyForcibly();
    }

    static int freePort() throws IOException {
        return dev.stoker.testkit.Ports.free(); // below the ephemeral range: no outgoing connection takes it before the child binds
    }

    /** {@code stoker plan}'s samples for {@code steps} steps from {@code startStep} at {@code ranks} ranks, step by step, rank by rank. */
    static List<Long> plan(int ranks, int startStep, int steps) throws IOException {
        var r = CliRunner.run("plan", "--data", manifest.toString(), "--ranks", "" + ranks, "--batch", "" + BATCH,
                "--steps", "" + steps, "--start-step", "" + startStep);
        assertEquals(0, r.status(), r.err());
        var out = new ArrayList<Long>();
        for (String line : r.out().strip().split("\n")) out.add(JSON.readTree(line).get("sample").asLong());
        return out;
    }

    /** The per-rank step logs of a run: each rank's complete lines as written, and parsed. */
    record Logs(List<List<String>> lines, List<List<JsonNode>> ranks) {
        static Logs read(Path dir, int ranks) throws IOException {
            var lines = new ArrayList<List<String>>();
            var parsed = new ArrayList<List<JsonNode>>();
            for (int r = 0; r < ranks; r++) {
                Path f = dir.resolve("rank" + r + ".jsonl");
                String text = Files.exists(f) ? Files.readString(f) : "";
                var mine = new ArrayList<String>();
                var nodes = new ArrayList<JsonNode>();
                int start = 0;
                for (int end; (end = text.indexOf('\n', start)) >= 0; start = end + 1) { // a line being written has no '\n' yet
                    mine.add(text.substring(start, end));
                    nodes.add(JSON.readTree(text.substring(start, end)));
                }
                lines.add(mine);
                parsed.add(nodes);
            }
            return new Logs(lines, parsed);
        }

        JsonNode at(int rank, int index) { return ranks.get(rank).get(index); }

        String line(int rank, int index) { return lines.get(rank).get(index); }

        /** The highest step any rank logged, -1 for none. */
        int lastStep() {
            int last = -1;
            for (List<JsonNode> r : ranks) for (JsonNode n : r) last = Math.max(last, n.get("step").asInt());
            return last;
        }

        /** Every sample trained on, step by step, rank by rank. */
        List<Long> samples() {
            var out = new ArrayList<Long>();
            int steps = ranks.getFirst().size();
            for (List<JsonNode> r : ranks) assertEquals(steps, r.size(), "every rank logged the same steps");
            for (int i = 0; i < steps; i++)
                for (List<JsonNode> r : ranks) r.get(i).get("sample_index").forEach(x -> out.add(x.asLong()));
            return out;
        }
    }

    static String read(Path file) {
        try {
            return Files.exists(file) ? Files.readString(file) : "(no " + file + ")";
        } catch (IOException e) {
            return "(" + e + ")";
        }
    }
}
