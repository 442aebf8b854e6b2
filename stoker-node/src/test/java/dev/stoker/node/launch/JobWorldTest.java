package dev.stoker.node.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.ConfigException;
import dev.stoker.pipeline.feed.RankRange;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A launched job's world: the options over SLURM's variables over the defaults, this node's ranks, and the refusals. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class JobWorldTest {
    @Test
    void theWorldComesFromTheOptionsElseSlurmElseTheDefaults() {
        var w = JobWorld.resolve(2, 1, 4, Map.of());
        assertEquals(8, w.ranks());
        assertEquals(new RankRange(4, 7), w.local());
        var slurm = Map.of("SLURM_NNODES", "3", "SLURM_NODEID", "2", "SLURM_NTASKS_PER_NODE", "2(x3)", "SLURM_GPUS_ON_NODE", "8");
        w = JobWorld.resolve(null, null, null, slurm);
        assertEquals(6, w.ranks());
        assertEquals(new RankRange(4, 5), w.local());
        assertEquals("--nnodes 3 from $SLURM_NNODES, --node-rank 2 from $SLURM_NODEID, --nproc-per-node 2 from $SLURM_NTASKS_PER_NODE",
                w.how());
        w = JobWorld.resolve(null, 0, null, Map.of("SLURM_NNODES", "2", "SLURM_NODEID", "1", "SLURM_GPUS_ON_NODE", "4"));
        assertEquals(new RankRange(0, 3), w.local(), "--node-rank given wins over $SLURM_NODEID; the GPUs give the ranks per node");
        assertEquals(8, w.ranks());
        w = JobWorld.resolve(null, null, 3, Map.of());
        assertEquals(3, w.ranks());
        assertEquals("--nnodes 1 (default), --node-rank 0 (default), --nproc-per-node 3", w.how());
        assertNull(JobWorld.resolve(null, null, null, Map.of()), "no world: --ranks as for serve");
        var e = assertThrows(ConfigException.class, () -> JobWorld.resolve(2, null, null, Map.of()));
        assertTrue(e.getMessage().contains("--nproc-per-node is required"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> JobWorld.resolve(2, 2, 1, Map.of()));
        assertTrue(e.getMessage().contains("--node-rank must be between 0 and 1 (--nnodes 2), got 2"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> JobWorld.resolve(null, null, null, Map.of("SLURM_NNODES", "2",
                "SLURM_NTASKS_PER_NODE", "many")));
        assertTrue(e.getMessage().contains("$SLURM_NTASKS_PER_NODE is 'many', not a number"), e.getMessage());
    }
}
