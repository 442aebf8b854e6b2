package dev.stoker.bench.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The ablation's rows and gains from its runs' figures; a large setting past the worker cap is refused before any run. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClusterAblationTest {
    @TempDir Path tmp;

    private static Map<String, Object> run(double samplesPerSecond, List<Double> linkUse, List<Long> relayed) {
        var j = new LinkedHashMap<String, Object>();
        j.put("samples_per_s", samplesPerSecond);
        j.put("steady_link_utilisation", linkUse);
        j.put("per_node_bytes", List.of(7L, 3L));
        j.put("per_node_relayed_bytes", relayed);
        return j;
    }

    @Test
    void eachLayoutsGainIsOverBothKnobsOffAtItsScale() {
        var config = NodeConfig.builder().data("d.jsonl").ranks(2).batch(2).build();
        var rows = new java.util.ArrayList<Map<String, Object>>();
        double[] small = {10, 10, 10, 10}, large = {20, 22, 24, 30};
        int i = 0;
        for (var retrieval : List.of(NodeConfig.Retrieval.RELAY, NodeConfig.Retrieval.DIRECT))
            for (var placement : List.of(NodeConfig.Placement.PACK, NodeConfig.Placement.SPREAD)) {
                var c = config.toBuilder().set(NodeConfig.PLACEMENT, placement).set(NodeConfig.RETRIEVAL, retrieval).build();
                rows.add(ClusterAblation.row(new ClusterAblation.Cell("small", placement, retrieval), c,
                        new ClusterBench.Outcome(0, run(small[i], List.of(0.5, 0.9), List.of(5L, -1L)))));
                rows.add(ClusterAblation.row(new ClusterAblation.Cell("large", placement, retrieval), c,
                        new ClusterBench.Outcome(i == 3 ? 1 : 0, i == 3 ? null : run(large[i], List.of(0.5, 0.9), List.of(0L, 0L)))));
                i++;
            }
        var first = rows.getFirst();
        assertEquals("pack", first.get("placement"));
        assertEquals("relay", first.get("retrieval"));
        assertEquals(0.9, first.get("busiest_tx_utilisation"));
        assertEquals(7L, first.get("coordinator_node_tx_bytes"));
        assertEquals(5L, first.get("relayed_bytes"), "a node without counters (-1) adds nothing");
        var gains = ClusterAblation.gains(rows);
        @SuppressWarnings("unchecked") var g = (Map<String, Object>) gains.get("large");
        assertEquals(1.0, g.get("pack+relay"));
        assertEquals(1.1, g.get("spread+relay"));
        assertEquals(1.2, g.get("pack+direct"));
        assertNull(g.get("spread+direct"), "a failed run has no figures, so no gain: " + g);
        assertEquals(false, rows.getLast().get("ok"));
        @SuppressWarnings("unchecked") var s = (Map<String, Object>) gains.get("small");
        assertEquals(1.0, s.get("spread+direct"));
    }

    @Test
    void aLargeSettingPastTheWorkerCapIsRefusedBeforeAnyRun() {
        var config = NodeConfig.builder().data("d.jsonl").ranks(2).batch(2).set(NodeConfig.WORKERS, 20).build();
        var s = new ClusterBench.Settings(config, 5, 0, 0, true, null, "1g", null, tmp);
        var out = new PrintWriter(new StringWriter());
        var e = assertThrows(ConfigException.class, () -> ClusterAblation.run(s, 4, out, out));
        assertEquals("--ablate's large setting needs 20 × 4 workers, more than " + NodeConfig.MAX_CLUSTER_WORKERS
                + ": lower --workers or --ablate-scale", e.getMessage());
        assertThrows(ConfigException.class, () -> ClusterAblation.run(s, 1, out, out));
    }
}
