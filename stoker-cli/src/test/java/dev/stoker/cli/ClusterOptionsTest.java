package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The cluster's access policy: a node that other hosts can reach lends batches only to callers with the cluster token. */
class ClusterOptionsTest {
    @TempDir Path tmp;

    static ClusterOptions parse(String... args) {
        var o = new ClusterOptions();
        new CommandLine(o).parseArgs(args);
        return o;
    }

    @Test
    void loopbackNeedsNoToken() {
        assertNull(parse("--bind", "127.0.0.1:2551").token("127.0.0.1", Map.of()));
    }

    @Test
    void anotherAddressWithoutATokenIsRefused() {
        var e = assertThrows(Main.InvalidInputException.class, () -> parse("--bind", "10.213.7.1:2551").token("10.213.7.1", Map.of()));
        assertTrue(e.getMessage().contains("need a token") && e.getMessage().contains("--cluster-token-file"), e.getMessage());
    }

    @Test
    void theTokenComesFromAPrivateFileOrTheEnvironmentNeverBoth() throws Exception {
        Path file = tmp.resolve("token");
        Files.writeString(file, "0123456789abcdef0123456789abcdef\n");
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
        assertEquals("0123456789abcdef0123456789abcdef",
                parse("--bind", "10.213.7.1:2551", "--cluster-token-file", file.toString()).token("10.213.7.1", Map.of()));
        assertEquals("fedcba9876543210fedcba9876543210",
                parse("--bind", "10.213.7.1:2551").token("10.213.7.1", Map.of(ClusterOptions.TOKEN_ENV, "fedcba9876543210fedcba9876543210")));
        assertThrows(Main.InvalidInputException.class, () -> parse("--cluster-token-file", file.toString())
                .token("10.213.7.1", Map.of(ClusterOptions.TOKEN_ENV, "fedcba9876543210fedcba9876543210")));
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-r--r--"));
        var e = assertThrows(Main.InvalidInputException.class,
                () -> parse("--cluster-token-file", file.toString()).token("10.213.7.1", Map.of()));
        assertTrue(e.getMessage().contains("--cluster-token-file") && e.getMessage().contains("open to other users"), e.getMessage());
        assertTrue(!e.getMessage().contains("0123456789abcdef"), "the message never holds the token");
    }

    /** What a cluster job does not do is refused with a reason, before anything starts (no cluster is needed to see it). */
    @Test
    void serveRefusesWhatAClusterJobDoesNotDo() {
        var base = java.util.List.of("serve", "--cluster", "127.0.0.1:1", "--data", tmp.resolve("none.jsonl").toString(),
                "--socket", tmp.resolve("s.sock").toString());
        for (var extra : java.util.List.of(
                java.util.List.of("--mode", "prefetch"),
                java.util.List.of("--metrics-port", "0"),
                java.util.List.of("--flight", "0"),
                java.util.List.of("--start-step", "3"))) {
            var args = new java.util.ArrayList<>(base);
            args.addAll(extra);
            var r = CliRunner.run(args.toArray(String[]::new));
            assertEquals(2, r.status(), extra + ": " + r.err());
            assertTrue(r.err().contains(extra.getFirst()), extra + " named in: " + r.err());
        }
    }
}
