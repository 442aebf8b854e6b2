package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.core.batch.Tensor;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.flight.FlightBatchServer;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStatusCode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audit #9: every Flight endpoint needs a token, loopback included. Real servers on 127.0.0.1 and
 * real clients: the service's default token file is made 0600 in a 0700 runtime folder (a temporary
 * $XDG_RUNTIME_DIR here), a client without the token or with a wrong one is refused with
 * UNAUTHENTICATED and takes no batch, a token file or folder others can open is refused with the
 * reason, and a client of the same user that finds the token by itself is then served every batch in
 * order.
 */
@Timeout(60)
class FlightTokenTest {
    static final int STEPS = 4;
    @TempDir Path tmp;

    private Map<String, String> env() { return Map.of("XDG_RUNTIME_DIR", tmp.toString()); }

    private FlightAccess plan(String spec, Map<String, String> env) { return FlightAccess.plan(NodeConfig.builder().flight(spec).build(), env); }

    /** Rank 0 of a world of 1: STEPS batches of one int64 tensor holding the step, then the end; counts what it handed out. */
    static final class Steps implements BatchProvider {
        final AtomicInteger handed = new AtomicInteger();

        @Override
        public void validate(int rank, int world) {
            if (rank != 0 || world != 1) throw new IllegalArgumentException("rank 0 of 1 only");
        }

        @Override
        public Joined join(int rank, long connection, ScheduleCursor resume, long fingerprint) { throw new UnsupportedOperationException(); }

        @Override
        public CompletableFuture<Prepared> next(int rank, long connection) {
            int step = handed.getAndIncrement();
            if (step >= STEPS) return CompletableFuture.completedFuture(null);
            return CompletableFuture.completedFuture(new Prepared(new BatchLayout.Meta(0, step, 0, 1, 1),
                    List.of(Tensor.of("input_ids", new long[] {step, 100 + step}, 2))));
        }
    }

    private static String refusal(Runnable r) { return assertThrows(ConfigException.class, r::run).getMessage(); }

