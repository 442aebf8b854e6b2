package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.NodeConfig;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A two-member loopback cluster in this JVM ({@code serve --join} and {@code node --join} as the CLI assembles them): rank 0's
 * trainer on the coordinator's node, rank 1's on the member's. The coordinator's metrics, verdict, status line and
 * {@code --report-dir} file hold both ranks' measured wait, the remote one's under the member's address.
 */
@Tag("slow")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CoordinatorTimingsTest {
    static final int RANKS = 2, STEPS = 4;
    @TempDir Path tmp;

    @Test
    @SuppressWarnings("unchecked")
    void theCoordinatorHoldsTheRemoteRanksMeasuredWait() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), 16, 5);
        String member = "127.0.0.1:" + freePort();
        Path reportDir = tmp.resolve("report");
        var memberConfig = NodeConfig.builder().set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, member).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-member"))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve("member.sock")).build();
        var coordinatorConfig = NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(2).pixels(3136, 50176).threads(1)
                .warmUpMillis(0).set(NodeConfig.MAX_IMAGES, 1).steps(STEPS).set(NodeConfig.JOB, "timed")
                .set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, "127.0.0.1:" + freePort()).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-coord"))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .set(NodeConfig.REPORT_DIR, reportDir).socket(tmp.resolve("coord.sock")).build();
        String memberAddress;
        try (var m = ClusteredNode.launchMember(memberConfig, line -> {});
             var c = ClusteredNode.launchCoordinator(coordinatorConfig, line -> {})) {
            memberAddress = (String) m.metrics().get("address");
            for (int r = 0; r < RANKS; r++) // rank 0 on the coordinator's own node, rank 1 on the member: remote to the coordinator
                try (var t = TrainerClient.connect((r == 0 ? c : m).socket(), r, RANKS, "timed", TrainerClient.Options.SHARED_MEMORY)) {
                    for (int s = 0; s < STEPS; s++)
                        try (var b = t.next()) {
                            Thread.sleep(5); // a step's compute
                        }
                }

            var metrics = c.metrics();
            var trainers = (Map<String, Object>) metrics.get("trainers");
            assertNotNull(trainers, metrics.toString());
            var ranks = (List<Map<String, Object>>) trainers.get("ranks");
            assertEquals(List.of(0, 1), ranks.stream().map(x -> x.get("rank")).toList(), trainers.toString());
            for (var x : ranks) {
                long steps = (Long) x.get("steps_reported");
                assertTrue(steps > 0 && steps <= STEPS, "measured steps " + x);
                double w = (Double) x.get("wait_ratio");
                assertTrue(w >= 0 && w <= 1, x.toString());
            }
            assertEquals(List.of(memberAddress), ranks.get(1).get("nodes"), "rank 1 was measured on the member " + trainers);
            var nodes = (List<Map<String, Object>>) trainers.get("nodes");
            assertEquals(2, nodes.size(), trainers.toString());
            var remote = nodes.stream().filter(n -> memberAddress.equals(n.get("node"))).findFirst().orElseThrow();
            assertEquals(List.of(1), remote.get("ranks"));
            assertEquals(0L, trainers.get("refused_reports"));
            var verdict = (Map<String, Object>) metrics.get("verdict");
            assertTrue(List.of("TRAINER_BOUND", "DATA_BOUND").contains(verdict.get("kind")), verdict.toString());
            assertTrue(((String) verdict.get("evidence")).contains("2 of 2 ranks measured on 2 nodes"), verdict.toString());

            var status = c.status();
            assertNotNull(status, "a coordinator shows the job's status line");
            assertEquals((long) RANKS * STEPS, status.deliveredBatches());
            assertEquals((long) RANKS * STEPS, status.totalBatches());
            assertTrue(status.waitRatio().isPresent(), "the trainers' wait, gathered from both nodes");
            assertNotNull(status.verdict());
        }
        // closed: --report-dir holds the coordinator's last figures, every rank's
        var written = new ObjectMapper().readTree(reportDir.resolve("job-pipeline.json").toFile());
        assertEquals(2, written.path("trainers").path("ranks").size(), written.toString());
        assertTrue(written.path("trainers").path("wait_ratio").isNumber(), written.toString());
        assertTrue(written.path("verdict").path("kind").isTextual(), written.toString());
    }

    static int freePort() throws IOException {
        try (var s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
