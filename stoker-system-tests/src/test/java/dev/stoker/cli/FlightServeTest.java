package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.testkit.TestCertificate;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --flight}: a trainer on another node pulls its rank's batches over Arrow Flight (TLS,
 * with the token from --flight-token-file) and gets exactly what a local trainer of an identical
 * service reads from shared memory, videos included (a third of the samples hold one); a caller without the token gets
 * nothing.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
@Tag("slow")
class FlightServeTest {
    static final int STEPS = 3;
    static final String TOKEN = "flight-serve-test-token-7f3a9c";
    @TempDir Path tmp;
    TestCertificate cert;

    @Test
    void aFlightRankGetsTheBatchesALocalRankReadsFromSharedMemory() throws Exception {
        Path ds = Files.createDirectories(tmp.resolve("ds"));
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), ds.resolve("a.jpg"));
        Files.copy(Vectors.get().inputImage("p08_exact_448x448"), ds.resolve("b.png"));
        dev.stoker.testkit.FfmpegClips.require();
        dev.stoker.testkit.FfmpegClips.h264(ds.resolve("c.mp4"), "160x120", "10", 1.2); // every third sample's, a video (issue 29)
        var lines = new StringBuilder();
        for (int i = 0; i < 24; i++) {
            boolean video = i % 3 == 1;
            lines.append(String.format("{\"id\":\"s%d\",\"%s\":\"%s\",\"conversations\":[{\"from\":\"human\",\"value\":\"<%s>\\nWhat is %d?%s\"},"
                    + "{\"from\":\"gpt\",\"value\":\"Answer %d.\"}]}%n", i, video ? "video" : "image", video ? "c.mp4" : i % 2 == 0 ? "a.jpg" : "b.png",
                    video ? "video" : "image", i, " Be brief.".repeat(i % 3), i));
        }
        Files.writeString(ds.resolve("train.jsonl"), lines);
        Path shm = Files.createDirectories(tmp.resolve("shm"));
        cert = TestCertificate.create(Files.createDirectories(tmp.resolve("tls")));
        Files.writeString(tmp.resolve("token"), TOKEN + "\n");
        Files.setPosixFilePermissions(tmp.resolve("token"), PosixFilePermissions.fromString("rw-------"));
        Process a = serve(ds, shm, "a", true), b = serve(ds, shm, "b", false);
        try {
            String logA = ServeProcess.awaitListening(a, tmp.resolve("a.log"));
            ServeProcess.awaitListening(b, tmp.resolve("b.log"));
            for (String s : List.of("a.sock", "b.sock"))
                assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(tmp.resolve(s))), s);
            var m = Pattern.compile("flight on grpc\\+tls://127\\.0\\.0\\.1:(\\d+) \\(token required\\)").matcher(logA);
            assertTrue(m.find(), logA);
            int port = Integer.parseInt(m.group(1));
            try (var stranger = FlightBatchClient.connect("127.0.0.1", port, new FlightBatchClient.Options(null, true, cert.certificate()), null)) {
                var e = assertThrows(FlightRuntimeException.class, () -> stranger.next(0, 2, "test"));
                assertEquals(FlightStatusCode.UNAUTHENTICATED, e.status().code(), e.toString());
            }
            var remote = new ArrayList<byte[][]>();
            var remoteMeta = new ArrayList<BatchLayout.Meta>();
            var remoteNames = new ArrayList<List<String>>();
            var options = new FlightBatchClient.Options(TOKEN, true, cert.certificate());
            try (var flight = FlightBatchClient.connect("127.0.0.1", port, options, null)) {
                for (int s = 0; s < STEPS; s++) {
                    var batch = flight.next(0, 2, "test");
                    assertTrue(batch != null, "step " + s);
                    remote.add(bytes(batch));
                    remoteMeta.add(batch.meta());
                    remoteNames.add(batch.tensors().stream().map(Tensor::name).toList());
                }
                assertNull(flight.next(0, 2, "test"), "end of feed after --steps");
                assertTrue(remoteNames.stream().anyMatch(n -> n.contains("pixel_values_videos")), "videos cross Flight: " + remoteNames);
            }
            try (var local = TrainerClient.connect(tmp.resolve("b.sock"), 0, 2, "test", TrainerClient.Options.SHARED_MEMORY)) {
                for (int s = 0; s < STEPS; s++) {
                    try (var r = local.next()) {
                        assertTrue(r.byReference());
                        assertEquals(remoteMeta.get(s), r.batch().meta(), "step " + s);
                        byte[][] expected = bytes(r.batch());
                        assertEquals(expected.length, remote.get(s).length);
                        assertEquals(remoteNames.get(s), r.batch().tensors().stream().map(Tensor::name).toList(), "the same tensor order");
                        for (int t = 0; t < expected.length; t++)
                            assertArrayEquals(expected[t], remote.get(s)[t], "step " + s + " tensor " + r.batch().tensors().get(t).name());
                    }
                }
            }
        } finally {
            for (Process p : List.of(a, b)) {
                p.destroy();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            }
        }
        assertEquals(0, a.exitValue());
        assertFalse(Files.readString(tmp.resolve("a.log")).contains(TOKEN), "the token is never printed");
        try (var left = Files.list(shm)) {
            assertEquals(List.of(), left.toList(), "arenas removed on SIGTERM");
        }
    }

    /** Each tensor's bytes, in the batch's order (the same over Flight and shared memory). */
    private static byte[][] bytes(BatchLayout.Batch batch) {
        var tensors = batch.tensors();
        byte[][] out = new byte[tensors.size()][];
        for (int i = 0; i < out.length; i++) out[i] = tensors.get(i).data().toArray(ValueLayout.JAVA_BYTE);
        return out;
    }

    private Process serve(Path ds, Path shm, String name, boolean flight) throws Exception {
        var cmd = new ArrayList<>(List.of("--data", ds.resolve("train.jsonl").toString(), "--ranks", "2", "--batch", "2", "--max-pixels", "50176",
                "--socket", tmp.resolve(name + ".sock").toString(), "--shm-dir", shm.toString(), "--shm-budget", "256M", "--max-images", "1", "--max-seq-len", "1024",
                "--steps", "" + STEPS, "--threads", "1"));
        if (flight)
            cmd.addAll(List.of("--flight", "127.0.0.1:0", "--flight-token-file", tmp.resolve("token").toString(),
                    "--flight-tls-cert", cert.certificate().toString(), "--flight-tls-key", cert.privateKey().toString()));
        return ServeProcess.start(tmp.resolve(name + ".log"), "1g", cmd);
    }

}