    @Test
    void loopbackGetsTheDefaultTokenAndOnlyItsHoldersAreServed() throws Exception {
        var access = plan("127.0.0.1:0", env());
        Path file = tmp.resolve("stoker").resolve(FlightTokenFile.NAME);
        assertTrue(access.loopback());
        assertEquals(file, access.tokenFile());
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file, LinkOption.NOFOLLOW_LINKS)));
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file.getParent(), LinkOption.NOFOLLOW_LINKS)));
        String token = access.security().token();
        assertTrue(token.matches("[0-9a-f]{64}"), "32 random bytes as hex");
        assertEquals(token, Files.readString(file).strip());
        assertFalse(access.toString().contains(token), "never shown");
        assertEquals(token, plan("8815", env()).security().token(), "the file is reused, not remade");
        assertEquals(List.of(), Files.list(file.getParent()).filter(p -> !p.equals(file)).toList(), "no temporary file left");

        var source = new Steps();
        try (var server = FlightBatchServer.start(access.location(), source, null, null, access.security())) {
            int port = server.port();
            try (var none = FlightBatchClient.connect("127.0.0.1", port)) {
                var e = assertThrows(FlightRuntimeException.class, () -> none.next(0, 1, "job"));
                assertEquals(FlightStatusCode.UNAUTHENTICATED, e.status().code(), e.toString());
                assertTrue(e.getMessage().contains("requires a token"), e.getMessage());
            }
            try (var wrong = FlightBatchClient.connect("127.0.0.1", port, new FlightBatchClient.Options(FlightBatchServer.newToken(), false, null), null)) {
                var e = assertThrows(FlightRuntimeException.class, () -> wrong.next(0, 1, "job"));
                assertEquals(FlightStatusCode.UNAUTHENTICATED, e.status().code(), e.toString());
                assertTrue(e.getMessage().contains("wrong token"), e.getMessage());
            }
            assertEquals(0, source.handed.get(), "refused callers took no batch");
            // a client of the same user finds the token by itself, as the service made it
            var found = FlightTokenFile.forClient(null, env());
            assertEquals(file, found.file());
            try (var client = FlightBatchClient.connect("127.0.0.1", port, new FlightBatchClient.Options(found.value(), false, null), null)) {
                for (int step = 0; step < STEPS; step++) {
                    var batch = client.next(0, 1, "job");
                    assertEquals(step, batch.meta().step(), "every batch, in order");
                    assertArrayEquals(new long[] {step, 100 + step}, batch.tensors().getFirst().data().toArray(java.lang.foreign.ValueLayout.JAVA_LONG));
                }
                assertNull(client.next(0, 1, "job"), "then the end of the feed");
            }
        }
    }

    @Test
    void aTokenFileOrFolderOthersCanOpenIsRefusedAndNothingIsRepaired() throws Exception {
        Path file = plan("127.0.0.1:0", env()).tokenFile();
        for (String mode : List.of("rw-r--r--", "rw-rw----", "rw------x")) {
            Files.setPosixFilePermissions(file, PosixFilePermissions.fromString(mode));
            String message = refusal(() -> plan("127.0.0.1:0", env()));
            assertTrue(message.contains("is open to other users (mode " + mode + "); run chmod 600 " + file), message);
            assertTrue(refusal(() -> FlightTokenFile.forClient(null, env())).contains("chmod 600"), "a client refuses it too");
            assertEquals(mode, PosixFilePermissions.toString(Files.getPosixFilePermissions(file)), "left as it was");
        }
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
        Files.setPosixFilePermissions(file.getParent(), PosixFilePermissions.fromString("rwxr-xr-x"));
        String folder = refusal(() -> plan("127.0.0.1:0", env()));
        assertTrue(folder.contains("folder " + file.getParent() + " is open to other users (mode rwxr-xr-x); run chmod 700"), folder);
        Files.setPosixFilePermissions(file.getParent(), PosixFilePermissions.fromString("rwx------"));

        // a link where the file should be: whoever planted it could point it anywhere
        Path elsewhere = Files.writeString(tmp.resolve("planted"), FlightBatchServer.newToken());
        Files.setPosixFilePermissions(elsewhere, PosixFilePermissions.fromString("rw-------"));
        Files.delete(file);
        Files.createSymbolicLink(file, elsewhere);
        assertTrue(refusal(() -> plan("127.0.0.1:0", env())).contains("is not a regular file"));
        Files.delete(file);

        if ("root".equals(System.getProperty("user.name"))) { // root can hand the file to another user
            plan("127.0.0.1:0", env());
            Files.setAttribute(file, "unix:uid", 65534);
            assertTrue(refusal(() -> plan("127.0.0.1:0", env())).contains("belongs to another user (uid 65534)"));
            Files.delete(file);
        }
        // removed: a new one is made, and served with
        var fresh = plan("127.0.0.1:0", env());
        assertTrue(Files.isRegularFile(fresh.tokenFile(), LinkOption.NOFOLLOW_LINKS));
        assertEquals(fresh.security().token(), FlightTokenFile.forClient(null, env()).value());
    }

    @Test
    void aClientTakesTheEnvironmentOrAGivenFileElseTheDefaultAndSaysWhereItLooked() throws Exception {
        String missing = refusal(() -> FlightTokenFile.forClient(null, env()));
        assertTrue(missing.contains("no Flight token") && missing.contains(tmp.resolve("stoker").resolve(FlightTokenFile.NAME).toString()), missing);
        String token = FlightBatchServer.newToken();
        var fromEnv = Map.of("XDG_RUNTIME_DIR", tmp.toString(), FlightAccess.TOKEN_ENV, token);
        assertEquals(token, FlightTokenFile.forClient(null, fromEnv).value());
        assertNull(FlightTokenFile.forClient(null, fromEnv).file());
        Path given = Files.writeString(tmp.resolve("given.token"), token + "\n");
        Files.setPosixFilePermissions(given, PosixFilePermissions.fromString("rw-------"));
        assertEquals(token, FlightTokenFile.forClient(given, env()).value());
        assertTrue(refusal(() -> FlightTokenFile.forClient(given, fromEnv)).contains("one way"));
        Files.writeString(given, "short");
        String weak = refusal(() -> FlightTokenFile.forClient(given, env()));
        assertTrue(weak.contains("at least 16") && !weak.contains("short"), weak);
        // a service given its token (here by the environment) makes no default file
        var access = plan("127.0.0.1:0", fromEnv);
        assertEquals(token, access.security().token());
        assertNull(access.tokenFile());
        assertFalse(Files.exists(tmp.resolve("stoker").resolve(FlightTokenFile.NAME)));
    }
}
