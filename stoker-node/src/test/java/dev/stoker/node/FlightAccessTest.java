package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Flight access policy: every endpoint has a token (loopback: this user's default token file, in
 * a temporary $XDG_RUNTIME_DIR here; anything else: a token given), which never appears in a message.
 * No socket is opened here ({@link FlightTokenTest} serves with real ones).
 */
@Timeout(30)
class FlightAccessTest {
    static final String TOKEN = "0123456789abcdef-not-a-real-token";
    @TempDir Path tmp;

    private Path tokenFile(String mode, String content) throws Exception {
        Path f = tmp.resolve("token-" + mode);
        Files.writeString(f, content);
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString(mode));
        return f;
    }

    private FlightAccess plan(String spec) { return plan(spec, null, null, null, Map.of("XDG_RUNTIME_DIR", tmp.toString())); }

    /** The policy applied to a configuration with these Flight settings. */
    private static FlightAccess plan(String spec, Path tokenFile, Path cert, Path key, Map<String, String> env) {
        var config = NodeConfig.builder().flight(spec).set(NodeConfig.FLIGHT_TOKEN_FILE, tokenFile).set(NodeConfig.FLIGHT_TLS_CERT, cert)
                .set(NodeConfig.FLIGHT_TLS_KEY, key).build();
        return FlightAccess.plan(config, env);
    }

    private static String refusal(Runnable r) {
        String message = assertThrows(ConfigException.class, r::run).getMessage();
        assertFalse(message.contains(TOKEN), "a refusal never shows the token: " + message);
        return message;
    }

    @Test
    void loopbackTakesThisUsersDefaultToken() {
        var port = plan("8815");
        assertEquals("127.0.0.1", port.host(), "a bare port binds loopback");
        assertEquals(8815, port.port());
        assertTrue(port.loopback());
        assertEquals(tmp.resolve("stoker").resolve(FlightTokenFile.NAME), port.tokenFile());
        assertEquals(64, port.security().token().length(), "audit #9: a token on loopback too");
        assertEquals(List.of(), port.warnings());
        assertEquals("grpc+tcp://127.0.0.1:8815", port.location().getUri().toString());
        for (String spec : List.of("127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.2:0")) assertTrue(plan(spec).loopback(), spec);
    }

    @Test
    void anAddressOtherHostsReachNeedsAToken() {
        for (String spec : List.of("0.0.0.0:0", "[::]:0", "0.0.0.0:8815")) {
            assertFalse(FlightAccess.isLoopback(spec.startsWith("[") ? "::" : "0.0.0.0", "--flight"));
            String message = refusal(() -> plan(spec));
            assertTrue(message.contains("needs a token"), message);
            assertTrue(message.contains("--flight-token-file FILE") && message.contains("$STOKER_FLIGHT_TOKEN"), message);
        }
    }

    @Test
    void aPrivateTokenFileOpensTheWildcardWithAWarningWithoutTls() throws Exception {
        Path file = tokenFile("rw-------", TOKEN + "\n");
        FlightAccess plain = plan("0.0.0.0:0", file, null, null, Map.of());
        assertFalse(plain.loopback());
        assertEquals(TOKEN, plain.security().token(), "the token, without the file's newline");
        assertEquals(1, plain.warnings().size());
        assertTrue(plain.warnings().getFirst().contains("unencrypted"), plain.warnings().getFirst());
        assertFalse(plain.toString().contains(TOKEN), plain.toString());

        Path cert = Files.writeString(tmp.resolve("cert.pem"), "x"), key = Files.writeString(tmp.resolve("key.pem"), "x");
        var tls = plan("0.0.0.0:0", file, cert, key, Map.of());
        assertEquals(List.of(), tls.warnings());
        assertEquals("grpc+tls", tls.location().getUri().getScheme());
        assertEquals("grpc+tls://0.0.0.0:8815", tls.url(8815));
        String halfTls = refusal(() -> plan("0.0.0.0:0", file, cert, null, Map.of()));
        assertTrue(halfTls.contains("go together"), halfTls);
        String missing = refusal(() -> plan("0.0.0.0:0", file, cert, tmp.resolve("none.pem"), Map.of()));
        assertTrue(missing.contains("cannot read"), missing);
    }

    @Test
    void aTokenFileOthersCanReadIsRefused() throws Exception {
        for (String mode : List.of("rw-r--r--", "rw-r-----", "rw-----w-")) {
            Path file = tokenFile(mode, TOKEN);
            String message = refusal(() -> plan("0.0.0.0:0", file, null, null, Map.of()));
            assertTrue(message.contains("chmod 600 " + file), message);
        }
    }

    @Test
    void theTokenMayComeFromTheEnvironmentButNotTwice() throws Exception {
        var env = plan("0.0.0.0:0", null, null, null, Map.of(FlightAccess.TOKEN_ENV, TOKEN));
        assertEquals(TOKEN, env.security().token());
        Path file = tokenFile("rw-------", TOKEN);
        String both = refusal(() -> plan("0.0.0.0:0", file, null, null, Map.of(FlightAccess.TOKEN_ENV, TOKEN)));
        assertTrue(both.contains("one way"), both);
        var loopbackWithToken = plan("127.0.0.1:0", null, null, null, Map.of(FlightAccess.TOKEN_ENV, TOKEN));
        assertEquals(TOKEN, loopbackWithToken.security().token(), "a token given is enforced on loopback too");
    }

    @Test
    void weakOrMalformedTokensAreRefusedWithoutBeingShown() throws Exception {
        String shortToken = "abc123";
        String message = refusal(() -> plan("0.0.0.0:0", null, null, null, Map.of(FlightAccess.TOKEN_ENV, shortToken)));
        assertTrue(message.contains("at least 16") && !message.contains(shortToken), message);
        Path empty = tokenFile("rw-------", "\n");
        assertTrue(refusal(() -> plan("0.0.0.0:0", empty, null, null, Map.of())).contains("is empty"));
        Path spaced = tokenFile("r--------", "0123456789 abcdef0123");
        assertTrue(refusal(() -> plan("0.0.0.0:0", spaced, null, null, Map.of())).contains("printable ASCII"));
        assertTrue(refusal(() -> plan("0.0.0.0:0", tmp, null, null, Map.of())).contains("is not a regular file"));
    }

    @Test
    void malformedEndpointsAreRefused() {
        for (String spec : List.of("", "host", "::1:0", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1", "[::1]"))
            assertThrows(ConfigException.class, () -> plan(spec), spec);
    }
}
