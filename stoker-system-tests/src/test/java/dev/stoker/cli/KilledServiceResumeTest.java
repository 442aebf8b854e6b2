package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.node.FlightTokenFile;
import dev.stoker.testkit.BatchDigest;
import dev.stoker.testkit.DemoDatasetBuilder;
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
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code kill -9} of a {@code stoker serve} process with its prefetch buffers full, and a restart: the next start
 * removes the dead service's shared-memory arena, and trainers reconnecting with their saved states get exactly the
 * batches of an uninterrupted run, a socket trainer (rank 0) and an Arrow Flight session (rank 1) from the one kill;
 * SIGTERM then leaves no file behind. The same resume in-process, without a kill (a service closed and started again,
 * a resize, Python trainers), is {@code stoker-node}'s {@code ResumeTest}.
 *
 * <p>Data: 40 samples cut from the project's photos; 2 ranks × 3 samples a step, so that 14 steps cross two epoch
 * boundaries (an epoch is 6 steps).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
@Tag("slow")
class KilledServiceResumeTest {
    static final int SAMPLES = 40, RANKS = 2, BATCH = 3, STEPS = 14, BEFORE_KILL = 5;
    /** The serve default: batches each rank's buffer holds ahead of its trainer. */
    static final int PREFETCH_BATCHES = 4;
    @TempDir Path tmp;

