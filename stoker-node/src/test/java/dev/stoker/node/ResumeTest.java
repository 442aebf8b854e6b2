package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.plan.schedule.SampleSchedule;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.transport.FeedProtocol;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Exact resume through the local protocol, against a real {@link RankLedger} and {@link FeedServer}
 * with Java {@link TrainerClient}s: a trainer that disconnects and reconnects, a batch lost in
 * transit or still being produced for a dead connection, a restarted service (with its prefetch
 * buffers full when it stopped), a resized job (2 → 3 ranks, mid-epoch and across the epoch
 * boundary), and states that must be refused. Every resumed run is compared, batch by batch, with
 * an uninterrupted run of the same settings: the digest of every tensor and the dataset indices.
 * A service process killed with SIGKILL and restarted is stoker-system-tests' {@code KilledServiceResumeTest}.
 *
 * <p>Data: 40 samples cut from the project's photos; 2 ranks × 3 samples = 6 per global step, so an
 * epoch is 6 steps (36 samples; the last 4 of each permutation are dropped) and 14 steps cross two
 * epoch boundaries.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class ResumeTest {
    static final String PYTHON = "/usr/bin/python3";
    static final int SAMPLES = 40, RANKS = 2, BATCH = 3, STEPS = 14;
    @TempDir static Path tmp;
    static Path manifest;
    static final List<List<String>> reference = new ArrayList<>(); // [rank][step] digest

    @BeforeAll
    static void dataAndReference() throws Exception {
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 7);
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            var digests = new ArrayList<List<String>>();
            try (var factory = factory(RANKS); var service = factory.start(mode, null); var server = server(service, "ref-" + mode)) {
                for (int r = 0; r < RANKS; r++) {
                    try (var c = connect(server, r, RANKS, null)) {
                        digests.add(take(c, STEPS));
                    }
                }
            }
            if (reference.isEmpty()) reference.addAll(digests);
            else assertEquals(reference, digests, "prefetch and zero-copy yield the same batches, their tensors in the same order");
        }
    }

    @ParameterizedTest
    @EnumSource(value = FeedMode.class, names = {"ZERO_COPY", "PREFETCH"})
    void aTrainerThatReconnectsContinuesWhereItWas(FeedMode mode) throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(mode, null); var server = server(service, "reconnect-" + mode)) {
            TrainerClient.State saved;
            try (var c = connect(server, 0, RANKS, null)) {
                assertEquals(reference.get(0).subList(0, 5), take(c, 5));
                saved = c.state();
            }
            assertEquals(new ScheduleCursor(0, 5 * RANKS * BATCH), saved.cursor());
            try (var c = connect(server, 0, RANKS, saved)) {
                assertEquals(reference.get(0).subList(5, STEPS), take(c, STEPS - 5));
            }
            try (var c = connect(server, 1, RANKS, null)) { // the other rank was never disturbed
                assertEquals(reference.get(1), take(c, STEPS));
            }
        }
    }

    @Test
    void aBatchThatArrivedButWasNotConsumedIsHandedOutAgain() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "lost")) {
            TrainerClient.State before;
            try (var c = connect(server, 1, RANKS, null)) {
                assertEquals(reference.get(1).subList(0, 3), take(c, 3));
                before = c.state();
                assertEquals(reference.get(1).get(3), take(c, 1).getFirst()); // arrived; the trainer crashed before a checkpoint
            }
            try (var c = connect(server, 1, RANKS, before)) {
                assertEquals(reference.get(1).subList(3, STEPS), take(c, STEPS - 3));
            }
            // the server releases a connection's leases when it sees the close, after the client's close returns
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (server.connectionsOpen() > 0 && System.nanoTime() < deadline) Thread.sleep(5);
            assertEquals(0, server.connectionsOpen(), "the server has seen both connections close");
            assertEquals(0, server.leasesHeld());
        }
    }

    @Test
    void aBatchProducedForADeadConnectionGoesToTheNextOne() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "dead")) {
            TrainerClient.State saved;
            try (var c = connect(server, 0, RANKS, null)) {
                take(c, 2);
                saved = c.state();
            }
            // a trainer that asks for its next batch and dies before the answer
            try (var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
                ch.connect(UnixDomainSocketAddress.of(server.socketPath()));
                var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, 0, RANKS, FeedProtocol.FLAG_SHARED_MEMORY, saved.cursor(),
                        saved.fingerprint(), "t");
                FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, encode(hello));
                var in = new FeedProtocol.FrameReader(ch);
                assertEquals(FeedProtocol.WELCOME, in.next().type());
                FeedProtocol.writeFrame(ch, FeedProtocol.NEXT, null);
            }
            try (var c = connect(server, 0, RANKS, saved)) {
                assertEquals(reference.get(0).subList(2, STEPS), take(c, STEPS - 2));
            }
        }
    }

    /** A service restarted (its prefetch buffers were full when it stopped) continues every rank at its saved cursor. */
    @ParameterizedTest
    @ValueSource(ints = {4, 7}) // mid-epoch, and past the first epoch boundary
    void aRestartedServiceResumesEveryRankFromItsState(int done) throws Exception {
        var states = new ArrayList<TrainerClient.State>();
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "before-" + done)) {
            for (int r = 0; r < RANKS; r++) {
                try (var c = connect(server, r, RANKS, null)) {
                    assertEquals(reference.get(r).subList(0, done), take(c, done));
                    states.add(c.state());
                }
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (service.feeder().metrics().bufferedBatches() < (long) RANKS * 4 && System.nanoTime() < deadline) Thread.sleep(20);
            assertEquals((long) RANKS * 4, service.feeder().metrics().bufferedBatches(), "prefetch buffers full when the service stops");
        }
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "after-" + done)) {
            for (int r = 0; r < RANKS; r++) {
                try (var c = connect(server, r, RANKS, states.get(r))) {
                    assertEquals(reference.get(r).subList(done, STEPS), take(c, STEPS - done));
                }
            }
            assertEquals(1, service.repositions());
        }
    }

    /**
     * Two ranks save at step {@code done}; three ranks resume. The epoch's global order continues:
     * what the three take up to the epoch's end is exactly the permutation from the saved position
     * on, and nothing of what the two took comes again in that epoch.
     */
    @ParameterizedTest
    @ValueSource(ints = {4, 5, 6})
    void aJobResizedFromTwoToThreeRanksLosesAndRepeatsNothing(int done) throws Exception {
        var before = new ArrayList<List<Long>>();
        var labelsBefore = new HashSet<Long>();
        TrainerClient.State saved = null;
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "two-" + done)) {
            for (int r = 0; r < RANKS; r++) {
                try (var c = connect(server, r, RANKS, null)) {
                    var mine = new ArrayList<Long>();
                    for (int s = 0; s < done; s++) mine.addAll(indices(c, labelsBefore));
                    before.add(mine);
                    saved = c.state();
                }
            }
        }
        var after = new ArrayList<List<Long>>();
        try (var factory = factory(3); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "three-" + done)) {
            for (int r = 0; r < 3; r++) {
                try (var c = connect(server, r, 3, saved)) {
                    assertEquals(saved.nextStep(), c.state().nextStep(), "rank " + r + " is welcomed at the saved state's step label");
                    var mine = new ArrayList<Long>();
                    var labels = new ArrayList<Long>();
                    while (c.state().epoch() == saved.epoch()) mine.addAll(indices(c, labels));
                    indices(c, labels); // the next epoch's first step
                    // audit #32: the labels go on from the two ranks' count, one per step, into the next epoch; none repeats
                    for (int i = 0; i < labels.size(); i++) {
                        assertEquals(saved.nextStep() + i, labels.get(i), "rank " + r + "'s batch " + i);
                        assertFalse(labelsBefore.contains(labels.get(i)), "label " + labels.get(i) + " was used before the resize");
                    }
                    assertEquals(epochTail(saved, 3), mine.size());
                    after.add(mine);
                }
            }
        }
        // the global order is a function of (seed, epoch, data set size) only: the same for 2 and 3 ranks
        var schedule = new SampleSchedule(1234, SAMPLES, 3, BATCH);
        int[] epoch0 = schedule.permutationCopy(0), resumed = schedule.permutationCopy(saved.epoch());
        assertEquals(slice(epoch0, 0, done * RANKS * BATCH), interleave(before), "two ranks took the epoch's first positions");
        var expected = new ArrayList<Long>();
        for (long p = saved.position(); p + 3 * BATCH <= SAMPLES; p += 3 * BATCH) expected.addAll(slice(resumed, (int) p, (int) p + 3 * BATCH));
        var continued = interleave(after);
        assertEquals(expected, continued, "three ranks continue the epoch's global order from the saved position");
        if (saved.epoch() == 0) {
            var seen = new HashSet<>(interleave(before));
            for (long i : continued) assertTrue(seen.add(i), "sample " + i + " repeated in epoch 0");
        }
    }

    static List<Long> slice(int[] perm, int from, int to) {
        return Arrays.stream(perm, from, to).mapToObj(i -> (long) i).toList();
    }

    /** Step by step, rank by rank: the global order of what the ranks took. */
    static List<Long> interleave(List<List<Long>> perRank) {
        var out = new ArrayList<Long>();
        for (int s = 0; s * BATCH < perRank.getFirst().size(); s++)
            for (var mine : perRank) out.addAll(mine.subList(s * BATCH, s * BATCH + BATCH));
        return out;
    }

    /** A job resized from 2 to 3 ranks: Flight sessions resumed at the saved cursor get what socket trainers resumed there get. */
    @Test
    void flightTrainersResumeIntoAResizedJobLikeSocketTrainers() throws Exception {
        TrainerClient.State saved;
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "resize-src")) {
            try (var c = connect(server, 0, RANKS, null)) {
                take(c, 3);
                saved = c.state();
            }
        }
        var bySocket = new ArrayList<List<String>>();
        var socketStates = new ArrayList<TrainerClient.State>();
        try (var factory = factory(3); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "resize-sock")) {
            for (int r = 0; r < 3; r++)
                try (var c = connect(server, r, 3, saved)) {
                    bySocket.add(take(c, 4));
                    socketStates.add(c.state());
                }
        }
        var byFlight = new ArrayList<List<String>>();
        try (var factory = factory(3); var service = factory.start(FeedMode.ZERO_COPY, null);
             var flight = dev.stoker.flight.FlightBatchServer.start(org.apache.arrow.flight.Location.forGrpcInsecure("127.0.0.1", 0),
                     service, null, null, dev.stoker.flight.FlightBatchServer.Security.NONE);
             var client = dev.stoker.flight.FlightBatchClient.connect("127.0.0.1", flight.port())) {
            for (int r = 0; r < 3; r++) {
                var s = client.open(r, 3, "t", saved.cursor(), saved.nextStep(), saved.fingerprint());
                assertEquals(saved.nextStep(), s.firstStep(), "the saved label goes on (audit #32)");
                var got = new ArrayList<String>();
                for (int i = 0; i < 4; i++) got.add(digest(s.next()));
                byFlight.add(got);
                // after a resize the cursor is no multiple of the step: the session follows it as the socket's client does
                assertEquals(socketStates.get(r).cursor(), s.cursor(), "rank " + r + "'s cursor after 4 batches");
                assertEquals(socketStates.get(r).nextStep(), s.nextStep());
                s.close();
            }
        }
        assertEquals(bySocket, byFlight);
    }

    /**
     * The Python client saves its {@code state_dict()}; a new Python process, against a restarted
     * service, resumes from it bit for bit.
     */
    @Test
    void thePythonClientResumesFromItsSavedStateOnARestartedService() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "no /usr/bin/python3");
        Path state = tmp.resolve("py-state.json");
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "py-a")) {
            var first = python(server, 1, 4, null, state);
            assertEquals(reference.get(1).subList(0, 4), strings(first.get("digests")));
            assertEquals(4L * RANKS * BATCH, first.get("state").get("position").asLong());
        }
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "py-b")) {
            var resumed = python(server, 1, STEPS - 4, state, null);
            assertEquals(reference.get(1).subList(4, STEPS), strings(resumed.get("digests")));
            assertEquals(1, service.repositions());
        }
    }

    static com.fasterxml.jackson.databind.JsonNode python(FeedServer server, int rank, int steps, Path stateIn, Path stateOut)
            throws Exception {
        return python(server, rank, steps, stateIn, stateOut, 0);
    }

    /** fetch_batches.py take; {@code thenDie} > 0: it takes that many more batches after saving its state, then SIGKILLs itself. */
    static com.fasterxml.jackson.databind.JsonNode python(FeedServer server, int rank, int steps, Path stateIn, Path stateOut, int thenDie)
            throws Exception {
        var cmd = new ArrayList<>(List.of(PYTHON, Vectors.projectDir().resolve("clients/python/tests/integration/fetch_batches.py")
                .toString(), "take", "--socket", server.socketPath().toString(), "--world", "" + RANKS, "--rank", "" + rank, "--job", "t",
                "--steps", "" + steps));
        if (stateIn != null) cmd.addAll(List.of("--state-in", stateIn.toString()));
        if (stateOut != null) cmd.addAll(List.of("--state-out", stateOut.toString()));
        if (thenDie > 0) cmd.addAll(List.of("--then-die", "" + thenDie));
        var p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(thenDie > 0 ? 128 + 9 : 0, p.exitValue(), out);
        var lines = out.strip().split("\n");
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(lines[lines.length - 1]);
    }

    static List<String> strings(com.fasterxml.jackson.databind.JsonNode array) {
        var out = new ArrayList<String>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    /**
     * A Python trainer killed with SIGKILL two batches after its checkpoint: a new process resumes
     * from the checkpoint on the running service and gets exactly what followed it (the two batches
     * the dead one trained on again, then the rest).
     */
    @Test
    void aPythonTrainerKilledWithSigkillResumesFromItsCheckpoint() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of(PYTHON)), "no /usr/bin/python3");
        Path state = tmp.resolve("py-killed.json");
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "py-kill")) {
            var dead = python(server, 0, 3, null, state, 2);
            assertEquals(reference.get(0).subList(0, 5), strings(dead.get("digests")));
            var resumed = python(server, 0, STEPS - 3, state, null);
            assertEquals(reference.get(0).subList(3, STEPS), strings(resumed.get("digests")), "from the checkpoint, exactly");
        }
    }

    @Test
    void aStateFromAnotherJobIsRefusedClearly() throws Exception {
        TrainerClient.State saved;
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "job-a")) {
            try (var c = connect(server, 0, RANKS, null)) {
                take(c, 1);
                saved = c.state();
            }
        }
        try (var factory = factory(RANKS, 99); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "job-b")) {
            var e = assertThrows(IOException.class, () -> connect(server, 0, RANKS, saved));
            assertTrue(e.getMessage().contains("another data set or configuration"), e.getMessage());
        }
    }

    /**
     * A trainer restarted from an older checkpoint (its last batches were confirmed by later
     * requests): while another rank's trainer is connected the running feed cannot move back and
     * says so; once no rank has a trainer connected (an elastic restart stops them all), the feed
     * moves back and every rank resumes exactly from the checkpoint.
     */
    @Test
    void aResumeBehindTheRunningFeedWaitsForEveryRankToStopThenMovesBack() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "moved")) {
            TrainerClient.State saved;
            try (var c = connect(server, 0, RANKS, null)) {
                take(c, 1);
                saved = c.state();
                take(c, 3); // and consumed three more; the service knows they arrived
            }
            try (var other = connect(server, 1, RANKS, null)) {
                take(other, 1);
                var e = assertThrows(IOException.class, () -> connect(server, 0, RANKS, saved));
                assertTrue(e.getMessage().contains("asks to resume at epoch 0 position 6"), e.getMessage());
                assertTrue(e.getMessage().contains("a trainer of another rank is connected"), e.getMessage());
            }
            for (int r = 0; r < RANKS; r++)
                try (var c = connect(server, r, RANKS, saved)) {
                    assertEquals(reference.get(r).subList(1, STEPS), take(c, STEPS - 1), "rank " + r + " from the checkpoint");
                }
            assertEquals(1, service.repositions());
        }
    }

    /**
     * An elastic restart: a rank's resume that must move the pipeline back arrives while another
     * rank's old trainer is still closing; it waits for that end instead of being refused.
     */
    @Test
    void aResumeThatMustMoveWaitsForAnotherRanksClosingTrainer() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.PREFETCH, null); var server = server(service, "closing")) {
            TrainerClient.State saved;
            try (var c = connect(server, 0, RANKS, null)) {
                take(c, 1);
                saved = c.state();
                take(c, 3);
            }
            var other = connect(server, 1, RANKS, null);
            take(other, 1);
            var resumed = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                try (var c = connect(server, 0, RANKS, saved)) {
                    return take(c, STEPS - 1);
                } catch (Exception e) {
                    throw new java.util.concurrent.CompletionException(e);
                }
            });
            Thread.sleep(300); // the resume is waiting in its hello
            assertFalse(resumed.isDone(), "the resume waits while rank 1's trainer is connected");
            other.close();
            assertEquals(reference.get(0).subList(1, STEPS), resumed.get(30, java.util.concurrent.TimeUnit.SECONDS));
            assertEquals(1, service.repositions());
        }
    }

    @Test
    void aRefusedResumeLeavesTheLiveConnectionOfItsRankAlone() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "live")) {
            try (var live = connect(server, 0, RANKS, null)) {
                assertEquals(reference.get(0).subList(0, 3), take(live, 3));
                var wrong = new TrainerClient.State("t", 0, RANKS, service.feeder().fingerprint(), 0, 30, 5);
                assertThrows(IOException.class, () -> connect(server, 0, RANKS, wrong));
                assertEquals(reference.get(0).subList(3, STEPS), take(live, STEPS - 3));
            }
        }
    }

    /** A second connection claiming a live rank is refused, naming the rank; the live one goes on, nothing duplicated (audit #5). */
    @Test
    void aSecondClaimOfALiveRankIsRefusedAndTheLiveOneGoesOn() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "twice")) {
            try (var live = connect(server, 0, RANKS, null)) {
                assertEquals(reference.get(0).subList(0, 3), take(live, 3));
                var e = assertThrows(IOException.class, () -> connect(server, 0, RANKS, null));
                assertTrue(e.getMessage().contains("rank 0 is already being fed to a trainer on another, open connection"), e.getMessage());
                assertEquals(reference.get(0).subList(3, STEPS), take(live, STEPS - 3));
            }
            try (var again = connect(server, 0, RANKS, null)) { // once closed, the rank may be claimed, and goes on after it
                assertEquals(STEPS, again.welcome().nextStep());
            }
        }
    }

    /**
     * A fresh trainer after one that died with a request pending: its WELCOME names the batch it
     * will get first, which is the one made for the dead request (audit #4), so its state never
     * runs ahead of what it got.
     */
    @Test
    void aFreshTrainerAfterADeadRequestIsWelcomedAtTheBatchItGets() throws Exception {
        try (var factory = factory(RANKS, 1234, 400); var service = factory.start(FeedMode.ZERO_COPY, null);
             var server = server(service, "fresh")) {
            try (var ch = SocketChannel.open(StandardProtocolFamily.UNIX)) { // asks for step 0, which takes 400 ms to fetch, and dies
                ch.connect(UnixDomainSocketAddress.of(server.socketPath()));
                var hello = new FeedProtocol.Hello(FeedProtocol.VERSION, 0, RANKS, FeedProtocol.FLAG_SHARED_MEMORY, null, 0, "t");
                FeedProtocol.writeFrame(ch, FeedProtocol.HELLO, hello.encode());
                var in = new FeedProtocol.FrameReader(ch);
                assertEquals(FeedProtocol.WELCOME, in.next().type());
                FeedProtocol.writeFrame(ch, FeedProtocol.NEXT, null);
            }
            try (var c = connect(server, 0, RANKS, null)) {
                long welcomed = c.welcome().nextStep();
                try (var got = c.next()) {
                    assertEquals(welcomed, got.batch().meta().globalStep(), "the WELCOME's step is the first batch's");
                    assertEquals(reference.get(0).get((int) welcomed), digest(got.batch()));
                }
                assertEquals(new ScheduleCursor(0, (welcomed + 1) * RANKS * BATCH), c.state().cursor());
            }
        }
    }

    /**
     * A Flight trainer behind the same ledger: a session resumed from its saved state gets every
     * batch after it exactly once (the one that arrived after the state again), a second live
     * session on its rank is refused naming the rank, and a session that went idle (its client died
     * without a goodbye) frees the rank.
     */
    @Test
    void aFlightTrainerResumesFromItsStateAndASecondClaimOfItsRankIsRefused() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null);
             var flight = dev.stoker.flight.FlightBatchServer.start(org.apache.arrow.flight.Location.forGrpcInsecure("127.0.0.1", 0),
                     service, null, null, dev.stoker.flight.FlightBatchServer.Security.NONE);
             var client = dev.stoker.flight.FlightBatchClient.connect("127.0.0.1", flight.port())) {
            flight.sessionIdle(java.time.Duration.ofSeconds(1));
            var first = client.open(0, RANKS, "t", null, 0);
            var got = new ArrayList<String>();
            for (int i = 0; i < 3; i++) got.add(digest(first.next()));
            assertEquals(reference.get(0).subList(0, 3), got);
            var saved = first.cursor();
            long fingerprint = first.fingerprint();
            var e = assertThrows(org.apache.arrow.flight.FlightRuntimeException.class, () -> client.open(0, RANKS, "t", null, 0));
            assertTrue(e.getMessage().contains("rank 0 is already being fed"), e.getMessage());
            assertEquals(reference.get(0).get(3), digest(first.next())); // arrived; the trainer dies without a goodbye
            Thread.sleep(1500);
            var resumed = client.open(0, RANKS, "t", saved, fingerprint);
            assertEquals(3, resumed.firstStep());
            got.clear();
            for (int i = 3; i < STEPS; i++) got.add(digest(resumed.next()));
            assertEquals(reference.get(0).subList(3, STEPS), got, "every batch after the state, none twice");
            resumed.close();
            try (var socket = server(service, "flight-other"); var c = connect(socket, 1, RANKS, null)) { // the socket's rank 1 beside it
                assertEquals(reference.get(1), take(c, STEPS));
            }
        }
    }

    /**
     * A Flight ticket without a session for a rank a trainer holds (a socket trainer on rank 0, a
     * Flight session on rank 1) is refused, naming the rank: it took the rank's next batch, which
     * was then missing from the live trainer's. The live trainers go on with exactly the
     * uninterrupted run's batches; once they are gone, such a ticket takes what comes next.
     */
    @Test
    void aFlightTicketWithoutASessionCannotTakeTheBatchesOfARankATrainerHolds() throws Exception {
        try (var factory = factory(RANKS); var service = factory.start(FeedMode.ZERO_COPY, null); var server = server(service, "plain");
             var flight = dev.stoker.flight.FlightBatchServer.start(org.apache.arrow.flight.Location.forGrpcInsecure("127.0.0.1", 0),
                     service, null, null, dev.stoker.flight.FlightBatchServer.Security.NONE);
             var client = dev.stoker.flight.FlightBatchClient.connect("127.0.0.1", flight.port())) {
            var socketTrainer = connect(server, 0, RANKS, null);
            var session = client.open(1, RANKS, "t", null, 0);
            var got = new ArrayList<String>();
            assertEquals(reference.get(0).subList(0, 3), take(socketTrainer, 3));
            for (int i = 0; i < 3; i++) got.add(digest(session.next()));
            for (int rank = 0; rank < RANKS; rank++) {
                int r = rank;
                var e = assertThrows(org.apache.arrow.flight.FlightRuntimeException.class, () -> client.next(r, RANKS, "t"));
                assertEquals(org.apache.arrow.flight.FlightStatusCode.INVALID_ARGUMENT, e.status().code());
                assertTrue(e.getMessage().contains("rank " + r + " is being fed to a trainer on an open connection or session"), e.getMessage());
            }
            assertEquals(reference.get(0).subList(3, STEPS), take(socketTrainer, STEPS - 3), "the socket trainer's rank: nothing taken");
            for (int i = 3; i < STEPS; i++) got.add(digest(session.next()));
            assertEquals(reference.get(1), got, "the session's rank: nothing taken");
            socketTrainer.close();
            session.close();
            assertEquals(STEPS, client.next(0, RANKS, "t").meta().globalStep(), "a rank nobody holds: what comes next, at most once");
        }
    }

    // ---- helpers ----

    static NodeFeeds factory(int ranks) throws IOException { return factory(ranks, 1234); }

    static NodeFeeds factory(int ranks, long seed) throws IOException { return factory(ranks, seed, 0); }

    static NodeFeeds factory(int ranks, long seed, long fetchLatencyMillis) throws IOException {
        var config = NodeConfig.builder().set(NodeConfig.FETCH_LATENCY_MS, fetchLatencyMillis).data(manifest.toString()).ranks(ranks).batch(BATCH).seed(seed).threads(2)
                .set(NodeConfig.FETCH_CONCURRENCY, 4).shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1)
                .warmUpMillis(0).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176).build();
        return NodeFeeds.open(config);
    }

    static FeedServer server(RankLedger service, String name) throws IOException {
        return new FeedServer(tmp.resolve(name + ".sock"), service, false);
    }

    static TrainerClient connect(FeedServer server, int rank, int world, TrainerClient.State resume) throws IOException {
        var options = TrainerClient.Options.SHARED_MEMORY;
        if (resume != null) options = options.resumingFrom(resume);
        return TrainerClient.connect(server.socketPath(), rank, world, "t", options);
    }

    /** The digests of the next {@code n} batches: every tensor's name, shape and bytes, in the batch's order. */
    static List<String> take(TrainerClient c, int n) throws Exception {
        var out = new ArrayList<String>();
        for (int i = 0; i < n; i++) {
            try (var got = c.next()) {
                out.add(digest(got.batch()));
            }
        }
        return out;
    }

    /** Samples the rest of the saved epoch holds for one of {@code ranks} ranks from the saved cursor on. */
    static int epochTail(TrainerClient.State saved, int ranks) {
        return (int) ((SAMPLES - saved.position()) / (ranks * BATCH)) * BATCH;
    }

    /** {@link #indices(TrainerClient)}, adding the batch's step label to {@code labels}. */
    static List<Long> indices(TrainerClient c, java.util.Collection<Long> labels) throws IOException {
        try (var got = c.next()) {
            labels.add(got.batch().meta().globalStep());
            return Arrays.stream(got.batch().sampleIndex()).boxed().toList();
        }
    }

    static List<Long> indices(TrainerClient c) throws IOException {
        try (var got = c.next()) {
            return Arrays.stream(got.batch().sampleIndex()).boxed().toList();
        }
    }

    static String digest(BatchLayout.Batch b) { return BatchDigest.of(b); }

    static ByteBuffer encode(FeedProtocol.Hello h) {
        byte[] name = h.job().getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(48 + name.length).order(ByteOrder.LITTLE_ENDIAN).putInt(h.version()).putInt(h.rank()).putInt(h.world())
                .putInt(h.flags() | FeedProtocol.FLAG_RESUME).putLong(h.resume().epoch()).putLong(h.resume().position())
                .putLong(h.fingerprint()).putLong(0).put(name).flip();
    }
}
