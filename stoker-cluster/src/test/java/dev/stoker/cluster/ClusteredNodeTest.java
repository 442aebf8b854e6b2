package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.node.FlightAccess;
import dev.stoker.node.NodeConfig;
import dev.stoker.pipeline.feed.FeedMode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A cluster member's access rule (the token off loopback) and what a cluster job refuses, checked before anything starts. */
@Timeout(30)
class ClusteredNodeTest {
    @TempDir Path tmp;

    static NodeConfig member(String bind, Path tokenFile) {
        return NodeConfig.builder().set(NodeConfig.JOIN, List.of(bind)).set(NodeConfig.BIND, bind).set(NodeConfig.CLUSTER_TOKEN_FILE, tokenFile)
                .build();
    }

    @Test
    void loopbackNeedsNoToken() {
        assertNull(FlightAccess.clusterToken(member("127.0.0.1:2551", null), "127.0.0.1", Map.of()));
        assertNull(ClusteredNode.memberOptions(member("127.0.0.1:2551", null)).flightToken());
    }

    @Test
    void anotherAddressWithoutATokenIsRefused() {
        var e = assertThrows(ConfigException.class, () -> ClusteredNode.memberOptions(member("10.213.7.1:2551", null)));
        assertTrue(e.getMessage().contains("need a token") && e.getMessage().contains("--cluster-token-file"), e.getMessage());
        var none = assertThrows(ConfigException.class, () -> ClusteredNode.memberOptions(NodeConfig.builder().build()));
        assertTrue(none.getMessage().startsWith("--join is required"), none.getMessage());
    }

    @Test
    void theTokenComesFromAPrivateFileOrTheEnvironmentNeverBoth() throws Exception {
        Path file = tmp.resolve("token");
        Files.writeString(file, "0123456789abcdef0123456789abcdef\n");
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
        assertEquals("0123456789abcdef0123456789abcdef", FlightAccess.clusterToken(member("10.213.7.1:2551", file), "10.213.7.1", Map.of()));
        String env = "fedcba9876543210fedcba9876543210";
        assertEquals(env, FlightAccess.clusterToken(member("10.213.7.1:2551", null), "10.213.7.1", Map.of(FlightAccess.CLUSTER_TOKEN_ENV, env)));
        assertThrows(ConfigException.class,
                () -> FlightAccess.clusterToken(member("10.213.7.1:2551", file), "10.213.7.1", Map.of(FlightAccess.CLUSTER_TOKEN_ENV, env)));
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-r--r--"));
        var e = assertThrows(ConfigException.class, () -> FlightAccess.clusterToken(member("10.213.7.1:2551", file), "10.213.7.1", Map.of()));
        assertTrue(e.getMessage().contains("--cluster-token-file") && e.getMessage().contains("open to other users"), e.getMessage());
        assertTrue(!e.getMessage().contains("0123456789abcdef"), "the message never holds the token");
    }

    /** What a cluster job does not do is refused with a reason naming the option, before anything starts. */
    @Test
    void aClusterJobRefusesWhatItDoesNotDo() {
        var base = NodeConfig.builder().data(tmp.resolve("none.jsonl").toString()).set(NodeConfig.JOIN, List.of("127.0.0.1:1"));
        var cases = Map.of("--mode", base.build().toBuilder().mode(FeedMode.PREFETCH), "--metrics-port", base.build().toBuilder().set(NodeConfig.METRICS_PORT, 0),
                "--flight", base.build().toBuilder().flight("0"), "--start-step", base.build().toBuilder().set(NodeConfig.START_STEP, 3L),
                "--node-shm-budget", base.build().toBuilder().set(NodeConfig.NODE_SHM_BUDGET, 1L << 20));
        cases.forEach((option, b) -> {
            var e = assertThrows(ConfigException.class, () -> ClusteredNode.launchCoordinator(b.build(), line -> {}));
            assertTrue(e.getMessage().contains(option), option + " named in: " + e.getMessage());
        });
    }
}
