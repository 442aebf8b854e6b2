package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code stoker cluster-key FILE}: makes a 0600 key, refuses to overwrite one, and a node refuses a key others can read. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ClusterKeyCommandTest {
    @TempDir Path tmp;

    @Test
    void makesAPrivateKeyAndNeverOverwritesIt() throws Exception {
        Path file = tmp.resolve("cluster.key");
        var made = CliRunner.run("cluster-key", file.toString());
        assertEquals(0, made.status(), made.err());
        assertTrue(made.out().startsWith("wrote cluster key " + file + " (mode 0600), certificate SHA-256 "), made.out());
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file)));
        String key = Files.readString(file);

        var again = CliRunner.run("cluster-key", file.toString());
        assertEquals(Main.EXIT_INVALID_INPUT, again.status());
        assertTrue(again.err().startsWith("stoker: " + file + " exists; stoker cluster-key does not overwrite a key"), again.err());
        assertEquals(key, Files.readString(file), "the key is untouched");
    }

    @Test
    void aNodeRefusesAKeyOthersCanRead() throws Exception {
        Path file = tmp.resolve("k");
        assertEquals(0, CliRunner.run("cluster-key", file.toString()).status());
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-r--r--"));
        var node = CliRunner.run("node", "--join", "127.0.0.1:1", "--bind", "127.0.0.1:1", "--cluster-key", file.toString(),
                "--socket", tmp.resolve("n.sock").toString());
        assertEquals(Main.EXIT_INVALID_INPUT, node.status(), node.err());
        assertTrue(node.err().contains("cluster key " + file + " is open to other users (mode rw-r--r--); run chmod 600"), node.err());
    }
}