    @Test
    void socketAndFlightTrainersResumeExactlyOnAServiceRestartedAfterSigkill() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 7);
        Path shm = Files.createDirectories(tmp.resolve("shm")), socket = tmp.resolve("kill.sock");
        int flightPort = freePort();
        // the uninterrupted run, a service of its own, starting beside the first one
        Process reference = serve(manifest, Files.createDirectories(tmp.resolve("shm-ref")), tmp.resolve("ref.sock"), "reference", null);
        Process first = serve(manifest, shm, socket, "first", flightPort);
        List<List<String>> expected;
        try {
            ServeProcess.awaitListening(reference, tmp.resolve("reference.log"));
            expected = new ArrayList<>();
            for (int r = 0; r < RANKS; r++)
                try (var c = TrainerClient.connect(tmp.resolve("ref.sock"), r, RANKS, "t", TrainerClient.Options.SHARED_MEMORY)) {
                    expected.add(take(c, STEPS));
                }
        } finally {
            stop(reference, "reference");
        }

        TrainerClient.State socketState;
        ScheduleCursor flightCursor;
        long fingerprint;
        Path firstArena;
        try {
            String log = ServeProcess.awaitListening(first, tmp.resolve("first.log"));
            firstArena = arena(log);
            try (var c = TrainerClient.connect(socket, 0, RANKS, "t", TrainerClient.Options.SHARED_MEMORY)) {
                assertEquals(expected.get(0).subList(0, BEFORE_KILL), take(c, BEFORE_KILL));
                socketState = c.state();
            }
            try (var client = FlightBatchClient.connect("127.0.0.1", flightPort, FlightTokenFile.clientOptions(System.getenv()), null)) {
                var session = client.open(1, RANKS, "t", null, 0);
                var got = new ArrayList<String>();
                for (int i = 0; i < BEFORE_KILL; i++) got.add(BatchDigest.of(session.next()));
                assertEquals(expected.get(1).subList(0, BEFORE_KILL), got);
                flightCursor = session.cursor();
                fingerprint = session.fingerprint();
            }
            awaitBuffersFull(log);
        } finally {
            first.destroyForcibly(); // SIGKILL: no clean-up at all
            assertTrue(first.waitFor(30, TimeUnit.SECONDS));
        }
        assertTrue(Files.isDirectory(firstArena), "a killed service leaves its arena behind");

        Process second = serve(manifest, shm, socket, "second", flightPort);
        try {
            Path secondArena = arena(ServeProcess.awaitListening(second, tmp.resolve("second.log")));
            assertFalse(Files.exists(firstArena), "the next start removed the dead service's arena");
            try (var left = Files.list(shm)) {
                assertEquals(List.of(secondArena), left.toList());
            }
            try (var c = TrainerClient.connect(socket, 0, RANKS, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(socketState))) {
                assertEquals(expected.get(0).subList(BEFORE_KILL, STEPS), take(c, STEPS - BEFORE_KILL), "rank 0 on the socket, resumed");
            }
            try (var client = FlightBatchClient.connect("127.0.0.1", flightPort, FlightTokenFile.clientOptions(System.getenv()), null);
                 var session = client.open(1, RANKS, "t", flightCursor, fingerprint)) {
                var got = new ArrayList<String>();
                for (int i = BEFORE_KILL; i < STEPS; i++) got.add(BatchDigest.of(session.next()));
                assertEquals(expected.get(1).subList(BEFORE_KILL, STEPS), got, "rank 1 over Flight, resumed");
            }
        } finally {
            stop(second, "second");
        }
        try (var left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "SIGTERM leaves no shared-memory file");
        }
    }

    /** {@code stoker serve} of the job on {@code socket} (and on Arrow Flight at {@code flightPort}), output to {@code tmp/NAME.log}. */
    private Process serve(Path manifest, Path shm, Path socket, String name, Integer flightPort) throws IOException {
        var args = new ArrayList<>(List.of("--data", manifest.toString(), "--ranks", "" + RANKS, "--batch", "" + BATCH,
                "--processor", "qwen2-vl", "--min-pixels", "3136", "--max-pixels", "50176", "--max-images", "1", "--threads", "2",
                "--warm-up-ms", "0", "--socket", socket.toString(), "--shm-dir", shm.toString(), "--shm-budget", "256M",
                "--metrics-port", "0"));
        if (flightPort != null) args.addAll(List.of("--flight", "127.0.0.1:" + flightPort));
        return ServeProcess.start(tmp.resolve(name + ".log"), "1g", args);
    }

    /** SIGTERM; the service stops cleanly (status 0) within 30 s. */
    private void stop(Process p, String name) throws Exception {
        p.destroy();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), name + " did not stop within 30 s");
        assertEquals(0, p.exitValue(), Files.readString(tmp.resolve(name + ".log")));
    }

    /** The digests of the next {@code n} batches: every tensor's name, shape and bytes, in the batch's order. */
    private static List<String> take(TrainerClient c, int n) throws Exception {
        var out = new ArrayList<String>();
        for (int i = 0; i < n; i++) {
            try (var got = c.next()) {
                out.add(BatchDigest.of(got.batch()));
            }
        }
        return out;
    }

    /** The service's arena folder, from its start-up lines. */
    private static Path arena(String log) {
        var m = Pattern.compile("shared memory (\\S+) \\(budget").matcher(log);
        assertTrue(m.find(), "no arena in " + log);
        return Path.of(m.group(1));
    }

    /** Waits until every rank's prefetch buffer is full, as the service's Prometheus endpoint says. */
    private static void awaitBuffersFull(String log) throws Exception {
        var m = Pattern.compile("metrics on (http://127\\.0\\.0\\.1:\\d+/metrics)").matcher(log);
        assertTrue(m.find(), log);
        var http = HttpClient.newHttpClient();
        var request = HttpRequest.newBuilder(URI.create(m.group(1))).build();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        String body = "";
        while (System.nanoTime() < deadline) {
            body = http.send(request, HttpResponse.BodyHandlers.ofString()).body();
            boolean full = true;
            for (int r = 0; r < RANKS; r++) full &= body.contains("stoker_buffer_batches{rank=\"" + r + "\"} " + PREFETCH_BATCHES + ".0");
            if (full) return;
            Thread.sleep(20);
        }
        throw new AssertionError("the prefetch buffers did not fill within 60 s: " + body);
    }

    private static int freePort() throws IOException {
        return dev.stoker.testkit.Ports.free(); // below the ephemeral range: no outgoing connection takes it before the child binds
    }
}
