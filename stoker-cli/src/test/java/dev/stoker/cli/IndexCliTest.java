package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code stoker bench index} on a small manifest: its JSON line, and a JSON array indexed like the same JSON Lines. */
@Timeout(120)
class IndexCliTest {
    @TempDir Path tmp;

    @Test
    void benchIndexReportsSpeedHeapAndTheCachedStart() throws Exception {
        var r = CliRunner.run("bench", "index", "--samples", "5000", "--work-dir", tmp.toString());
        assertEquals(0, r.status(), r.err());
        var lines = r.out().strip().split("\n");
        var n = new ObjectMapper().readTree(lines[lines.length - 1]).get("index").get("5000");
        assertTrue(n.get("mb_per_s").asDouble() > 0, n.toString());
        assertEquals(16, n.get("index_bytes_per_sample").asInt());
        assertTrue(n.get("json_array_mb_per_s").asDouble() > 0, n.toString());
        assertTrue(n.get("cached_load_s").asDouble() >= 0, n.toString());
        var bad = CliRunner.run("bench", "index", "--samples", "0", "--work-dir", tmp.toString());
        assertTrue(bad.status() != 0 && bad.err().contains("--samples must be positive"), bad.err());
    }
}
