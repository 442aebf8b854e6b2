package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cluster key's file rules, on real files: made 0600 and never over an existing file, refused when others can
 * read it or it is not a key, the per-user key made once in a 0700 folder, and a member off loopback refused without one.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ClusterKeyTest {
    @TempDir Path tmp;

    @Test
    void aNewKeyIsPrivateAndNeverOverwritesAFile() throws Exception {
        Path file = tmp.resolve("cluster.key");
        var key = ClusterKey.create(file);
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file)));
        assertEquals(key, ClusterKey.load(file), "what was written reads back");
        assertEquals("CN=" + ClusterKey.NAME, key.certificate().getSubjectX500Principal().getName());
        assertEquals(64, key.flightToken().length());
        assertFalse(key.toString().contains(Files.readString(file).lines().filter(l -> l.startsWith("password:")).findFirst().orElseThrow()
                .substring("password:".length()).strip()), "toString never shows the password");
        String before = Files.readString(file);
        var e = assertThrows(ConfigException.class, () -> ClusterKey.create(file));
        assertTrue(e.getMessage().contains("exists") && e.getMessage().contains("does not overwrite"), e.getMessage());
        assertEquals(before, Files.readString(file), "the existing key is untouched");
        assertNotEquals(key, ClusterKey.create(tmp.resolve("other.key")), "every key is new");
    }

    @Test
    void aKeyOthersCanReadOrThatIsNoKeyIsRefused() throws Exception {
        Path file = tmp.resolve("k");
        ClusterKey.create(file);
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-r--r--"));
        var open = assertThrows(ConfigException.class, () -> ClusterKey.load(file));
        assertTrue(open.getMessage().contains("open to other users") && open.getMessage().contains("chmod 600"), open.getMessage());
        // the member's option says the same, before anything starts
        var config = NodeConfig.builder().set(NodeConfig.JOIN, List.of("127.0.0.1:2551")).set(NodeConfig.BIND, "127.0.0.1:2551")
                .set(NodeConfig.CLUSTER_KEY, file).build();
        var viaOption = assertThrows(ConfigException.class, () -> ClusteredNode.memberOptions(config));
        assertTrue(viaOption.getMessage().contains("open to other users"), viaOption.getMessage());

        Path junk = tmp.resolve("junk");
        Files.writeString(junk, "not a key\n");
        Files.setPosixFilePermissions(junk, PosixFilePermissions.fromString("rw-------"));
        var e = assertThrows(ConfigException.class, () -> ClusterKey.load(junk));
        assertTrue(e.getMessage().contains("is not a Stoker cluster key"), e.getMessage());
        Path link = tmp.resolve("link");
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
        Files.createSymbolicLink(link, file);
        var l = assertThrows(ConfigException.class, () -> ClusterKey.load(link));
        assertTrue(l.getMessage().contains("not a regular file"), l.getMessage());
    }

    @Test
    void thePerUserKeyIsMadeOnceInAPrivateFolder() throws Exception {
        var env = Map.of("XDG_CONFIG_HOME", tmp.resolve("config").toString());
        Path expected = tmp.resolve("config/stoker/cluster.key");
        assertEquals(expected, ClusterKey.userDefaultPath(env));
        var first = ClusterKey.userDefault(env);
        assertEquals(expected, first.file());
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(expected.getParent())));
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(expected)));
        assertEquals(first, ClusterKey.userDefault(env), "a second member finds the same key");
        try (var names = Files.list(expected.getParent())) {
            assertEquals(List.of(expected), names.toList(), "nothing left aside");
        }
        Files.setPosixFilePermissions(expected.getParent(), PosixFilePermissions.fromString("rwxrwxrwx"));
        var e = assertThrows(ConfigException.class, () -> ClusterKey.userDefault(env));
        assertTrue(e.getMessage().contains("is open to other users (mode rwxrwxrwx); run chmod 700"), e.getMessage());
    }

    @Test
    void aMemberBeyondLoopbackNeedsAKeyGivenExplicitly() throws Exception {
        Path token = tmp.resolve("token");
        Files.writeString(token, "0123456789abcdef0123456789abcdef\n");
        Files.setPosixFilePermissions(token, PosixFilePermissions.fromString("rw-------"));
        var b = NodeConfig.builder().set(NodeConfig.JOIN, List.of("10.213.7.1:2551")).set(NodeConfig.BIND, "10.213.7.1:2551")
                .set(NodeConfig.CLUSTER_TOKEN_FILE, token);
        var e = assertThrows(ConfigException.class, () -> ClusteredNode.memberOptions(b.build()));
        assertTrue(e.getMessage().contains("--cluster-key FILE") && e.getMessage().contains("stoker cluster-key"), e.getMessage());
        // a loopback member that joins another host needs one too
        var joinsOut = NodeConfig.builder().set(NodeConfig.JOIN, List.of("10.213.7.1:2551")).set(NodeConfig.BIND, "127.0.0.1:2552").build();
        assertThrows(ConfigException.class, () -> ClusteredNode.memberOptions(joinsOut));
        var start = assertThrows(ConfigException.class, () -> ClusterNode.keyFor(ClusterNode.Options.of("10.213.7.1", 2551,
                List.of("10.213.7.1:2551"), 1)));
        assertTrue(start.getMessage().contains("--cluster-key FILE"), start.getMessage());
        Path key = tmp.resolve("key");
        var made = ClusterKey.create(key);
        assertEquals(made, ClusteredNode.memberOptions(b.set(NodeConfig.CLUSTER_KEY, key).build()).clusterKey());
    }
}
