package dev.stoker.bench.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The settings a cluster run's JSON line records are the values in force: a default derived from the processor included. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClusterSummaryTest {
    @TempDir Path tmp;

    private Map<String, Object> settings(NodeConfig config) {
        var s = new ClusterBench.Settings(config, 5, 100, 1000, true, null, "1g", null, tmp);
        var facts = new ClusterSummary.Facts(tmp, Map.of(), 2, 2, false, null, null, List.of(), 1.5, List.of("--batch", "2"));
        return ClusterSummary.settings(s, facts);
    }

    @Test
    void thePixelCapRecordedIsTheOneInForce() throws Exception {
        var byDefault = settings(NodeConfig.builder().data("d.jsonl").ranks(2).batch(2).processor(ProcessorPreset.QWEN3_VL).build());
        assertEquals(ProcessorPreset.QWEN3_VL.vision().maxPixels(), byDefault.get("max_pixels"), "the processor's, not the key's null");
        assertFalse(new ObjectMapper().writeValueAsString(byDefault).contains("null"), byDefault.toString());
        var given = settings(NodeConfig.builder().data("d.jsonl").ranks(2).batch(2).pixels(3136, 50176).build());
        assertEquals(50176L, given.get("max_pixels"));
        assertEquals(2, given.get("batch"));
        assertEquals("d.jsonl", given.get("data"));
    }
}
